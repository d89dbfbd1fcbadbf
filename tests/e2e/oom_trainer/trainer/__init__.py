"""A stand-in `trainer` package for the out-of-memory end-to-end test. Only `trainer.train`
is replaced: the rest of the package, `python -m trainer`'s entry point included, is the
real one, found on the path added here."""
from pathlib import Path

__path__.append(str(Path(__file__).resolve().parents[4] / "trainer"))  # noqa: F821 (a package's own __path__)
