"""What the warm launcher imports once, so that each job's launcher and rank forked from it starts
with torch, transformers, peft (and on a host without NVIDIA GPUs DeepSpeed) loaded.

Imported only inside the warm launcher (`python -m trainer.startup.warm_start`). It
must leave the process safe to fork: no CUDA context (the NVML-based availability check
never creates one), no OpenMP thread pool beyond one thread (a forked child cannot use a
parent's GNU OpenMP pool), no TorchInductor compile workers (dynamo is off while
importing; a rank turns it on again when its job compiles).
"""
from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

from trainer.rank import die_with_launcher  # noqa: E402
from trainer.startup.warm_rank import PRELOAD_ONLY_VARIABLES  # noqa: E402,F401 (what it sets below)

# The warm launcher dies with its parent (a dead worker): it would otherwise
# outlive it, and so would the launchers it forked, whose death signal is tied to it.
die_with_launcher()

os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
os.environ["TORCHDYNAMO_DISABLE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# A QLoRA job needs bitsandbytes and never starts warm (worker/warm_launcher.py), so the
# warm launcher keeps it out, as a cold LoRA or full rank does (trainer/startup/unused_libraries.py).
if "bitsandbytes" not in sys.modules:
    sys.modules["bitsandbytes"] = None

import torch  # noqa: E402,F401
import transformers  # noqa: E402,F401
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402,F401
import peft  # noqa: E402,F401

import trainer.__main__  # noqa: E402,F401
import trainer.train  # noqa: E402,F401
import trainer.backends.fsdp  # noqa: E402,F401

# DeepSpeed picks its accelerator as it is imported; on a GPU host that may touch CUDA, so
# there a ZeRO-2 rank imports it itself, after the fork.
if not Path("/dev/nvidiactl").exists():
    import deepspeed  # noqa: E402,F401

# Objects made by the imports never change again: keep the collector off them, so a fork's
# pages stay shared with the server instead of being copied as the collector touches them.
gc.collect()
gc.freeze()
