"""Dependencies point one way (docs/architecture.md), for every package: checked on the source
and, for what must stay light, in a fresh interpreter.

    core (tunedeck/)                     -> nothing of app, worker, trainer, cli
    app                                  -> core only (never torch, never the worker)
    worker                               -> core, and the trainer's pure modules
    trainer                              -> pure core modules only
    cli (start-up, above all the rest)   -> anything of the product
    migrations                           -> core only
    (nothing of tunedeck, app, worker, trainer or migrations imports cli)
    harness (what tests and benches drive TuneDeck with) -> the product, never a test
    bench                                -> the product and harness, never a test
and no package of the product imports harness, bench or tests.
"""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

NOT_THE_PRODUCT = {"harness", "bench", "tests"}
START_UP = "cli"
# What each package may not import at all (prefixes of dotted names).
FORBIDDEN = {
    "tunedeck": {"app", "worker", "trainer", START_UP, *NOT_THE_PRODUCT},
    "app": {"worker", "trainer", START_UP, "torch", "deepspeed", "transformers", "peft",
            "datasets", "tunedeck.data.sources", *NOT_THE_PRODUCT},
    "worker": {"app", START_UP, *NOT_THE_PRODUCT},
    "trainer": {"app", "worker", START_UP, "tunedeck.db", "tunedeck.jobs.store",
                "tunedeck.jobs.queries", "tunedeck.metrics.store", "tunedeck.settings",
                "tunedeck.accounts",
                "tunedeck.cluster", "sqlalchemy", "celery", "gradio", "fastapi",
                *NOT_THE_PRODUCT},
    "cli": {*NOT_THE_PRODUCT},
    "migrations": {"app", "worker", "trainer", START_UP, *NOT_THE_PRODUCT},
    "harness": {"tests", "bench"},
    "bench": {"tests"},
}
# The app may import these only inside a function (they load torch or the worker's stack).
APP_MODULE_LEVEL_FORBIDDEN = {"torch", "deepspeed", "transformers", "peft", "worker"}
PURE_MODULES = ["tunedeck/spec/job_spec.py", "tunedeck/spec/sections.py",
                "tunedeck/torch_extensions.py", "tunedeck/lora_targets_text.py",
                "tunedeck/launch_config.py", "tunedeck/training_plan.py",
                "tunedeck/training_steps.py", "tunedeck/run_folder.py", "tunedeck/metrics/events.py",
                "tunedeck/metrics/figures.py", "tunedeck/jobs/states.py", "tunedeck/units.py",
                "tunedeck/metrics/eta.py", "tunedeck/safetensors_headers.py",
                "tunedeck/data/records.py", "tunedeck/data/sources.py", "tunedeck/data/columns.py",
                "tunedeck/data/file_formats.py", "tunedeck/data/file_check.py",
                "tunedeck/data/preference_records.py", "tunedeck/worker_requests/states.py",
                "tunedeck/spec/text.py"]
HEAVY = {"torch", "deepspeed", "transformers", "peft", "sqlalchemy", "celery", "gradio",
         "fastapi", "yaml", "numpy", "datasets", "pyarrow", "huggingface_hub"}


def _imports(path: Path, *, module_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if module_level_only else ast.walk(tree)
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # `from tunedeck import job_spec` names the module through its package.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def all_imports(path: Path) -> set[str]:
    return _imports(path, module_level_only=False)


def module_level_imports(path: Path) -> set[str]:
    """Imports executed when the module is imported (function bodies don't count)."""
    return _imports(path, module_level_only=True)


def hits(names: set[str], forbidden: set[str]) -> set[str]:
    return {name for name in names for bad in forbidden if name == bad or name.startswith(bad + ".")}


def files_of(package: str) -> list[Path]:
    files = sorted((REPO / package).rglob("*.py"))
    if package == "bench":  # the stand-in trainer a bench launches is a trainer of its own
        files = [path for path in files if "fake_trainer" not in path.parts]
    return files


def test_every_package_of_the_repository_has_a_rule():
    packages = {path.name for path in REPO.iterdir() if path.is_dir() and
                any(path.rglob("*.py")) and path.name not in {"tests", "docker", "scripts"}
                and not path.name.startswith(".")}
    assert packages <= {name.split("/")[0] for name in FORBIDDEN}, packages


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_what_its_rule_allows(package):
    wrong = {str(path.relative_to(REPO)): sorted(hits(all_imports(path), FORBIDDEN[package]))
             for path in files_of(package)}
    assert not {path: names for path, names in wrong.items() if names}


def test_app_never_imports_torch_or_worker_code_at_module_level():
    for path in files_of("app"):
        assert not hits(module_level_imports(path), APP_MODULE_LEVEL_FORBIDDEN), path


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_import_no_heavy_library_at_module_level(module):
    assert not hits(module_level_imports(REPO / module), HEAVY), module


def _fresh_interpreter(code: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={"TUNEDECK_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False",
                               "PATH": "/usr/bin:/bin"})


def test_the_web_app_loads_without_torch(tmp_path):
    code = ("import sys; from app.main import create_app; from tunedeck.db.migrate import "
            "upgrade_database; from tunedeck.settings import load_settings; "
            "upgrade_database(load_settings().resolved_database_url); create_app(with_ui=True); "
            "bad = [m for m in ('torch', 'deepspeed', 'worker.tasks') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = _fresh_interpreter(code, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_worker_imports_only_pure_trainer_modules(tmp_path):
    """What the worker takes from the trainer (names and rules) must not load torch into a
    worker process that only claims and supervises."""
    trainer_modules = sorted({name for path in files_of("worker") for name in
                              module_level_imports(path) if name.startswith("trainer.")
                              and (REPO / (name.replace(".", "/") + ".py")).exists()})
    assert trainer_modules
    code = (f"import sys; import {', '.join(trainer_modules)}; "
            "bad = [m for m in ('torch', 'transformers', 'peft', 'deepspeed') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = _fresh_interpreter(code, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# The client commands talk to a server over HTTP: they run where the web's stack is not
# installed, so they import nothing of it (start-up commands like `web` may).
CLIENT_COMMANDS = ["cli/server_calls.py", "cli/job_commands.py",
                   "cli/logs_command.py", "cli/download_command.py",
                   "cli/watch_command.py", "cli/text_table.py",
                   "tunedeck/metrics/eta.py"]


@pytest.mark.parametrize("module", CLIENT_COMMANDS)
def test_client_commands_import_nothing_of_the_web(module):
    assert not hits(all_imports(REPO / module), {"app", "gradio", "fastapi", "worker",
                                                 "trainer", "torch"}), module
