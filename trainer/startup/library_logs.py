"""Library log lines that tell a TuneDeck user nothing, each dropped by its own message; the
same libraries' other lines still show.

bitsandbytes, imported on a CPU with AVX512-BF16, asks the Hugging Face hub for an optional
4-bit matmul kernel ("kernels-community/quantization-bitsandbytes") and, on a host that is
offline or whose `kernels` will not load an unverified repository, warns that it could not.
It then uses its own kernel. peft imports bitsandbytes wherever it is installed, so every
process that imports peft printed it: each rank of a QLoRA job, "Try it", the LoRA targets
preview and the worker's model check. Nothing in TuneDeck fetches kernels from the hub.
"""
from __future__ import annotations

import logging

BITSANDBYTES_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"
BITSANDBYTES_KERNEL_WARNING = "Failed to load CPU gemm_4bit_forward from kernels-community"


class _DropMessage(logging.Filter):
    def __init__(self, message_start: str):
        super().__init__()
        self.message_start = message_start

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.message_start)


def quiet_known_library_warnings() -> None:
    """Install the filters; before the library is imported (it warns as it is imported).
    Calling it again adds nothing."""
    logger = logging.getLogger(BITSANDBYTES_CPU_LOGGER)
    if not any(isinstance(known, _DropMessage) for known in logger.filters):
        logger.addFilter(_DropMessage(BITSANDBYTES_KERNEL_WARNING))
