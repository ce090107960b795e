#!/usr/bin/env bash
# The front-end libraries `azserve web` ships (azserve/web/static/vendor/): fetched from the npm
# registry into a temporary directory with the machine's npm, and only their built, minified
# files and licences copied in. Nothing is fetched when the server runs; rerun this script only
# to change a version (then commit what it copied).
#
#   chessground: the board Lichess uses (GPL-3.0-or-later), for chess games;
#   uPlot: small, fast time-series charts (MIT), for the losses and the rating curves.
set -euo pipefail
CHESSGROUND=9.2.1
UPLOT=1.6.32

repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$repo/azserve/web/static/vendor"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cd "$tmp"
npm init -y >/dev/null
# --ignore-scripts: neither package needs an install script, and none should run here.
npm install --no-audit --no-fund --ignore-scripts --silent \
  "chessground@$CHESSGROUND" "uplot@$UPLOT"

rm -rf "$out"
mkdir -p "$out/chessground" "$out/uplot"
cg=node_modules/chessground
cp "$cg/dist/chessground.min.js" "$cg/LICENSE" "$out/chessground/"
# The board's layout, the brown squares and the cburnett pieces (SVG embedded in the CSS).
cp "$cg/assets/chessground.base.css" "$cg/assets/chessground.brown.css" \
  "$cg/assets/chessground.cburnett.css" "$out/chessground/"
up=node_modules/uplot
cp "$up/dist/uPlot.iife.min.js" "$up/dist/uPlot.min.css" "$up/LICENSE" "$out/uplot/"
cat >"$out/VERSIONS" <<EOF
chessground $CHESSGROUND GPL-3.0-or-later https://github.com/lichess-org/chessground
uplot $UPLOT MIT https://github.com/leeoniya/uPlot
EOF
du -sh "$out"
