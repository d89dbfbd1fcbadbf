#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one call: the speed options against the plain path
# (tests/gpu, where pytest is installed), throughput and MFU of the real trainer
# (bench/gpu_throughput.py), then the memory planner against the allocator's peak
# (bench/gpu_memory_plan.py). Skips (exit 0) where no GPU answers.
#
# About 8 minutes on one H200: the throughput matrix starts no cell past its budget (the
# 1B cells first, then the 8B LoRA), the memory plan runs seq 2048 only. Longer budgets:
# THROUGHPUT_BUDGET_SECONDS=1800 MEMORY_PLAN_BUDGET_SECONDS=600 bench/gpu_check.sh
#
# On a machine without internet, carry what its image lacks as wheels in ./wheels, e.g.
#   pip download --no-deps -d wheels deepspeed==0.19.8 liger-kernel==0.8.5 pydantic \
#     pydantic-core annotated-types typing-inspection
# (Liger's triton comes with CUDA torch); every wheel there is installed, none fetched. A
# "liger" cell without liger-kernel fails naming it, and the rest of the matrix runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export GRADIO_ANALYTICS_ENABLED=False
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here; skipped"
  exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

if ls wheels/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps wheels/*.whl \
    || echo "gpu_check: some wheels in wheels/ did not install"
fi
# The repository's own packages (tunedeck, trainer) import from the checkout.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# Each speed option computes what the plain path computes (tests/gpu needs no conftest,
# so no database packages).
if "$PYTHON" -c "import pytest" 2>/dev/null; then
  "$PYTHON" -m pytest -q -p no:cacheprovider --noconftest tests/gpu \
    || echo "gpu_check: tests/gpu failed"
fi
"$PYTHON" bench/gpu_throughput.py --budget-seconds "${THROUGHPUT_BUDGET_SECONDS:-330}"
"$PYTHON" bench/gpu_memory_plan.py --seq-lens 2048 \
  --budget-seconds "${MEMORY_PLAN_BUDGET_SECONDS:-90}"
