"""The plan's JSON for people: a terminal table (for `tunedeck plan`) and HTML (for the New
job form). Both list the strategies in plan["strategies"] order, the order the form's chart
uses too, and write every figure with its unit, so a tiny model's figures read as MB rather
than a column of 0.00."""
from __future__ import annotations

import html
from collections.abc import Sequence

from tunedeck.units import format_count, format_size

PARTS = ("params", "grads", "optimizer", "activations", "other", "total")
# The JSON's keys are the planner's; a person reads "params" as a count, so the weights as
# held, and "other" is the gathered layers' and communication buffers.
PART_NAMES = {"params": "weights", "grads": "grads", "optimizer": "optimizer",
              "activations": "activations", "other": "buffers", "total": "total"}
HEADER = ("backend", *(PART_NAMES[part] for part in PARTS), "verdict", "host/node")
RECOMMENDED_MARK = "★"


def strategy_cells(plan: dict, name: str) -> list[str]:
    """One table row's cells, as HEADER names them."""
    row = plan[name]
    host = row["host_gb_per_node"]
    return [name, *(format_size(row["per_gpu_gb"][part]) for part in PARTS), row["fits"],
            format_size(host) if host else "–"]


def setups(plan: dict) -> list[dict]:
    """The set-ups the plan offers: the recommended one first, then the alternatives."""
    return ([plan["recommended"]] if plan["recommended"] else []) + list(plan["alternatives"])


def _summary(plan: dict) -> str:
    gpus, count = plan["gpus"], plan["parameter_count"]
    # The model's own count, as the advice names it; an adapter's parameters are added to
    # the model's (they are trainable and the rest frozen), so they are said apart.
    total, trainable = plan["parameters"], plan["trainable_parameters"]
    counted = (f"{format_count(total)} parameters (all trainable" if trainable == total else
               f"{format_count(total - trainable)} parameters and a "
               f"{format_count(trainable)}-parameter adapter (the trainable ones")
    return f"{plan['model']}: {counted}; from the {count['source']}); {hardware_words(gpus)}"


def on_cpu(plan: dict) -> bool:
    """Whether the plan is for CPU ranks (its JSON says device "cpu"; a GPU plan's has none)."""
    return plan["gpus"].get("device") == "cpu"


def rank_word(plan: dict) -> str:
    """"GPU" or "rank", as in "per GPU"."""
    return "rank" if on_cpu(plan) else "GPU"


def hardware_words(gpus: dict) -> str:
    """"1 node(s) x 2 H100(s) of 80 GB"; CPU ranks: "1 node x 2 CPU ranks, 11.7 GB of RAM each"."""
    if gpus.get("device") == "cpu":
        nodes, ranks = gpus["nodes"], gpus["count"]
        return (f"{nodes} node{'s' if nodes > 1 else ''} x {ranks} CPU rank"
                f"{'s' if ranks > 1 else ''}, {gpus['memory_gb']:.3g} GB of RAM each")
    return (f"{gpus['nodes']} node(s) x {gpus['count']} {gpus.get('card') or 'GPU'}(s) of "
            f"{gpus['memory_gb']:g} GB")


def _setup_figures(setup: dict, per: str) -> str:
    """'59.9 GB per GPU (fits), +33% compute (recomputed forward)'."""
    cost = f", {setup['cost']}" if setup["cost"] else ""
    return f"{format_size(setup['total_gb'])} per {per} ({setup['fits']}){cost}"


def plan_as_text(plan: dict) -> str:
    per = rank_word(plan)
    lines = [f"{_summary(plan)}. Per {per} (GB = 10^9 bytes):"]
    rows = [list(HEADER), *(strategy_cells(plan, name) for name in plan["strategies"])]
    widths = [max(len(row[index]) for row in rows) for index in range(len(HEADER))]
    lines += ["  ".join(cell.rjust(width) if index else cell.ljust(width)
                        for index, (cell, width) in enumerate(zip(row, widths)))
              for row in rows]
    recommended = plan["recommended"]
    lines.append(f"recommended: {recommended['label']} at {format_size(recommended['total_gb'])} "
                 f"per {per} ({recommended['fits']})" if recommended else "recommended: nothing fits")
    lines += [f"- {reason}" for reason in plan["reasons"]]
    lines += [f"- alternative: {setup['label']}: {format_size(setup['total_gb'])} per {per}"
              + (f", {setup['cost']}" if setup["cost"] else "")
              for setup in plan["alternatives"]]
    return "\n".join(lines)


# Inline styles rather than a stylesheet: the HTML lands inside Gradio's themed prose, whose
# table rules would otherwise win or lose by selector order. nowrap keeps "zero2_offload" and
# "59.9 GB" on one line; tabular numerals line the figures up.
_CELL = "white-space:nowrap;padding:3px 10px;border-bottom:1px solid rgba(128,128,128,.25);"
_TEXT_CELL = _CELL + "text-align:left;"
_FIGURE_CELL = _CELL + "text-align:right;font-variant-numeric:tabular-nums;"
_RECOMMENDED_ROW = "background:rgba(250,204,21,.22);"
_VERDICT_COLOURS = {"fits": "#15803d", "tight": "#b45309", "does not fit": "#b91c1c",
                    "not supported": "#6b7280"}
_FIGURE_COLUMNS = range(1, len(PARTS) + 1)
_HOST_COLUMN = len(HEADER) - 1


def _cell_style(index: int) -> str:
    return _FIGURE_CELL if index in _FIGURE_COLUMNS or index == _HOST_COLUMN else _TEXT_CELL


def _html_row(plan: dict, name: str, recommended: str | None) -> str:
    cells = strategy_cells(plan, name)
    marked = name == recommended
    texts = [html.escape(cell) for cell in cells]
    # Bold on the name only: a semibold figure fell back to another font for its unit.
    texts[0] = f"<strong>{RECOMMENDED_MARK} {texts[0]}</strong>" if marked else texts[0]
    verdict = len(PARTS) + 1
    texts[verdict] = (f'<span style="color:{_VERDICT_COLOURS.get(cells[verdict], "inherit")}">'
                      f"{texts[verdict]}</span>")
    body = "".join(f'<td style="{_cell_style(index)}">{text}</td>'
                   for index, text in enumerate(texts))
    marks = (f' class="recommended" data-recommended="true" style="{_RECOMMENDED_ROW}"'
             if marked else "")
    return f'<tr data-strategy="{html.escape(name)}"{marks}>{body}</tr>'


def _html_table(plan: dict) -> str:
    recommended = plan["recommended"]["strategy"] if plan["recommended"] else None
    header = "".join(f'<th style="{_cell_style(index)}">{html.escape(name)}</th>'
                     for index, name in enumerate(HEADER))
    rows = "".join(_html_row(plan, name, recommended) for name in plan["strategies"])
    # A too-narrow page scrolls the table sideways instead of wrapping or clipping it.
    return (f'<div style="overflow-x:auto"><table style="border-collapse:collapse;width:auto;'
            f'margin:0;font-size:14px"><thead><tr>{header}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>")


def _html_setup(setup: dict, note: str, per: str) -> str:
    reason = f" {html.escape(setup['reason'])}" if setup["reason"] else ""
    note = f" <em>{html.escape(note)}</em>" if note else ""
    return (f"<strong>{html.escape(setup['label'])}</strong>: "
            f"{html.escape(_setup_figures(setup, per))}.{reason}{note}")


def plan_as_html(plan: dict, setup_notes: Sequence[str] = ()) -> str:
    """The plan as the form shows it: the table (the recommended strategy's row marked), then
    the recommended set-up and the alternatives, then the reasons. `setup_notes` adds a note
    to each set-up, in setups(plan) order (e.g. how to make a change the form cannot)."""
    notes = [*setup_notes, *[""] * len(setups(plan))]
    recommended, per = plan["recommended"], rank_word(plan)
    parts = [f'<p style="margin:0 0 6px">{html.escape(_summary(plan))}. Per {per}:</p>',
             _html_table(plan)]
    if recommended and recommended["changes"]:
        changed = f"{recommended['strategy']} with {' and '.join(recommended['changes'])}"
        # The table is the spec as written: its marked row may not fit until these changes.
        parts.append(f'<p style="margin:4px 0">{RECOMMENDED_MARK} {html.escape(changed)}: '
                     f"{html.escape(format_size(recommended['total_gb']))} per {per} "
                     f"({html.escape(recommended['fits'])}; the table is the spec as written)</p>")
    parts.append(f'<p style="margin:8px 0 4px">Recommended: {_html_setup(recommended, notes[0], per)}</p>'
                 if recommended else '<p style="margin:8px 0 4px"><strong>Recommended: nothing '
                 'fits</strong> as the spec stands.</p>')
    alternatives = notes[1:] if recommended else notes
    if plan["alternatives"]:
        items = "".join(f"<li>{_html_setup(setup, note, per)}</li>"
                        for setup, note in zip(plan["alternatives"], alternatives))
        parts.append(f'<p style="margin:4px 0 0">Alternatives:</p><ul style="margin:0">{items}</ul>')
    if plan["reasons"]:
        # The first reason words the recommendation, which the panel already shows above.
        reasons = plan["reasons"][1:] if recommended else plan["reasons"]
        items = "".join(f"<li>{html.escape(reason)}</li>" for reason in reasons)
        parts.append(f'<p style="margin:4px 0 0">Why:</p><ul style="margin:0">{items}</ul>')
    return f'<div class="tunedeck-plan">{"".join(parts)}</div>'
