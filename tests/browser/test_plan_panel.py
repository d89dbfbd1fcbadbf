"""The memory plan panel as a person sees it at 1440 x 900: a table that does not wrap, in the
chart's order, the recommended row marked, and Apply putting a set-up into the form.

The expected set-ups and figures come from the same handlers in this process: the browser
must show what they computed, whichever set-ups today's planner offers."""
from __future__ import annotations

import threading
import time

import pytest

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.new_job import form_handlers
from app.ui.new_job.plan_handlers import apply_setup
from tests.browser.conftest import signed_in_page
from tunedeck.cluster import workers as worker_registry
from tunedeck.db.engine import Database
from tunedeck.db.models import utc_now
from tunedeck.planner.plan_text import strategy_cells
from tunedeck.settings import Settings

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1440, "height": 900}
GPU_WORKER = "gpu@rig"
HEARTBEAT_SECONDS = 3
FORM = dict(model="meta-llama/Llama-2-13b-hf", method="full", backend="fsdp", num_gpus=4,
            gpu_memory_gb=80)
# A cell wraps when its text makes more than one line box, or a box much taller than a line.
WRAPPED_CELLS = """(table) => [...table.querySelectorAll('th, td')].filter(cell => {
  const style = getComputedStyle(cell);
  const line = parseFloat(style.lineHeight) || 1.2 * parseFloat(style.fontSize);
  const range = document.createRange();
  range.selectNodeContents(cell);
  const lines = new Set([...range.getClientRects()].map(rect => Math.round(rect.top)));
  return cell.getClientRects().length !== 1 || lines.size > 1
    || cell.getBoundingClientRect().height - parseFloat(style.paddingTop)
       - parseFloat(style.paddingBottom) > 1.6 * line;
}).map(cell => cell.textContent)"""
# Vega names a discrete x axis's values in order in its aria-label; the tick labels are the
# fallback where that is missing.
CHART_ORDER = """(chart) => {
  const axis = [...chart.querySelectorAll('g.role-axis')]
    .find(g => (g.getAttribute('aria-label') || '').startsWith('X-axis'));
  if (!axis) return null;
  return [...axis.querySelectorAll('.role-axis-label text')].map(text => text.textContent);
}"""


def _expect():
    from playwright.sync_api import expect

    return expect


@pytest.fixture
def wide_page(browser, server):
    page = signed_in_page(browser, server)
    page.set_viewport_size(VIEWPORT)
    yield page
    page.context.close()


def _server_database(tunedeck_server) -> Database:
    return Database(Settings(home=tunedeck_server.home).resolved_database_url)


def _heartbeat(database: Database, name: str, resources: dict) -> None:
    with database.transaction() as session:
        worker_registry.record_heartbeat(session=session, name=name, host=name.split("@")[-1],
                                         queues=["default"], pid=1, concurrency=1,
                                         resources=resources, started_at=utc_now())


@pytest.fixture
def gpu_worker(tunedeck_server):
    """A GPU worker's heartbeats in the server's database, every few seconds while the test
    runs (as a worker on a GPU host sends them), so the form plans the GPU memory it is
    given rather than the CPU ranks of this host's own worker; stopped after."""
    database, stopped = _server_database(tunedeck_server), threading.Event()

    def beat() -> None:
        while not stopped.is_set():
            _heartbeat(database, GPU_WORKER, {"gpus": [{"index": 0, "id": "0"}]})
            stopped.wait(HEARTBEAT_SECONDS)

    _heartbeat(database, GPU_WORKER, {"gpus": [{"index": 0, "id": "0"}]})
    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    yield
    stopped.set()
    beating.join()
    with database.transaction() as session:
        worker_registry.mark_worker_stopped(session=session, name=GPU_WORKER)
    database.dispose()


def _live_workers(tunedeck_server, *, seconds: float = 120) -> list[dict]:
    """The registered workers, once `tunedeck up`'s own worker has said what it has."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        workers = tunedeck_server.http.get("/api/workers").json()["workers"]
        if any(worker.get("state") == "online" for worker in workers):
            return workers
        time.sleep(0.5)
    raise AssertionError(f"no worker registered: {tunedeck_server.describe()}")


def test_on_this_cpu_host_the_form_plans_its_cpu_ranks_in_ram(browser, tunedeck_server,
                                                              tmp_path):
    """Issue 29 item 10: with only this host's CPU worker, the form opens on a plan for its
    CPU ranks, each with a share of the host's RAM: no H100, no step time, figures per rank;
    the GPU memory field says it is not used."""
    expect = _expect()
    _live_workers(tunedeck_server)
    database = _server_database(tunedeck_server)
    settings = Settings(home=tunedeck_server.home)
    expected = form_handlers.preview_form(form_handlers.default_form(), principal=OPEN_PRINCIPAL,
                                          settings=settings, database=database).plan
    database.dispose()
    assert expected.plan["gpus"]["device"] == "cpu"
    page = signed_in_page(browser, tunedeck_server.base_url)
    page.set_viewport_size(VIEWPORT)
    try:
        plan = page.locator("#new-job-plan")
        ranks = expected.plan["gpus"]["count"]
        expect(plan).to_contain_text(f"1 node x {ranks} CPU ranks, "
                                     f"{expected.plan['gpus']['memory_gb']:.3g} GB of RAM each")
        expect(plan).to_contain_text("Per rank")
        for guess in ("H100", "per GPU", " a step", "Step times"):
            expect(plan).not_to_contain_text(guess)
        chart = page.locator("#new-job-plan-chart")
        expect(chart).to_contain_text("per rank")
        # The bars are this plan's, not the one the page was built with: the y axis reaches
        # its largest total (the build-time plan's, on GPUs with Liger, is smaller).
        largest = expected.frame.groupby("backend")["size"].sum().max()
        page.wait_for_function(f"""() => {{
          const chart = document.querySelector('#new-job-plan-chart');
          const axis = [...chart.querySelectorAll('g.role-axis')]
            .find(g => (g.getAttribute('aria-label') || '').startsWith('Y-axis'));
          if (!axis) return false;
          const ticks = [...axis.querySelectorAll('.role-axis-label text')]
            .map(text => parseFloat(text.textContent));
          return Math.max(...ticks) >= 0.8 * {largest};
        }}""", timeout=30_000)
        expect(page.locator("#new-job-gpu-memory-gb")).to_contain_text("not used")
        _wait_for_rows(page, _expected_rows(expected))
        shots = tmp_path / "screenshots"
        shots.mkdir()
        plan.screenshot(path=str(shots / "plan-panel-cpu.png"))
        page.screenshot(path=str(shots / "new-job-page-cpu.png"), full_page=True)
        print(f"CPU plan screenshots: {shots}")
    finally:
        page.context.close()


def _fill(page) -> None:
    page.locator("#new-job-model textarea, #new-job-model input").first.fill(FORM["model"])
    page.locator("#new-job-method").get_by_label(FORM["method"], exact=True).check()
    page.locator("#new-job-backend").get_by_label(FORM["backend"], exact=True).check()
    page.locator("#new-job-num-gpus input").fill(str(FORM["num_gpus"]))
    page.locator("#new-job-gpu-memory-gb input").fill(str(FORM["gpu_memory_gb"]))
    page.locator("#new-job-gpu-memory-gb input").blur()


def _row_texts(page) -> dict[str, list[str]]:
    rows = page.locator("#new-job-plan tbody tr")
    return {row.get_attribute("data-strategy"): [cell.strip() for cell in
                                                 row.locator("td").all_inner_texts()]
            for row in rows.all()}


def _expected_rows(view) -> dict[str, list[str]]:
    recommended = view.plan["recommended"]["strategy"] if view.plan["recommended"] else None
    rows = {}
    for name in view.plan["strategies"]:
        cells = strategy_cells(view.plan, name)
        cells[0] = f"★ {name}" if name == recommended else name
        rows[name] = cells
    return rows


def _wait_for_rows(page, expected: dict[str, list[str]]) -> None:
    page.wait_for_function(
        """(expected) => {
          const rows = [...document.querySelectorAll('#new-job-plan tbody tr')];
          return rows.length === Object.keys(expected).length && rows.every(row =>
            JSON.stringify([...row.querySelectorAll('td')].map(td => td.innerText.trim()))
            === JSON.stringify(expected[row.dataset.strategy]));
        }""", arg=expected, timeout=30_000)


def _field_value(page, name: str):
    """What the form shows for a FORM_FIELDS name, as apply_setup writes it."""
    field = page.locator(f"#new-job-{name.replace('_', '-')}")
    if field.locator("input[type=checkbox]").count():
        return field.locator("input[type=checkbox]").is_checked()
    if field.locator("input[type=radio]").count():
        return field.locator("input[type=radio]:checked").get_attribute("value")
    value = field.locator("input").first.input_value()
    return int(float(value)) if value.replace(".", "", 1).isdigit() else value


def _field_value_when_set(page, name: str, expected, *, seconds: float = 10.0):
    """The field's value once it reads `expected`, or what it reads after `seconds`: the
    Apply click and the preview it starts land a moment apart (a set-up that changes the
    backend leaves the table's rows, which the test waits on, as they were)."""
    value = _field_value(page, name)
    for _ in range(int(seconds / 0.2)):
        if value == expected:
            break
        page.wait_for_timeout(200)
        value = _field_value(page, name)
    return value


def test_the_plan_panel_reads_on_one_line_per_backend_and_applies_a_set_up(gpu_worker,
                                                                           wide_page, tmp_path):
    page, expect = wide_page, _expect()
    form = {**form_handlers.default_form(), **FORM}
    view = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings()).plan
    assert view.plan and view.plan["model"] == FORM["model"]
    # The form opens on the tiny built-in model: its figures are MB, not a table of 0.00.
    expect(page.locator("#new-job-plan")).to_contain_text("builtin:tiny-llama")
    expect(page.locator("#new-job-plan")).to_contain_text(" MB")
    expect(page.locator("#new-job-plan")).not_to_contain_text("0.00")
    expect(page.locator("#new-job-plan-chart")).to_contain_text("MB per GPU")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    page.locator("#new-job-plan").screenshot(path=str(shots / "plan-panel-tiny.png"))
    _fill(page)
    _wait_for_rows(page, _expected_rows(view))
    table = page.locator("#new-job-plan table")
    shot = shots / "plan-panel.png"
    page.locator("#new-job-plan").screenshot(path=str(shot))
    page.screenshot(path=str(shots / "new-job-page.png"), full_page=True)
    print(f"plan panel screenshot: {shot}")

    assert table.evaluate(WRAPPED_CELLS) == []
    # Nothing clipped or scrolled sideways: the whole table is on the page as it is.
    assert table.evaluate("t => t.parentElement.scrollWidth <= t.parentElement.clientWidth")
    headers = [text.strip() for text in table.locator("th").all_inner_texts()]
    assert headers == ["backend", "weights", "grads", "optimizer", "activations", "buffers",
                       "total", "verdict", "host/node"]
    rows = list(_row_texts(page))
    assert rows == view.plan["strategies"]
    chart_order = page.locator("#new-job-plan-chart").evaluate(CHART_ORDER)
    assert chart_order == rows
    expect(page.locator("#new-job-plan-chart")).to_contain_text(f"{view.unit} per GPU")
    if view.plan["recommended"]:
        marked = page.locator("#new-job-plan tr[data-recommended]")
        expect(marked).to_have_count(1)
        assert marked.get_attribute("data-strategy") == view.plan["recommended"]["strategy"]
        expect(marked.locator("td").first).to_have_text(f"★ {marked.get_attribute('data-strategy')}")
        assert marked.evaluate("tr => getComputedStyle(tr).backgroundColor") != "rgba(0, 0, 0, 0)"

    # The buttons are the set-ups the form can make, in the panel's order.
    for index in range(4):
        label = view.apply_labels[index] if index < len(view.apply_labels) else ""
        button = page.locator(f"#new-job-plan-apply-{index}")
        if label:
            expect(button).to_have_text(label)
        else:
            expect(button).to_be_hidden()
    first = next((index for index, label in enumerate(view.apply_labels) if label), None)
    assert first is not None, f"no set-up the form can apply: {view.setups}"
    updates = apply_setup(form, view.setups[first])
    page.locator(f"#new-job-plan-apply-{first}").click()
    applied = form_handlers.preview_form({**form, **updates}, principal=OPEN_PRINCIPAL, settings=Settings()).plan
    _wait_for_rows(page, _expected_rows(applied))  # the preview re-ran on the applied form
    for name, value in updates.items():
        if isinstance(value, bool):  # the option group may still be appearing: wait for it
            box = page.locator(f"#new-job-{name.replace('_', '-')} input[type=checkbox]")
            (expect(box).to_be_checked() if value else expect(box).not_to_be_checked())
        else:
            assert _field_value_when_set(page, name, value) == value, name
    page.locator("#new-job-plan").screenshot(path=str(shots / "plan-panel-applied.png"))
