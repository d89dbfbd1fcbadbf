"""The plan's JSON as a terminal table (for `tunedeck plan`) and as Markdown (for the form)."""
from __future__ import annotations

from tunedeck.planner.memory_plan import STRATEGIES

COLUMNS = ("params", "grads", "optimizer", "activations", "other", "total")


def plan_rows(plan: dict) -> list[list[str]]:
    rows = []
    for name in STRATEGIES:
        per_gpu = plan[name]["per_gpu_gb"]
        host = plan[name]["host_gb_per_node"]
        rows.append([name, *(f"{per_gpu[column]:.2f}" for column in COLUMNS), plan[name]["fits"],
                     f"{host:.1f}" if host else ""])
    return rows


HEADER = ["backend", *COLUMNS, "verdict", "host GB/node"]


def plan_as_text(plan: dict) -> str:
    gpus = plan["gpus"]
    lines = [f"{plan['model']}: {plan['parameters'] / 1e9:.3f}B parameters, "
             f"{plan['trainable_parameters']:,} trainable; {gpus['nodes']} node(s) x "
             f"{gpus['count']} GPU(s) x {gpus['memory_gb']:g} GB. GB per GPU (10^9 bytes):"]
    rows = [HEADER, *plan_rows(plan)]
    widths = [max(len(row[index]) for row in rows) for index in range(len(HEADER))]
    lines += ["  ".join(cell.rjust(width) if index else cell.ljust(width)
                        for index, (cell, width) in enumerate(zip(row, widths)))
              for row in rows]
    lines.append(f"recommended: {plan['recommended'] or 'nothing fits'}")
    lines += [f"- {reason}" for reason in plan["reasons"]]
    lines += [f"- would fit with {s['change']}: {s['backend']} at {s['total_gb']:.1f} GB per GPU"
              for s in plan["suggestions"]]
    return "\n".join(lines)


def plan_as_markdown(plan: dict) -> str:
    rows = [HEADER, ["---"] * len(HEADER), *plan_rows(plan)]
    table = "\n".join("| " + " | ".join(row) + " |" for row in rows)
    advice = [f"**Recommended: {plan['recommended'] or 'nothing fits'}**",
              *[f"- {reason}" for reason in plan["reasons"]],
              *[f"- Would fit with **{s['change']}**: {s['backend']} at {s['total_gb']:.1f} GB per GPU"
                for s in plan["suggestions"]]]
    return table + "\n\n" + "\n".join(advice)
