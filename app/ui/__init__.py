"""The Gradio UI: one module per tab under `tabs/`, composed by `build_ui`."""
