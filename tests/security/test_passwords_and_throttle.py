"""Passwords are Argon2id (earlier scrypt hashes sign in once and are upgraded), and wrong
passwords or guessed API tokens are throttled: after 5 failures within a minute every attempt
is refused (the right password too) until the delay has passed, then each failure doubles it.
Against the real app over SQLite and PostgreSQL."""
from __future__ import annotations

import base64
import hashlib
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from tunedeck.accounts import audit, throttle, users as accounts
from tunedeck.db.models import AuditEvent, User, utc_now

PASSWORD = "correct horse battery"


@pytest.fixture
def client(hostile_app) -> TestClient:
    with hostile_app.state.database.transaction() as session:
        accounts.create_user(session=session, name="alice", password=PASSWORD)
        accounts.create_user(session=session, name="bob", password=PASSWORD)
    with TestClient(hostile_app, raise_server_exceptions=False) as client:
        yield client


def sign_in(client: TestClient, name: str, password: str):
    return client.post("/login", data={"username": name, "password": password},
                       follow_redirects=False)


def stored_hash(client, name: str) -> str:
    with client.app.state.database.transaction() as session:
        return session.get(User, name).password_hash


def age_failures(client, seconds: float) -> None:
    """As if the failures so far happened `seconds` earlier (the throttle reads the audit)."""
    with client.app.state.database.transaction() as session:
        for event in session.query(AuditEvent).all():
            event.time = event.time - timedelta(seconds=seconds)


def test_a_new_password_is_hashed_with_argon2id_at_owasps_parameters(client):
    stored = stored_hash(client, "alice")
    assert stored.startswith("$argon2id$v=19$m=19456,t=2,p=1$") and PASSWORD not in stored
    assert accounts.password_matches(PASSWORD, stored)
    assert not accounts.password_matches(PASSWORD + "!", stored)
    assert not accounts.needs_rehash(stored)


def old_scrypt_hash(password: str) -> str:
    """How earlier releases stored a password: scrypt at N = 2^14, r = 8, p = 1."""
    salt = b"0123456789abcdef"
    digest = hashlib.scrypt(password.encode(), salt=salt, n=2 ** 14, r=8, p=1, dklen=32)
    return "$".join(["scrypt", "16384", "8", "1", base64.b64encode(salt).decode(),
                     base64.b64encode(digest).decode()])


def test_an_old_scrypt_account_signs_in_and_is_upgraded_to_argon2id(client):
    with client.app.state.database.transaction() as session:
        session.execute(update(User).where(User.name == "bob")
                        .values(password_hash=old_scrypt_hash(PASSWORD)))
    assert sign_in(client, "bob", "wrong password!").status_code == 401
    assert stored_hash(client, "bob").startswith("scrypt$")  # a wrong password changes nothing
    assert sign_in(client, "bob", PASSWORD).status_code == 303
    upgraded = stored_hash(client, "bob")
    assert upgraded.startswith("$argon2id$")
    assert sign_in(client, "bob", PASSWORD).status_code == 303  # with the new hash


def test_the_sixth_wrong_password_in_a_minute_is_refused_even_with_the_right_one(client):
    for _ in range(throttle.MAX_FAILURES):
        assert sign_in(client, "alice", "wrong password!").status_code == 401
    refused = sign_in(client, "alice", PASSWORD)
    assert refused.status_code == 429
    assert 0 < int(refused.headers["retry-after"]) <= throttle.FIRST_DELAY.total_seconds()
    assert "too many failed sign-ins" in refused.text
    with client.app.state.database.transaction() as session:
        actions = [event.action for event in audit.list_events(session=session, actor="alice")]
    assert actions[0] == audit.SIGN_IN_THROTTLED
    # Once the delay has passed, the right password signs in again.
    age_failures(client, throttle.FIRST_DELAY.total_seconds() + 1)
    assert sign_in(client, "alice", PASSWORD).status_code == 303


def test_the_delay_doubles_with_each_failure_past_it_and_covers_the_address():
    now = utc_now()
    burst = [now - timedelta(seconds=seconds) for seconds in (1, 2, 3, 4, 5)]
    assert throttle.wait_seconds(burst, now) == pytest.approx(29, abs=0.01)
    assert throttle.wait_seconds(burst[:4], now) == 0.0
    # Five failures spread over more than a minute never trigger it.
    spread = [now - timedelta(seconds=20 * index) for index in range(5)]
    assert throttle.wait_seconds(spread, now) == 0.0
    # A sixth failure, after the first delay: twice as long from the newest.
    assert throttle.wait_seconds([now, *burst], now) == pytest.approx(60, abs=0.01)
    many = [now - timedelta(seconds=index) for index in range(40)]
    assert throttle.wait_seconds(many, now) == throttle.MAX_DELAY.total_seconds()


def test_another_account_from_the_same_address_is_throttled_too(client):
    for _ in range(throttle.MAX_FAILURES):
        sign_in(client, "alice", "wrong password!")
    assert sign_in(client, "bob", PASSWORD).status_code == 429  # the test client's address


def test_guessed_api_tokens_are_audited_and_answered_429_with_retry_after(client):
    guess = {"Authorization": "Bearer tdk_not-a-real-token"}
    for _ in range(throttle.MAX_FAILURES):
        assert client.get("/api/jobs", headers=guess).status_code == 401
    refused = client.get("/api/tokens", headers=guess)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
    with client.app.state.database.transaction() as session:
        actions = [event.action for event in audit.list_events(session=session)]
    assert actions.count(audit.TOKEN_REFUSED) == throttle.MAX_FAILURES
    assert not any("not-a-real-token" in event.detail
                   for event in audit.list_events(session=session))


def test_the_openapi_schema_declares_the_bearer_token_and_the_session_cookie(client):
    # Open: the schema itself, as /docs reads it, needs the same credentials as the API.
    with client.app.state.database.transaction() as session:
        token = accounts.create_api_token(session=session, user_name="alice")
    schema = client.get("/openapi.json", headers={"Authorization": f"Bearer {token}"}).json()
    schemes = schema["components"]["securitySchemes"]
    assert schemes["apiToken"] == {"type": "http", "scheme": "bearer",
                                   "description": schemes["apiToken"]["description"]}
    assert schemes["sessionCookie"]["in"] == "cookie"
    assert schemes["sessionCookie"]["name"] == "tunedeck_session"
    assert schema["paths"]["/api/jobs"]["get"]["security"] == [{"apiToken": []},
                                                               {"sessionCookie": []}]
    assert "security" not in schema["paths"]["/healthz"]["get"]
