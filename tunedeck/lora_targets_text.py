"""What a spec's LoRA adapts (POST /api/lora-targets' answer), in words: the form shows it
as Markdown, `tunedeck lora-targets` as plain text. Pure: plain dicts in, text out."""
from __future__ import annotations


def counts_line(preview: dict, *, emphasis: str = "") -> str:
    """"LlamaForCausalLM (llama): 1,024 trainable parameters of 9,876 (10.37%)", the
    architecture between `emphasis` marks ("**" for Markdown)."""
    trainable, total = preview["trainable_parameters"], preview["total_parameters"]
    architecture = f"{emphasis}{preview['architecture']}{emphasis}"
    return (f"{architecture} ({preview['model_type']}): {trainable:,} trainable "
            f"parameters of {total:,} ({trainable / total:.2%})")


def target_groups(preview: dict, *, dropout: float) -> list[tuple[str, list[str]]]:
    """Each kind of target the preview names, in words, with its names."""
    groups = [(f"linear layers (dropout {dropout:g})", preview.get("linear_modules")),
              ("linear layers through their weights (no dropout)",
               preview.get("linear_modules_without_dropout")),
              ("expert weights (no dropout)", preview.get("expert_parameters")),
              ("expert weights left out (lora.experts off)", preview.get("experts_left_out")),
              (f"router, {preview.get('router')}", preview.get("routers"))]
    return [(label, names) for label, names in groups if names]


def preview_as_markdown(preview: dict, *, dropout: float) -> str:
    """The preview as the form shows it: counts first, then each kind of target."""
    lines = [counts_line(preview, emphasis="**")]
    lines += [f"- {label}: {', '.join(f'`{name}`' for name in names)}"
              for label, names in target_groups(preview, dropout=dropout)]
    return "\n".join(lines)
