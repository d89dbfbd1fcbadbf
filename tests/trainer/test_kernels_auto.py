"""`kernels: auto`: Liger's kernels where a GPU run measured them to win (LoRA and QLoRA on
a family Liger patches, on a CUDA host with liger-kernel), the plain path elsewhere, and
the sentence that says which; the planner's table of Liger's families against Liger's own;
the CUDA allocator's settings every rank starts with, and the first step's memory line."""
import pytest
import torch

from trainer.rank import RankContext, configure_cuda_allocator
from trainer.speed.options import resolve_auto_kernels
from trainer.telemetry import allocator_peaks, first_step_memory_text
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.architectures import KNOWN_MODEL_TYPES
from tunedeck.training_plan import LIGER_FAMILIES, Host, auto_kernels

LLAMA_ONLY = frozenset({"llama"})


def rule(method="lora", model_type="llama", *, families=lambda: LLAMA_ONLY, cuda=True,
         installed=True) -> tuple[str, str]:
    return auto_kernels(method, Host(cuda_available=cuda, liger_installed=installed,
                                     model_type=lambda: model_type, liger_families=families))


def rank_on(device: str) -> RankContext:
    return RankContext(rank=0, local_rank=0, world_size=1, local_world_size=1,
                       device=torch.device(device))


def test_auto_is_liger_for_lora_and_qlora_on_a_cuda_host_with_liger():
    assert rule("lora") == ("liger", "Liger Kernel for lora on a llama model on a CUDA GPU")
    assert rule("qlora")[0] == "liger"


def test_auto_stays_plain_and_says_why_everywhere_else():
    assert rule(cuda=False)[1] == "no CUDA GPU on this host (Liger's kernels are GPU code)"
    assert "pip install liger-kernel" in rule(installed=False)[1]
    assert rule(model_type="gpt_neox") == (
        "none", "Liger Kernel has no kernels for model family 'gpt_neox'")
    chosen, why = rule("full")
    assert chosen == "none" and "full fine-tune stays on the plain path" in why


def test_the_model_and_liger_are_asked_only_once_host_and_method_qualify():
    def never():
        raise AssertionError("read too early")
    for early_out in ({"cuda_available": False, "liger_installed": True},
                      {"cuda_available": True, "liger_installed": False}):
        host = Host(model_type=never, liger_families=never, **early_out)
        assert auto_kernels("lora", host).kernels == "none"
    host = Host(cuda_available=True, liger_installed=True, model_type=never, liger_families=never)
    assert auto_kernels("full", host).kernels == "none"


def test_the_planners_liger_families_are_those_liger_patches_of_the_families_it_counts():
    monkey_patch = pytest.importorskip("liger_kernel.transformers.monkey_patch")
    patched = set(monkey_patch.MODEL_TYPE_TO_APPLY_LIGER_FN)
    assert LIGER_FAMILIES == patched & set(KNOWN_MODEL_TYPES)


def test_a_cpu_rank_resolves_auto_to_none_with_its_reason(builtin_model_dir):
    resolved, said = resolve_auto_kernels(JobSpec(max_steps=1), str(builtin_model_dir),
                                          context=rank_on("cpu"))
    assert resolved.kernels == "none"
    assert said == "kernels auto: none (no CUDA GPU on this host (Liger's kernels are GPU code))"
    named = JobSpec(max_steps=1, kernels="none")
    assert resolve_auto_kernels(named, str(builtin_model_dir), context=rank_on("cpu")) == \
        (named, None)


def test_a_cuda_rank_resolves_auto_by_the_models_family_and_the_method(builtin_model_dir):
    """No GPU is touched: the rank's device only says CUDA, and the family is read from
    the model's config (the built-in model is a Llama)."""
    pytest.importorskip("liger_kernel")
    lora, said = resolve_auto_kernels(JobSpec(max_steps=1), str(builtin_model_dir),
                                      context=rank_on("cuda:0"))
    assert lora.kernels == "liger" and said.startswith("kernels auto: liger (")
    missing, said = resolve_auto_kernels(JobSpec(max_steps=1), str(builtin_model_dir),
                                         context=rank_on("cuda:0"), installed=lambda name: False)
    assert missing.kernels == "none" and "liger-kernel is not installed" in said
    full, _said = resolve_auto_kernels(JobSpec(max_steps=1, method="full"),
                                       str(builtin_model_dir), context=rank_on("cuda:0"))
    assert full.kernels == "none"


def test_ranks_start_with_expandable_segments_beside_the_hosts_own_settings():
    environment: dict = {}
    configure_cuda_allocator(environment)
    assert environment == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    # A host's own settings are kept, and expandable segments join them in the same variable.
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        environment = {name: "max_split_size_mb:512"}
        configure_cuda_allocator(environment)
        assert environment == {name: "max_split_size_mb:512,expandable_segments:True"}
    # A host that says whether to expand segments has the last word.
    environment = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}
    configure_cuda_allocator(environment)
    assert environment == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}


def test_the_first_steps_memory_line_says_which_phase_peaked():
    gib = 2**30
    assert first_step_memory_text((30 * gib, 31 * gib), (30 * gib, 31 * gib)) == (
        "memory of the first step: forward and backward peaked at 30.00 GiB allocated "
        "(31.00 GiB reserved); the optimizer step needed no more")
    assert first_step_memory_text((20 * gib, 21 * gib), (24.5 * gib, 25 * gib)).endswith(
        "; the optimizer step peaked higher, at 24.50 GiB (25.00 GiB reserved)")
    assert allocator_peaks(torch.device("cpu")) is None
