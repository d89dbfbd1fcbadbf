"""Access: accounts, tokens, sign-in, roles and the audit trail, against the real app
(REST and Gradio routes behind the access middleware) over SQLite and PostgreSQL.

The attack table of issue 7, access half: a missing or stale token, another user's job id,
every route without credentials, an open redirect, open access beyond loopback."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from starlette.routing import Mount, Route

from app.auth.middleware import OpenAccessRefused
from app.main import create_app
from tunedeck.accounts import users as accounts
from tunedeck.db.models import Credential, utc_now
from tunedeck.db.migrate import upgrade_database
from tunedeck.settings import Settings

PASSWORD = "correct horse battery"


def add_user(app, name: str, *, admin: bool = False) -> str:
    """The user, and an API token of theirs."""
    with app.state.database.transaction() as session:
        accounts.create_user(session=session, name=name, password=PASSWORD, is_admin=admin)
        return accounts.create_api_token(session=session, user_name=name, label="tests")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def accounts_app(hostile_app):
    """The app with an admin, two users and a job of each user."""
    tokens = {"root": add_user(hostile_app, "root", admin=True),
              "alice": add_user(hostile_app, "alice"), "bob": add_user(hostile_app, "bob")}
    hostile_app.state.tokens = tokens
    return hostile_app


@pytest.fixture
def client(accounts_app) -> TestClient:
    with TestClient(accounts_app, raise_server_exceptions=False) as client:
        client.tokens = accounts_app.state.tokens
        yield client


def submit(client: TestClient, user: str, name: str = "job") -> int:
    response = client.post("/api/jobs", json={"name": name, "max_steps": 1},
                           headers=bearer(client.tokens[user]))
    assert response.status_code == 201, response.text
    assert response.json()["owner"] == user
    return response.json()["id"]


# --- credentials -------------------------------------------------------------------------

def test_no_credentials_is_401_naming_the_way_in(client):
    response = client.get("/api/jobs")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in response.json()["detail"]


@pytest.mark.parametrize("header", ["Bearer tdk_not-a-real-token", "Bearer ", "Basic cm9vdDpyb290",
                                    "tdk_missing-scheme"])
def test_a_wrong_or_malformed_token_is_401(client, header):
    assert client.get("/api/jobs", headers={"Authorization": header}).status_code == 401


def test_an_expired_token_is_401(client, accounts_app):
    with accounts_app.state.database.transaction() as session:
        token = accounts.create_api_token(session=session, user_name="alice", expires_in_days=1)
        session.query(Credential).filter(Credential.label == "").update(
            {"expires_at": utc_now() - timedelta(seconds=1)})
    response = client.get("/api/jobs", headers=bearer(token))
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


def test_a_revoked_token_is_401(client):
    tokens = client.get("/api/tokens", headers=bearer(client.tokens["alice"])).json()
    (own,) = tokens
    assert client.delete(f"/api/tokens/{own['id']}",
                         headers=bearer(client.tokens["alice"])).status_code == 204
    assert client.get("/api/jobs", headers=bearer(client.tokens["alice"])).status_code == 401


def test_a_disabled_user_is_locked_out_of_tokens_and_sign_in(client, accounts_app):
    with accounts_app.state.database.transaction() as session:
        accounts.set_disabled(session=session, name="bob", disabled=True)
    assert client.get("/api/jobs", headers=bearer(client.tokens["bob"])).status_code == 401
    response = client.post("/login", data={"username": "bob", "password": PASSWORD},
                           follow_redirects=False)
    assert response.status_code == 401


def test_tokens_and_passwords_are_stored_hashed(client, accounts_app):
    with accounts_app.state.database.transaction() as session:
        stored = {row.secret_sha256 for row in session.query(Credential)}
        hashes = [user.password_hash for user in accounts.list_users(session=session)]
    assert not any(token in digest for token in client.tokens.values() for digest in stored)
    assert all(h.startswith("$argon2id$") and PASSWORD not in h for h in hashes)


def test_a_user_makes_and_uses_their_own_token(client):
    made = client.post("/api/tokens", json={"label": "laptop"},
                       headers=bearer(client.tokens["alice"]))
    assert made.status_code == 201
    me = client.get("/api/me", headers=bearer(made.json()["token"])).json()
    assert me == {"name": "alice", "admin": False, "open_access": False}
    listed = client.get("/api/tokens", headers=bearer(client.tokens["alice"])).json()
    assert {token["label"] for token in listed} == {"tests", "laptop"}
    assert not any(made.json()["token"] in str(token) for token in listed)


# --- roles and ownership -------------------------------------------------------------------

OWNED_ROUTES = [("GET", "/api/jobs/{id}"), ("GET", "/api/jobs/{id}/metrics"),
                ("GET", "/api/jobs/{id}/events"), ("GET", "/api/jobs/{id}/logs"),
                ("GET", "/api/jobs/{id}/config"), ("GET", "/api/jobs/{id}/checkpoints"),
                ("GET", "/api/jobs/{id}/artifacts/merged"), ("POST", "/api/jobs/{id}/cancel"),
                ("POST", "/api/jobs/{id}/resume"), ("POST", "/api/jobs/{id}/retry"),
                ("POST", "/api/jobs/{id}/compare-backends"), ("GET", "/api/compare?ids={own},{id}")]


@pytest.mark.parametrize("method,route", OWNED_ROUTES)
def test_another_users_job_is_404_on_every_job_route(client, method, route):
    job_id, own = submit(client, "alice"), submit(client, "bob")
    response = client.request(method, route.format(id=job_id, own=own),
                              headers=bearer(client.tokens["bob"]))
    assert response.status_code == 404, response.text
    assert f"job {job_id} does not exist" in response.text
    # The job is untouched by bob's attempt.
    job = client.get(f"/api/jobs/{job_id}", headers=bearer(client.tokens["alice"])).json()
    assert job["status"] == "queued" and not job["cancel_requested"]


def test_a_user_lists_only_their_own_jobs_and_an_admin_everyones(client):
    alices, bobs = submit(client, "alice"), submit(client, "bob")
    def listed(user):
        return {job["id"] for job in client.get("/api/jobs", headers=bearer(client.tokens[user])).json()}
    assert listed("alice") == {alices}
    assert listed("bob") == {bobs}
    assert listed("root") == {alices, bobs}


def test_an_admin_controls_any_users_job(client):
    job_id = submit(client, "alice")
    response = client.post(f"/api/jobs/{job_id}/cancel", headers=bearer(client.tokens["root"]))
    assert response.status_code == 202
    assert response.json()["status"] == "cancelled"


@pytest.mark.parametrize("method,route", [("GET", "/api/users"), ("POST", "/api/users"),
                                          ("GET", "/api/audit")])
def test_admin_routes_are_403_for_a_user(client, method, route):
    body = {"name": "mallory", "password": "x" * 12, "admin": True} if method == "POST" else None
    response = client.request(method, route, json=body, headers=bearer(client.tokens["alice"]))
    assert response.status_code == 403


def test_an_admin_adds_a_user_who_can_then_work(client):
    response = client.post("/api/users", json={"name": "carol", "password": "s" * 12},
                           headers=bearer(client.tokens["root"]))
    assert response.status_code == 201
    signed_in = client.post("/login", data={"username": "carol", "password": "s" * 12},
                            follow_redirects=False)
    assert signed_in.status_code == 303
    assert client.get("/api/me").json()["name"] == "carol"


# --- sign-in -------------------------------------------------------------------------------

def test_sign_in_sets_a_session_that_sign_out_ends(client):
    response = client.post("/login", data={"username": "alice", "password": PASSWORD,
                                           "next": "/api/me"}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/api/me"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "samesite=lax" in cookie.lower()
    assert client.get("/api/me").json()["name"] == "alice"
    client.get("/logout", follow_redirects=False)
    client.cookies.set("tunedeck_session", re.search(r"tunedeck_session=([^;]+)", cookie).group(1))
    assert client.get("/api/me").status_code == 401  # the old cookie is dead, not just dropped


def test_a_wrong_password_is_refused_and_audited(client):
    response = client.post("/login", data={"username": "alice", "password": "wrong"},
                           follow_redirects=False)
    assert response.status_code == 401
    assert "wrong user name or password" in response.text
    trail = client.get("/api/audit", headers=bearer(client.tokens["root"])).json()
    assert trail[0]["action"] == "sign_in_failed" and trail[0]["actor"] == "alice"


@pytest.mark.parametrize("route", ["/api/audit?actor=%00", "/api/audit?actor=a%00b",
                                   "/api/jobs?owner=%00"])
def test_a_name_filter_with_a_nul_is_422_naming_it(client, route):
    # PostgreSQL text refuses NUL even as a query parameter: the schema fuzzer found the 500.
    response = client.get(route, headers=bearer(client.tokens["root"]))
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["query", route.split("?")[1].split("=")[0]]
    assert client.get("/api/audit?actor=alice", headers=bearer(client.tokens["root"])).status_code == 200


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil.example"])
def test_sign_in_never_redirects_off_site(client, target):
    response = client.post("/login", data={"username": "alice", "password": PASSWORD,
                                           "next": target}, follow_redirects=False)
    assert response.headers["location"] == "/"


def test_a_browser_is_sent_to_the_sign_in_page(client):
    response = client.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/"
    page = client.get("/login")
    assert page.status_code == 200 and 'name="password"' in page.text


# --- the audit trail --------------------------------------------------------------------

def test_submit_cancel_and_download_attempts_are_in_the_audit_trail(client):
    job_id = submit(client, "alice", name="audited")
    client.post(f"/api/jobs/{job_id}/cancel", headers=bearer(client.tokens["root"]))
    trail = client.get(f"/api/audit?job_id={job_id}", headers=bearer(client.tokens["root"])).json()
    assert [(event["actor"], event["action"]) for event in reversed(trail)] == [
        ("alice", "submit"), ("root", "cancel")]
    assert all(event["client"] for event in trail)


# --- open access ------------------------------------------------------------------------

def test_without_accounts_loopback_runs_open_and_says_so(hostile_client):
    me = hostile_client.get("/api/me").json()
    assert me == {"name": "local", "admin": True, "open_access": True}
    assert hostile_client.post("/api/jobs", json={"max_steps": 1}).json()["owner"] is None


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "tunedeck.example"])
def test_without_accounts_it_refuses_to_listen_beyond_loopback(tmp_path, host):
    settings = Settings(home=tmp_path, host=host, database_url=None, broker_url=None)
    upgrade_database(settings.resolved_database_url)
    with pytest.raises(OpenAccessRefused, match="tunedeck user add"):
        create_app(settings, with_ui=False)


def test_with_an_account_it_listens_beyond_loopback_and_requires_sign_in(tmp_path):
    settings = Settings(home=tmp_path, host="0.0.0.0", database_url=None, broker_url=None)
    upgrade_database(settings.resolved_database_url)
    loopback_app = create_app(settings.model_copy(update={"host": "127.0.0.1"}), with_ui=False)
    add_user(loopback_app, "root", admin=True)
    app = create_app(settings, with_ui=False)
    with TestClient(app) as client:
        assert client.get("/api/jobs").status_code == 401
        assert client.get("/healthz").status_code == 200


# --- every route, Gradio's included ----------------------------------------------------------

def _every_route(routes, prefix=""):
    for route in routes:
        if hasattr(route, "original_router"):  # FastAPI's include_router
            yield from _every_route(route.original_router.routes,
                                    prefix + (route.include_context.prefix or ""))
        elif isinstance(route, Mount):  # Gradio's app
            yield from _every_route(route.routes, prefix + route.path)
        elif isinstance(route, Route) or hasattr(route, "methods"):
            for method in sorted(getattr(route, "methods", None) or {"GET"}):
                yield method, prefix + route.path


@pytest.fixture(scope="module")
def ui_app(tmp_path_factory):
    home = tmp_path_factory.mktemp("ui-home")
    settings = Settings(home=home, database_url=None, broker_url=None)
    upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=True)
    add_user(app, "root", admin=True)
    yield app
    app.state.database.dispose()


def test_every_route_rest_and_gradio_refuses_an_anonymous_request(ui_app):
    public = {"/healthz", "/login", "/logout"}
    routes = sorted(set(_every_route(ui_app.routes)))
    assert len(routes) > 100, routes  # the REST API and Gradio's own routes are all there
    checked = []
    with TestClient(ui_app, raise_server_exceptions=False) as client:
        for method, path in routes:
            if path in public or method == "HEAD":
                continue
            concrete = re.sub(r"\{[^}]*\}", "1", path) or "/"
            response = client.request(method, concrete, follow_redirects=False,
                                      headers={"Accept": "application/json"})
            checked.append((method, concrete, response.status_code))
    allowed = [(method, path, status) for method, path, status in checked if status != 401]
    assert allowed == [], allowed
    assert {path for _m, path, _s in checked} >= {"/api/jobs", "/api/jobs/1/artifacts/1",
                                                   "/api/workers", "/config"}


# --- the UI's handlers act for the signed-in user too ----------------------------------------

def test_the_ui_shows_and_acts_on_a_users_own_jobs_only(client, accounts_app):
    from app.auth.principal import Principal
    from app.ui.compare import compare_handlers
    from app.ui.jobs import jobs_table
    from app.ui.job_ids import job_link
    from app.ui.job_page import job_actions, job_handlers

    database = accounts_app.state.database
    alice, bob = Principal("alice", is_admin=False), Principal("bob", is_admin=False)
    alices, bobs = submit(client, "alice"), submit(client, "bob")
    assert list(jobs_table.jobs_table(database=database, principal=bob)["id"]) == [job_link(bobs)]
    assert job_handlers.load_job_page(alices, database=database, principal=bob).headline == (
        f"There is no job {alices}.")
    assert job_actions.cancel_from_page(alices, database=database, principal=bob) == (
        f"There is no job {alices}.")
    assert compare_handlers.load_comparison(f"{alices}, {bobs}", database=database,
                                            principal=bob).message.startswith("Cannot compare")
    assert job_actions.cancel_from_page(alices, database=database, principal=alice).startswith(
        f"Job {alices}")
    root = Principal("root", is_admin=True)
    assert set(jobs_table.jobs_table(database=database, principal=root)["id"]) == \
        {job_link(alices), job_link(bobs)}
    trail = client.get(f"/api/audit?job_id={alices}", headers=bearer(client.tokens["root"])).json()
    assert [(event["actor"], event["action"]) for event in trail] == [("alice", "cancel"),
                                                                      ("alice", "submit")]
