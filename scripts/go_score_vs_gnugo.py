"""How often our dead-stone scoring (``actors.games.go.status``, behind GTP's ``final_score``)
agrees with GnuGo's own on finished games: GnuGo plays both sides of a 9x9 game (after four
random opening moves, seeded) under area rules without --capture-all-dead, so dead stones stay
on the board when both pass; then both score it. Run (docs/go.md):

    .venv/bin/python scripts/go_score_vs_gnugo.py --games 20 --level 1

Prints one line per game (GnuGo's score and dead stones, ours) and the agreement count.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess

from actors.games.go import status as go_status
from actors.games.go.rules import Go


def send(proc: subprocess.Popen[str], command: str) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    lines = []
    while True:
        line = proc.stdout.readline()
        if not line.strip() and lines:
            break
        if line.strip():
            lines.append(line.strip())
    return " | ".join(lines)[1:].strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=20)
    ap.add_argument("--level", type=int, default=1)
    args = ap.parse_args()
    gnugo = shutil.which("gnugo") or shutil.which("gnugo", path="/usr/games")
    if gnugo is None:
        raise SystemExit("gnugo not found (Debian: apt-get install gnugo)")
    go = Go(9)
    agree = finished = 0
    for seed in range(args.games):
        argv = [gnugo, "--mode", "gtp", "--level", str(args.level), "--chinese-rules",
                "--positional-superko", "--seed", str(seed)]  # fmt: skip
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        send(proc, "boardsize 9")
        send(proc, "komi 7.5")
        s, rng = go.initial_state(), random.Random(seed)
        while not go.is_terminal(s):
            color = "bw"[s.color]
            if s.ply < 4:
                move = go.format_move(rng.choice(go.legal_actions(s)[:-1]))
                send(proc, f"play {color} {move}")
            else:
                move = send(proc, f"genmove {color}")
            if move.lower() == "resign":
                break
            s = go.apply(s, go.parse_move(move))
        if not go.is_terminal(s):
            print(f"game {seed}: resigned, not scored")
            proc.kill()
            continue
        theirs = send(proc, "final_score")
        their_dead = send(proc, "final_status_list dead")
        proc.kill()
        proc.wait()
        owned = go_status.ownership(9, s.board)
        statuses = go_status.chain_statuses(9, s.board, owned)
        ours = go_status.format_score(go_status.dead_aware_score(go, s.board, statuses))
        our_dead = " | ".join(
            " ".join(go.format_move(p) for p in c.cells) for c in statuses if c.status == "dead"
        )
        finished += 1
        agree += ours == theirs
        print(f"game {seed}: gnugo {theirs} (dead: {their_dead or '-'}), ours {ours} "
              f"(dead: {our_dead or '-'}){'' if ours == theirs else '  DIFFERENT'}")  # fmt: skip
    print(f"level {args.level}: {agree} of {finished} finished games scored alike")


if __name__ == "__main__":
    main()
