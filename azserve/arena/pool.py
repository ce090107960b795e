"""Games in parallel, one per worker process (``azserve ladder --jobs N``, ``azserve match
--jobs N``): each worker builds its own players once (its agents on its own backend, its own
engine processes) from a setup handed over when it is spawned, then plays one game per task.
The command's own process decides every task and keeps every record (``play_in_pool`` drives
the pool for both), so what a game is (its players, colours and seed) never depends on which
worker plays it, or when.

Tasks and answers travel as JSON over pipes (nothing is unpickled from them). A worker dies with
the command's process (``kill -9`` included: Linux's parent-death signal); its engines see their
input close and exit. A task's answer is its handler's dict; a handler's exception (a bug) stops
the command with the worker's traceback.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import traceback
from collections.abc import Callable, Generator, Hashable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from azserve.errors import AzserveError


class Handler(Protocol):
    """What a worker runs: built once from the setup, then one ``play`` per task."""

    def play(self, task: dict[str, Any]) -> dict[str, Any]: ...

    def close(self) -> None: ...


def _worker(
    factory: Callable[[Any], Handler],
    setup: Any,
    tasks: Connection,
    results: Connection,
    parent: int,
) -> None:
    """A worker's main: ``factory(setup)``, then each task's answer."""
    import torch

    _die_with_parent(parent)
    torch.set_num_threads(1)  # one game, one core
    handler = factory(setup)
    try:
        while True:
            if not tasks.poll(1.0):
                if os.getppid() != parent:  # the command is gone: no one to answer
                    return
                continue
            task = json.loads(tasks.recv_bytes())
            if task is None:
                return
            try:
                answer = handler.play(task)
            except Exception:  # a bug: the command stops and shows where
                results.send_bytes(json.dumps({"crash": traceback.format_exc()}).encode())
                return
            results.send_bytes(json.dumps(answer).encode())
    finally:
        handler.close()


def _die_with_parent(parent: int) -> None:
    """Linux: SIGTERM when the command's process dies, even mid-game (``kill -9`` included);
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
    key: Hashable | None = None
    """The task being played (its caller's key); None when idle."""


class GamePool:
    """``jobs`` worker processes running ``factory(setup)`` (a top-level callable: each worker
    imports it by name); ``submit`` a task to an idle one under a key, ``finished`` yields
    (key, answer) as games end."""

    def __init__(self, jobs: int, factory: Callable[[Any], Handler], setup: Any) -> None:
        ctx = mp.get_context("spawn")  # torch and a forked parent's threads do not mix
        self._jobs: list[_Job] = []
        try:
            for i in range(jobs):
                task_r, task_w = ctx.Pipe(duplex=False)
                result_r, result_w = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=_worker,
                    args=(factory, setup, task_r, result_w, os.getpid()),
                    name=f"azserve-job-{i}",
                    daemon=True,
                )
                proc.start()
                task_r.close()
                result_w.close()
                self._jobs.append(_Job(proc, task_w, result_r))
        except BaseException:
            self.close()
            raise

    @property
    def busy(self) -> set[Any]:
        """The keys of the tasks being played now."""
        return {j.key for j in self._jobs if j.key is not None}

    def idle(self) -> int:
        return sum(j.key is None for j in self._jobs)

    def submit(self, key: Hashable, task: dict[str, Any]) -> None:
        job = next(j for j in self._jobs if j.key is None)
        try:
            job.tasks.send_bytes(json.dumps(task).encode())
        except OSError:  # it died before its first game (a checkpoint it could not load...)
            job.process.join(timeout=5)
            raise AzserveError(
                f"{job.process.name} is gone (exit code {job.process.exitcode}); its error is "
                "on stderr above"
            ) from None
        job.key = key

    def finished(self, timeout: float) -> Iterator[tuple[Any, dict[str, Any]]]:
        """(key, answer) of each task that ended within ``timeout`` seconds. A worker that
        crashed or died raises AzserveError."""
        busy = {j.results: j for j in self._jobs if j.key is not None}
        sentinels = {j.process.sentinel: j for j in busy.values()}
        for ready in wait([*busy, *sentinels], timeout):
            job = busy.get(ready) or sentinels[ready]  # type: ignore[call-overload]
            if job.key is None:
                continue  # answered through the other handle already
            try:
                answer = json.loads(job.results.recv_bytes()) if job.results.poll() else None
            except (EOFError, OSError):
                answer = None
            if answer is None:
                if job.process.is_alive():
                    continue
                raise AzserveError(
                    f"{job.process.name} died (exit code {job.process.exitcode}) playing {job.key}"
                )
            if "crash" in answer:
                raise AzserveError(f"{job.process.name} failed:\n{answer['crash']}")
            key, job.key = job.key, None
            yield key, answer

    def close(self) -> None:
        """Stop the workers; tasks in flight are dropped."""
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


Task = tuple[Hashable, dict[str, Any]]
"""A task under its key."""


def play_in_pool(
    jobs: int,
    factory: Callable[[Any], Handler],
    setup: Any,
    next_task: Callable[[set[Any]], Task | None],
    timeout: float = 1.0,
) -> Generator[tuple[Any, dict[str, Any]], None, None]:
    """The driver of ``match --jobs`` and ``ladder --jobs``: a ``GamePool`` of ``jobs``
    workers kept busy with ``next_task(busy)`` (the keys in play now; None: nothing to start
    now) until it has nothing more and every game has ended; (key, answer) as games end. The
    caller handles an answer before the next tasks are asked for; the workers stop when the
    caller stops iterating."""
    pool = GamePool(jobs, factory, setup)
    try:
        while True:
            while pool.idle():
                task = next_task(pool.busy)
                if task is None:
                    break
                pool.submit(*task)
            if not pool.busy:
                return
            yield from pool.finished(timeout)
    finally:
        pool.close()


__all__ = ["GamePool", "Handler", "Task", "play_in_pool"]
