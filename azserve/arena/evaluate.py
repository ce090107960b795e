"""How good is the agent? Its game's benchmarks, and matches against other players.

- Benchmarks: what the game scores itself on (``Game.benchmarks()``, actors/games/benchmark.py):
  tic-tac-toe the share of optimal moves over every reachable position, Connect Four the
  mistake rate per set of positions with exact scores, chess the blunder rate against
  Stockfish's score of every move; raw policy and MCTS.
- Matches: win/draw/loss against uniform random play and against an earlier version.

``azserve eval --checkpoint RUN`` runs the benchmarks, or a match against random play for a
game without any, on one checkpoint (``run_eval``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from actors.games import BUILTIN_GAMES, Benchmark, Game, make_game
from azserve.arena.agent import Agent, analysis_mcts, eval_backend
from azserve.arena.players import AgentPlayer, Player, RandomPlayer
from azserve.arena.referee import GameRecord, play_game_async
from azserve.config.presets import resolve_data_path
from azserve.config.schema import Config
from azserve.errors import ConfigError, WeightsError
from azserve.model.weights import load_weights_file


def benchmark_scores(agent: Agent, sims: int, positions: str, limit: int) -> dict[str, Any]:
    """Each of the agent's game's benchmarks run, their results by name. ``positions`` (a data
    path, found by ``resolve_data_path``) and ``limit`` go to those that read positions from a
    file."""
    out: dict[str, Any] = {}
    for b in agent.game.benchmarks():
        if b.takes_positions:
            out[b.name] = b.run(agent, sims, resolve_data_path(positions), limit)
        else:
            out[b.name] = b.run(agent, sims)
    return out


def games_with_positions() -> list[str]:
    """The built-in games one of whose benchmarks reads a positions file."""
    return [
        name
        for name in BUILTIN_GAMES
        if any(b.takes_positions for b in make_game(name).benchmarks())
    ]


def random_opening(game: Game, rng: np.random.Generator, plies: int) -> list[int]:
    """``plies`` uniform random moves from the initial state (fewer where the game ends
    first: its last move is left out, so the players still play)."""
    s, moves = game.initial_state(), []
    for _ in range(plies):
        a = int(rng.choice(game.legal_actions(s)))
        if game.is_terminal(game.apply(s, a)):
            break
        moves.append(a)
        s = game.apply(s, a)
    return moves


def match(
    agent: Agent,
    opponent: Agent | None,
    games: int,
    sims: int,
    seed: int = 0,
    opening_plies: int = 0,
    deadline: float | None = None,
) -> dict[str, int]:
    """``agent`` against ``opponent`` (None = uniform random), alternating colours, each game
    under the referee (``azserve.arena.referee``); all games run concurrently so their
    searches share batches. The first ``opening_plies`` moves are random so that
    deterministic agents play varied games; game pairs share an opening, each side playing it
    once with each colour. Returns agent's wins/draws/losses; with a ``deadline``
    (``time.monotonic()``), the games still going then are stopped and counted
    (``unfinished``)."""
    game = agent.game

    def side(who: Agent | None, i: int) -> Player:
        if who is None:
            return RandomPlayer([seed, i])
        return AgentPlayer(who, sims, 0, seed, name="agent" if who is agent else "opponent")

    async def run() -> list[GameRecord | None]:
        tasks = []
        for i in range(games):
            opening = random_opening(game, np.random.default_rng([seed, i // 2]), opening_plies)
            me, them = side(agent, i), side(opponent, i)
            black, white = (me, them) if i % 2 == 0 else (them, me)
            tasks.append(asyncio.ensure_future(play_game_async(game, black, white, opening)))
        if deadline is None or not tasks:
            return list(await asyncio.gather(*tasks))
        left = max(0.0, deadline - time.monotonic())
        finished, going = await asyncio.wait(tasks, timeout=left)
        for task in going:
            task.cancel()
        await asyncio.gather(*going, return_exceptions=True)
        return [t.result() if t in finished else None for t in tasks]

    records = asyncio.run(run())
    mine = [r.winner if i % 2 == 0 or r.winner is None else 1 - r.winner
            for i, r in enumerate(records) if r is not None]  # fmt: skip
    out = {
        "win": sum(w == 0 for w in mine),
        "draw": sum(w is None for w in mine),
        "loss": sum(w == 1 for w in mine),
    }
    if deadline is not None:
        out["unfinished"] = sum(r is None for r in records)
    return out


def evaluate_checkpoint(
    cfg: Config,
    path: str | Path,
    full: bool,
    previous: str | Path | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Score one checkpoint: its game's benchmarks (raw policy always, MCTS when ``full``),
    matches against uniform random, and against ``previous`` (an earlier checkpoint) when
    given; the matches' games still going at ``deadline`` (``time.monotonic()``) stop."""
    game = make_game(cfg.game)
    # Read both files now: during a run, retention may delete ``previous`` (the oldest kept)
    # while the benchmark below computes.
    # Both on the serving path of the evaluation's backend (``eval.compile``; one program per
    # process, each a version).
    weights = load_weights_file(path)
    earlier_weights = None if previous is None else load_weights_file(previous)
    backend = eval_backend(cfg)
    agent = Agent(game, cfg.net, weights, analysis_mcts(cfg), backend=backend)
    earlier = None
    try:
        if earlier_weights is not None:
            earlier = Agent(game, cfg.net, earlier_weights, analysis_mcts(cfg), backend=backend)
        return _scores(cfg, agent, earlier, full, deadline)
    finally:
        agent.close()
        if earlier is not None:
            earlier.close()


def _scores(
    cfg: Config, agent: Agent, earlier: Agent | None, full: bool, deadline: float | None
) -> dict[str, Any]:
    sims = cfg.eval.sims if full else 0
    out = benchmark_scores(agent, sims, cfg.eval.c4_positions, cfg.eval.c4_limit)
    games, match_sims = cfg.eval.match_games, cfg.eval.match_sims
    if games:
        out["vs_random"] = match(agent, None, games, match_sims, deadline=deadline)
        if earlier is not None:
            out["vs_previous"] = match(
                agent, earlier, games, match_sims, opening_plies=2, deadline=deadline
            )
    return out


def eval_scalars(result: dict[str, Any], prefix: str = "eval") -> dict[str, float]:
    """An evaluation result as flat TensorBoard scalars: ``{NAME: {"policy_optimal": 0.98}}``
    -> ``{"eval/NAME/policy_optimal": 0.98}``; match results as scores in [0, 1]
    (win 1, draw 1/2)."""
    out: dict[str, float] = {}
    for key, value in result.items():
        name = f"{prefix}/{key}"
        if isinstance(value, dict) and {"win", "draw", "loss"} <= set(value):
            n = value["win"] + value["draw"] + value["loss"]
            if n:  # none finished (stopped at a deadline): no score
                out[f"{name}/score"] = (value["win"] + 0.5 * value["draw"]) / n
        elif isinstance(value, dict):
            out.update(eval_scalars(value, name))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def run_eval(args: argparse.Namespace) -> int:
    """The ``azserve eval`` main: score ``args.checkpoint`` and print the result as JSON
    (written to ``args.json`` too when given)."""
    from azserve.arena.agent import agent_from_checkpoint
    from azserve.files import emit
    from learner.checkpoint import load_checkpoint

    cfg, agent = agent_from_checkpoint(args.checkpoint, args.config, args.overrides, args.game)
    benchmarks = agent.game.benchmarks()
    if (args.positions or args.limit is not None) and not any(
        b.takes_positions for b in benchmarks
    ):
        flag = "--positions" if args.positions else "--limit"
        raise ConfigError(
            f"{flag}: benchmark positions are for {', '.join(games_with_positions())}, "
            f"not {cfg.game}"
        )
    sims = cfg.eval.sims if args.sims is None else args.sims
    games = args.games if args.games is not None else (0 if benchmarks else cfg.eval.match_games)
    out: dict[str, Any] = {"checkpoint": str(args.checkpoint), "game": cfg.game, "sims": sims}
    try:
        meta = load_checkpoint(args.checkpoint).meta
        out.update(step=meta.step, version=meta.version)
    except WeightsError:  # plain weights: no step or version
        pass
    t0 = time.monotonic()
    positions = args.positions or cfg.eval.c4_positions
    limit = cfg.eval.c4_limit if args.limit is None else args.limit
    if any(b.takes_positions for b in benchmarks):
        out["positions_file"] = str(resolve_data_path(positions))
    out.update(benchmark_scores(agent, sims, positions, limit))
    if games:
        out["vs_random"] = match(agent, None, games, sims)
        out["match_games"] = games
    out["eval_s"] = round(time.monotonic() - t0, 3)
    emit(out, args.json)
    print(summary_line(out, benchmarks), file=sys.stderr)
    return 0


def summary_line(result: dict[str, Any], benchmarks: tuple[Benchmark, ...] = ()) -> str:
    """One line for people: the headline figures of an ``azserve eval`` result, each of
    ``benchmarks`` (the game's) saying its own."""
    return f"azserve eval: {result['game']}, {result['sims']} sims, " + scores_text(
        result, benchmarks
    )


def scores_text(result: dict[str, Any], benchmarks: tuple[Benchmark, ...] = ()) -> str:
    """An evaluation's figures in words: each of ``benchmarks`` (the game's) saying its own,
    then the matches (``vs random 9-0-1 (win-draw-loss)``)."""
    parts = [b.summary(result[b.name]) for b in benchmarks if b.name in result]
    for key, who in (("vs_random", "random"), ("vs_previous", "the previous checkpoint")):
        if key in result:
            r = result[key]
            stopped = (
                f", {r['unfinished']} stopped at the time limit" if r.get("unfinished") else ""
            )
            parts.append(f"vs {who} {r['win']}-{r['draw']}-{r['loss']} (win-draw-loss{stopped})")
    return ", ".join(parts) or "nothing scored"
