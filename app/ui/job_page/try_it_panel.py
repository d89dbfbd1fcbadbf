"""The job page's "Try it" panel (a succeeded job's only): a prompt, which weights answer
it, how many new tokens at what temperature, and "Compare with base" for the base model's
answer beside the fine-tuned one. app/ui/job_page/try_it.py computes the answers."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from app.auth.principal import principal_of
from app.ui.job_page import try_it
from app.ui.request_polling import build_request_polling, still_waiting
from tunedeck.generation.request import GenerationRequest
from tunedeck.settings import Settings

DEFAULTS = GenerationRequest.model_fields


@dataclass(frozen=True)
class TryItPanel:
    panel: gr.Accordion  # shown for a succeeded job only (page_chrome.CSS, by the headline)


def build_try_it_panel(*, job_id: gr.Textbox, database, celery_app,
                       settings: Settings) -> TryItPanel:
    with gr.Accordion("Try it", open=True, elem_id="job-try-it") as panel:
        prompt = gr.Textbox(label="Prompt", lines=3, max_lines=12, elem_id="try-it-prompt",
                            placeholder="What is 12 + 7?",
                            info="rendered with the model's chat template, as training "
                                 "rendered its prompts")
        with gr.Row():
            variant = gr.Radio(list(try_it.VARIANT_LABELS), value=DEFAULTS["variant"].default,
                               label="Weights", elem_id="try-it-variant", scale=2,
                               info="merged: the exported model; adapter: base + LoRA adapter")
            max_new_tokens = gr.Number(DEFAULTS["max_new_tokens"].default, precision=0,
                                       minimum=1, maximum=settings.generation_max_new_tokens,
                                       label="Max new tokens", elem_id="try-it-max-new-tokens")
            temperature = gr.Slider(0.0, 2.0, value=DEFAULTS["temperature"].default, step=0.05,
                                    label="Temperature", info="0: greedy, the same text each time",
                                    elem_id="try-it-temperature")
            top_p = gr.Slider(0.05, 1.0, value=DEFAULTS["top_p"].default, step=0.05,
                              label="Top p", elem_id="try-it-top-p")
        with gr.Row():
            compare = gr.Checkbox(False, label="Compare with base",
                                  info="the same prompt to the base model, side by side",
                                  elem_id="try-it-compare")
            generate = gr.Button("Generate", variant="primary", elem_id="try-it-generate")
        with gr.Row():
            tuned_answer = gr.HTML(elem_id="try-it-answer")
            base_answer = gr.HTML(visible=False, elem_id="try-it-base-answer")
    # Answers not in when the request stopped waiting (a big model's first load): polled.
    polling = build_request_polling()

    def show(answers: try_it.TryItAnswers) -> tuple:
        return (answers.tuned_html, gr.HTML(answers.base_html, visible=answers.compared),
                *still_waiting(answers.waiting_ids))

    def answer(selected_job_id, text, chosen_variant, tokens, heat, nucleus, with_base,
               request: gr.Request):
        return show(try_it.try_prompt(selected_job_id, text, chosen_variant, tokens, heat,
                                      nucleus, with_base, database=database,
                                      celery_app=celery_app, settings=settings,
                                      principal=principal_of(request)))

    def poll_answers(ids, request: gr.Request):
        return show(try_it.answers_of(ids, database=database, settings=settings,
                                      principal=principal_of(request), wait_seconds=0))

    inputs = [job_id, prompt, variant, max_new_tokens, temperature, top_p, compare]
    outputs = [tuned_answer, base_answer, *polling.outputs]
    for trigger in (generate.click, prompt.submit):
        trigger(answer, inputs, outputs, concurrency_limit=None)
    polling.on_tick(poll_answers, [tuned_answer, base_answer])
    # Another job's page starts without this one's answers.
    job_id.change(lambda: show(try_it.TryItAnswers("")), None, outputs, show_progress="hidden")
    return TryItPanel(panel=panel)
