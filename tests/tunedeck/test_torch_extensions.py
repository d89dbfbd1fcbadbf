"""One DeepSpeed build folder per Python environment and torch version."""
import sys
from pathlib import Path

from tunedeck.settings import Settings
from tunedeck.torch_extensions import environment_extensions_dir, installed_torch_version


def test_each_environment_and_torch_version_builds_in_a_folder_of_its_own(tmp_path):
    one = environment_extensions_dir(tmp_path, python_prefix="/work/a/.venv", torch_version="2.13.0")
    assert one.parent == tmp_path and one.name.startswith(".venv-") and one.name.endswith("-torch2.13.0")
    assert one == environment_extensions_dir(tmp_path, python_prefix="/work/a/.venv", torch_version="2.13.0")
    other_checkout = environment_extensions_dir(tmp_path, python_prefix="/work/b/.venv", torch_version="2.13.0")
    other_torch = environment_extensions_dir(tmp_path, python_prefix="/work/a/.venv", torch_version="2.14.0")
    assert len({one, other_checkout, other_torch}) == 3


def test_this_environment_is_keyed_by_its_own_prefix_and_installed_torch():
    mine = environment_extensions_dir()
    assert mine == environment_extensions_dir(python_prefix=sys.prefix,
                                              torch_version=installed_torch_version())
    assert mine.name.endswith(f"-torch{installed_torch_version().replace('+', '_')}")
    assert mine.parent == Settings().torch_extensions_dir == Path.home() / ".cache" / "tunedeck" / "torch_extensions"
