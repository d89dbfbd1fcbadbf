"""What the page carries for the charts: their style sheet, and the hover listener each
chart component runs once (`js_on_load`)."""
from __future__ import annotations

CHART_CSS = """
.td-chart { font-size: 12px; color: var(--body-text-color); padding: 6px 4px 2px; }
.td-chart-head { display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: baseline;
  margin-bottom: 6px; }
.td-chart-title { font-weight: 600; font-size: 13px; }
.td-legend { display: flex; flex-wrap: wrap; gap: 2px 12px; color: var(--body-text-color-subdued, #6b7280); }
.td-legend-item { white-space: nowrap; }
.td-legend-item i { display: inline-block; width: 14px; height: 3px; margin: 0 5px 3px 0;
  vertical-align: middle; background: var(--colour); }
.td-legend-item[data-kind="faint"] i { height: 2px; }
.td-legend-item[data-kind="points"] i { width: 7px; height: 7px; border-radius: 50%; }
.td-legend-item[data-kind="reference"] i { background: none; height: 0;
  border-top: 2px dashed var(--colour); }
.td-chart-body { display: grid; grid-template-rows: auto auto auto; }
.td-y-title { position: relative; }
.td-y-title span { position: absolute; left: 50%; top: 50%; white-space: nowrap;
  transform: translate(-50%, -50%) rotate(-90deg); color: var(--body-text-color-subdued, #6b7280); }
.td-y-ticks { position: relative; }
.td-y-tick { position: absolute; right: 6px; transform: translateY(50%); white-space: nowrap;
  font-variant-numeric: tabular-nums; opacity: .75; }
.td-chart-plot { position: relative; border-left: 1px solid var(--border-color-primary, #e5e7eb);
  border-bottom: 1px solid var(--border-color-primary, #e5e7eb); }
.td-chart-svg { position: absolute; inset: 0; width: 100%; height: 100%; overflow: visible; }
.td-chart-svg path { fill: none; vector-effect: non-scaling-stroke; stroke-linejoin: round; }
.td-grid { stroke: var(--border-color-primary, #e5e7eb); stroke-width: 1; opacity: .6; }
.td-line { stroke-width: 2; }
.td-faint { stroke-width: 1; opacity: .8; }
.td-reference { stroke-width: 1.5; stroke-dasharray: 6 4; }
.td-points { stroke-width: 7; stroke-linecap: round; }
.td-chart-plot[data-hover] { cursor: crosshair; }
.td-tip { position: fixed; z-index: 1000; pointer-events: none; white-space: pre; font-size: 12px;
  padding: 4px 8px; border-radius: 4px; background: var(--background-fill-primary, #fff);
  color: var(--body-text-color, #111); border: 1px solid var(--border-color-primary, #e5e7eb);
  box-shadow: 0 2px 6px rgba(0, 0, 0, .15); font-variant-numeric: tabular-nums; }
.td-rule { position: absolute; top: 0; bottom: 0; width: 0; pointer-events: none;
  border-left: 1px dashed var(--body-text-color-subdued, #6b7280); }
.td-x-ticks { position: relative; height: 1.6em; }
.td-x-tick { position: absolute; top: 3px; transform: translateX(-50%); white-space: nowrap;
  font-variant-numeric: tabular-nums; opacity: .75; }
.td-x-title { text-align: center; color: var(--body-text-color-subdued, #6b7280); }
.td-chart-empty { position: absolute; inset: 0; display: flex; align-items: center;
  justify-content: center; color: var(--body-text-color-subdued, #6b7280); }
"""

# A chart component's `js_on_load`: runs once per component, and its listeners outlive the
# updates (they sit on the component's element, which the updates diff into, not replace).
HOVER_JS = """
const tip = document.createElement('div');
tip.className = 'td-tip';
tip.hidden = true;
document.body.appendChild(tip);
let parsed = {source: null, bands: []};
const hide = () => {
  tip.hidden = true;
  element.querySelectorAll('.td-rule').forEach((rule) => rule.remove());
};
element.addEventListener('mousemove', (event) => {
  const plot = event.target.closest && event.target.closest('.td-chart-plot[data-hover]');
  if (!plot) { hide(); return; }
  if (parsed.source !== plot.dataset.hover) {
    parsed = {source: plot.dataset.hover, bands: JSON.parse(plot.dataset.hover || '[]')};
  }
  const box = plot.getBoundingClientRect();
  const at = (event.clientX - box.left) / box.width;
  const band = parsed.bands.find(([left, right]) => at >= left && at <= right);
  if (!band) { hide(); return; }
  tip.textContent = band[2];
  tip.hidden = false;
  const flip = event.clientX + tip.offsetWidth + 24 > window.innerWidth;
  tip.style.left = (flip ? event.clientX - tip.offsetWidth - 12 : event.clientX + 12) + 'px';
  tip.style.top = (event.clientY + 12) + 'px';
  let rule = plot.querySelector('.td-rule');
  if (!rule) { rule = document.createElement('div'); rule.className = 'td-rule'; plot.appendChild(rule); }
  rule.style.left = (at * 100) + '%';
});
element.addEventListener('mouseleave', hide);
"""
