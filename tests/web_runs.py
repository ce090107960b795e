"""Run directories for the web tests: a real one (``azserve train --web 0`` on tic-tac-toe with
tiny budgets, then ``azserve ladder`` on it), watched through its pages while it trains; and
Go and chess runs whose games are written by the project's own writers (``Game.record``: SGF,
PGN; the trajectory file format of the learner's journal) from random legal play."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from actors.games import Game, make_game
from azserve.protocol import Trajectory
from azserve.sparse import SparseRows
from azserve.trajfile import open_for_append, write_record

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "replay.min_size=200",
    "trainer.publish_every=10",
    "trainer.batch_size=64",
    "actors.games=32",
    "mcts.num_simulations=8",
    "eval.match_games=2",
    "eval.sims=4",
    "eval.match_sims=2",
    "train.eval_every_s=0",
    "train.status_interval_s=1",
    "learner.status_interval_s=1",
    "learner.log_every=2",
    "checkpoint.keep_every=10",
]


def azserve(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("azserve")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "azserve.cli.main"]
    return [*head, *args]


@dataclass
class TrainedRun:
    """A real run, and what its pages said while it trained."""

    path: Path
    url: str
    """The address ``azserve train --web`` printed."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """The ``metrics`` events its event stream sent while it trained."""
    output: str = ""


_URL = re.compile(r"the run's pages at (http://\S+)")


async def _train_watched(run_dir: Path, log: Path) -> TrainedRun:
    """``azserve train --web 0``: find the address it prints, listen to its events until a
    learner row comes, then let it finish."""
    sets = [a for s in TINY for a in ("--set", s)]
    cmd = azserve("train", "--config", str(REPO / "configs" / "tictactoe.toml"),
                  "--run-dir", str(run_dir), "--no-progress", "--steps", "30", "--web", "0",
                  *sets)  # fmt: skip
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=out, stderr=asyncio.subprocess.PIPE, cwd=REPO
        )
        assert proc.stderr is not None
        lines: list[str] = []
        url = ""
        while not url:
            line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
            if not line:
                raise AssertionError(f"train ended before serving its pages: {''.join(lines)}")
            lines.append(line)
            if m := _URL.search(line):
                url = m.group(1)
        run = TrainedRun(run_dir, url)
        drain = asyncio.create_task(_drain(proc.stderr, lines))
        async with aiohttp.ClientSession() as http, http.get(url + "api/events") as r:
            async for raw in r.content:
                if raw.startswith(b"data: "):
                    event = json.loads(raw[6:])
                    if event["type"] == "metrics" and event["rows"]:
                        run.events.append(event)
                        break
        await asyncio.wait_for(proc.wait(), 180)
        await drain
        run.output = log.read_text() + "".join(lines)
        assert proc.returncode == 0, run.output
    return run


async def _drain(stream: asyncio.StreamReader, lines: list[str]) -> None:
    while line := await stream.readline():
        lines.append(line.decode())


def train_watched(run_dir: Path, log: Path) -> TrainedRun:
    run = asyncio.run(_train_watched(run_dir, log))
    ladder = subprocess.run(
        azserve("ladder", str(run_dir), "--games", "4", "--sims", "2", "--max-checkpoints", "3"),
        capture_output=True, text=True, timeout=240, cwd=REPO,
        env=dict(os.environ, AZSERVE_SET=""),
    )  # fmt: skip
    assert ladder.returncode == 0, ladder.stderr
    return run


# --- Go and chess runs from random play ----------------------------------------------------------


def random_game(game: Game, rng: random.Random, max_moves: int) -> list[int]:
    s, moves = game.initial_state(), []
    while not game.is_terminal(s) and len(moves) < max_moves:
        a = rng.choice(game.legal_actions(s))
        moves.append(a)
        s = game.apply(s, a)
    return moves


def write_journal(path: Path, game: Game, games: list[list[int]], sparse: bool) -> None:
    """Self-play games as the learner journals them: each game's positions (``encode``), a
    policy at each (most of its weight on the move played, the rest on another legal move),
    the outcome from each side to move."""
    with open_for_append(path) as f:
        for gid, moves in enumerate(games):
            s = game.initial_state()
            obs, policy = [], np.zeros((len(moves), game.num_actions), np.float32)
            for t, a in enumerate(moves):
                obs.append(game.encode(s))
                other = [b for b in game.legal_actions(s) if b != a]
                policy[t, a] = 0.75 if other else 1.0
                if other:
                    policy[t, other[0]] = 0.25
                s = game.apply(s, a)
            first = game.terminal_value(s) if game.is_terminal(s) else 0.0
            first = first if game.to_play(s) == 0 else -first
            outcome = np.array([first if t % 2 == 0 else -first for t in range(len(moves))],
                               np.float32)  # fmt: skip
            traj = Trajectory(actor="actor-0", game_id=gid, game=game.name, version=3,
                              length=len(moves), result=first, moves=len(moves))  # fmt: skip
            rows: np.ndarray | SparseRows = policy
            if sparse:
                traj.sparse = True
                rows = SparseRows.from_dense(policy)
            write_record(f, traj, np.stack(obs), rows, outcome)


def game_run(root: Path, spec: str, seed: int = 1) -> Path:
    """A run directory of game ``spec`` with no training: a config, two match records written
    by ``Game.record`` and a journal of two self-play games."""
    game = make_game(spec)
    run = root / spec
    (run / "match").mkdir(parents=True)
    (run / "journal").mkdir()
    (run / "config.toml").write_text(f'game = "{spec}"\n')
    rng = random.Random(seed)
    games = [random_game(game, rng, 60) for _ in range(2)]
    for i, moves in enumerate(games):
        text = game.record(moves, ("azserve@100", "random"), "", "", date="2026-01-01")
        (run / "match" / f"game-{i:04d}{game.record_suffix}").write_text(text)
    write_journal(run / "journal" / "seg-000000000.azt", game, games, sparse=spec == "chess")
    return run


__all__ = ["TrainedRun", "azserve", "game_run", "random_game", "train_watched", "write_journal"]
