"""``azserve match``: a checkpoint against another player, game after game, colours alternating;
the referee (``azserve.arena.referee``) checks every move, scores every game and cross-checks the
score with the opponent's own; each game is written down as its game keeps records
(``Game.record``: SGF for Go, PGN for chess, CSA for shogi, text otherwise), and the result is
the win rate with a 95% confidence interval. Disputed games (the opponent scores another winner, or
refuses a legal move) count for neither side and are listed with both scores.

Opponents (``azserve.arena.players``): any GTP engine (``gnugo --mode gtp --level 1``: GnuGo is
run with ``--chinese-rules --capture-all-dead --positional-superko``, so that the game is played
out under our rules), ``openspiel-mcts:SIMS``, ``random``, another ``checkpoint:PATH``, for
chess a UCI engine (``uci:stockfish;Skill Level=0;movetime=50``), for shogi a USI engine
(``usi:fairy-stockfish;Skill Level=-20;byoyomi=50``), and for both ``greedy``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from actors.games import Game
from azserve.arena.ladder.store import game_seed
from azserve.arena.lineup import Lineup
from azserve.arena.players import RESIGN, Player, PlayerError, Refused, parse_spec
from azserve.arena.pool import Task, play_in_pool
from azserve.arena.ratings import wilson
from azserve.arena.referee import GameRecord, play_game, record_text


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


def summarize(
    results: list[GameResult], opponent: str, sides: tuple[str, str] = ("black", "white")
) -> dict[str, Any]:
    """match.json's summary; ``sides`` names the colours (``Game.sides``: ``as_black``,
    ``as_white``); each game's result is as the game's records write it (SGF's ``B+3.5``,
    PGN's ``1-0``)."""
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
        "checked_by_opponent": sum(any(k in sides for k in r.scores) for r in scored),
        "margin_differs": sum(r.margin_differs for r in scored),
        "mean_moves": round(sum(len(r.moves) for r in results) / max(1, len(results)), 1),
        "results": [r.result for r in results],
    }


@dataclass(frozen=True)
class MatchSetup:
    """What builds a match's players, in this process or in each ``--jobs`` worker."""

    checkpoint: str
    config: str | None
    overrides: list[str]
    opponent: str
    sims: int | None
    sample_moves: int
    seed: int
    log: str
    """The opponent engine's log file."""


class MatchPlayers:
    """Our checkpoint and the opponent, and each game's pair of players, from one ``Lineup``.
    Every game's players are seeded by the match's seed and the game's number
    (``game_seed``), so a game is the same whoever plays it and whenever; only an engine
    process (GTP, UCI) is kept from game to game (its own randomness is its own)."""

    def __init__(self, setup: MatchSetup) -> None:
        from azserve.arena.agent import agent_from_checkpoint, identity
        from azserve.config.presets import newest_checkpoint_in

        self.setup = setup
        cfg, agent = agent_from_checkpoint(setup.checkpoint, setup.config, setup.overrides, None)
        self.game = agent.game
        self.sims = cfg.eval.sims if setup.sims is None else setup.sims
        self.lineup = Lineup(self.game, Path(setup.log).parent, setup.sims, setup.sample_moves)
        self.lineup.add(setup.checkpoint, agent, self.sims)
        name = self.game.name
        self.ours_name = f"azserve {identity(newest_checkpoint_in(setup.checkpoint), name)}"
        self._theirs: tuple[str, str | None] = (setup.opponent, None)  # (spec, name)
        kind, arg = parse_spec(setup.opponent)
        if kind == "checkpoint":
            file = newest_checkpoint_in(arg)
            self._theirs = (f"checkpoint:{file}", f"azserve {identity(file, name)}")
        probe = self.players(0)[1]  # an engine starts here, a checkpoint loads
        self.opponent_name = probe.name
        self.opponent_command: str = getattr(probe, "command", probe.name)

    def players(self, i: int) -> tuple[Player, Player]:
        """(ours, theirs) for game ``i``."""
        s = game_seed(self.setup.seed, ("match", self.setup.opponent), i)
        ours = self.lineup.player(f"checkpoint:{self.setup.checkpoint}", s, self.ours_name)
        spec, name = self._theirs
        return ours, self.lineup.player(spec, s + 1, name, log=Path(self.setup.log))

    def close(self) -> None:
        self.lineup.close()


class MatchJob:
    """A ``--jobs`` worker's games (``azserve.arena.pool``): task ``{i}``, answer the game's
    ``GameResult`` fields, or ``{error}`` when a player failed."""

    def __init__(self, setup: MatchSetup) -> None:
        self.players = MatchPlayers(setup)

    def play(self, task: dict[str, Any]) -> dict[str, Any]:
        i = int(task["i"])
        ours, theirs = self.players.players(i)
        try:
            r = play_one(self.players.game, i, i % 2, ours, theirs)
        except PlayerError as e:
            return {"error": str(e)}
        return {"result": asdict(r)}

    def close(self) -> None:
        self.players.close()


def _games_here(players: MatchPlayers, games: int) -> Iterator[GameResult]:
    for i in range(games):
        ours, theirs = players.players(i)
        yield play_one(players.game, i, i % 2, ours, theirs)


def _games_in_jobs(setup: MatchSetup, games: int, jobs: int) -> Iterator[GameResult]:
    """The games as they end, ``jobs`` at a time, each in a worker process."""
    numbers = iter(range(games))

    def next_task(busy: set[Any]) -> Task | None:
        i = next(numbers, None)
        return None if i is None else (i, {"i": i})

    with closing(play_in_pool(jobs, MatchJob, setup, next_task)) as ended:
        for i, answer in ended:
            if "error" in answer:
                raise PlayerError(f"game {i + 1}: {answer['error']}")
            yield GameResult(**answer["result"])


def run_match(args: argparse.Namespace) -> int:
    """The ``azserve match`` main."""
    import torch

    from azserve.files import emit

    # One position at a time: a second thread only adds overhead, and with another engine
    # (or a second match) on the cores, torch's spinning threads slowed a Go game 40-fold
    # (205 s against 5 s, measured).
    torch.set_num_threads(1)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = getattr(args, "jobs", 1)
    setup = MatchSetup(
        str(args.checkpoint), args.config, list(args.overrides), args.opponent, args.sims,
        args.sample_moves, args.seed, str(out_dir / "opponent.log"),
    )  # fmt: skip
    players = MatchPlayers(setup)  # here too: names, and the games when one job plays them
    game = players.game
    print(
        f"azserve match: {game.name}, {args.games} games against {players.opponent_command}, "
        f"{players.sims} simulations per move; games in {out_dir}"
        + (f"; {jobs} games at a time" if jobs > 1 else ""),
        file=sys.stderr,
        flush=True,
    )
    today = datetime.date.today().isoformat()
    sides = game.sides
    results: list[GameResult] = []
    try:
        if jobs > 1:
            players.close()  # the workers build their own
            stream = _games_in_jobs(setup, args.games, jobs)
        else:
            stream = _games_here(players, args.games)
        for r in stream:
            i, our_color = r.index, r.our_color
            results.append(r)
            them = players.opponent_name
            names = (players.ours_name, them) if our_color == 0 else (them, players.ours_name)
            text = record_text(game, r, names, date=today, event="azserve match")
            (out_dir / f"game-{i:04d}{game.record_suffix}").write_text(text)
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
                f"{r.result} ({r.reason}, {len(r.moves)} moves, {r.seconds:.0f} s{checked}); "
                f"azserve {wins}/{len(results)}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        if jobs <= 1:
            players.close()
    results.sort(key=lambda r: r.index)
    summary = summarize(results, players.opponent_name, sides)
    summary.update(
        checkpoint=str(args.checkpoint),
        game=game.name,
        sims=players.sims,
        out=str(out_dir),
        opponent_command=players.opponent_command,
    )
    (out_dir / "match.json").write_text(json.dumps(summary, indent=1) + "\n")
    emit(summary, args.json)
    lo, hi = summary["ci95"]
    print(
        f"azserve match: {summary['wins']}-{summary['draws']}-{summary['losses']} "
        f"(win-draw-loss) against {players.opponent_name}: win rate {summary['win_rate']:.3f}, "
        f"95% CI {lo:.3f}-{hi:.3f}; forfeits ours {summary['forfeits']['ours']}, "
        f"theirs {summary['forfeits']['theirs']}; disputed {summary['disputed']}",
        file=sys.stderr,
    )
    return 0


__all__ = [
    "RESIGN",
    "GameResult",
    "MatchJob",
    "MatchPlayers",
    "MatchSetup",
    "PlayerError",
    "Refused",
    "play_one",
    "run_match",
    "summarize",
]
