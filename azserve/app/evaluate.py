"""How good is the agent? Scores against perfect play and matches against other players.

- Tic-tac-toe: fraction of all 4,520 reachable non-terminal positions where the agent's move is
  optimal (exhaustive minimax), for the raw policy and for MCTS.
- Connect Four: mistake rate per benchmark set on ``move_scores.tsv`` (a move outside
  ``sign_optimal_columns`` changes the game-theoretic outcome), as in AlphaZero.jl's benchmark.
- Matches: win/draw/loss against uniform random play and against an earlier version.

``azserve eval --checkpoint RUN`` runs the first two, or a match against random play for the
other games, on one checkpoint (``run_eval``).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from actors.games import Game, State, make_game
from actors.games.solver import TicTacToeSolver
from azserve.app.agent import Agent, analysis_mcts
from azserve.app.presets import resolve_data_path
from azserve.app.schema import Config
from azserve.errors import ConfigError, WeightsError
from azserve.model.weights import load_weights_file

SET_NAMES = {
    "Test_L3_R1": "End-Easy",
    "Test_L2_R1": "Middle-Easy",
    "Test_L2_R2": "Middle-Medium",
    "Test_L1_R1": "Beginning-Easy",
    "Test_L1_R2": "Beginning-Medium",
    "Test_L1_R3": "Beginning-Hard",
}


def tictactoe_optimality(agent: Agent, sims: int) -> dict[str, float]:
    """Fractions of reachable non-terminal positions where the move is optimal."""
    solver = TicTacToeSolver()
    states = solver.reachable_nonterminal_states()
    optimal = [solver.optimal_actions(s) for s in states]
    out: dict[str, float] = {"positions": float(len(states))}
    raw = agent.analyze_sync(states, 0)
    out["policy_optimal"] = float(np.mean([a.move in o for a, o in zip(raw, optimal)]))
    if sims > 0:
        searched = agent.analyze_sync(states, sims)
        out["mcts_optimal"] = float(np.mean([a.move in o for a, o in zip(searched, optimal)]))
    return out


def load_c4_benchmark(path: str, limit: int = 0) -> list[dict[str, Any]]:
    """Rows of move_scores.tsv with zero-based ``moves`` and ``sign_optimal`` column sets."""
    rows = []
    with resolve_data_path(path).open() as f:
        for row in csv.DictReader(f, delimiter="\t"):
            rows.append(
                {
                    "moves": [int(c) - 1 for c in row["moves"]],
                    "sign_optimal": {int(c) - 1 for c in row["sign_optimal_columns"].split(",")},
                    "set": row["test_set"],
                }
            )
            if limit and len(rows) >= limit:
                break
    return rows


def connect4_mistakes(agent: Agent, path: str, sims: int, limit: int = 0) -> dict[str, Any]:
    """Mistake rate per benchmark set (and overall), raw policy and with ``sims`` MCTS."""
    rows = load_c4_benchmark(path, limit)
    states = [agent.game.from_moves(r["moves"]) for r in rows]
    out: dict[str, Any] = {"positions": len(rows)}
    for label, n in (("policy", 0), ("mcts", sims)):
        if label == "mcts" and sims <= 0:
            continue
        moves = [a.move for a in agent.analyze_sync(states, n)]
        wrong = np.array([m not in r["sign_optimal"] for m, r in zip(moves, rows)])
        sets = np.array([r["set"] for r in rows])
        per_set = {SET_NAMES.get(s, s): float(wrong[sets == s].mean()) for s in sorted(set(sets))}
        out[label] = {"overall": float(wrong.mean()), **per_set}
    return out


async def _play(
    game: Game, players: list[Any], rng: np.random.Generator, opening_plies: int
) -> float:
    """One game; players[i] is (Agent, sims) or None (uniform random); the first
    ``opening_plies`` moves are random so that deterministic agents play varied games.
    Returns the first player's result."""
    state: State = game.initial_state()
    ply = 0
    while not game.is_terminal(state):
        p = players[game.to_play(state)]
        if p is None or ply < opening_plies:
            action = int(rng.choice(game.legal_actions(state)))
        else:
            agent, sims = p
            action = (await agent.analyze([state], sims))[0].move
        state = game.apply(state, action)
        ply += 1
    tv = game.terminal_value(state)
    return tv if game.to_play(state) == 0 else -tv


def match(
    agent: Agent,
    opponent: Agent | None,
    games: int,
    sims: int,
    seed: int = 0,
    opening_plies: int = 0,
) -> dict[str, int]:
    """``agent`` against ``opponent`` (None = uniform random), alternating colours; all games
    run concurrently so their searches share batches. Returns agent's wins/draws/losses."""
    game = agent.game

    async def run() -> list[float]:
        tasks = []
        for i in range(games):
            me, them = (agent, sims), (None if opponent is None else (opponent, sims))
            players = [me, them] if i % 2 == 0 else [them, me]
            # Game pairs share an opening (same seed), each side playing it once with each colour.
            tasks.append(_play(game, players, np.random.default_rng([seed, i // 2]), opening_plies))
        return await asyncio.gather(*tasks)

    results = asyncio.run(run())
    mine = [r if i % 2 == 0 else -r for i, r in enumerate(results)]
    return {
        "win": sum(r > 0 for r in mine),
        "draw": sum(r == 0 for r in mine),
        "loss": sum(r < 0 for r in mine),
    }


def evaluate_checkpoint(
    cfg: Config, path: str | Path, full: bool, previous: str | Path | None = None
) -> dict[str, Any]:
    """Score one checkpoint: against perfect play (raw policy always, MCTS when ``full``), against
    uniform random, and against ``previous`` (an earlier checkpoint) when given."""
    game = make_game(cfg.game)
    # Read both files now: during a run, retention may delete ``previous`` (the oldest kept)
    # while the benchmark below computes.
    # Both on the serving path of the run's backend (compiled once per process, each a version).
    weights = load_weights_file(path)
    earlier_weights = None if previous is None else load_weights_file(previous)
    agent = Agent(game, cfg.net, weights, analysis_mcts(cfg), backend=cfg.backend)
    earlier = None
    try:
        if earlier_weights is not None:
            earlier = Agent(game, cfg.net, earlier_weights, analysis_mcts(cfg), backend=cfg.backend)
        return _scores(cfg, agent, earlier, full)
    finally:
        agent.close()
        if earlier is not None:
            earlier.close()


def _scores(cfg: Config, agent: Agent, earlier: Agent | None, full: bool) -> dict[str, Any]:
    sims = cfg.eval.sims if full else 0
    out: dict[str, Any] = {}
    if cfg.game == "tictactoe":
        out["tictactoe"] = tictactoe_optimality(agent, sims)
    elif cfg.game == "connect4":
        out["connect4"] = connect4_mistakes(agent, cfg.eval.c4_positions, sims, cfg.eval.c4_limit)
    if cfg.eval.match_games:
        out["vs_random"] = match(agent, None, cfg.eval.match_games, cfg.eval.match_sims)
        if earlier is not None:
            out["vs_previous"] = match(
                agent, earlier, cfg.eval.match_games, cfg.eval.match_sims, opening_plies=2
            )
    return out


def eval_scalars(result: dict[str, Any], prefix: str = "eval") -> dict[str, float]:
    """An evaluation result as flat TensorBoard scalars: ``{"tictactoe": {"policy_optimal":
    0.98}}`` -> ``{"eval/tictactoe/policy_optimal": 0.98}``; match results as scores in [0, 1]
    (win 1, draw 1/2)."""
    out: dict[str, float] = {}
    for key, value in result.items():
        name = f"{prefix}/{key}"
        if isinstance(value, dict) and {"win", "draw", "loss"} <= set(value):
            n = max(1, value["win"] + value["draw"] + value["loss"])
            out[f"{name}/score"] = (value["win"] + 0.5 * value["draw"]) / n
        elif isinstance(value, dict):
            out.update(eval_scalars(value, name))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def run_eval(args: argparse.Namespace) -> int:
    """The ``azserve eval`` main: score ``args.checkpoint`` and print the result as JSON
    (written to ``args.json`` too when given)."""
    from azserve.app.agent import agent_from_checkpoint
    from azserve.app.bench.cli import emit
    from learner.checkpoint import load_checkpoint

    cfg, agent = agent_from_checkpoint(args.checkpoint, args.config, args.overrides, args.game)
    if cfg.game != "connect4" and (args.positions or args.limit is not None):
        flag = "--positions" if args.positions else "--limit"
        raise ConfigError(f"{flag}: benchmark positions are for connect4, not {cfg.game}")
    sims = cfg.eval.sims if args.sims is None else args.sims
    benchmark = cfg.game in ("tictactoe", "connect4")
    games = args.games if args.games is not None else (0 if benchmark else cfg.eval.match_games)
    out: dict[str, Any] = {"checkpoint": str(args.checkpoint), "game": cfg.game, "sims": sims}
    try:
        meta = load_checkpoint(args.checkpoint).meta
        out.update(step=meta.step, version=meta.version)
    except WeightsError:  # plain weights: no step or version
        pass
    t0 = time.monotonic()
    if cfg.game == "tictactoe":
        out["tictactoe"] = tictactoe_optimality(agent, sims)
    elif cfg.game == "connect4":
        positions = args.positions or cfg.eval.c4_positions
        limit = cfg.eval.c4_limit if args.limit is None else args.limit
        out["positions_file"] = str(resolve_data_path(positions))
        out["connect4"] = connect4_mistakes(agent, positions, sims, limit)
    if games:
        out["vs_random"] = match(agent, None, games, sims)
        out["match_games"] = games
    out["eval_s"] = round(time.monotonic() - t0, 3)
    emit(out, args.json)
    print(summary_line(out), file=sys.stderr)
    return 0


def summary_line(result: dict[str, Any]) -> str:
    """One line for people: the headline figures of an ``azserve eval`` result."""
    parts = [f"{result['game']}, {result['sims']} sims"]
    if "tictactoe" in result:
        t = result["tictactoe"]
        parts.append(f"optimal moves: raw policy {100 * t['policy_optimal']:.1f}%")
        if "mcts_optimal" in t:
            parts.append(f"MCTS {100 * t['mcts_optimal']:.1f}%")
    if "connect4" in result:
        c = result["connect4"]
        parts.append(f"mistakes: raw policy {100 * c['policy']['overall']:.1f}%")
        if "mcts" in c:
            parts.append(f"MCTS {100 * c['mcts']['overall']:.1f}%")
        parts.append(f"on {c['positions']} positions")
    if "vs_random" in result:
        r = result["vs_random"]
        parts.append(f"vs random {r['win']}-{r['draw']}-{r['loss']} (win-draw-loss)")
    return "azserve eval: " + ", ".join(parts)
