#!/usr/bin/env bash
# azserve's benches on a CUDA machine: serve (with peers), selfplay and swap, JSON into OUT_DIR.
#
#   scripts/gpu_bench.sh [OUT_DIR]        (default runs/gpu-bench; runs/ is git-ignored)
#
# Environment: CONFIG (default configs/connect4.toml), PY (python for the venv, default
# python3), VENV (default .venv, as the Makefile), BUDGET_S (default 470: the benches' total).
#
# The venv is built exactly as `make venv` builds it (torch pinned first, then the project with
# its test extra), plus the optional `bench` extra (Ray Serve); a peer whose package is missing
# is reported as skipped. Building the venv is not part of the time budget (it downloads torch);
# the benches themselves stay under BUDGET_S seconds (8 minutes by default), each cut by its own
# timeout so that one slow bench cannot eat the others' time.
#
# GPU settings: bf16, Triton-sized batches (1024), torch.compile (inductor) of the folded net
# with one CUDA graph per batch bucket, pinned host buffers and host-to-device copies on their
# own stream, overlapped with the previous batch's compute (azserve/backends/torch_backend.py).
# Every bucket compiles once before the server binds; later weight versions reuse the graphs
# (they only copy their tensors), so the swap bench runs compiled too. If a compiled run fails
# (no compiler for inductor's kernels, say), the bench is rerun eager and its log is kept.
# Nothing here is needed by the tests.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-runs/gpu-bench}
CONFIG=${CONFIG:-configs/connect4.toml}
VENV=${VENV:-.venv}
BUDGET_S=${BUDGET_S:-470}
mkdir -p "$OUT"

# --- venv, the Makefile's way ------------------------------------------------------------------
make venv VENV="$VENV" PY="${PY:-python3}" || { echo "gpu_bench: make venv failed" >&2; exit 1; }
"$VENV/bin/pip" install -q -e '.[bench]' \
    || echo "gpu_bench: the bench extra (ray[serve]) did not install: ray_serve will be skipped" >&2
AZ="$VENV/bin/azserve"
"$VENV/bin/python" - <<'EOF' || { echo "gpu_bench: torch sees no CUDA device" >&2; exit 1; }
import sys, torch
sys.exit(0 if torch.cuda.is_available() else 1)
EOF
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  echo "cpus: $(nproc)"; "$VENV/bin/python" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

# --- settings ----------------------------------------------------------------------------------
CPUS=$(nproc)
LOADERS=$(( CPUS / 4 > 1 ? CPUS / 4 : 1 ))   # load processes: a quarter of the cores
ACTORS=$(( CPUS / 2 > 1 ? CPUS / 2 : 1 ))    # actor processes: half of the cores
GPU=(--set backend.device=cuda --set backend.dtype=bfloat16
     --set server.max_batch_size=1024 --set client.max_rows=1024 --set server.max_queue_delay_us=1000)
COMPILED=(--set backend.torch.compile=inductor --set backend.torch.cuda_graphs=true
          --set "backend.torch.batch_buckets=[64,128,256,512,1024]")
EAGER=(--set backend.torch.compile=none)
START=$SECONDS
STATUS=0

# run NAME TIMEOUT_S COMPILE(yes|no) ARGS...: one bench, compiled first when asked, eager on failure.
run() {
    local name=$1 limit=$2 compile=$3; shift 3
    local left=$(( BUDGET_S - (SECONDS - START) ))
    (( limit > left )) && limit=$left
    if (( limit < 30 )); then
        echo "{\"skipped\": \"no time left in the ${BUDGET_S} s budget\"}" > "$OUT/$name.json"
        STATUS=1; return
    fi
    local t0=$SECONDS
    echo "== $name (limit ${limit} s)"
    if [[ $compile == yes ]]; then
        timeout -s INT -k 30 "$limit" "$AZ" bench "$name" --config "$CONFIG" "${GPU[@]}" "${COMPILED[@]}" "$@" \
            --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1 && return
        echo "   compiled run failed (see $OUT/$name.log); rerunning eager"
        mv "$OUT/$name.log" "$OUT/$name.compiled.log"
        limit=$(( limit - (SECONDS - t0) ))
        (( limit < 30 )) && { STATUS=1; return; }
    fi
    timeout -s INT -k 30 "$limit" "$AZ" bench "$name" --config "$CONFIG" "${GPU[@]}" "${EAGER[@]}" "$@" \
        --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1 \
        || { echo "   $name failed (see $OUT/$name.log)"; STATUS=1; }
}

# --- the benches -------------------------------------------------------------------------------
run serve 250 yes --duration 10 --processes "$LOADERS" --coroutines 2048
run selfplay 130 yes --duration 20 --set actors.processes="$ACTORS" --set actors.games=1024
run swap 90 yes --duration 5 --swaps 10 --processes "$LOADERS" --coroutines 2048

echo "== done in $(( SECONDS - START )) s; JSON in $OUT"
for f in "$OUT"/serve.json "$OUT"/selfplay.json "$OUT"/swap.json; do
    [[ -f $f ]] && "$VENV/bin/python" - "$f" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
keys = ("positions_per_s", "model_positions_per_s", "efficiency", "latency_ms", "games_per_s",
        "inference_busy_fraction", "bottleneck", "swap_ms", "latency_ms_steady", "latency_ms_during_swap")
print(sys.argv[1], {k: r[k] for k in keys if k in r} or r)
EOF
done
exit $STATUS
