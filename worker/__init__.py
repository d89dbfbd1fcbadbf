"""The Celery worker of a GPU host: claims jobs, launches torchrun, streams metrics."""
