"""``azserve match``: a checkpoint against another player, game after game, colours alternating;
the referee (``azserve.app.referee``) checks every move, scores every game and cross-checks the
score with the opponent's own; each game is written down (SGF for Go, PGN for chess), and the result is the win
rate with a 95% confidence interval. Disputed games (the opponent scores another winner, or
refuses a legal move) count for neither side and are listed with both scores.

Opponents (``azserve.app.players``): any GTP engine (``gnugo --mode gtp --level 1``: GnuGo is
run with ``--chinese-rules --capture-all-dead --positional-superko``, so that the game is played
out under our rules), ``openspiel-mcts:SIMS``, ``random``, another ``checkpoint:PATH``, and for
chess a UCI engine (``uci:stockfish;Skill Level=0;movetime=50``) or ``greedy``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.games import Game
from actors.games.chess import Chess
from azserve.app.chess_players import pgn, pgn_result
from azserve.app.players import RESIGN, AgentPlayer, Player, PlayerError, Refused, make_player
from azserve.app.referee import GameRecord, play_game, sgf


@dataclass
class GameResult(GameRecord):
    """One game, from our side: the referee's record, our game number and our colour."""

    index: int = 0
    our_color: int = 0

    @property
    def won(self) -> bool:
        return self.winner is not None and self.winner == self.our_color

    @property
    def margin_differs(self) -> bool:
        """The scorers agree on the winner but not on the margin."""
        return self.reason == "score" and len(set(self.scores.values())) > 1


def play_one(game: Game, index: int, our_color: int, ours: Player, theirs: Player) -> GameResult:
    """One refereed game with us as ``our_color``."""
    black, white = (ours, theirs) if our_color == 0 else (theirs, ours)
    r: GameRecord = play_game(game, black, white)
    return GameResult(**vars(r), index=index, our_color=our_color)


def wilson(wins: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a win rate (95% for z = 1.96)."""
    if n == 0:
        return 0.0, 1.0
    p = wins / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(
    results: list[GameResult],
    opponent: str,
    sides: tuple[str, str] = ("black", "white"),
    result_text: Callable[[GameResult], str] = lambda r: r.result,
) -> dict[str, Any]:
    """match.json's summary; ``sides`` names the colours (``as_black``, ``as_white``) and
    ``result_text`` writes each game's result as the game's records do (SGF's ``B+3.5``, PGN's
    ``1-0``)."""
    scored = [r for r in results if r.reason != "disputed"]
    wins = sum(r.won for r in scored)
    draws = sum(r.winner is None for r in scored)
    n = len(scored)
    points = wins + 0.5 * draws
    lo, hi = wilson(points, n)
    by_color = {}
    for color, side in enumerate(sides):
        label = f"as_{side}"
        mine = [r for r in scored if r.our_color == color]
        by_color[label] = {
            "games": len(mine),
            "wins": sum(r.won for r in mine),
            "draws": sum(r.winner is None for r in mine),
        }
    return {
        "opponent": opponent,
        "games": len(results),
        "wins": wins,
        "draws": draws,
        "losses": n - wins - draws,
        "win_rate": points / n if n else 0.0,
        "ci95": [round(lo, 4), round(hi, 4)],
        **by_color,
        "forfeits": {
            "ours": sum(r.reason == "forfeit" and not r.won for r in scored),
            "theirs": sum(r.reason == "forfeit" and r.won for r in scored),
        },
        "resigned": {
            "ours": sum(r.reason == "resign" and not r.won for r in scored),
            "theirs": sum(r.reason == "resign" and r.won for r in scored),
        },
        "disputed": len(results) - n,
        "disputes": [
            {"game": r.index, "why": r.why, "scores": r.scores}
            for r in results
            if r.reason == "disputed"
        ],
        "checked_by_opponent": sum("black" in r.scores or "white" in r.scores for r in scored),
        "margin_differs": sum(r.margin_differs for r in scored),
        "mean_moves": round(sum(len(r.moves) for r in results) / max(1, len(results)), 1),
        "results": [result_text(r) for r in results],
    }


def run_match(args: argparse.Namespace) -> int:
    """The ``azserve match`` main."""
    import torch

    from azserve.app.agent import agent_from_checkpoint
    from azserve.app.bench.cli import emit
    from azserve.app.cli import newest_checkpoint_in
    from azserve.app.gtp import identity

    # One position at a time: a second thread only adds overhead, and with another engine
    # (or a second match) on the cores, torch's spinning threads slowed a Go game 40-fold
    # (205 s against 5 s, measured).
    torch.set_num_threads(1)
    cfg, agent = agent_from_checkpoint(args.checkpoint, args.config, args.overrides, None)
    game = agent.game
    sims = cfg.eval.sims if args.sims is None else args.sims
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def checkpoint_player(path: str, seed: int) -> Player:
        file = newest_checkpoint_in(path)
        their_cfg, theirs = agent_from_checkpoint(file, None, (), game.name)
        their_sims = their_cfg.eval.sims if args.sims is None else args.sims
        name = f"azserve {identity(file, game.name)}"  # two nets' games tell them apart
        return AgentPlayer(theirs, their_sims, args.sample_moves, seed + 1, name=name)

    opponent = make_player(
        args.opponent, args.seed, out_dir / "opponent.log", agent_player=checkpoint_player
    )
    ours_name = f"azserve {identity(newest_checkpoint_in(args.checkpoint), game.name)}"
    ours = AgentPlayer(agent, sims, args.sample_moves, args.seed, name=ours_name)
    as_run = getattr(opponent, "command", opponent.name)
    print(
        f"azserve match: {game.name}, {args.games} games against {as_run}, "
        f"{sims} simulations per move; games in {out_dir}",
        file=sys.stderr,
        flush=True,
    )
    today = datetime.date.today().isoformat()
    sides = game.sides
    result_text = pgn_result if isinstance(game, Chess) else (lambda r: r.result)
    results: list[GameResult] = []
    try:
        for i in range(args.games):
            our_color = i % 2
            r = play_one(game, i, our_color, ours, opponent)
            results.append(r)
            names = [ours.name, opponent.name] if our_color == 0 else [opponent.name, ours.name]
            if isinstance(game, Chess):
                (out_dir / f"game-{i:04d}.pgn").write_text(
                    pgn(game, r, names[0], names[1], date=today)
                )
            elif hasattr(game, "size"):
                (out_dir / f"game-{i:04d}.sgf").write_text(
                    sgf(game, r, names[0], names[1], date=today)
                )
            else:
                moves = " ".join(game.format_move(a) for a in r.moves)
                (out_dir / f"game-{i:04d}.txt").write_text(f"{r.result} ({r.reason})\n{moves}\n")
            wins = sum(x.won for x in results)
            checked = (
                f"; {r.why}"
                if r.why
                else (
                    f"; scores {', '.join(f'{k} {v}' for k, v in r.scores.items())}"
                    if len(r.scores) > 1
                    else ""
                )
            )
            print(
                f"game {i + 1}/{args.games}: azserve {sides[our_color]}, "
                f"{result_text(r)} ({r.reason}, {len(r.moves)} moves, {r.seconds:.0f} s{checked}); "
                f"azserve {wins}/{len(results)}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        opponent.close()
    summary = summarize(results, opponent.name, sides, result_text)
    summary.update(
        checkpoint=str(args.checkpoint),
        game=game.name,
        sims=sims,
        out=str(out_dir),
        opponent_command=as_run,
    )
    (out_dir / "match.json").write_text(json.dumps(summary, indent=1) + "\n")
    emit(summary, args.json)
    lo, hi = summary["ci95"]
    print(
        f"azserve match: {summary['wins']}-{summary['draws']}-{summary['losses']} "
        f"(win-draw-loss) against {opponent.name}: win rate {summary['win_rate']:.3f}, "
        f"95% CI {lo:.3f}-{hi:.3f}; forfeits ours {summary['forfeits']['ours']}, "
        f"theirs {summary['forfeits']['theirs']}; disputed {summary['disputed']}",
        file=sys.stderr,
    )
    return 0


__all__ = [
    "RESIGN",
    "GameResult",
    "PlayerError",
    "Refused",
    "play_one",
    "run_match",
    "summarize",
    "wilson",
]
