"""`tunedeck user|token|audit` and the initial admin of `tunedeck migrate`, run as an operator
runs them (real processes, a real SQLite database under a temporary home)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.auth.middleware import check_open_access_allowed
from tunedeck.accounts import users as accounts
from tunedeck.db.engine import Database

CLI = [sys.executable, "-m", "cli"]


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def tunedeck(home, *arguments: str, stdin: str | None = None, extra_env=None,
             check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "TUNEDECK_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False",
           **(extra_env or {})}
    env.pop("TUNEDECK_DATABASE_URL", None)
    result = subprocess.run([*CLI, *arguments], env=env, input=stdin, text=True,
                            capture_output=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def database(home) -> Database:
    return Database(f"sqlite:///{home.resolve() / 'tunedeck.db'}")


def test_an_operator_adds_users_makes_and_revokes_a_token_and_reads_the_trail(home):
    tunedeck(home, "migrate")
    tunedeck(home, "user", "add", "alice", "--admin", "--password-stdin", stdin="alice-password\n")
    tunedeck(home, "user", "add", "bob", "--password-stdin", stdin="bob-password\n")
    assert tunedeck(home, "user", "list").stdout.split("\n")[:2] == ["alice\tadmin", "bob\tuser"]
    token = tunedeck(home, "token", "create", "bob", "--label", "ci").stdout.strip()
    assert token.startswith("tdk_")
    with database(home).transaction() as session:
        assert accounts.account_for_secret(session=session, secret=token,
                                           kind=accounts.TOKEN_KIND).name == "bob"
    listed = tunedeck(home, "token", "list").stdout
    assert "bob" in listed and "ci" in listed and token not in listed
    token_id = listed.split("\t")[0]
    tunedeck(home, "token", "revoke", token_id)
    with database(home).transaction() as session:
        assert accounts.account_for_secret(session=session, secret=token,
                                           kind=accounts.TOKEN_KIND) is None
    trail = tunedeck(home, "audit").stdout
    assert "token_revoked" in trail and "token_created" in trail and "user_created" in trail


@pytest.mark.parametrize("name", ["../etc", "a b", "", ".hidden", "x" * 65])
def test_a_bad_user_name_is_refused_naming_it(home, name):
    tunedeck(home, "migrate")
    result = tunedeck(home, "user", "add", name, "--password-stdin", stdin="long-enough\n",
                      check=False)
    assert result.returncode != 0 and "user name" in result.stderr


def test_a_short_password_is_refused(home):
    tunedeck(home, "migrate")
    result = tunedeck(home, "user", "add", "carol", "--password-stdin", stdin="short\n",
                      check=False)
    assert result.returncode != 0 and "8 to 1024 characters" in result.stderr


def test_migrate_creates_the_initial_admin_once(home):
    first = tunedeck(home, "migrate", extra_env={"TUNEDECK_INITIAL_ADMIN": "root",
                                                 "TUNEDECK_INITIAL_ADMIN_PASSWORD": "first-password"})
    assert "created the initial admin root" in first.stdout
    assert "first-password" not in first.stdout + first.stderr
    again = tunedeck(home, "migrate", extra_env={"TUNEDECK_INITIAL_ADMIN_PASSWORD": "other-password"})
    assert "created" not in again.stdout
    with database(home).transaction() as session:
        assert accounts.authenticate_password(session=session, name="root",
                                              password="first-password").is_admin
        assert [user.name for user in accounts.list_users(session=session)] == ["root"]
    # With an account, listening beyond loopback is allowed.
    assert check_open_access_allowed(database=database(home), host="0.0.0.0") is False


def test_tunedeck_up_refuses_to_listen_beyond_loopback_without_an_account(home):
    result = tunedeck(home, "up", "--host", "0.0.0.0", "--port", "1", check=False)
    assert result.returncode != 0
    assert "refusing to listen on 0.0.0.0" in result.stderr and "tunedeck user add" in result.stderr
