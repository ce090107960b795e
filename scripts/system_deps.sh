#!/usr/bin/env bash
# System packages some tests use: Debian's Slurm (controller, node daemon, srun) and munge for
# the cluster tests, GnuGo for the Go match test, Stockfish for chess's, Fairy-Stockfish and
# GNU Shogi for shogi's, Chromium for azserve web's page in a browser, nftables for the chaos
# fleet's network strikes. Installed only where it can be (root with
# apt-get) and only when missing; elsewhere those tests skip and say why. `make test` runs
# this first.
set -euo pipefail
missing=()
command -v srun >/dev/null && command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
{ command -v gnugo || test -x /usr/games/gnugo; } >/dev/null || missing+=(gnugo)  # Debian: /usr/games
{ command -v stockfish || test -x /usr/games/stockfish; } >/dev/null || missing+=(stockfish)  # Debian: /usr/games
{ command -v fairy-stockfish || test -x /usr/games/fairy-stockfish; } >/dev/null || missing+=(fairy-stockfish)
{ command -v gnushogi || test -x /usr/games/gnushogi; } >/dev/null || missing+=(gnushogi)
command -v chromium >/dev/null || missing+=(chromium)
command -v nft >/dev/null || missing+=(nftables)  # bench chaos: partitions and lossy links
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "system_deps: not root or no apt-get: ${missing[*]} not installed, their tests will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
