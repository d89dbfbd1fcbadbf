"""Reading what a Gradio Dataframe shows: its visible grid is `[role=row]` divs whose cells
are `[data-testid=cell-R-C]`, under headers `[data-testid=header-C]` titled by column (the
`<table>` inside is a hidden copy used for sizing, so it is not what the user sees)."""
from __future__ import annotations


def table_rows(page, table_selector: str) -> list[dict[str, str]]:
    """The rows on screen, each as {header: cell text}."""
    table = page.locator(table_selector)
    # A header cell's text also holds its menu button ("⋮"); its title is the column name.
    headers = [header.get_attribute("title") or ""
               for header in table.locator("[data-testid^='header-']").all()]
    rows = []
    for row in table.locator("[role=row]").all():
        cells = [text.strip() for text in row.locator("[data-testid^='cell-']").all_inner_texts()]
        if cells:
            rows.append(dict(zip(headers, cells)))
    return rows


def job_row(page, table_selector: str, job_id: int):
    """The visible row of the job whose id cell links its address (`?job=ID`)."""
    return page.locator(f"{table_selector} [role=row]").filter(
        has=page.locator(f"a[href='?job={job_id}']"))


def tick_box(page, table_selector: str, job_id: int):
    """The job's tick box, the checkbox in its row's first cell (to read: is it checked)."""
    return job_row(page, table_selector, job_id).locator("[data-col='0'] input[type=checkbox]")


def tick(page, table_selector: str, job_id: int) -> None:
    """Click the job's tick box as a user does. The box itself is read-only and lets the
    click through to its cell, so the click lands on the label drawn around it."""
    job_row(page, table_selector, job_id).locator("[data-col='0'] label").click()
