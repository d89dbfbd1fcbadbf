"""A stand-in `trainer` package for the data preflight end-to-end test. Only `trainer.train`
is replaced (by one that holds its job slot until cancelled); the rest of the package, the
entry point and the preflight the worker runs included, is the real one, found on the path
added here."""
from pathlib import Path

__path__.append(str(Path(__file__).resolve().parents[4] / "trainer"))  # noqa: F821 (a package's own __path__)
