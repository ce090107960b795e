"""Ladder games in parallel (``azserve ladder --jobs N``): N worker processes, each with its own
``Roster`` (its agents on its own backend, its own engine processes), play one game at a time.
The ladder's own process picks every pair, writes the store and fits: a pair is never given to
two workers at once, so the store's per-pair order (game k before game k + 1) holds, and a
game's number, colours and seed are fixed before it starts, exactly as with one job. A ladder
killed at any point resumes as before: a game in flight was never written.

Tasks and results travel as JSON over pipes (nothing is unpickled from them); the workers'
setup (configs, entrants) is handed over once, when they are spawned. A worker dies with the
ladder's process (``kill -9`` included: Linux's parent-death signal); its engines see their
input close and exit.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from azserve.app.schema import Config
from azserve.errors import AzserveError


@dataclass(frozen=True)
class Setup:
    """What every worker builds its ``Roster`` from."""

    game: str
    """The referee's game spec (``make_game``)."""
    sims: int
    sample_moves: int
    log_dir: str
    entrants: list[Any]
    """The ladder's ``Entrant``s."""
    configs: dict[str, Config] = field(default_factory=dict)
    """Checkpoint path -> its run's config, as ``Roster`` takes them."""


def _worker(setup: Setup, tasks: Connection, results: Connection, parent: int) -> None:
    """A worker's main: play each task's game and answer with its record (or why not)."""
    import torch

    from actors.games import make_game
    from azserve.app.ladder import Roster, play_record
    from azserve.app.players import PlayerError

    _die_with_parent(parent)
    torch.set_num_threads(1)  # one game, one core: as ``azserve ladder`` itself
    roster = Roster(make_game(setup.game), setup.sims, setup.sample_moves,
                    Path(setup.log_dir), setup.configs)  # fmt: skip
    by_name = {e.name: e for e in setup.entrants}
    try:
        while True:
            if not tasks.poll(1.0):
                if os.getppid() != parent:  # the ladder is gone: no one to answer
                    return
                continue
            task = json.loads(tasks.recv_bytes())
            if task is None:
                return
            pair = (task["pair"][0], task["pair"][1])
            try:
                record, sgf = play_record(roster, by_name, pair, task["k"], task["seed"])
                answer: dict[str, Any] = {"record": record, "sgf": sgf}
            except PlayerError as e:
                for n in pair:  # a failed engine is restarted for its next game
                    roster.drop(by_name[n])
                answer = {"error": str(e)}
            except Exception:  # a bug: the ladder stops and shows where
                results.send_bytes(json.dumps({"crash": traceback.format_exc()}).encode())
                return
            results.send_bytes(json.dumps(answer).encode())
    finally:
        roster.close()


def _die_with_parent(parent: int) -> None:
    """Linux: SIGTERM when the ladder's process dies, even mid-game (``kill -9`` included);
    elsewhere the poll in ``_worker`` notices between games."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the call
        os._exit(0)


@dataclass
class _Job:
    process: Any
    tasks: Connection
    results: Connection
    pair: tuple[str, str] | None = None


class GamePool:
    """``jobs`` worker processes; ``submit`` a game to an idle one, ``finished`` yields the
    answers as games end."""

    def __init__(self, jobs: int, setup: Setup) -> None:
        ctx = mp.get_context("spawn")  # torch and a forked parent's threads do not mix
        self._jobs: list[_Job] = []
        try:
            for i in range(jobs):
                task_r, task_w = ctx.Pipe(duplex=False)
                result_r, result_w = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_worker, args=(setup, task_r, result_w, os.getpid()),
                                   name=f"azserve-ladder-job-{i}", daemon=True)  # fmt: skip
                proc.start()
                task_r.close()
                result_w.close()
                self._jobs.append(_Job(proc, task_w, result_r))
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [j.process.pid for j in self._jobs]

    @property
    def busy(self) -> set[tuple[str, str]]:
        """The pairs being played now."""
        return {j.pair for j in self._jobs if j.pair is not None}

    def idle(self) -> int:
        return sum(j.pair is None for j in self._jobs)

    def submit(self, pair: tuple[str, str], k: int, seed: int) -> None:
        job = next(j for j in self._jobs if j.pair is None)
        job.tasks.send_bytes(json.dumps({"pair": list(pair), "k": k, "seed": seed}).encode())
        job.pair = pair

    def finished(self, timeout: float) -> Iterator[tuple[tuple[str, str], dict[str, Any]]]:
        """(pair, answer) of each game that ended within ``timeout`` seconds: ``{"record",
        "sgf"}``, or ``{"error"}`` (a player failed: the game is not stored). A worker that
        crashed or died raises AzserveError."""
        busy = {j.results: j for j in self._jobs if j.pair is not None}
        sentinels = {j.process.sentinel: j for j in busy.values()}
        for ready in wait([*busy, *sentinels], timeout):
            job = busy.get(ready) or sentinels[ready]  # type: ignore[call-overload]
            if job.pair is None:
                continue  # answered through the other handle already
            try:
                answer = json.loads(job.results.recv_bytes()) if job.results.poll() else None
            except (EOFError, OSError):
                answer = None
            if answer is None:
                if job.process.is_alive():
                    continue
                raise AzserveError(
                    f"ladder job {job.process.name} died (exit code {job.process.exitcode}) "
                    f"playing {job.pair[0]} v {job.pair[1]}"
                )
            if "crash" in answer:
                raise AzserveError(f"ladder job {job.process.name} failed:\n{answer['crash']}")
            pair, job.pair = job.pair, None
            yield pair, answer

    def close(self) -> None:
        """Stop the workers: games in flight are dropped (never stored, played again later)."""
        for j in self._jobs:
            try:
                j.tasks.send_bytes(b"null")
            except OSError:
                pass
        for j in self._jobs:
            j.process.join(timeout=5)
            if j.process.is_alive():
                j.process.terminate()
                j.process.join(timeout=5)
            if j.process.is_alive():
                j.process.kill()
                j.process.join()
            j.tasks.close()
            j.results.close()


__all__ = ["GamePool", "Setup"]
