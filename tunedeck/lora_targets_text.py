"""What a spec's LoRA adapts (POST /api/lora-targets' answer), in words: the form shows it
as Markdown, `tunedeck lora-targets` prints it. Pure: plain dicts in, text out."""
from __future__ import annotations


def preview_as_markdown(preview: dict, *, dropout: float) -> str:
    """The preview as the form shows it: counts first, then each kind of target."""
    trainable, total = preview["trainable_parameters"], preview["total_parameters"]
    lines = [f"**{preview['architecture']}** ({preview['model_type']}): "
             f"{trainable:,} trainable parameters of {total:,} ({trainable / total:.2%})"]
    if preview.get("linear_modules"):
        lines.append(f"- linear layers (dropout {dropout:g}): {_names(preview['linear_modules'])}")
    if preview.get("linear_modules_without_dropout"):
        lines.append(f"- linear layers through their weights (no dropout): "
                     f"{_names(preview['linear_modules_without_dropout'])}")
    if preview.get("expert_parameters"):
        lines.append(f"- expert weights (no dropout): {_names(preview['expert_parameters'])}")
    if preview.get("experts_left_out"):
        lines.append(f"- expert weights left out (lora.experts off): "
                     f"{_names(preview['experts_left_out'])}")
    if preview.get("routers"):
        lines.append(f"- router, {preview['router']}: {_names(preview['routers'])}")
    return "\n".join(lines)


def _names(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)
