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
