"""This process as one rank of a torchrun job: who it is, which device it drives, and the
process-level settings every rank needs before any work starts. Torch is imported inside
functions so `die_with_launcher` can run before the seconds-long heavy imports."""
from __future__ import annotations

import ctypes
import os
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# The CUDA caching allocator's settings for the ranks. Expandable segments let a freed
# range serve a later allocation of another size, so the optimizer step's flat fp32
# partitions reuse what backward's activations freed instead of reserving new blocks beside
# them (torchtitan runs with the same).
CUDA_ALLOCATOR_SETTINGS = "expandable_segments:True"
ALLOCATOR_VARIABLES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


@dataclass(frozen=True)
class RankContext:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def node_rank(self) -> int:
        """Which node of the job this rank runs on (torchrun numbers ranks node by node)."""
        return self.rank // self.local_world_size

    @property
    def uses_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def communication_backend(self) -> str:
        return "nccl" if self.uses_cuda else "gloo"


def rank_context_from_environment() -> RankContext:
    """torchrun's variables (a plain `python -m trainer` is a world of one)."""
    import torch

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    return RankContext(
        rank=int(os.environ.get("RANK", "0")),
        local_rank=local_rank,
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        device=device,
    )


def configure_cuda_allocator(environ: dict | None = None) -> None:
    """Add expandable segments to the allocator's settings before CUDA is first used (the
    allocator reads them once): to the variable the host's environment sets, after its own
    settings, unless those already say whether to expand segments."""
    environ = os.environ if environ is None else environ
    name = next((name for name in ALLOCATOR_VARIABLES if environ.get(name)),
                "PYTORCH_CUDA_ALLOC_CONF")
    own = environ.get(name, "")
    if "expandable_segments" not in own:
        environ[name] = f"{own},{CUDA_ALLOCATOR_SETTINGS}" if own else CUDA_ALLOCATOR_SETTINGS


def die_with_launcher() -> None:
    """Ask Linux to SIGKILL this rank when its parent (torchrun) dies, so a killed launcher
    never leaves orphan ranks holding GPUs. SIGTERM keeps its default action (exit): a
    cancel signals the whole process group and needs no handler here."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def set_cpu_threads(context: RankContext) -> None:
    """Share the cores between the ranks of this host, unless OMP_NUM_THREADS says otherwise
    (torch already follows it); oversubscribed ranks run several times slower."""
    import torch

    if context.uses_cuda or "OMP_NUM_THREADS" in os.environ:
        return
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // context.local_world_size))


def seed_everything(seed: int) -> None:
    """The same seed on every rank: LoRA's fresh weights must agree across ranks (FSDP shards
    whatever each rank holds and does not broadcast rank 0's copy)."""
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
