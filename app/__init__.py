"""The web: REST API under /api and the Gradio UI at /. Never imports torch or worker code."""
