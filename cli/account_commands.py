"""`tunedeck user|token|audit`: account administration on the configured database, for
whoever runs the server (it needs the database, not the web service), through the same
account actions as the REST API."""
from __future__ import annotations

import argparse
import getpass
import sys

# Who the audit trail names for these commands.
CLI_ACTOR = "cli"


def add_account_commands(commands) -> None:
    user = commands.add_parser("user", help="accounts: add, list, passwd, disable, enable")
    users = user.add_subparsers(title="user commands")
    add = users.add_parser("add", help="a new account (asks for its password)")
    add.add_argument("name")
    add.add_argument("--admin", action="store_true", help="sees and controls every job")
    _password_option(add)
    add.set_defaults(handler=_add_user)
    listing = users.add_parser("list", help="every account")
    listing.set_defaults(handler=_list_users)
    passwd = users.add_parser("passwd", help="a new password (ends the user's sign-ins)")
    passwd.add_argument("name")
    _password_option(passwd)
    passwd.set_defaults(handler=_change_password)
    for name, disabled in (("disable", True), ("enable", False)):
        command = users.add_parser(name, help=f"{name} an account (its jobs stay)")
        command.add_argument("name")
        command.set_defaults(handler=_set_disabled, disabled=disabled)

    token = commands.add_parser("token", help="API tokens: create, list, revoke")
    tokens = token.add_subparsers(title="token commands")
    create = tokens.add_parser("create", help="a new API token for USER, printed once")
    create.add_argument("user")
    create.add_argument("--label", default="", help="what the token is for")
    create.add_argument("--expires-days", type=float, default=None, help="default: never")
    create.set_defaults(handler=_create_token)
    token_list = tokens.add_parser("list", help="tokens (never their secrets)")
    token_list.add_argument("user", nargs="?", default=None, help="default: everyone's")
    token_list.set_defaults(handler=_list_tokens)
    revoke = tokens.add_parser("revoke", help="revoke token ID (from `token list`)")
    revoke.add_argument("token_id", type=int)
    revoke.set_defaults(handler=_revoke_token)

    trail = commands.add_parser("audit", help="the audit trail, newest first")
    trail.add_argument("--limit", type=int, default=50)
    trail.add_argument("--job", type=int, default=None, help="only this job's")
    trail.add_argument("--actor", default=None, help="only this user's")
    trail.set_defaults(handler=_show_audit)


def _password_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--password-stdin", action="store_true",
                        help="read the password from standard input (for scripts)")


def _read_password(arguments: argparse.Namespace) -> str:
    if arguments.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    password = getpass.getpass("password: ")
    if getpass.getpass("again: ") != password:
        sys.exit("the passwords differ")
    return password


def _database():
    from tunedeck.db.engine import Database
    from tunedeck.settings import load_settings

    return Database(load_settings().resolved_database_url)


def _as_cli(action, **arguments):
    """The account action (app/actions/accounts.py, the one the REST API calls) on the
    configured database, as the admin "cli" (who runs this has the database); a refusal
    exits naming it."""
    from app.actions.errors import ActionError
    from app.auth.principal import Principal

    try:
        return action(Principal(name=CLI_ACTOR, is_admin=True), database=_database(),
                      **arguments)
    except ActionError as error:
        sys.exit(str(error))


def _add_user(arguments: argparse.Namespace) -> int:
    from app.actions import accounts as actions
    from tunedeck.accounts import users as accounts

    try:  # before asking for a password
        accounts.check_user_name(arguments.name)
    except accounts.AccountError as error:
        sys.exit(str(error))
    password = _read_password(arguments)
    _as_cli(actions.create_user, name=arguments.name, password=password,
            is_admin=arguments.admin)
    print(f"user {arguments.name} added{' (admin)' if arguments.admin else ''}")
    return 0


def _list_users(_arguments: argparse.Namespace) -> int:
    from app.actions import accounts as actions

    for user in _as_cli(actions.list_users):
        flags = " (disabled)" if user.disabled else ""
        print(f"{user.name}\t{user.role}{flags}")
    return 0


def _change_password(arguments: argparse.Namespace) -> int:
    from app.actions import accounts as actions

    password = _read_password(arguments)
    _as_cli(actions.set_password, name=arguments.name, password=password)
    print(f"password of {arguments.name} changed; their browser sign-ins have ended")
    return 0


def _set_disabled(arguments: argparse.Namespace) -> int:
    from app.actions import accounts as actions

    _as_cli(actions.set_disabled, name=arguments.name, disabled=arguments.disabled)
    print(f"user {arguments.name} {'disabled' if arguments.disabled else 'enabled'}")
    return 0


def _create_token(arguments: argparse.Namespace) -> int:
    from app.actions import accounts as actions

    secret = _as_cli(actions.create_token, user_name=arguments.user, label=arguments.label,
                     expires_in_days=arguments.expires_days)
    print(secret)
    print(f"(an API token for {arguments.user}; it is shown only now: send it as "
          "'Authorization: Bearer <token>' or set TUNEDECK_TOKEN for the CLI)", file=sys.stderr)
    return 0


def _list_tokens(arguments: argparse.Namespace) -> int:
    from app.actions import accounts as actions

    for token in _as_cli(actions.list_everyones_tokens, user_name=arguments.user):
        state = "revoked" if token.revoked_at else (
            f"expires {token.expires_at:%Y-%m-%d %H:%M}" if token.expires_at else "live")
        print(f"{token.id}\t{token.user_name}\t{token.hint}…\t{state}\t{token.label}")
    return 0


def _revoke_token(arguments: argparse.Namespace) -> int:
    from app.actions import accounts as actions

    _as_cli(actions.revoke_token, token_id=arguments.token_id)
    print(f"token {arguments.token_id} revoked")
    return 0


def _show_audit(arguments: argparse.Namespace) -> int:
    from app.actions import accounts as actions

    for event in _as_cli(actions.list_audit, limit=arguments.limit, job_id=arguments.job,
                         actor=arguments.actor):
        job = f"job {event.job_id}" if event.job_id is not None else "-"
        print(f"{event.time:%Y-%m-%d %H:%M:%S}\t{event.actor}\t{event.action}\t{job}\t"
              f"{event.detail}\t{event.client or ''}")
    return 0
