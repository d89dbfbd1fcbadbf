"""A plan request: a spec and a GPU set, as `POST /api/plan`, `tunedeck plan` and the form
send it. One function turns it into the plan's JSON, so all three answer the same."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.gpu_cards import Device


class GpuRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int | None = Field(None, ge=1, le=64,
                              description="GPUs (or CPU ranks) per node; default spec.num_gpus")
    memory_gb: float = Field(80.0, gt=0, le=4096,
                             description="memory of one GPU, GB (10^9 bytes); with device cpu, "
                                         "the RAM one rank may use (the host's RAM shared by "
                                         "its ranks)")
    nodes: int | None = Field(None, ge=1, le=64, description="default spec.num_nodes")
    card: str | None = Field(None, max_length=40,
                             description="the card, for step times (H100, A100, RTX 4090, ...); "
                                         "default the common card of memory_gb")
    device: Device = Field("gpu", description="gpu, or cpu for ranks that are CPU processes "
                                              "(a host without GPUs): planned against RAM, "
                                              "with no step time and no offload")

    @model_validator(mode="before")
    @classmethod
    def _memory_of_the_card(cls, data):
        """A card named without a memory size is planned with its own (an RTX 4090: 24 GB)."""
        from tunedeck.planner.gpu_cards import card_named

        if not isinstance(data, dict) or data.get("memory_gb") is not None:
            return data
        data = {key: value for key, value in data.items() if key != "memory_gb"}
        card = card_named(str(data["card"])) if data.get("card") else None
        return {**data, "memory_gb": card.memory_gb[0]} if card else data

    @field_validator("card")
    @classmethod
    def _known_card(cls, card: str | None) -> str | None:
        from tunedeck.planner.gpu_cards import CARDS, card_named

        if card is not None and card_named(card) is None:
            raise ValueError(f"unknown card {card!r}; one of {', '.join(c.name for c in CARDS)}")
        return card


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: JobSpec
    gpus: GpuRequest = GpuRequest()


def plan_json(spec: JobSpec, gpus: GpuRequest) -> dict:
    """The plan's JSON; a ValueError names the model when its shape cannot be found."""
    from tunedeck.planner.advice import plan_memory
    from tunedeck.planner.gpu_cards import GpuSet
    from tunedeck.planner.shape_source import resolve_model_shape

    gpu_set = GpuSet(count=gpus.count or spec.num_gpus, memory_gb=gpus.memory_gb,
                     nodes=gpus.nodes or spec.num_nodes, card=gpus.card, device=gpus.device)
    return plan_memory(spec, gpu_set, resolve_model_shape(spec.model)).to_json()
