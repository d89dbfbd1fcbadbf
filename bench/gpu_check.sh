#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one call that fits a short GPU window (under 8
# minutes on one H200), the most telling first:
#   1. bench/gpu_e2e.py, where it exists: the worker's own path on the GPU (E2E_SECONDS, 120);
#   2. tests/gpu, where pytest is installed: each speed option computes what the plain path
#      computes (GPU_TESTS_SECONDS, 60; pytest is interrupted there and still says how far
#      it got);
#   3. bench/gpu_throughput.py on the cells of bench/gpu_check_cells.txt, in that order
#      (issue 28's measured rows, then the full 8B), a cell the plan says does not fit run
#      anyway beside the plan's figure; they get what is left of GPU_CHECK_SECONDS (450)
#      once the memory plan's share is set aside (THROUGHPUT_BUDGET_SECONDS overrides);
#   4. bench/gpu_memory_plan.py on the 1B full fine-tune with activation checkpointing, seq
#      2048, FSDP first (its plan was 15% short) then ZeRO-2 (MEMORY_PLAN_BUDGET_SECONDS, 45).
# Skips (exit 0) where no GPU answers. Everything it prints also goes into a dated markdown
# record, RESULTS_DIR/<YYYY-MM-DD>-<gpu>.md (RESULTS_DIR: bench/results, relative to the
# repository), with the commit (TUNEDECK_COMMIT names it where the copy has no .git), the
# device, the packages' versions and the tables; commit that file.
# A longer run: GPU_CHECK_SECONDS=1200 bench/gpu_check.sh; other cells first:
# GPU_CHECK_CELLS=my-cells.txt bench/gpu_check.sh
#
# On a machine without internet, carry what its image lacks as wheels in ./wheels, e.g.
#   pip download --no-deps -d wheels deepspeed==0.19.8 liger-kernel==0.8.5 pydantic \
#     pydantic-core annotated-types typing-inspection
# (Liger's triton comes with CUDA torch); every wheel there is installed, none fetched. A
# "liger" cell without liger-kernel fails naming it, and the other cells run.
set -euo pipefail
cd "$(dirname "$0")/.."
export GRADIO_ANALYTICS_ENABLED=False
# The GPU hosts have no internet: nothing may wait on the Hub.
export HF_HUB_OFFLINE=1
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here; skipped"
  exit 0
fi

# WHEELS_DIR: where the carried wheels are (./wheels); each one there is installed.
WHEELS_DIR="${WHEELS_DIR:-wheels}"
if ls "$WHEELS_DIR"/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps "$WHEELS_DIR"/*.whl \
    || echo "gpu_check: some wheels in $WHEELS_DIR did not install"
fi
# The repository's own packages (tunedeck, trainer, worker) import from the checkout.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

TOTAL_SECONDS="${GPU_CHECK_SECONDS:-450}"
E2E_SECONDS="${E2E_SECONDS:-120}"
GPU_TESTS_SECONDS="${GPU_TESTS_SECONDS:-60}"
MEMORY_PLAN_BUDGET_SECONDS="${MEMORY_PLAN_BUDGET_SECONDS:-45}"
# The memory plan's time beyond its budget: building its 1B model, and a cell's overrun.
MEMORY_PLAN_OVERHEAD_SECONDS=25
CELLS_FILE="${GPU_CHECK_CELLS:-bench/gpu_check_cells.txt}"

device_line="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  | head -n 1)"
record="$("$PYTHON" bench/gpu_record.py new --results-dir "${RESULTS_DIR:-bench/results}" \
  --device-line "$device_line")"
log="$(mktemp)"
tests_log="$(mktemp)"
trap 'rm -f "$log" "$tests_log"' EXIT

run_e2e() {
  [ -f bench/gpu_e2e.py ] || return 0
  timeout --kill-after=15 "$E2E_SECONDS" "$PYTHON" bench/gpu_e2e.py --markdown "$record" \
    || echo "gpu_check: bench/gpu_e2e.py failed or ran past ${E2E_SECONDS} s (exit $?)"
}

run_gpu_tests() {
  # tests/gpu needs no conftest, so no database packages.
  if ! "$PYTHON" -c "import pytest" 2>/dev/null; then
    echo "gpu_check: pytest is not installed; tests/gpu skipped"
    return 0
  fi
  set +e
  # SIGINT, so that pytest still prints its summary and slowest tests at the budget.
  timeout --signal=INT --kill-after=15 "$GPU_TESTS_SECONDS" \
    "$PYTHON" -m pytest -q -p no:cacheprovider --noconftest --durations=10 tests/gpu 2>&1 \
    | tee "$tests_log"
  local code="${PIPESTATUS[0]}"
  set -e
  [ "$code" = 0 ] || echo "gpu_check: tests/gpu failed or ran past ${GPU_TESTS_SECONDS} s (exit $code)"
  "$PYTHON" bench/gpu_record.py tests "$record" --log "$tests_log" --exit-code "$code"
}

run_throughput() {
  local left=$(( TOTAL_SECONDS - SECONDS - MEMORY_PLAN_BUDGET_SECONDS - MEMORY_PLAN_OVERHEAD_SECONDS ))
  local budget="${THROUGHPUT_BUDGET_SECONDS:-$left}"
  echo "gpu_check: ${SECONDS} s in; the throughput cells get ${budget} s"
  "$PYTHON" bench/gpu_throughput.py --cells-file "$CELLS_FILE" --run-unplanned \
    --budget-seconds "$budget" --markdown "$record" \
    || echo "gpu_check: bench/gpu_throughput.py failed (exit $?)"
}

run_memory_plan() {
  echo "gpu_check: ${SECONDS} s in; the memory plan gets ${MEMORY_PLAN_BUDGET_SECONDS} s"
  "$PYTHON" bench/gpu_memory_plan.py --seq-lens 2048 --methods full --backends fsdp,zero2 \
    --checkpointing on \
    --budget-seconds "$MEMORY_PLAN_BUDGET_SECONDS" --markdown "$record" \
    || echo "gpu_check: bench/gpu_memory_plan.py failed (exit $?)"
}

run_checks() {
  echo "$device_line"
  run_e2e
  run_gpu_tests
  run_throughput
  run_memory_plan
  echo "gpu_check: done in ${SECONDS} s"
}

run_checks 2>&1 | tee "$log"
"$PYTHON" bench/gpu_record.py log "$record" "$log"
echo "gpu_check: the record is $record (commit it)"
