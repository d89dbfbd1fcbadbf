# TuneDeck: `make run` and `make test` work on a fresh clone of a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0
# PyTorch's own index of CPU-only builds (where unreachable, pip falls back to PyPI's).
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

export GRADIO_ANALYTICS_ENABLED := False
export TUNEDECK_TEST_POSTGRES_URL ?= postgresql+psycopg://postgres@127.0.0.1:5432/test
# Two pytest processes, each taking whole files (a file's servers, Redis database and
# module fixtures stay in one process). `make test PYTEST_PARALLEL=` runs it in one.
PYTEST_PARALLEL ?= -n 2 --dist loadfile
export TUNEDECK_TEST_REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: run test install services browser-deps clean

run: $(STAMP)
	$(VENV)/bin/tunedeck up

test: $(STAMP) services browser-deps
	$(VPY) -m pytest -q -rs --durations=30 $(PYTEST_PARALLEL) $(PYTEST_ARGS)

install: $(STAMP)

# A GPU host takes the normal (CUDA) torch; elsewhere the CPU build, so pip never pulls
# a multi-GB CUDA build onto a laptop or a CI machine.
$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(VPY) -m pip install -q torch; \
	else \
	  $(VPY) -m pip install -q --retries 1 "torch==$(TORCH_VERSION)" \
	    --extra-index-url $(TORCH_CPU_INDEX); \
	fi
	$(VPY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

services:
	scripts/ensure_services.sh
	@# Slurm needs root; where it cannot start, its tests skip (CI requires them).
	scripts/ensure_slurm.sh || echo "no Slurm here: tests/e2e/test_slurm.py skips"

browser-deps:
	scripts/ensure_chromium.sh

clean:
	rm -rf var .pytest_cache
