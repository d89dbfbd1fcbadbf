#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one call: throughput and MFU of the real trainer
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
if ls wheels/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps wheels/*.whl || echo "gpu_check: some wheels did not install"
fi
# The repository's own packages (tunedeck, trainer) import from the checkout.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# The speed options compute what the plain path computes (tests/gpu), where pytest is here.
if "$PYTHON" -c "import pytest" 2>/dev/null; then
  "$PYTHON" -m pytest -q -p no:cacheprovider --noconftest tests/gpu || echo "gpu_check: tests/gpu failed"
fi
"$PYTHON" bench/gpu_throughput.py --budget-seconds "${THROUGHPUT_BUDGET_SECONDS:-330}"
"$PYTHON" bench/gpu_memory_plan.py --seq-lens 2048 \
  --budget-seconds "${MEMORY_PLAN_BUDGET_SECONDS:-90}"
