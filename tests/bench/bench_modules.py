"""bench/ is scripts, not a package: its modules are loaded from their files, once each, so
a module a bench imports by name (`gpu_cells`) and the one a test loads are the same object
(their dataclasses compare equal)."""
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


def load_bench_module(name: str):
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # as a bench run from the shell finds its neighbours
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
