"""The GPUs a plan is made for: how many, how much memory, and which card, for what a step
costs. The card table is the one the trainer's MFU meter reads its peak FLOPs from. On a
host without GPUs the ranks are CPU processes (device "cpu"): the memory is the RAM one
rank may use, and no card's speed applies.

Per card: dense bf16 tensor-core peak (datasheets, without sparsity), and the bandwidth a
collective sees between GPUs of one node (NVLink where the card has it, else PCIe). Between
nodes every GPU is assumed to get INTER_NODE_BYTES_PER_S (a 200 Gb/s NIC per GPU), and host
memory is reached over PCIe at PCIE_BYTES_PER_S (PCIe 4.0 x16, as measured, not nominal).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Device = Literal["gpu", "cpu"]

INTER_NODE_BYTES_PER_S = 25e9
PCIE_BYTES_PER_S = 25e9


@dataclass(frozen=True)
class Card:
    name: str  # a fragment of torch.cuda.get_device_name
    memory_gb: tuple[float, ...]  # the sizes it is sold in
    bf16_flops: float
    link_bytes_per_s: float  # collective bandwidth per GPU inside a node


# The first match of a device name wins, so longer names come first.
CARDS = (
    Card("H200", (141,), 989e12, 450e9),
    Card("H100 PCIe", (80,), 756e12, 25e9),
    Card("H100", (80, 94), 989e12, 450e9),
    Card("GH200", (96, 144), 989e12, 450e9),
    Card("B200", (180, 192), 2250e12, 900e9),
    Card("A100", (80, 40), 312e12, 300e9),
    Card("A800", (80, 40), 312e12, 200e9),
    Card("L40S", (48,), 362e12, 25e9),
    Card("L40", (48,), 181e12, 25e9),
    Card("RTX 6000 Ada", (48,), 364e12, 25e9),
    Card("A6000", (48,), 155e12, 25e9),
    Card("RTX 4090", (24,), 165e12, 25e9),
    Card("RTX 3090", (24,), 71e12, 25e9),
    Card("A10G", (24,), 70e12, 25e9),
    Card("A10", (24,), 125e12, 25e9),
    Card("L4", (24,), 121e12, 25e9),
    Card("V100", (32, 16), 125e12, 150e9),
    Card("T4", (16,), 65e12, 12e9),
)
PEAK_BF16_FLOPS = tuple((card.name, card.bf16_flops) for card in CARDS)
# The card a plan assumes for a memory size when none is named: the common one.
TYPICAL_CARD = {141: "H200", 80: "H100", 94: "H100", 40: "A100", 48: "L40S", 24: "RTX 4090",
                32: "V100", 16: "T4", 192: "B200", 180: "B200"}


def card_named(name: str) -> Card | None:
    return next((card for card in CARDS if card.name.lower() == name.lower()), None)


def peak_flops_for(device_name: str) -> float | None:
    return next((flops for fragment, flops in PEAK_BF16_FLOPS if fragment in device_name), None)


def typical_card(memory_gb: float) -> Card:
    """The common card of the nearest memory size (an 80 GB plan is costed as an H100)."""
    nearest = min(TYPICAL_CARD, key=lambda size: (abs(size - memory_gb), size))
    return card_named(TYPICAL_CARD[nearest])


@dataclass(frozen=True)
class GpuSet:
    count: int = 1  # GPUs per node
    memory_gb: float = 80.0
    nodes: int = 1
    card: str | None = None  # a CARDS name; None: the typical card of memory_gb
    device: Device = "gpu"  # "cpu": CPU ranks, memory_gb the RAM each may use

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def rank_word(self) -> str:
        """What one rank runs on, as a plan's figures say it: "per GPU", "per rank"."""
        return "rank" if self.on_cpu else "GPU"

    @property
    def world_size(self) -> int:
        return self.count * self.nodes

    @property
    def card_spec(self) -> Card:
        """The card whose speed ranks the set-ups (CPU ranks keep the typical card's order,
        and no plan for them prints its seconds)."""
        return (card_named(self.card) if self.card else None) or typical_card(self.memory_gb)
