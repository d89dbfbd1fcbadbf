# A TuneDeck GPU worker: `tunedeck worker` and the trainer its torchrun ranks run, on the
# CUDA build of PyTorch. A -devel base, not -runtime: DeepSpeed JIT-compiles its ops with
# nvcc the first time a ZeRO-2 job runs.
ARG BASE_IMAGE=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    TUNEDECK_HOME=/var/lib/tunedeck \
    TUNEDECK_TORCH_EXTENSIONS_DIR=/var/lib/tunedeck/torch_extensions \
    TORCH_EXTENSIONS_DIR=/var/lib/tunedeck/torch_extensions

RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY . /app
# The base image's CUDA torch already satisfies the `worker` extra, so pip keeps it; the
# check fails the build if pip replaced it with a build that cannot see a GPU.
RUN pip install ".[worker]" \
    && python -c "import sys, torch; sys.exit(torch.version.cuda is None)"

RUN mkdir -p /var/lib/tunedeck/torch_extensions
VOLUME ["/var/lib/tunedeck"]
CMD ["tunedeck", "worker"]
