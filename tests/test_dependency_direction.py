"""Dependencies point one way (docs/architecture.md): checked on the source and in a fresh interpreter."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "trainer": {"app", "worker", "tunedeck.db", "tunedeck.job_store", "tunedeck.metrics.store",
                "tunedeck.settings", "sqlalchemy", "celery", "gradio", "fastapi"},
    "app": {"torch", "deepspeed", "transformers", "peft", "worker", "trainer", "datasets",
            "tunedeck.data.sources"},
}
PURE_MODULES = ["tunedeck/job_spec.py", "tunedeck/spec_sections.py", "tunedeck/torch_extensions.py",
                "tunedeck/lora_targets_text.py", "tunedeck/backend_config.py", "tunedeck/run_folder.py",
                "tunedeck/metrics/events.py", "tunedeck/job_states.py",
                "tunedeck/safetensors_headers.py", "tunedeck/data/records.py",
                "tunedeck/data/sources.py", "tunedeck/data/columns.py"]
HEAVY = {"torch", "deepspeed", "transformers", "peft", "sqlalchemy", "celery", "gradio",
         "fastapi", "yaml", "numpy", "datasets", "pyarrow", "huggingface_hub"}


def module_level_imports(path: Path) -> set[str]:
    """Imports executed when the module is imported (function bodies don't count)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def all_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def hits(names: set[str], forbidden: set[str]) -> set[str]:
    return {name for name in names for bad in forbidden if name == bad or name.startswith(bad + ".")}


@pytest.mark.parametrize("package", ["trainer"])
def test_trainer_imports_nothing_of_web_worker_or_database(package):
    for path in (REPO / package).rglob("*.py"):
        assert not hits(all_imports(path), FORBIDDEN[package]), path


def test_app_never_imports_torch_or_worker_code_at_module_level():
    for path in (REPO / "app").rglob("*.py"):
        assert not hits(module_level_imports(path), FORBIDDEN["app"]), path


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_import_no_heavy_library_at_module_level(module):
    assert not hits(module_level_imports(REPO / module), HEAVY), module


def test_the_web_app_loads_without_torch(tmp_path):
    code = ("import sys; from app.main import create_app; from tunedeck.migrate import "
            "upgrade_database; from tunedeck.settings import load_settings; "
            "upgrade_database(load_settings().resolved_database_url); create_app(with_ui=True); "
            "bad = [m for m in ('torch', 'deepspeed', 'worker.tasks') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            env={"TUNEDECK_HOME": str(tmp_path),
                                 "GRADIO_ANALYTICS_ENABLED": "False", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
