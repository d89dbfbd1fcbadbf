"""Secrets never written down, and no user value reaches a shell (issue 7).

The database password, the broker password and the hub token go in through the environment
of a real `tunedeck migrate` and `tunedeck up` (PostgreSQL, a Redis of the test's own that
requires a password); a job runs to success; then none of them may be in anything TuneDeck
printed, wrote (every file under its home: run folder, launch.json, logs, metrics), stored
in the database, or answered over HTTP (REST and the UI). The hub token must still have
reached the rank's environment.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from harness.services import REPO
from harness.servers import free_port, running_tunedeck
from tunedeck.accounts.redaction import REDACTED, redact_url

# Distinctive values: any hit is one of them, never a coincidence.
DATABASE_PASSWORD = f"PgSecret{uuid.uuid4().hex[:12]}"
BROKER_PASSWORD = f"RedisSecret{uuid.uuid4().hex[:12]}"
HUB_TOKEN = f"hf_HubSecret{uuid.uuid4().hex[:16]}"
SECRETS = {"database password": DATABASE_PASSWORD, "broker password": BROKER_PASSWORD,
           "hub token": HUB_TOKEN}
FINISHED = {"succeeded", "failed", "cancelled"}
SECRETS_JOB = {"name": "secrets", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
               "method": "lora", "backend": "fsdp", "num_gpus": 1, "max_steps": 40,
               "micro_batch_size": 4, "seq_len": 64, "precision": "fp32",
               "lora": {"r": 4, "alpha": 8, "dropout": 0.0}}
SOURCE_FOLDERS = ("app", "tunedeck", "cli", "worker", "trainer")


@pytest.fixture
def redis_with_password(tmp_path):
    """A Redis server of this test's own that refuses clients without the password."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    folder = tmp_path / "redis"
    folder.mkdir()
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", BROKER_PASSWORD,
         "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://:{BROKER_PASSWORD}@127.0.0.1:{port}/0"
    try:
        _wait_for_redis(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_for_redis(url: str, process: subprocess.Popen) -> None:
    import redis

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and process.poll() is None:
        try:
            redis.Redis.from_url(url).ping()
            return
        except redis.ConnectionError:
            time.sleep(0.1)
    raise AssertionError("the test's Redis did not start")


@pytest.mark.torchrun
@pytest.mark.postgres
@pytest.mark.redis
def test_a_job_runs_and_no_secret_is_printed_written_stored_or_served(
        tmp_path, postgres_url, redis_with_password):
    from sqlalchemy.engine import make_url

    database_url = make_url(postgres_url).set(password=DATABASE_PASSWORD) \
        .render_as_string(hide_password=False)
    env = {"TUNEDECK_DATABASE_URL": database_url, "TUNEDECK_BROKER_URL": redis_with_password,
           "HF_TOKEN": HUB_TOKEN, "HUGGING_FACE_HUB_TOKEN": HUB_TOKEN}
    home = tmp_path / "home"
    migrate = subprocess.run([sys.executable, "-m", "cli", "migrate"], cwd=REPO,
                             env={**os.environ, "TUNEDECK_HOME": str(home), **env},
                             capture_output=True, text=True, timeout=120)
    assert migrate.returncode == 0, migrate.stderr
    with running_tunedeck(home, extra_env=env) as server:
        job_id = server.submit(SECRETS_JOB)
        rank_environment = _a_rank_environment(home, server, job_id)
        job = server.wait_for(job_id, FINISHED, timeout_seconds=240)
        assert job["status"] == "succeeded", job["error"]
        answers = _http_answers(server, job_id)
    # Not vacuous: the job ran, its record and files exist, the hub token reached its rank,
    # and each secret is one the services really had to use.
    assert len(answers[f"/api/jobs/{job_id}/metrics"]) > 100
    run = home / "runs" / f"job-{job_id}"
    assert (run / "launch.json").is_file() and (run / "merged").is_dir()
    assert rank_environment.get("HF_TOKEN") == HUB_TOKEN
    assert "TUNEDECK_DATABASE_URL" not in rank_environment
    assert "TUNEDECK_BROKER_URL" not in rank_environment
    printed = {"tunedeck migrate": migrate.stdout + migrate.stderr,
               "tunedeck up, web and worker": (home / "up.log").read_text(errors="replace")}
    assert "database postgresql+psycopg://postgres:***@" in printed["tunedeck migrate"]
    assert "transport:   redis://:**@" in printed["tunedeck up, web and worker"]  # Celery's
    assert "database postgresql+psycopg://postgres:***@" in printed["tunedeck up, web and worker"]
    assert "broker redis://:***@127.0.0.1:" in printed["tunedeck up, web and worker"]
    found = _places_holding_secrets({
        **printed, **answers, **_files_under(home), **_database_rows(database_url),
        "the rank's environment, less the hub token": "\n".join(
            f"{key}={value}" for key, value in rank_environment.items()
            if key not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"))})
    assert found == [], "\n".join(found)


def _a_rank_environment(home: Path, server, job_id: int) -> dict[str, str]:
    """The environment of the job's rank 0, read from /proc while it runs: a torchrun child
    whose command line names the run folder."""
    from worker.process_group import live_group_members
    from worker.sampler import rank_of_process

    run_dir = str(home.resolve() / "runs" / f"job-{job_id}")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        # A cold rank names the run folder on its command line; a warm one (forked by the
        # warm start's fork server) is in its launcher's process group, named td-rank0.
        launcher_pid = server.job(job_id).get("launcher_pid")
        candidates = [process for process in psutil.process_iter(["cmdline"])
                      if run_dir in (process.info["cmdline"] or [])]
        candidates += [psutil.Process(pid) for pid in
                       (live_group_members(launcher_pid) if launcher_pid else [])]
        for process in candidates:
            try:
                if rank_of_process(process) == 0:
                    return process.environ()
            except psutil.Error:
                continue
        assert server.job(job_id)["status"] in ("queued", "running"), server.job(job_id)
        time.sleep(0.1)
    raise AssertionError("no rank of the job was seen running")


def _http_answers(server, job_id: int) -> dict[str, str]:
    paths = ["/api/jobs", f"/api/jobs/{job_id}", f"/api/jobs/{job_id}/config",
             f"/api/jobs/{job_id}/logs?lines=5000", f"/api/jobs/{job_id}/events",
             f"/api/jobs/{job_id}/metrics", "/api/workers", "/openapi.json",
             "/", "/config"]  # the UI's page and Gradio's description of it
    answers = {}
    for path in paths:
        response = server.http.get(path)
        assert response.status_code == 200, (path, response.status_code)
        answers[path] = response.text
    return answers


def _files_under(home: Path) -> dict[str, bytes]:
    """Every file TuneDeck wrote: the run folder (spec.json, launch.json, the backend
    config, logs/, metrics/, the weights), the builtin model, up.log."""
    return {str(path): path.read_bytes() for path in home.rglob("*") if path.is_file()}


def _database_rows(database_url: str) -> dict[str, str]:
    """Every row of every table, as text: the record the web serves the UI from."""
    from sqlalchemy import MetaData, create_engine, select

    engine = create_engine(database_url)
    metadata = MetaData()
    metadata.reflect(engine)
    with engine.connect() as connection:
        rows = {f"table {table.name}": repr(connection.execute(select(table)).all())
                for table in metadata.sorted_tables}
    engine.dispose()
    return rows


def _places_holding_secrets(places: dict[str, str | bytes]) -> list[str]:
    found = []
    for place, content in places.items():
        for secret_name, secret in SECRETS.items():
            needle = secret.encode() if isinstance(content, bytes) else secret
            if needle in content:
                found.append(f"{secret_name} in {place}")
    return found


# --- the redaction helper -------------------------------------------------------------


@pytest.mark.parametrize("url, shown", [
    ("postgresql+psycopg://tunedeck:S3cretPw@127.0.0.1/test",
     "postgresql+psycopg://tunedeck:***@127.0.0.1/test"),
    ("postgresql+psycopg://tunedeck:S3c%40retPw@db:5432/tunedeck",
     "postgresql+psycopg://tunedeck:***@db:5432/tunedeck"),
    # An unescaped @ in the password: nothing of it is left (SQLAlchemy's own renderer
    # would leave "etPw@" behind).
    ("postgresql+psycopg://tunedeck:S3cr@etPw@db/tunedeck", "postgresql+psycopg://tunedeck:***@db/tunedeck"),
    ("redis://:S3cretPw@redis:6379/0", "redis://:***@redis:6379/0"),
    ("redis://default:S3cretPw@[::1]:6379/0", "redis://default:***@[::1]:6379/0"),
    ("amqp://guest:S3cretPw@rabbit//", "amqp://guest:***@rabbit//"),
    ("https://alice:S3cretPw@tunedeck.example/", "https://alice:***@tunedeck.example/"),
    ("postgresql+psycopg://tunedeck@db/tunedeck?password=S3cretPw&sslmode=require",
     "postgresql+psycopg://tunedeck@db/tunedeck?password=***&sslmode=require"),
    ("redis://redis:6379/0?Password=S3cretPw", "redis://redis:6379/0?Password=***"),
    ("http://alice:S3cretPw@[::1", "http://***"),  # does not parse: only the scheme is left
])
def test_a_url_is_shown_without_its_password(url, shown):
    assert redact_url(url) == shown
    assert "S3cretPw" not in redact_url(url) and REDACTED in redact_url(url)


@pytest.mark.parametrize("url", [
    "sqlite:////var/lib/tunedeck/tunedeck.db", "sqlite:///./var/tunedeck.db", "filesystem://",
    "redis://redis:6379/0", "postgresql+psycopg://tunedeck@db/tunedeck?sslmode=require",
    "http://127.0.0.1:7860",
])
def test_a_url_without_a_password_is_shown_unchanged(url):
    assert redact_url(url) == url


def test_settings_never_show_the_urls_in_their_repr():
    from tunedeck.settings import Settings

    settings = Settings(database_url="postgresql+psycopg://u:S3cretPw@db/x",
                        broker_url="redis://:S3cretPw@redis:6379/0")
    assert "S3cretPw" not in repr(settings) and "S3cretPw" not in str(settings)


def test_an_unreachable_database_or_broker_is_reported_without_the_password(tmp_path):
    """What the worker's heartbeat and the web log when the database or broker is down: the
    driver's error names host and port, SQLAlchemy's and kombu's reprs hide the password."""
    import traceback

    from tunedeck.services.broker import make_celery
    from tunedeck.db.engine import Database
    from tunedeck.settings import Settings

    closed_port = free_port()
    database = Database(f"postgresql+psycopg://postgres:{DATABASE_PASSWORD}@127.0.0.1:{closed_port}/x")
    with pytest.raises(Exception) as raised:
        with database.transaction() as session:
            session.connection()
    told = "".join(traceback.format_exception(raised.value)) + repr(database.engine)
    database.dispose()
    celery_app = make_celery(Settings(home=tmp_path, broker_url=(
        f"redis://:{BROKER_PASSWORD}@127.0.0.1:{closed_port}/0")))
    with pytest.raises(Exception) as raised:
        celery_app.send_task("tunedeck.nothing", retry_policy={"max_retries": 0})
    told += "".join(traceback.format_exception(raised.value)) + repr(celery_app.connection())
    assert f"127.0.0.1:{closed_port}" in told or f'port {closed_port}' in told
    assert _places_holding_secrets({"the errors": told}) == []


def test_the_ranks_get_the_hub_token_and_launch_json_records_only_tunedecks_own_variables(
        tmp_path, monkeypatch):
    from tunedeck.spec.job_spec import JobSpec
    from tunedeck.run_folder import RunFolder, read_json
    from tunedeck.settings import Settings
    from worker.launch import NodeLaunch, prepare_run_folder

    for key, value in {"HF_TOKEN": HUB_TOKEN, "HUGGING_FACE_HUB_TOKEN": HUB_TOKEN,
                       "TUNEDECK_DATABASE_URL": f"postgresql+psycopg://u:{DATABASE_PASSWORD}@db/x",
                       "TUNEDECK_BROKER_URL": f"redis://:{BROKER_PASSWORD}@redis:6379/0",
                       "POSTGRES_PASSWORD": DATABASE_PASSWORD}.items():
        monkeypatch.setenv(key, value)
    run = RunFolder(tmp_path / "run")
    spec = JobSpec.model_validate(SECRETS_JOB)
    _argv, process_environment = prepare_run_folder(NodeLaunch(job_id=1, spec=spec, run=run),
                                                    Settings(home=tmp_path))
    assert process_environment["HF_TOKEN"] == HUB_TOKEN  # gated models need it
    assert process_environment["HUGGING_FACE_HUB_TOKEN"] == HUB_TOKEN
    assert not {"TUNEDECK_DATABASE_URL", "TUNEDECK_BROKER_URL",
                "POSTGRES_PASSWORD"} & set(process_environment)
    # An allow-list: what TuneDeck itself sets for the ranks, nothing inherited.
    assert set(read_json(run.launch_file)["env"]) <= {
        "TUNEDECK_HOME", "TORCH_EXTENSIONS_DIR", "OMP_NUM_THREADS", "PYTHONUNBUFFERED",
        "PYTHONSAFEPATH", "TOKENIZERS_PARALLELISM", "CUDA_VISIBLE_DEVICES", "HF_DATASETS_CACHE"}
    written = b"".join(path.read_bytes() for path in run.path.rglob("*") if path.is_file())
    assert _places_holding_secrets({"the run folder": written}) == []


def test_the_cli_does_not_print_the_password_of_its_server_url(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "cli", "resume", "1",
         "--server", f"http://alice:{BROKER_PASSWORD}@127.0.0.1:9"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "TUNEDECK_HOME": str(tmp_path)})
    assert result.returncode != 0
    assert "cannot reach TuneDeck at http://alice:***@127.0.0.1:9" in result.stderr
    assert BROKER_PASSWORD not in result.stdout + result.stderr


# --- no shell ---------------------------------------------------------------------------

SHELL_CALLS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"),
               ("subprocess", "getstatusoutput"), ("asyncio", "create_subprocess_shell")}


def _shell_uses(path: Path) -> list[str]:
    uses = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:" \
                f"{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant)
                                                   and keyword.value.value is False):
                    uses.append(f"{where} shell=")
            function = node.func
            if (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
                    and (function.value.id, function.attr) in SHELL_CALLS):
                uses.append(f"{where} {function.value.id}.{function.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module in {"os", "subprocess", "asyncio"}:
            uses += [f"{where} from {node.module} import {alias.name}" for alias in node.names
                     if (node.module, alias.name) in SHELL_CALLS]
    return uses


def test_no_source_file_starts_a_shell():
    sources = [path for folder in SOURCE_FOLDERS for path in (REPO / folder).rglob("*.py")]
    assert len(sources) > 50
    assert [use for path in sources for use in _shell_uses(path)] == []


def test_the_scan_finds_each_way_of_starting_a_shell(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os, subprocess\nfrom os import system\n"
                     "subprocess.run('ls', shell=True)\nsubprocess.Popen('ls', shell=flag)\n"
                     "os.system('ls')\nos.popen('ls')\nsubprocess.getoutput('ls')\n"
                     "subprocess.run(['ls'], shell=False)\n")
    assert len(_shell_uses(probe)) == 6


HOSTILE = ["job; rm -rf /", "$(id)", "`id`", "a b\tc", "x && y || z", "'\"", "*", "> /tmp/out"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_run_folder_with_shell_characters_is_one_argv_item_each_time(hostile):
    from tunedeck.launch_config import build_torchrun_argv
    from tunedeck.spec.job_spec import JobSpec

    spec = JobSpec.model_validate({**SECRETS_JOB, "name": hostile})
    run_dir = f"/srv/tunedeck/runs/{hostile}"
    argv = build_torchrun_argv(spec, run_dir, torchrun=f"/opt/{hostile}/torchrun")
    assert argv[0] == f"/opt/{hostile}/torchrun"
    assert argv[argv.index("--run-dir") + 1] == run_dir
    assert argv[argv.index("--log-dir") + 1] == f"{run_dir}/logs/ranks"
    assert hostile not in argv  # the job's name is not an argument at all


def test_the_launcher_hands_argv_to_the_program_unchanged(tmp_path):
    """The worker's own launcher (no shell between): each hostile string arrives as one
    argument, unexpanded."""
    from worker.process_group import start_process_group

    log_file = tmp_path / "launcher.log"
    echo = "import json, sys; print(json.dumps(sys.argv[1:]))"
    process = start_process_group([sys.executable, "-c", echo, *HOSTILE], cwd=tmp_path,
                                  env={"PATH": os.environ.get("PATH", "")}, log_file=log_file)
    assert process.wait(timeout=30) == 0
    assert json.loads(log_file.read_text()) == HOSTILE
