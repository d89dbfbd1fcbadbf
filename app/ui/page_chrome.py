"""What the page carries besides its components: the style sheet and the script that make a
job's page an address of its own (`/?job=ID`: shareable, kept on reload, and the browser's
back button goes back to the job before)."""
from __future__ import annotations

from typing import Any

from app.ui.job_ids import JOB_PARAMETER, parse_job_id

# Runs in the browser once a job's page is drawn, with the job box's value: the address
# names the job, a new history entry for each job opened.
NAME_JOB_IN_ADDRESS_JS = f"""
(jobId) => {{
  const parsed = parseInt(jobId, 10);  // the box's text; anything but a positive id: none
  const wanted = parsed > 0 ? String(parsed) : "";
  const url = new URL(window.location.href);
  if (wanted && url.searchParams.get("{JOB_PARAMETER}") !== wanted) {{
    url.searchParams.set("{JOB_PARAMETER}", wanted);
    window.history.pushState({{job: wanted}}, "", url);
  }}
  return [];
}}
"""



# Shows the tab its input names ("Job"; nothing for an empty name) by clicking the tab's
# button, as the user would, so its select event fires. Handlers never output
# `gr.Tabs(selected=...)`: Gradio's front end walks a layout block that has ever been an
# event's input or output whole on every later event, copying each of its components, and
# the Tabs (all of the app) made each tick of the job page cost the browser ~10% of a core.
SHOW_TAB_JS = """
(label) => {
  if (!label) return [];
  const tab = [...document.querySelectorAll('#tabs [role="tab"]')]
    .find((button) => button.textContent.trim() === label);
  if (tab && tab.getAttribute("aria-selected") !== "true") tab.click();
  return [];
}
"""


# Back and forward load the page the address names; the page opens its job on load.
# A plain click on a job link stays on this page (Gradio opens Markdown links in a new tab):
# the table's row click opens the job here. Ctrl-, shift- or middle-click still opens a tab.
HEAD = """
<script>
window.addEventListener("popstate", () => window.location.reload());
document.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest('a[href^="?job="]');
  if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
  event.preventDefault();
}, true);
</script>
"""

# The footer keeps only Gradio's Settings (no "Use via API", no "Built with"): the dot that
# separated them from it would stand alone.
# The database banner (database_banner.py) is a warning, not an error: the page waits the
# outage out. Amber on both themes, full width, above the tabs it speaks for.
# The New job form's radio groups keep each option on one line: an option that did not fit
# went under the others ("full", "fp32"), so a group is as wide as its options, trimmed of
# some padding so the three fit one row at 1440 px (a narrower row wraps whole groups).
# The form's previews (read-only, lines never wrapped): CodeMirror sizes its gutters from
# an estimated 14 px line until it has measured the lines, which it does only once the
# editor is inside the window, so a preview drawn below the fold had its line numbers drift
# from their lines: each number is one line high, as its line is (the first element is
# CodeMirror's hidden width spacer), and the fold markers, placed by the same estimate,
# are left out (nothing in a preview this short is worth folding).
# Table headers never break inside a word, and the Jobs and Events cells only between words
# (names break at their hyphens: "tiny-llama-/lora-zero2"), except the last column (a
# reason or a message), where a path wider than the column must break somewhere. Gradio 6
# draws cells as divs (role=gridcell) where Gradio 5 drew <td>. The error colour is the
# theme's. The Jobs table's tick boxes are read-only checkboxes (see jobs/jobs_tab.py): drawn
# as enabled ones, and a click passes through the box to its cell, whose select event toggles
# the tick. A click there ticks and anywhere else opens the job, so Gradio's cell selection
# (a ring, and buttons that would cover the id link) means nothing in that table. The Job
# tab's body and Try it panel show by the headline's class
# (job_page/job_page_layout.headline_classes).
CSS = """
footer .divider { display: none !important; }
#database-banner .database-banner {
  padding: 10px 14px; border-radius: var(--radius-md); font-weight: 600;
  border: 1px solid #f59e0b; border-left-width: 6px; background: #fffbeb; color: #92400e;
}
.dark #database-banner .database-banner { background: #451a03; color: #fde68a; }
#tabs:has(#job-status.job-none) #job-body { display: none !important; }
#tabs:not(:has(#job-status.job-succeeded)) #job-try-it { display: none !important; }
#tabs:not(:has(#job-status.job-succeeded)) #job-continue { display: none !important; }
#job-rollouts h4 { margin: 12px 0 6px; }
#job-rollouts table.rollouts { width: 100%; border-collapse: collapse; font-size: 13px; }
#job-rollouts th, #job-rollouts td { border-bottom: 1px solid var(--border-color-primary);
  padding: 3px 6px; text-align: left; vertical-align: top; }
#job-rollouts td pre { margin: 0; white-space: pre-wrap; word-break: break-word;
  font-size: 12px; background: none; }
#job-rollouts tr.rollout-prompt td { background: var(--background-fill-secondary); }
#job-rollouts tr.rollout-best td { font-weight: 600; }
#jobs-table th, #jobs-table th *, #compare-summary th, #compare-summary th * {
  word-break: keep-all !important; overflow-wrap: normal !important; white-space: nowrap;
}
#jobs-table td, #jobs-table td *, #job-events td, #job-events td *,
#jobs-table [role=gridcell], #jobs-table [role=gridcell] *,
#job-events [role=gridcell], #job-events [role=gridcell] * {
  word-break: normal !important; overflow-wrap: normal !important;
}
#jobs-table [role=gridcell]:last-child *, #job-events [role=gridcell]:last-child * {
  overflow-wrap: anywhere !important;
}
div.field-error, div.field-error *, .block.field-error .info-text {
  color: var(--error-text-color, #b91c1c) !important;
}
.block.field-error .info-text { font-weight: 600; }
.job-log-box {
  overflow: auto; display: flex; flex-direction: column-reverse;
  border: 1px solid var(--border-color-primary); border-radius: var(--radius-md);
  padding: 8px; margin: 4px 0 6px; background: var(--background-fill-secondary);
}
.job-log-box pre { margin: 0; white-space: pre-wrap; word-break: break-word; font-size: 12px; }
.job-log-label { font-size: var(--block-label-text-size); color: var(--block-label-text-color); }
#new-job-method, #new-job-backend, #new-job-precision { min-width: max-content !important; }
:is(#new-job-method, #new-job-backend, #new-job-precision) .wrap { flex-wrap: nowrap; }
:is(#new-job-method, #new-job-backend, #new-job-precision) label {
  white-space: nowrap; flex-shrink: 0; padding-left: 8px; padding-right: 8px;
}
:is(#new-job-config, #new-job-trainer-settings) .cm-lineNumbers .cm-gutterElement:not(:first-child) {
  height: auto !important;
}
:is(#new-job-config, #new-job-trainer-settings) .cm-foldGutter { display: none; }
#new-job-presets > button { align-self: flex-end; margin-bottom: 12px; white-space: nowrap; }
#jobs-buttons > button { white-space: nowrap; }
#jobs-table .bool-cell input[disabled] { opacity: 1; cursor: pointer; pointer-events: none; }
#jobs-table .bool-cell label { cursor: pointer; }
#jobs-table .body-cell.cell-selected { box-shadow: none; }
#jobs-table .selection-button { display: none; }
.try-it-answer h4 { margin: 0 0 4px; }
.try-it-answer pre.try-it-text {
  white-space: pre-wrap; word-break: break-word; margin: 0; padding: 8px;
  border: 1px solid var(--border-color-primary); border-radius: var(--radius-md);
  background: var(--background-fill-secondary); font-size: 13px;
}
.try-it-answer .try-it-facts {
  font-size: 12px; color: var(--body-text-color-subdued); margin: 4px 0 0;
}
.try-it-answer .try-it-error { color: var(--error-text-color, #b91c1c); }
.block.field-error input, .block.field-error textarea {
  border-color: var(--error-border-color, #ef4444) !important;
}
"""


def job_in_address(query_params: Any) -> int | None:
    """The job `?job=ID` names, or None (no such parameter, or not a job id)."""
    return parse_job_id(query_params.get(JOB_PARAMETER)) if query_params is not None else None
