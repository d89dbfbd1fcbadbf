"""Tokens per second, model FLOPs utilisation and peak memory of the real trainer on one GPU.

A random-weight Llama of about 1B parameters (hidden 2048, 16 layers, 32 heads, vocab 32000)
trains for a few dozen steps on long synthetic rows, for each cell of
{full, lora} x {zero2, fsdp} in bf16 on 1 GPU, launched exactly as a worker launches it.

    MFU = tokens/s x (6N for full, 4N for LoRA) / the GPU's dense bf16 peak

N counts the weights that take part in matrix multiplies (all but the input embedding);
attention's own s^2 FLOPs are left out, as in the usual 6N rule, so MFU is slightly
understated at long sequence lengths. LoRA skips the weight-gradient matmuls of the frozen
base (4N instead of 6N). Target: MFU >= 40% for the full fine-tune.

Usage: .venv/bin/python bench/gpu_throughput.py [--steps 30] [--seq-len 2048]
       [--micro-batch 8] [--layers 16 --hidden 2048 ...] (smaller to smoke-test on CPU with
       --allow-cpu). Without a CUDA GPU (and without --allow-cpu) it says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainer_runs import run_plain_torchrun  # noqa: E402

from tunedeck.job_spec import JobSpec  # noqa: E402

# Dense (no sparsity) bf16 tensor-core peaks, in FLOP/s, by a substring of the device name.
DENSE_BF16_PEAK_FLOPS = {
    "H200": 989e12, "H100 SXM": 989e12, "H100 PCIe": 756e12, "H100": 989e12,
    "A100": 312e12, "L40S": 362e12, "A10G": 125e12, "L4": 121e12, "RTX 4090": 165e12,
}
CELLS = [("full", "zero2"), ("full", "fsdp"), ("lora", "zero2"), ("lora", "fsdp")]


def build_random_llama(folder: Path, *, hidden: int, layers: int, heads: int, intermediate: int,
                       vocab: int) -> int:
    """Save a random-weight Llama (and the built-in tokenizer) into `folder`; its matmul
    parameter count N."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from trainer.builtin_model import ensure_builtin_model

    tokenizer = AutoTokenizer.from_pretrained(ensure_builtin_model(folder.parent / "home"))
    config = LlamaConfig(vocab_size=max(vocab, len(tokenizer)), hidden_size=hidden,
                         intermediate_size=intermediate, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=8192, tie_word_embeddings=False,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    embedding = model.get_input_embeddings().weight.numel()
    return sum(parameter.numel() for parameter in model.parameters()) - embedding


def write_long_rows(path: Path, *, rows: int, words_per_row: int) -> None:
    """Prompt/response records long enough that every row fills seq_len (no padding)."""
    generator = random.Random(0)
    words = [f"w{generator.randrange(300)}" for _ in range(words_per_row * 4)]
    with path.open("w", encoding="utf-8") as file:
        for index in range(rows):
            start = generator.randrange(len(words) - words_per_row)
            text = " ".join(words[start:start + words_per_row])
            file.write(json.dumps({"prompt": f"row {index}", "response": text}) + "\n")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The random Llama's sizes (about 1B by default) and --allow-cpu, for the GPU benches."""
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--intermediate", type=int, default=5632)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--allow-cpu", action="store_true", help="smoke-test on a CPU")


def build_model_from_arguments(folder: Path, arguments: argparse.Namespace) -> int:
    return build_random_llama(folder, hidden=arguments.hidden, layers=arguments.layers,
                              heads=arguments.heads, intermediate=arguments.intermediate,
                              vocab=arguments.vocab)


def dense_bf16_peak(device_name: str) -> float | None:
    for key, peak in DENSE_BF16_PEAK_FLOPS.items():
        if key in device_name:
            return peak
    return None


def measure_cell(home: Path, folder: Path, *, method: str, backend: str,
                 arguments: argparse.Namespace) -> dict:
    spec = JobSpec(name=f"gpu-{method}-{backend}", model=str(folder / "model"),
                   dataset=str(folder / "rows.jsonl"), method=method, backend=backend,
                   num_gpus=1, max_steps=arguments.steps, learning_rate=1e-5,
                   micro_batch_size=arguments.micro_batch, seq_len=arguments.seq_len,
                   precision="bf16")
    result = run_plain_torchrun(home, spec, folder / f"run-{method}-{backend}", metrics=True)
    memory = result.events(0, "memory")
    return {
        "tokens_per_second": result.summary.tokens_per_second,
        "median_step_seconds": result.summary.median_step_seconds,
        "peak_allocated_gb": max((event["peak_mb"] or 0 for event in memory), default=0) / 1024,
        "peak_reserved_gb": max((event["reserved_mb"] or 0 for event in memory), default=0) / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=8)
    add_model_arguments(parser)
    arguments = parser.parse_args()
    import torch

    if not torch.cuda.is_available() and not arguments.allow_cpu:
        print("gpu_throughput: no CUDA GPU here; skipped")
        return 0
    device_name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    peak = dense_bf16_peak(device_name)
    with tempfile.TemporaryDirectory(prefix="tunedeck-gpu-") as directory:
        folder = Path(directory)
        home = folder / "home"
        matmul_parameters = build_model_from_arguments(folder / "model", arguments)
        write_long_rows(folder / "rows.jsonl", rows=arguments.micro_batch * (arguments.steps + 4),
                        words_per_row=arguments.seq_len)
        print(f"device {device_name}; model {matmul_parameters / 1e9:.3f}B matmul parameters; "
              f"seq_len {arguments.seq_len}, micro-batch {arguments.micro_batch}, bf16, 1 GPU")
        print(f"{'cell':<12} {'tokens/s':>12} {'step s':>8} {'MFU':>7} {'peak alloc GB':>14} "
              f"{'peak reserved GB':>17}")
        for method, backend in CELLS:
            cell = measure_cell(home, folder, method=method, backend=backend, arguments=arguments)
            flops_per_token = (6 if method == "full" else 4) * matmul_parameters
            mfu = cell["tokens_per_second"] * flops_per_token / peak if peak else float("nan")
            print(f"{method + '/' + backend:<12} {cell['tokens_per_second']:>12,.0f} "
                  f"{cell['median_step_seconds']:>8.3f} {mfu:>7.1%} "
                  f"{cell['peak_allocated_gb']:>14.2f} {cell['peak_reserved_gb']:>17.2f}",
                  flush=True)
    print(f"MFU against the dense bf16 peak of {device_name}: "
          f"{peak / 1e12 if peak else float('nan'):.0f} TFLOP/s; target >= 40% for full fine-tunes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
