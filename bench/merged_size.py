"""Merged weights' size against the base's: a LoRA on a bf16 base (a random Llama of about
`--hidden` width), merged and exported as a job's rank 0 does (trainer/model/export.py), with
`export_dtype` auto, bf16, fp16 and fp32. The fp32 export, what every merge gave before
export_dtype, is the reference measured in the same run.

    .venv/bin/python bench/merged_size.py [--hidden 512 --layers 4]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tunedeck.units import MIB  # noqa: E402


def weight_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.glob("*.safetensors"))


def write_bf16_base(folder: Path, *, hidden: int, layers: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.model.builtin_model import build_tokenizer

    tokenizer = build_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=4,
                         tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def export_with(base: Path, run_dir: Path, export_dtype: str) -> Path:
    import torch
    from transformers import AutoTokenizer

    from trainer.model.export import export_weights
    from trainer.model.method import apply_method
    from trainer.model.model_source import load_base_model
    from tunedeck.spec.job_spec import JobSpec
    from tunedeck.run_folder import RunFolder

    spec = JobSpec.model_validate({"model": str(base), "max_steps": 1, "export_dtype": export_dtype})
    model = apply_method(load_base_model(str(base)), spec)
    trained = {name: 0.01 * torch.randn(parameter.shape)
               for name, parameter in model.named_parameters() if parameter.requires_grad}
    run = RunFolder(run_dir)
    run.path.mkdir(parents=True)
    export_weights(spec, run, trained_state=trained, model_source=str(base),
                   tokenizer=AutoTokenizer.from_pretrained(base))
    return run.merged_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="merged-size-") as folder:
        base = write_bf16_base(Path(folder) / "base", hidden=arguments.hidden, layers=arguments.layers)
        sizes = {dtype: weight_bytes(export_with(base, Path(folder) / dtype, dtype))
                 for dtype in ("fp32", "auto", "bf16", "fp16")}
        base_bytes = weight_bytes(base)
    print(f"bf16 base, {base_bytes / MIB:.1f} MiB of weights; merged LoRA exports:")
    for dtype, size in sizes.items():
        print(f"  export_dtype {dtype:4}: {size / MIB:7.1f} MiB, / base {size / base_bytes:.3f}, "
              f"/ fp32 export (reference) {size / sizes['fp32']:.3f}")


if __name__ == "__main__":
    main()
