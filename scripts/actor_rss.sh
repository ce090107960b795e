#!/usr/bin/env bash
# Resident memory of one `azserve actors` process: start a server and an actor process on
# private ipc endpoints (tic-tac-toe, null sink), read the actor's VmRSS after SECONDS of
# self-play, and whether torch is mapped into it. Usage: scripts/actor_rss.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-15}
PY=${PY:-.venv/bin/python}
D=$(mktemp -d)
trap 'kill $A $S 2>/dev/null || true; rm -rf "$D"' EXIT
SETS=(--set "server.bind=ipc://$D/s" --set actors.sink=null --set actors.status_interval_s=0
      --set server.status_interval_s=0)
$PY -m azserve.cli.main serve --config configs/tictactoe.toml "${SETS[@]}" >"$D/serve.log" 2>&1 &
S=$!
$PY -m azserve.cli.main actors --config configs/tictactoe.toml "${SETS[@]}" >"$D/actors.log" 2>&1 &
A=$!
sleep "$SECONDS_TO_RUN"
RSS_KB=$(awk '/VmRSS/{print $2}' "/proc/$A/status")
TORCH=$(grep -c torch "/proc/$A/maps" || true)
echo "{\"actor_rss_mib\": $((RSS_KB / 1024)), \"torch_mappings\": $TORCH}"
