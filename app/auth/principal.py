"""Who is asking: the account a request acts for, as the access middleware found it.

Every route and UI handler asks `principal_of(request)`; none reads cookies or tokens
itself. With no accounts on a loopback-only server, every request acts for the open
principal, which may do everything (TuneDeck says so at start and on the page).
"""
from __future__ import annotations

from dataclasses import dataclass

OPEN_PRINCIPAL_NAME = "local"


@dataclass(frozen=True)
class Principal:
    name: str
    is_admin: bool
    # True when TuneDeck runs without accounts (loopback only): nobody signed in.
    open_access: bool = False

    def may_see_job_of(self, owner: str | None) -> bool:
        """A user sees and controls their own jobs; an admin everyone's."""
        return self.is_admin or owner == self.name


OPEN_PRINCIPAL = Principal(name=OPEN_PRINCIPAL_NAME, is_admin=True, open_access=True)


def principal_of(request) -> Principal:
    """The principal the middleware put on a Starlette request (or Gradio's gr.Request,
    which carries the same state). A request that reached a route without one is a bug in
    the middleware's routing: refuse rather than act for nobody."""
    # Gradio hands its handlers a gr.Request wrapping the Starlette request as `.request`.
    request = getattr(request, "request", None) or request
    state = getattr(request, "state", None)
    principal = getattr(state, "principal", None) if state is not None else None
    if not isinstance(principal, Principal):
        raise PermissionError("no authenticated principal on this request")
    return principal
