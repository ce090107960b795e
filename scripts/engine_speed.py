"""The engines' speed as a user sees it (docs/benchmarks.md, "The engines"): ``azserve uci``,
``azserve usi`` and ``azserve gtp`` run as processes, driven over their pipes, one JSON line out.

    python scripts/engine_speed.py make CONFIG DIR   # random weights at CONFIG's net size
    python scripts/engine_speed.py uci CHECKPOINT [--nodes 200] [--repeat 5]
    python scripts/engine_speed.py usi CHECKPOINT [--nodes 200] [--repeat 5]
    python scripts/engine_speed.py gtp CHECKPOINT [--sims 200] [--repeat 5]

uci (usi the same, on shogi): seconds to ``uciok`` and to ``readyok`` (the net loaded), then
``go nodes N`` from ``repeat`` different positions (``ucinewgame`` before each, so no tree is
reused): the wall time from ``go`` to ``bestmove`` and the nodes per second that gives. gtp: seconds to the first
answer (``protocol_version``), then ``genmove`` at ``--sims N`` from ``repeat`` fresh boards.
Extra arguments after ``--`` go to the command (``-- --set mcts.core=python``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import IO

OPENINGS = ["", "e2e4", "d2d4", "g1f3", "c2c4", "e2e4 c7c5", "d2d4 g8f6", "e2e4 e7e5"]
SHOGI_OPENINGS = ["", "7g7f", "2g2f", "7g7f 3c3d", "2g2f 8c8d", "7g7f 8c8d", "6i7h", "5g5f"]
GO_OPENINGS = ["", "E5", "C3", "G7", "D4"]


def until(out: IO[str], prefix: str) -> list[str]:
    """Lines read up to and including the first that starts with ``prefix``."""
    lines = []
    for line in out:
        lines.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return lines
    raise SystemExit(f"the engine ended before {prefix!r}: {lines[-5:]}")


def uci(args: argparse.Namespace) -> dict[str, object]:
    """``azserve uci`` or, with ``args.engine == "usi"``, ``azserve usi``: the same session."""
    word = args.engine
    openings = SHOGI_OPENINGS if word == "usi" else OPENINGS
    t0 = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "azserve.cli.main", word, "--checkpoint", args.checkpoint, *args.extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
    )  # fmt: skip
    assert p.stdin is not None and p.stdout is not None

    def send(line: str) -> None:
        p.stdin.write(line + "\n")  # type: ignore[union-attr]
        p.stdin.flush()  # type: ignore[union-attr]

    send(word)
    until(p.stdout, f"{word}ok")
    uciok = time.monotonic() - t0
    send("isready")
    until(p.stdout, "readyok")
    readyok = time.monotonic() - t0
    runs = []
    for i in range(args.repeat):
        moves = openings[i % len(openings)]
        send(f"{word}newgame")
        send("position startpos" + (f" moves {moves}" if moves else ""))
        send("isready")
        until(p.stdout, "readyok")
        t = time.monotonic()
        send(f"go nodes {args.nodes}")
        lines = until(p.stdout, "bestmove")
        wall = time.monotonic() - t
        info = [x for x in lines if x.startswith("info depth")][-1].split()
        runs.append({"wall_s": round(wall, 3), "nps": round(args.nodes / wall, 1),
                     "engine_nps": int(info[info.index("nps") + 1])})  # fmt: skip
    send("quit")
    p.wait(timeout=60)
    nps = [r["nps"] for r in runs]
    return {"command": word, "nodes": args.nodes, f"{word}ok_s": round(uciok, 2),
            "readyok_s": round(readyok, 2), "median_nps": statistics.median(nps), "runs": runs}  # fmt: skip


def gtp(args: argparse.Namespace) -> dict[str, object]:
    t0 = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "azserve.cli.main", "gtp", "--checkpoint", args.checkpoint,
         "--sims", str(args.sims), *args.extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
    )  # fmt: skip
    assert p.stdin is not None and p.stdout is not None

    def ask(line: str) -> str:
        p.stdin.write(line + "\n")  # type: ignore[union-attr]
        p.stdin.flush()  # type: ignore[union-attr]
        reply = until(p.stdout, "")  # type: ignore[arg-type]
        while reply[-1] != "":
            reply += until(p.stdout, "")  # type: ignore[arg-type]
        return "\n".join(reply)

    ask("protocol_version")
    first = time.monotonic() - t0
    ask("genmove b")  # the first search loads the net: not timed
    runs = []
    for i in range(args.repeat):
        ask("clear_board")
        if GO_OPENINGS[i % len(GO_OPENINGS)]:
            ask(f"play b {GO_OPENINGS[i % len(GO_OPENINGS)]}")
        t = time.monotonic()
        move = ask("genmove w").split()[1]
        runs.append({"genmove_s": round(time.monotonic() - t, 3), "move": move})
    ask("quit")
    p.wait(timeout=60)
    secs = [r["genmove_s"] for r in runs]
    return {"command": "gtp", "sims": args.sims, "first_reply_s": round(first, 2),
            "median_genmove_s": statistics.median(secs),
            "sims_per_s": round(args.sims / statistics.median(secs), 1), "runs": runs}  # fmt: skip


def make(args: argparse.Namespace) -> dict[str, object]:
    """A learner checkpoint of ``args.checkpoint`` (a config: chess, go9) with random weights,
    saved as tests/test_uci.py saves one, in ``args.extra[0]``."""
    from dataclasses import replace
    from pathlib import Path

    from azserve.config.presets import resolve_config
    from azserve.config.schema import load_config, to_dict
    from learner.checkpoint import save_checkpoint
    from learner.trainer import Trainer

    cfg = load_config(resolve_config(args.checkpoint), [])
    trainer = Trainer(replace(cfg.net, seed=5), replace(cfg.trainer, device="cpu"))
    out = Path(args.extra[0]) / "checkpoints"
    path = save_checkpoint(out, 40, 5, trainer.state_dict(), to_dict(cfg))
    return {"command": "make", "checkpoint": str(path)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=["make", "uci", "usi", "gtp"])
    ap.add_argument("checkpoint", help="make: a config name")
    ap.add_argument("--nodes", type=int, default=200, help="uci: go nodes N")
    ap.add_argument("--sims", type=int, default=200, help="gtp: --sims N")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("extra", nargs="*", help="after --: more arguments for the command")
    args = ap.parse_args()
    print(json.dumps({"make": make, "uci": uci, "usi": uci, "gtp": gtp}[args.engine](args)))


if __name__ == "__main__":
    main()
