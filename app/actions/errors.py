"""The typed errors every action raises. Each front-end maps them once: the REST API to
status codes (app/api/errors.py), the UI to the message it shows. An error's text is the
message either front-end shows; nothing here knows HTTP."""
from __future__ import annotations

# A problem location: the path to the bad input inside what the action was given
# (("model",) for a spec's model); the REST API prefixes where that input sits ("body").
Location = tuple[str, ...]


class ActionError(Exception):
    """An action refused or could not do what it was asked; `str()` says why."""


class NotFound(ActionError):
    """No such thing, or one the principal may not see (another user's job is reported
    missing, so ids do not tell whose jobs exist)."""


class Refused(ActionError):
    """The principal may not do this, or the thing is not in a state that allows it."""


class Forbidden(Refused):
    """Only someone else (an admin, another account) may do this."""


class Conflict(Refused):
    """Not in this state: the job has not failed, there is no checkpoint, no accounts yet."""


class Invalid(ActionError):
    """Bad input, one (location, message) per problem; each message names its field."""

    def __init__(self, problems: list[tuple[Location, str]]):
        super().__init__("\n".join(message for _location, message in problems))
        self.problems = problems

    @classmethod
    def of_fields(cls, problems: list[tuple[str, str]]) -> Invalid:
        """From (field, message) pairs, as app.auth.spec_access reports them."""
        return cls([((field,), message) for field, message in problems])

    @property
    def messages(self) -> list[str]:
        return [message for _location, message in self.problems]


class TooLarge(ActionError):
    """More bytes than the configured cap."""


class Unavailable(ActionError):
    """This host cannot answer (no torch to build a model with); another part can."""
