#!/usr/bin/env bash
# azserve's GPU benches on a CUDA machine of your own, one with a package index: the venv as
# `make venv` builds it, then the lent machine's run (scripts/device/run: serve, selfplay, the
# learner's step and a 3-minute go9 run, each under its own timeout), its files into OUT_DIR.
#
#   scripts/gpu_bench.sh [OUT_DIR]        (default runs/gpu-bench; runs/ is git-ignored)
#
# Environment: PY (python for the venv, default python3), VENV (default .venv, as the Makefile),
# BUDGET_S (default 540: the benches' total, the venv's build not counted). On a machine with no
# index (the lent GPU machine), use scripts/device/bundle here and scripts/device/run there
# instead: docs/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/gpu-bench}
VENV=${VENV:-.venv}
make venv VENV="$VENV" PY="${PY:-python3}" || { echo "gpu_bench: make venv failed" >&2; exit 1; }
DEVICE_PYTHON="$VENV/bin/python" exec scripts/device/run --budget "${BUDGET_S:-540}" "$OUT"
