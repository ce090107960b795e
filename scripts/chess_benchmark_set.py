"""Make the chess move benchmark's positions, each legal move scored by Stockfish, into the
file the package ships (actors/games/chess/benchmark.jsonl.gz; the benchmark: ``MoveQuality``
in actors/games/chess/benchmark.py, docs/games.md "The Stockfish move benchmark").

Run (24 minutes on a busy 2-core EPYC: 5 of games, 19 of labels at depth 9; it needs python-chess, in the
test extra, and Stockfish, Debian's 15.1, which scripts/system_deps.sh installs)::

    .venv/bin/python scripts/chess_benchmark_set.py [--depth 9] [--seed 0] [--out FILE]
    .venv/bin/python scripts/chess_benchmark_set.py --baselines   # random and greedy's scores

Three stages, every engine call on one thread after ``ucinewgame`` (hash and histories
cleared, so each search depends on its position alone and the whole file on the seed and the
Stockfish version):

1. **Games**: ``--games`` semi-random games from the start. Each move is a draw by the seeded
   generator among Stockfish's 4 best at depth 5, weighted ``exp((score - best) / T)`` (T 60
   centipawns for the first 12 plies, then 30), or with probability 5% (2% in the first 12
   plies) a uniformly random legal move: a blunder, which leaves pieces hanging and mates
   on the board as weak players' games do. Games end at their end or at 200 plies.
2. **Candidates** from those games, by set: ``mate`` (the side to move mates in 1, 2 or 3 by
   that search), ``hanging`` (the best move takes a knight or more that is undefended or
   attacked by a cheaper piece, and every move that does not take it, of which there is one
   at least, is at least 200 centipawns worse), and the rest by phase, where that search's
   score is within 500 centipawns: ``opening`` (ply <= 24), ``endgame`` (pieces other than
   kings and pawns worth 20 or less together, N3 B3 R5 Q9), ``middlegame`` (the others). No
   position that stood before in its game, none with a halfmove clock over 60, none with one
   legal move, none twice; at most ``PER_GAME`` from one game per set (one per game and mate
   depth for ``mate``).
3. **Labels**: every legal move of each candidate at ``--depth`` (MultiPV = the number of legal
   moves), kept when the labels confirm its set (a ``mate`` position mates in 1-3 at that
   depth, a ``hanging`` one still wins its 200 centipawns, a phase position has no mate and a
   best score within 600), in the seed's order until the set has its target (``mate``: 100 of
   each depth where the games gave them) or ``MAX_LABELLED`` times it were labelled.

The file: gzip (mtime 0: the same run writes the same bytes) of JSON lines. The first is the
header (``format``, the Stockfish version, depth, seed, the sets' sizes); then one position a
line: ``fen``, ``set``, ``before`` (the position up to 7 plies earlier and the UCI moves from it,
so that a net that reads earlier positions gets them) and ``scores``, each legal move in UCI to
its score for the side to move after a search of ``depth``: centipawns (int) or ``"#N"``
(it mates in N moves) / ``"#-N"`` (it is mated in N), best first.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import chess
import chess.engine
import chess.polyglot
import numpy as np

OUT = Path(__file__).resolve().parents[1] / "actors" / "games" / "chess" / "benchmark.jsonl.gz"
FORMAT = "azserve-chess-benchmark/1"
TARGETS = {
    "opening": 500,
    "middlegame": 700,
    "endgame": 500,
    "mate": 300,
    "hanging": 300,
}
"""Positions per set in the file."""
MATE_PER_DEPTH = 100
"""Of the ``mate`` set: this many mates in 1, in 2 and in 3 (fewer where the games gave fewer,
the rest from the others)."""
MAX_LABELLED = 2.0
"""Candidates labelled at most per position wanted in a set (labels at depth reject some)."""
PER_GAME = 5
"""Positions one game gives a set at most (more games, less alike positions)."""
PLAY_DEPTH, PLAY_LINES, MAX_PLIES, HISTORY = 5, 4, 200, 7
VALUES = {chess.PAWN: 1, chess.KNIGHT: 3, chess.BISHOP: 3, chess.ROOK: 5, chess.QUEEN: 9}
CLIP = 1000
"""Centipawns at which a score is clipped (a mate counts as this): the benchmark's scale."""


def value_of(score: chess.engine.Score) -> int:
    """A score from the side to move's view, clipped to [-CLIP, CLIP] (a mate at the end)."""
    if score.is_mate():
        return CLIP if (score.mate() or 0) > 0 else -CLIP
    return max(-CLIP, min(CLIP, int(score.score() or 0)))


def label_text(score: chess.engine.Score) -> int | str:
    """A score as the file writes it: centipawns, or ``#N`` / ``#-N``."""
    if score.is_mate():
        return f"#{score.mate()}"
    return int(score.score() or 0)


def search(
    engine: chess.engine.SimpleEngine, board: chess.Board, depth: int, lines: int
) -> list[tuple[chess.Move, chess.engine.Score]]:
    """Stockfish's ``lines`` best moves at ``depth``, best first, each with its score for the
    side to move; on a cleared hash, from the FEN alone (no earlier moves)."""
    fresh = chess.Board(board.fen())
    infos = engine.analyse(fresh, chess.engine.Limit(depth=depth), multipv=lines, game=object())
    return [(i["pv"][0], i["score"].relative) for i in infos if i.get("pv")]


def hanging_targets(board: chess.Board) -> set[int]:
    """Squares of the opponent's knights, bishops, rooks and queens the side to move can take
    that are undefended or attacked by a cheaper piece (en prise)."""
    out = set()
    for m in board.legal_moves:
        victim = board.piece_at(m.to_square)
        if victim is None or VALUES.get(victim.piece_type, 0) < 3:
            continue
        attacker = board.piece_at(m.from_square)
        assert attacker is not None
        cheaper = VALUES.get(attacker.piece_type, 0) < VALUES[victim.piece_type]
        if cheaper or not board.is_attacked_by(not board.turn, m.to_square):
            out.add(m.to_square)
    return out


def takes_hanging(
    board: chess.Board, lines: list[tuple[chess.Move, int]], margin: int = 200
) -> bool:
    """Whether the best of ``lines`` (moves and clipped values, best first) takes a hanging
    piece and every move that does not capture on that square is ``margin`` worse, with one
    such move at least (a choice, not a forced recapture); when ``lines`` are not all the
    legal moves, the last stands for those left out."""
    targets = hanging_targets(board)
    best, top = lines[0]
    if best.to_square not in targets or abs(top) >= CLIP:
        return False
    if all(m.to_square == best.to_square for m in board.legal_moves):
        return False
    others = [v for m, v in lines if m.to_square != best.to_square]
    return top - (max(others) if others else lines[-1][1]) >= margin


def phase(board: chess.Board) -> str:
    if board.ply() <= 24:
        return "opening"
    pieces = sum(
        VALUES[p.piece_type]
        for p in board.piece_map().values()
        if p.piece_type not in (chess.PAWN, chess.KING)
    )
    return "endgame" if pieces <= 20 else "middlegame"


def play_games(
    engine: chess.engine.SimpleEngine, rng: np.random.Generator, games: int
) -> list[list[dict]]:
    """The candidates of each game (stage 1 and 2)."""
    out = []
    for g in range(games):
        board, found = chess.Board(), []
        seen: dict[int, int] = {}
        while not board.is_game_over() and board.ply() < MAX_PLIES:
            key = chess.polyglot.zobrist_hash(board)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] >= 3 or board.halfmove_clock >= 100:
                break  # a draw by the rules (threefold, the 50-move rule)
            repeated = seen[key] > 1
            lines = search(engine, board, PLAY_DEPTH, PLAY_LINES)
            scored = [(m, value_of(s)) for m, s in lines]
            if (
                board.ply() >= 6
                and not repeated
                and board.halfmove_clock <= 60
                and board.legal_moves.count() > 1
            ):
                kind = None
                top = lines[0][1]
                if top.is_mate() and 1 <= (top.mate() or 0) <= 3:
                    kind = "mate"
                elif takes_hanging(board, scored):
                    kind = "hanging"
                elif abs(scored[0][1]) <= 500:
                    kind = phase(board)
                if kind is not None:
                    found.append({"game": g, "set": kind, "board": board.copy(), "hint": top})
            early = board.ply() < 12
            if rng.random() < (0.02 if early else 0.05):
                moves = list(board.legal_moves)
                move = moves[int(rng.integers(len(moves)))]
            else:
                t = 60.0 if early else 30.0
                v = np.array([s for _, s in scored], float)
                p = np.exp((v - v.max()) / t)
                move = scored[int(rng.choice(len(scored), p=p / p.sum()))][0]
            board.push(move)
        out.append(found)
        if (g + 1) % 25 == 0:
            print(f"games: {g + 1}/{games}", file=sys.stderr, flush=True)
    return out


def pools(games: list[list[dict]], rng: np.random.Generator) -> dict[str, list[dict]]:
    """Each set's candidates in the order they are labelled: shuffled by the seed, at most
    ``PER_GAME`` per game (``mate``: one per game and mate depth), no position twice."""
    out: dict[str, list[dict]] = {}
    seen: set[str] = set()  # a position reached in several games (an opening) counts once
    for name in TARGETS:
        pool = [c for found in games for c in found if c["set"] == name]
        taken: dict[tuple[int, int], int] = {}
        for i in rng.permutation(len(pool)):
            c = pool[int(i)]
            key = (c["game"], c["hint"].mate() if name == "mate" else 0)
            epd = c["board"].epd()
            if taken.get(key, 0) < (1 if name == "mate" else PER_GAME) and epd not in seen:
                taken[key] = taken.get(key, 0) + 1
                seen.add(epd)
                out.setdefault(name, []).append(c)
    return out


def label(
    engine: chess.engine.SimpleEngine, board: chess.Board, depth: int
) -> list[tuple[chess.Move, chess.engine.Score]]:
    """Every legal move of ``board`` with its score at ``depth``, best first."""
    legal = list(board.legal_moves)
    lines = search(engine, board, depth, len(legal))
    missing = [m for m in legal if m not in {m for m, _ in lines}]
    for m in missing:  # MultiPV left it out (rare): searched alone, at the same depth
        fresh = chess.Board(board.fen())
        info = engine.analyse(fresh, chess.engine.Limit(depth=depth), root_moves=[m], game=object())
        lines.append((m, info["score"].relative))
    lines.sort(key=lambda ms: -_order(ms[1]))
    return lines


def _order(score: chess.engine.Score) -> float:
    """A total order on scores: mates in fewer moves best, being mated sooner worst."""
    if score.is_mate():
        n = score.mate() or 0
        return 1e6 - n if n > 0 else -1e6 - n
    return float(score.score() or 0)


def confirmed(c: dict, lines: list[tuple[chess.Move, chess.engine.Score]]) -> str | None:
    """The set the labels put candidate ``c`` in (``mate-N`` for a mate), or None to drop it."""
    board, top = c["board"], lines[0][1]
    short_mate = top.is_mate() and 1 <= (top.mate() or 0) <= 3
    if c["set"] == "mate":
        return f"mate-{top.mate()}" if short_mate else None
    if short_mate or top.is_mate():
        return None
    if c["set"] == "hanging":
        ok = takes_hanging(board, [(m, value_of(s)) for m, s in lines])
        return "hanging" if ok else None
    return c["set"] if abs(value_of(top)) <= 600 else None


def record(c: dict, name: str, lines: list[tuple[chess.Move, chess.engine.Score]]) -> dict:
    board: chess.Board = c["board"]
    back = min(HISTORY, len(board.move_stack))
    earlier = board.copy()
    moves = [earlier.pop().uci() for _ in range(back)][::-1]
    return {
        "fen": board.fen(),
        "set": name,
        "before": {"fen": earlier.fen(), "moves": moves},
        "scores": {m.uci(): label_text(s) for m, s in lines},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--depth", type=int, default=9, help="Stockfish depth of the labels")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--games", type=int, default=300, help="semi-random games to draw from")
    ap.add_argument("--scale", type=float, default=1.0, help="every set's target times this")
    ap.add_argument("--stockfish", default=None, help="the engine (default: stockfish on PATH)")
    ap.add_argument(
        "--baselines",
        action="store_true",
        help="make nothing: print the scores of uniform random moves and of the one-ply greedy "
        "mover on the set at --out (the scale a net's scores sit on)",
    )
    args = ap.parse_args(argv)
    if args.baselines:
        print(json.dumps(baselines(args.out, args.seed), indent=1))
        return 0
    path = (
        args.stockfish or shutil.which("stockfish") or shutil.which("stockfish", path="/usr/games")
    )
    if path is None:
        ap.error("no stockfish (apt-get install stockfish, or --stockfish PATH)")
    targets = {k: max(1, round(v * args.scale)) for k, v in TARGETS.items()}
    per_depth = max(1, round(MATE_PER_DEPTH * args.scale))
    rng = np.random.default_rng(args.seed)
    engine = chess.engine.SimpleEngine.popen_uci(path)
    try:
        engine.configure({"Threads": 1, "Hash": 16})
        t0 = time.monotonic()
        games = play_games(engine, rng, args.games)
        t1 = time.monotonic()
        counts: dict[str, int] = {}
        for found in games:
            for c in found:
                counts[c["set"]] = counts.get(c["set"], 0) + 1
        print(f"{args.games} games in {t1 - t0:.0f} s; candidates {counts}", file=sys.stderr)
        kept: dict[str, list[dict]] = {}
        labelled = 0
        for name, pool in pools(games, rng).items():
            want = targets[name]
            for c in pool[: math.ceil(MAX_LABELLED * want)]:
                if name == "mate":
                    if all(len(kept.get(f"mate-{n}", [])) >= per_depth for n in (1, 2, 3)):
                        break
                    if len(kept.get(f"mate-{c['hint'].mate()}", [])) >= per_depth:
                        continue  # that depth is full: spend no label on it
                elif len(kept.get(name, [])) >= want:
                    break
                lines = label(engine, c["board"], args.depth)
                labelled += 1
                verdict = confirmed(c, lines)
                if verdict is not None:
                    kept.setdefault(verdict, []).append(record(c, verdict.split("-")[0], lines))
                if labelled % 100 == 0:
                    print(
                        f"labelled {labelled} in {time.monotonic() - t1:.0f} s",
                        file=sys.stderr,
                        flush=True,
                    )
        t2 = time.monotonic()
        version = engine.id.get("name", "stockfish")
    finally:
        engine.quit()
    rows = select(kept, targets, per_depth)
    sizes = {name: sum(r["set"] == name for r in rows) for name in targets}
    mates = {n: len(kept.get(f"mate-{n}", [])) for n in (1, 2, 3)}
    header = {
        "format": FORMAT,
        "stockfish": version,
        "depth": args.depth,
        "multipv": "every legal move",
        "threads": 1,
        "hash_mb": 16,
        "seed": args.seed,
        "games": args.games,
        "positions": len(rows),
        "sets": sizes,
        "python_chess": chess.__version__,
        "script": "scripts/chess_benchmark_set.py",
    }
    write_set(args.out, header, rows)
    print(
        f"{args.out}: {len(rows)} positions {sizes} (mates in 1/2/3 confirmed: {mates}), "
        f"{labelled} labelled, "
        f"{args.out.stat().st_size / 1024:.0f} KiB; games {t1 - t0:.0f} s, "
        f"labels {t2 - t1:.0f} s at depth {args.depth}, {version}",
        file=sys.stderr,
    )
    return 0


def baselines(path: Path, seed: int) -> dict[str, dict]:
    """The benchmark's raw-policy scores of two players that need no net: a uniformly random
    legal move (its expected scores, exactly, from the labels) and ``azserve match``'s greedy
    mover (mate in one, else the most material after its move; ties drawn by ``seed``)."""
    from actors.games.chess import Chess
    from actors.games.chess.benchmark import SETS, read_set, score_moves, state_of
    from azserve.arena.players import make_player

    _, positions = read_set(path)
    expected: dict[str, Any] = {"blunder": {}, "cp_loss": 0.0, "mates_found": 0.0}
    for name in ("overall", *SETS):
        ps = [p for p in positions if name in ("overall", p.set)]
        judged = [[p.judge(m) for m in p.scores] for p in ps]
        expected["blunder"][name] = float(np.mean([np.mean([j[1] for j in js]) for js in judged]))
        if name == "overall":
            expected["cp_loss"] = float(np.mean([np.mean([j[0] for j in js]) for js in judged]))
        if name == "mate":
            expected["mates_found"] = float(np.mean([np.mean([j[2] for j in js]) for js in judged]))
    game = Chess()
    greedy = make_player("greedy", seed)
    greedy.new_game(game)
    moves = []
    for p in positions:
        s = state_of(game, p)
        moves.append(game.uci(s, greedy.genmove(game.to_play(s), s)))
    return {"uniform random": expected, "greedy": score_moves(positions, moves)}


def write_set(path: Path, header: dict, rows: list[dict]) -> None:
    """The set file: gzip (mtime 0: the same rows, the same bytes) of JSON lines, the header
    first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in [header, *rows])
    with path.open("wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as f:
        f.write(text.encode())


def select(kept: dict[str, list[dict]], targets: dict[str, int], per_depth: int) -> list[dict]:
    """The file's positions: each set up to its target in labelling order; the mate set
    ``per_depth`` of each mate depth first, topped up from the others."""
    rows = []
    for name, want in targets.items():
        if name != "mate":
            rows += kept.get(name, [])[:want]
            continue
        by_depth = [kept.get(f"mate-{n}", []) for n in (1, 2, 3)]
        mate = [r for pool in by_depth for r in pool[:per_depth]]
        rest = [r for pool in by_depth for r in pool[per_depth:]]
        rows += (mate + rest)[:want]
    return rows


if __name__ == "__main__":
    sys.exit(main())
