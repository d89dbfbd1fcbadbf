# TuneDeck's web service (REST API and UI) and `tunedeck migrate`: the project without the
# `worker` extra, so no torch, DeepSpeed or CUDA in this image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    TUNEDECK_HOME=/var/lib/tunedeck

WORKDIR /app
COPY . /app
# Base dependencies only (pyproject's `dependencies`); fail the build if torch crept in.
RUN pip install . \
    && python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"

RUN mkdir -p /var/lib/tunedeck
VOLUME ["/var/lib/tunedeck"]
EXPOSE 7860
CMD ["tunedeck", "web", "--host", "0.0.0.0", "--port", "7860"]
