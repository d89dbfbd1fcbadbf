"""The trainer stands alone: it imports nothing of the web app, the worker or the database."""
import re
import subprocess
import sys
from pathlib import Path

import trainer

FORBIDDEN = ("app", "worker", "sqlalchemy", "celery", "gradio", "fastapi", "alembic", "tunedeck.db")
TRAINER_DIR = Path(trainer.__file__).parent


def test_trainer_sources_import_nothing_forbidden():
    pattern = re.compile(r"^\s*(?:from|import)\s+(" + "|".join(map(re.escape, FORBIDDEN)) + r")\b", re.M)
    offenders = {str(path.relative_to(TRAINER_DIR)): pattern.findall(path.read_text())
                 for path in TRAINER_DIR.rglob("*.py")}
    assert {path: found for path, found in offenders.items() if found} == {}


def test_loading_every_trainer_module_pulls_in_nothing_forbidden():
    modules = ["trainer.__main__", "trainer.train", "trainer.backends.zero2", "trainer.backends.fsdp",
               "trainer.model.export", "trainer.telemetry"]
    script = (f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}];"
              f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r} or m.startswith('tunedeck.db')))")
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip().splitlines()[-1] == "[]"
