"""The database layer: models and engine. Only the web and the worker import it."""
