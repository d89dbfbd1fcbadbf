"""docker-compose.yml, the Dockerfiles and .env.example, checked without a Docker engine
(plus `docker compose config` where the Docker CLI has the compose plugin)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url

from tests.deploy.compose_file import (COMPOSE_FILE, REPO, load_compose,
                                       service_environment, variables_read_from_env_file)
from tunedeck.settings import Settings

SERVICES = {"postgres", "redis", "migrate", "web", "worker"}
LONG_RUNNING = ["postgres", "redis", "web", "worker"]
TUNEDECK_SERVICES = ["migrate", "web", "worker"]
SETTING_NAMES = {f"TUNEDECK_{name.upper()}" for name in Settings.model_fields}
# What `.env` would set; a password with no URL-special characters, as .env.example asks.
ENV_FILE_VALUES = {"POSTGRES_PASSWORD": "s3cret-pass"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def dependencies(service: dict) -> dict[str, str]:
    return {name: options["condition"] for name, options in service["depends_on"].items()}


def test_the_five_services_exist(services):
    # What `docker compose up` starts: the rest waits for its profile.
    assert {name for name, service in services.items() if not service.get("profiles")} == SERVICES


# --- the monitoring profile -----------------------------------------------------------------

PROMETHEUS_CONFIG = REPO / "docker" / "prometheus.yml"


@pytest.fixture(scope="module")
def prometheus_config() -> dict:
    return yaml.safe_load(PROMETHEUS_CONFIG.read_text())


def scrape_job(config: dict, name: str) -> dict:
    return next(job for job in config["scrape_configs"] if job["job_name"] == name)


def test_prometheus_is_optional_behind_the_monitoring_profile(services):
    prometheus = services["prometheus"]
    assert prometheus["profiles"] == ["monitoring"]
    assert prometheus["image"].startswith("prom/prometheus:")
    assert "disable" not in prometheus["healthcheck"]
    # Its UI shows the cluster's figures without sign-in: this host's loopback only.
    assert all(port.startswith("127.0.0.1:") for port in prometheus["ports"])
    config_mount = next(mount for mount in prometheus["volumes"]
                        if mount.endswith(":/etc/prometheus/prometheus.yml:ro"))
    assert (REPO / config_mount.split(":")[0]).resolve() == PROMETHEUS_CONFIG


def test_prometheus_scrapes_the_web_with_the_scrape_token_secret(compose, services,
                                                                 prometheus_config):
    web_job = scrape_job(prometheus_config, "tunedeck-web")
    assert web_job["metrics_path"] == "/metrics"
    assert web_job["static_configs"] == [{"targets": ["web:7860"]}]
    assert web_job["authorization"]["type"] == "Bearer"
    [secret] = services["prometheus"]["secrets"]
    assert web_job["authorization"]["credentials_file"] == f"/run/secrets/{secret}"
    assert compose["secrets"][secret] == {"environment": "TUNEDECK_METRICS_TOKEN"}


def test_prometheus_scrapes_the_worker_on_its_metrics_port(services, prometheus_config):
    worker = service_environment(services["worker"], ENV_FILE_VALUES)
    settings = Settings(worker_metrics_port=worker["TUNEDECK_WORKER_METRICS_PORT"],
                        worker_metrics_host=worker["TUNEDECK_WORKER_METRICS_HOST"])
    assert settings.worker_metrics_host == "0.0.0.0"  # reachable from the Prometheus container
    assert "ports" not in services["worker"]  # ...and from nothing outside the network
    worker_job = scrape_job(prometheus_config, "tunedeck-worker")
    assert worker_job["static_configs"] == [
        {"targets": [f"worker:{settings.worker_metrics_port}"]}]


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_every_long_running_service_has_a_healthcheck(services, name):
    healthcheck = services[name]["healthcheck"]
    assert healthcheck["test"][0] in ("CMD", "CMD-SHELL") and len(healthcheck["test"]) > 1
    assert "disable" not in healthcheck


def test_postgres_and_redis_are_checked_by_their_own_clients(services):
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "redis-cli ping" in " ".join(services["redis"]["healthcheck"]["test"])


def test_redis_keeps_queued_messages_across_a_restart(services):
    redis = services["redis"]
    assert redis["command"][redis["command"].index("--appendonly") + 1] == "yes"
    assert any(mount.split(":")[1] == "/data" for mount in redis["volumes"])


def test_migrate_runs_once_after_postgres_is_healthy(services):
    migrate = services["migrate"]
    assert migrate["command"] == ["tunedeck", "migrate"]
    assert dependencies(migrate) == {"postgres": "service_healthy"}
    assert migrate.get("restart", "no") == "no"


@pytest.mark.parametrize("name", ["web", "worker"])
def test_web_and_worker_start_after_the_migration_and_a_healthy_broker(services, name):
    assert dependencies(services[name]) == {"migrate": "service_completed_successfully",
                                             "redis": "service_healthy"}


def test_the_commands_are_the_tunedeck_services(services):
    assert services["web"]["command"] == ["tunedeck", "web", "--host", "0.0.0.0", "--port", "7860"]
    assert services["worker"]["command"] == ["tunedeck", "worker"]


def test_the_web_healthcheck_asks_healthz_on_the_port_web_listens_on(services):
    web = services["web"]
    port = web["command"][web["command"].index("--port") + 1]
    check = " ".join(web["healthcheck"]["test"])
    assert f"127.0.0.1:{port}/healthz" in check
    assert any(mapping.split(":")[-1] == port for mapping in web["ports"])


def test_the_worker_reserves_every_nvidia_gpu(services):
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "capabilities": ["gpu"], "count": "all"}]


def test_the_worker_healthcheck_script_is_in_the_worker_image(services):
    check = services["worker"]["healthcheck"]["test"]
    script = next(argument for argument in check if argument.endswith(".py"))
    dockerfile = (REPO / services["worker"]["build"]["dockerfile"]).read_text()
    assert re.search(r"^WORKDIR /app$", dockerfile, re.MULTILINE)
    assert re.search(r"^COPY \. /app$", dockerfile, re.MULTILINE)
    assert (REPO / os.path.relpath(script, "/app")).is_file()


def test_the_worker_keeps_its_host_name_across_restarts(services):
    # Its dead jobs are found by host name at start; a container id would change.
    assert services["worker"]["hostname"]


@pytest.mark.parametrize("name", ["web", "worker"])
def test_web_and_worker_share_one_volume_at_their_tunedeck_home(compose, services, name):
    home = service_environment(services[name], ENV_FILE_VALUES)["TUNEDECK_HOME"]
    home_volumes = {mount.split(":")[0] for mount in services[name]["volumes"]
                    if mount.split(":")[1] == home}
    assert len(home_volumes) == 1
    assert home_volumes <= set(compose["volumes"])  # a named volume, not a host folder
    other = services["worker" if name == "web" else "web"]
    assert service_environment(other, ENV_FILE_VALUES)["TUNEDECK_HOME"] == home
    assert home_volumes <= {mount.split(":")[0] for mount in other["volumes"]}


@pytest.mark.parametrize("name", TUNEDECK_SERVICES)
def test_tunedeck_services_reach_the_compose_database(services, name):
    environment = service_environment(services[name], ENV_FILE_VALUES)
    url = make_url(environment["TUNEDECK_DATABASE_URL"])
    postgres = service_environment(services["postgres"], ENV_FILE_VALUES)
    assert url.drivername == "postgresql+psycopg"
    assert url.host in services and services[url.host]["image"].startswith("postgres:")
    assert (url.port or 5432) == 5432
    assert url.username == postgres["POSTGRES_USER"]
    assert url.password == postgres["POSTGRES_PASSWORD"] == ENV_FILE_VALUES["POSTGRES_PASSWORD"]
    assert url.database == postgres["POSTGRES_DB"]


@pytest.mark.parametrize("name", TUNEDECK_SERVICES)
def test_tunedeck_services_reach_the_compose_broker(services, name):
    broker = urlsplit(service_environment(services[name], ENV_FILE_VALUES)["TUNEDECK_BROKER_URL"])
    assert broker.scheme == "redis"
    assert broker.hostname in services and services[broker.hostname]["image"].startswith("redis:")
    assert (broker.port or 6379) == 6379


@pytest.mark.parametrize("name", TUNEDECK_SERVICES)
def test_gradio_analytics_are_off(services, name):
    environment = service_environment(services[name], ENV_FILE_VALUES)
    assert environment["GRADIO_ANALYTICS_ENABLED"] == "False"


def test_the_compose_file_refuses_to_start_without_a_postgres_password(services):
    with pytest.raises(KeyError, match="POSTGRES_PASSWORD"):
        service_environment(services["postgres"], {})


def test_every_tunedeck_variable_in_the_compose_file_is_a_setting():
    named = set(re.findall(r"TUNEDECK_[A-Z0-9_]+", COMPOSE_FILE.read_text()))
    assert named and named <= SETTING_NAMES, named - SETTING_NAMES


def test_tunedeck_home_and_the_extensions_cache_are_in_the_volume(services):
    worker = service_environment(services["worker"], ENV_FILE_VALUES)
    assert worker["TUNEDECK_TORCH_EXTENSIONS_DIR"].startswith(worker["TUNEDECK_HOME"] + "/")


# --- Dockerfiles ----------------------------------------------------------------------------

def pip_install_targets(dockerfile: str) -> list[str]:
    """What each `pip install` in a Dockerfile installs (options dropped)."""
    commands = re.sub(r"\\\n", " ", dockerfile)
    targets = []
    for line in commands.splitlines():
        if not line.startswith("RUN "):
            continue
        for words in shell_commands(line[len("RUN "):]):
            if words[:2] == ["pip", "install"] or words[1:4] == ["-m", "pip", "install"]:
                start = words.index("install") + 1
                targets += [word for word in words[start:] if not word.startswith("-")]
    return targets


def shell_commands(script: str) -> list[list[str]]:
    """The words of each command of `a && b; c`, quotes respected."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&&", "||", ";", "|"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [words for words in commands if words]


@pytest.mark.parametrize("name", ["migrate", "web", "worker"])
def test_each_image_is_built_from_a_dockerfile_in_the_repo(services, name):
    build = services[name]["build"]
    assert build["context"] == "."
    assert (REPO / build["dockerfile"]).is_file()


def test_migrate_and_web_share_the_web_image(services):
    assert services["migrate"]["build"] == services["web"]["build"]
    assert services["migrate"]["image"] == services["web"]["image"]


def test_the_web_image_installs_the_project_without_torch(services):
    dockerfile = (REPO / services["web"]["build"]["dockerfile"]).read_text()
    targets = pip_install_targets(dockerfile)
    assert targets == ["."]
    assert not re.search(r"^FROM .*(pytorch|cuda)", dockerfile, re.MULTILINE | re.IGNORECASE)


def test_the_worker_image_installs_the_worker_extra_on_cuda_torch(services):
    dockerfile = (REPO / services["worker"]["build"]["dockerfile"]).read_text()
    assert pip_install_targets(dockerfile) == [".[worker]"]
    base = re.search(r"^ARG BASE_IMAGE=(\S+)", dockerfile, re.MULTILINE)
    assert base and re.match(r"pytorch/pytorch:[\d.]+-cuda[\d.]+-cudnn\d+-devel$", base[1])
    assert re.search(r"^ENV .*TORCH_EXTENSIONS_DIR=/var/lib/tunedeck/", dockerfile,
                     re.MULTILINE | re.DOTALL)


def test_the_build_context_leaves_out_local_state():
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv", "var", ".env"} <= ignored


# --- .env.example ---------------------------------------------------------------------------

def env_example_keys() -> set[str]:
    """Keys .env.example sets or shows commented out (`# KEY=...`)."""
    text = (REPO / ".env.example").read_text()
    return set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", text, re.MULTILINE))


def test_env_example_lists_every_setting():
    assert SETTING_NAMES <= env_example_keys(), SETTING_NAMES - env_example_keys()


def test_env_example_lists_no_setting_that_does_not_exist():
    listed = {key for key in env_example_keys() if key.startswith("TUNEDECK_")}
    assert listed <= SETTING_NAMES, listed - SETTING_NAMES


def test_env_example_sets_what_the_compose_file_reads():
    keys = env_example_keys()
    assert variables_read_from_env_file() <= keys
    assert {"POSTGRES_PASSWORD", "GRADIO_ANALYTICS_ENABLED"} <= keys


# --- Docker's own parser, where it is installed -------------------------------------------

def docker_compose_available() -> bool:
    try:
        return subprocess.run(["docker", "compose", "version"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not docker_compose_available(), reason="no `docker compose` on this machine")
def test_docker_compose_accepts_the_file(tmp_path):
    # `config` parses, interpolates and validates offline; it needs no Docker engine.
    result = subprocess.run(["docker", "compose", "-f", str(COMPOSE_FILE), "config", "-q"],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, **ENV_FILE_VALUES})
    assert result.returncode == 0, result.stderr
