"""The Gradio UI: a folder per page (its layout, wiring and handlers; the New job tab's
modules still under `tabs/`), composed by `build_ui`; at the root what several pages share."""
