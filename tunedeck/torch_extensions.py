"""Where DeepSpeed's JIT-compiled ops are cached: one folder per Python environment and
torch version, under a shared root outside the repo.

torch names a build folder after the op alone, and rebuilds it whenever the compiler flags,
the Python or the torch it was built for differ. A root shared by two checkouts (two
virtual environments) therefore made each one rebuild the other's ops, and the first ZeRO-2
job of a checkout sat at step 0 for up to a minute. Keyed by `sys.prefix` and torch's
version, every environment keeps its own builds. Pure: no torch import (the version comes
from the installed package's metadata), so the web and the worker can both call it.
"""
from __future__ import annotations

import hashlib
import sys
from importlib import metadata
from pathlib import Path

DEFAULT_EXTENSIONS_ROOT = Path.home() / ".cache" / "tunedeck" / "torch_extensions"


def installed_torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"


def environment_extensions_dir(root: Path = DEFAULT_EXTENSIONS_ROOT, *,
                               python_prefix: str | None = None,
                               torch_version: str | None = None) -> Path:
    """`root/<environment folder name>-<hash of its path>-torch<version>`: readable in a
    listing, and distinct for two environments of the same name."""
    prefix = str(Path(python_prefix or sys.prefix).resolve())
    version = torch_version or installed_torch_version()
    prefix_hash = hashlib.sha256(prefix.encode()).hexdigest()[:10]
    safe_version = "".join(char if char.isalnum() or char in "._" else "_" for char in version)
    return Path(root) / f"{Path(prefix).name}-{prefix_hash}-torch{safe_version}"
