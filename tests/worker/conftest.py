"""The trainer's session fixtures (one `$TUNEDECK_HOME` with the built-in model), for the
worker tests that launch real ranks (tests/worker/test_warm_launcher.py)."""
from tests.trainer.conftest import builtin_model_dir, tunedeck_home  # noqa: F401
