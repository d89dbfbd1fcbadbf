"""bitsandbytes' warning that it could not fetch a hub kernel is dropped from every process
that imports peft for TuneDeck; its other warnings are not."""
from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from trainer.startup.library_logs import BITSANDBYTES_CPU_LOGGER, BITSANDBYTES_KERNEL_WARNING

REPO = Path(__file__).resolve().parents[2]


def test_importing_peft_after_the_trainer_prints_no_kernels_community_warning():
    # As the Try-it and LoRA-preview processes do. bitsandbytes warns only on a CPU with
    # AVX512-BF16 (this host's has it; elsewhere this test shows less).
    imported = subprocess.run([sys.executable, "-c", "import trainer, peft"], cwd=REPO,
                              capture_output=True, text=True, timeout=300, check=True)
    assert "kernels-community" not in imported.stderr, imported.stderr


def test_only_that_message_is_dropped(caplog):
    import trainer  # noqa: F401 (installs the filter)

    logger = logging.getLogger(BITSANDBYTES_CPU_LOGGER)
    with caplog.at_level(logging.WARNING, logger=BITSANDBYTES_CPU_LOGGER):
        logger.warning(BITSANDBYTES_KERNEL_WARNING + ": %s. Please make sure ...", "offline")
        logger.warning("some other bitsandbytes warning")
    assert [record.getMessage() for record in caplog.records] == [
        "some other bitsandbytes warning"]
