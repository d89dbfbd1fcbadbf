"""Real runs: `python -m trainer` under torchrun with 2 CPU ranks on the built-in model."""
import json
import signal
import time
from statistics import mean

import pytest
import torch

pytestmark = pytest.mark.torchrun

LORA_STEPS = 36


def sample_input_ids() -> torch.Tensor:
    return torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(0))


def assert_rank_files_report_every_step(result, steps: int) -> list[float]:
    """Both ranks' files hold one step and one memory event per step; returns rank 0's losses."""
    assert [rank for rank, _ in result.run.rank_metrics_files()] == list(range(result.ranks))
    losses_by_rank = []
    for rank in range(result.ranks):
        step_events = result.events_of_kind(rank, "step")
        memory_events = result.events_of_kind(rank, "memory")
        assert [event["step"] for event in step_events] == list(range(1, steps + 1))
        assert [event["step"] for event in memory_events] == list(range(1, steps + 1))
        first = step_events[0]
        assert first["tokens"] > 0 and first["tokens_per_second"] > 0 and first["step_seconds"] > 0
        assert first["grad_norm"] > 0 and first["learning_rate"] > 0
        assert memory_events[0]["device"] == "cpu" and memory_events[0]["rss_mb"] > 0
        assert memory_events[0]["allocated_mb"] is None
        losses_by_rank.append([event["loss"] for event in step_events])
    # The loss is averaged over ranks before it is written, so every rank reports the same.
    assert all(losses == losses_by_rank[0] for losses in losses_by_rank)
    return losses_by_rank[0]


def assert_merged_matches_base_plus_adapter(run, base_dir, *, dtype=torch.float32):
    """merged/ is stored in `dtype` (every float tensor, and config.json says so) and gives
    the logits of the fp32 base + adapter/: within 1e-4 in fp32; in bf16 or fp16 within twice
    what the unmerged model loses when it is itself computed in that dtype (no model stored
    in it beats that floor; the factor leaves room for rounding W + BA once, not W, A, B).
    Returns (the largest logit error, the tolerance)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tunedeck.safetensors_headers import folder_tensor_entries

    stored = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}[dtype]
    assert {entry.dtype for entry in folder_tensor_entries(run.merged_dir)} == {stored}
    recorded = json.loads((run.merged_dir / "config.json").read_text())
    assert recorded.get("dtype", recorded.get("torch_dtype")) == str(dtype).removeprefix("torch.")
    merged = AutoModelForCausalLM.from_pretrained(run.merged_dir).eval()  # in its stored dtype
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, run.adapter_dir).eval()
    with torch.no_grad():
        merged_logits = merged(sample_input_ids()).logits.float()
        adapted_logits = adapted(sample_input_ids()).logits
        with adapted.disable_adapter():
            base_logits = adapted(sample_input_ids()).logits
        tolerance = 1e-4 if dtype == torch.float32 else 2 * float(
            (adapted.to(dtype)(sample_input_ids()).logits.float() - adapted_logits).abs().max())
    assert merged.dtype == dtype and merged.config.dtype == dtype
    assert torch.allclose(merged_logits, adapted_logits, atol=tolerance), tolerance
    # Training changed something, by more than the rounding allowed above.
    assert not torch.allclose(merged_logits, base_logits, atol=max(1e-2, 2 * tolerance))
    return float((merged_logits - adapted_logits).abs().max()), tolerance


@pytest.mark.parametrize("backend", ["zero2", "fsdp"])
def test_lora_run_learns_and_exports_an_equivalent_merge(backend, run_trainer, builtin_model_dir):
    result = run_trainer(backend=backend, method="lora", precision="bf16", max_steps=LORA_STEPS,
                         warmup_steps=2)
    assert result.returncode == 0, result.output
    print(f"{backend} lora run: {result.seconds:.1f} s")

    losses = assert_rank_files_report_every_step(result, LORA_STEPS)
    assert mean(losses[-5:]) < mean(losses[:5]) - 0.75, losses
    notices = [event["message"] for event in result.events_of_kind(0, "notice")]
    assert notices[0].startswith("loading model") and notices[-1].startswith("merged model saved")
    # Tokenized once, by rank 0, into the run folder both ranks read.
    (tokenized,) = [notice for notice in notices if notice.startswith("tokenized ")]
    assert tokenized.endswith("once for the 2 rank(s) of each node")
    assert not [event for event in result.events_of_kind(1, "notice")
                if event["message"].startswith("tokenized ")]
    assert not result.run.tokenized_dir(node_rank=0).exists()  # removed once the model is written
    # Before step 1, rank 0's phases in train()'s order: the data, then the model's shards.
    phases = [(event["phase"], event["state"]) for event in result.events_of_kind(0, "phase")
              if event["state"] != "progress"]
    # ZeRO-2's ops compile on a build cache's first job (which job that is depends on order).
    compiled = [phase for phase in phases if phase[0] == "compile_ops"]
    assert compiled == [("compile_ops", "start"), ("compile_ops", "end")] * (len(compiled) // 2)
    phases = [phase for phase in phases if phase[0] != "compile_ops"]
    assert phases[:4] == [("tokenize", "start"), ("tokenize", "end"),
                          ("load_shards", "start"), ("load_shards", "end")], phases
    assert not result.events_of_kind(1, "phase")  # rank 1 neither tokenizes nor reports a load
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in result.run.adapter_dir.iterdir()}
    assert_merged_matches_base_plus_adapter(result.run, builtin_model_dir)


def test_full_finetune_without_metrics_saves_a_loadable_model(run_trainer, builtin_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = run_trainer("--metrics", "off", backend="fsdp", method="full", precision="fp32",
                         max_steps=4, grad_accum=2, lr_schedule="constant", weight_decay=0.1,
                         max_grad_norm=0,
                         fsdp={"cpu_offload": True, "activation_checkpointing": True})
    assert result.returncode == 0, result.output
    print(f"fsdp full run: {result.seconds:.1f} s")

    assert list(result.run.metrics_dir.iterdir()) == []
    assert not result.run.adapter_dir.exists()
    merged = AutoModelForCausalLM.from_pretrained(result.run.merged_dir).eval()
    base = AutoModelForCausalLM.from_pretrained(builtin_model_dir).eval()
    AutoTokenizer.from_pretrained(result.run.merged_dir)
    changed = [name for name, weight in merged.state_dict().items()
               if not torch.equal(weight, base.state_dict()[name])]
    assert "model.embed_tokens.weight" in changed and "lm_head.weight" in changed


def test_missing_dataset_fails_with_an_error_notice_naming_the_path(run_trainer, tmp_path):
    missing = tmp_path / "no-such-folder" / "train.jsonl"
    result = run_trainer(backend="zero2", dataset=str(missing))
    assert result.returncode != 0
    print(f"failing run: {result.seconds:.1f} s")

    errors = [event for rank in range(result.ranks) for event in result.events_of_kind(rank, "notice")
              if event["level"] == "error"]
    assert errors and all(str(missing) in event["message"] for event in errors)
    assert not result.run.merged_dir.exists()


def test_ranks_die_with_a_killed_launcher(start_trainer):
    """PR_SET_PDEATHSIG: a SIGKILLed torchrun (no chance to stop its children) leaves no rank."""
    import psutil

    run, launcher = start_trainer(backend="fsdp", max_steps=100_000)
    deadline = time.monotonic() + 120
    while not (run.rank_metrics_file(1).exists() and '"step"' in run.rank_metrics_file(1).read_text()):
        assert launcher.poll() is None and time.monotonic() < deadline, "the run never reached a step"
        time.sleep(0.5)
    ranks = psutil.Process(launcher.pid).children()
    assert len(ranks) == 2
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=10)
    _, alive = psutil.wait_procs(ranks, timeout=20)
    assert alive == []
