#!/usr/bin/env bash
# The actor side's figures (docs/benchmarks.md, "The actor side at full load"), one run each,
# back to back, on Connect Four's default config; JSON per run in OUT, a table at the end.
#
#   scripts/actor_figures.sh [OUT=runs/actor-figures] [SECONDS=20]
#
# Run it on a quiet machine: the bench's rates are per actor CPU-second, but the real-server
# runs also depend on what the server gets.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/actor-figures}
SECONDS_EACH=${2:-20}
BIN=${BIN:-.venv/bin}
CONFIG=configs/connect4.toml
mkdir -p "$OUT"

bench() {  # NAME, then --set overrides
  local name=$1
  shift
  echo "== $name $*" >&2
  "$BIN/azserve" bench selfplay --config "$CONFIG" --duration "$SECONDS_EACH" \
    "$@" --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1 || {
    echo "$name failed: $OUT/$name.log" >&2
    tail -5 "$OUT/$name.log" >&2
  }
}

"$BIN/python" -m azserve.perf.mcts --seconds 30 --simulations 800 --json "$OUT/mcts.json" \
  >"$OUT/mcts.log" 2>&1
"$BIN/python" -m azserve.perf.pool --rounds 3 --per-round 1000 --json "$OUT/pool-alone.json" \
  >"$OUT/pool-alone.log" 2>&1
# With the actors' cache (64 MB, the default): the compiled store against the Python one.
"$BIN/python" -m azserve.perf.pool --rounds 3 --per-round 1000 --cache-mb 64 \
  --variants pool,pool-pystore,leaf --json "$OUT/pool-alone-cache.json" \
  >"$OUT/pool-alone-cache.log" 2>&1
SYN=(--set backend.kind=synthetic --set actors.cache_mb=0)
bench syn256-leaf "${SYN[@]}" --set actors.search_pool=false
bench syn256-pool "${SYN[@]}" --set actors.search_pool=true
bench syn2000-leaf "${SYN[@]}" --set actors.games=2000 --set actors.search_pool=false
bench syn2000-pool "${SYN[@]}" --set actors.games=2000 --set actors.search_pool=true
bench real-leaf --set actors.search_pool=false
bench real-pool --set actors.search_pool=true
bench real-pool-cache0 --set actors.search_pool=true --set actors.cache_mb=0
bench real-servercache --set actors.cache_mb=0 --set server.cache_mb=64

"$BIN/python" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
m = json.loads((out / "mcts.json").read_text())
print("zero-cost search, simulations per CPU-s:",
      {k: m[k]["simulations_per_s"] for k in m if isinstance(m[k], dict) and "simulations_per_s" in m[k]})
cols = ("actor_simulations_per_cpu_s", "simulations_per_s", "positions_per_s", "evaluations_per_s",
        "mean_batch", "inference_busy_fraction")
print("| run | " + " | ".join(cols) + " | lag mean/max ms | actor cores | cache hit | server cache hit |")
print("|---" * (len(cols) + 5) + "|")
p = json.loads((out / "pool-alone.json").read_text())
print("the actor side alone (bench_pool), simulations per CPU-s:",
      {k: (p[k]["simulations_per_cpu_s"], p[k]["rows_per_evaluation"]) for k in ("pool", "leaf")})
p = json.loads((out / "pool-alone-cache.json").read_text())
print("the same with the cache (64 MB), simulations per CPU-s and hit rate:",
      {k: (p[k]["simulations_per_cpu_s"], p[k]["cache_hit_rate"])
       for k in ("pool", "pool-pystore", "leaf")})
for f in sorted(out.glob("*.json")):
    if f.name in ("mcts.json", "pool-alone.json", "pool-alone-cache.json"):
        continue
    r = json.loads(f.read_text())
    lag = r.get("event_loop_lag_ms", {})
    cache = (r.get("cache") or {}).get("hit_rate")
    scache = (r.get("server_cache") or {}).get("hit_rate")
    print(f"| {f.stem} | " + " | ".join(str(r.get(c)) for c in cols)
          + f" | {lag.get('mean')}/{lag.get('max')} | {r.get('cpu_cores_used', {}).get('actors')}"
          + f" | {cache} | {scache} |")
EOF
