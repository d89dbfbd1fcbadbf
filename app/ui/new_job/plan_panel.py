"""The New job tab's memory plan: the table and advice, the stacked bars in the table's
order, and an Apply button per offered set-up that puts its changes into the form.

Full width, under the form and the preview: the table's nine columns need ~850 px on one
line, the preview's column is ~480 px wide at 1440 px, and a table-and-chart row (three
fifths for the table) clipped the verdicts; so the chart comes under the table."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import gradio as gr

from app.ui.new_job.form_handlers import form_values
from app.ui.new_job.form_layout import FORM_FIELDS
from app.ui.new_job.plan_handlers import PlanView, apply_setup

MAX_SETUPS = 4  # the recommended set-up and up to 3 alternatives
CHART_HEIGHT = 260


@dataclass(frozen=True)
class PlanPanel:
    table: gr.HTML
    chart: gr.BarPlot
    apply_buttons: list[gr.Button]
    setups: gr.State  # the set-ups the buttons apply, in their order

    @property
    def outputs(self) -> list:
        """What plan_updates fills, in its order."""
        return [self.table, self.chart, *self.apply_buttons, self.setups]


def build_plan_panel(initial: PlanView) -> PlanPanel:
    gr.Markdown("#### Memory plan", elem_id="new-job-plan-title")
    table = gr.HTML(initial.html, elem_id="new-job-plan")
    with gr.Column():
        # One under another, scale=0 (fit-content): in a Row, Gradio's zero flex-basis held
        # each button at its 160 px minimum and a long set-up's label wrapped to three lines.
        buttons = [gr.Button(_label(initial, index), visible=bool(_label(initial, index)),
                             size="sm", scale=0, elem_id=f"new-job-plan-apply-{index}")
                   for index in range(MAX_SETUPS)]
    # Drawn first by the page's load (plan_updates): a plot handed new data while it was
    # still mounting kept the build-time plan's bars under the new plan's axis title.
    chart = gr.BarPlot(PlanView().frame, x="backend", y="size", color="part",
                       **_chart_settings(initial), height=CHART_HEIGHT, visible=False,
                       elem_id="new-job-plan-chart")
    return PlanPanel(table=table, chart=chart, apply_buttons=buttons,
                     setups=gr.State(list(initial.setups)))


def plan_updates(view: PlanView) -> list:
    """The panel's new values for a preview, in PlanPanel.outputs order."""
    buttons = [gr.update(value=_label(view, index) or "Apply", visible=bool(_label(view, index)))
               for index in range(MAX_SETUPS)]
    # No plan (no GPU memory set, a model it cannot size): no empty chart frame either.
    return [view.html, gr.BarPlot(view.frame, **_chart_settings(view),
                                  visible=not view.frame.empty), *buttons,
            list(view.setups)]


def wire_apply_buttons(panel: PlanPanel, inputs: list) -> None:
    """Apply writes the set-up into the form; the fields' change events then re-run the
    preview, so the plan shows the applied set-up."""
    for index, button in enumerate(panel.apply_buttons):
        button.click(partial(apply_clicked, index), [panel.setups, *inputs], inputs,
                     show_progress="hidden")


def apply_clicked(index: int, setups: list[dict], *values: Any) -> list:
    """Apply button `index`'s answer: a value for each field it changes, in FORM_FIELDS
    order, and gr.skip() for the rest (an untouched field keeps what the user typed)."""
    if index >= len(setups or []):  # a stale click: the plan changed under it
        return [gr.skip()] * len(values)
    updates = apply_setup(form_values(values), setups[index])
    return [updates[name] if name in updates else gr.skip() for name in FORM_FIELDS]


def _label(view: PlanView, index: int) -> str:
    return view.apply_labels[index] if index < len(view.apply_labels) else ""


def _chart_settings(view: PlanView) -> dict:
    # Vega would sort the bars alphabetically; the table's order is the one to compare with.
    return {"sort": list(view.order), "y_title": f"{view.unit} per {view.per}"}
