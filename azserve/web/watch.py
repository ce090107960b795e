"""The live part of the pages: a watcher that polls the runs' files and tells every open page
what changed, as server-sent events.

Events (each a JSON object with ``type`` and ``run``, the run's id, or None for all):

- ``metrics``: the learner rows appended since the last poll (``rows``; ``reset``: the file
  was replaced, drop what you had) and, with them, ``status``: the status rows anew;
- ``networks``: a checkpoint was written or pruned, or an evaluation finished;
- ``strength``: a ladder's ratings changed;
- ``games``: a game was stored by the ladder or a match, or the journal began a segment (at
  each checkpoint: self-play's newer games);
- ``status``: the run stopped (``summary.json``) or its config appeared.

The watcher only reads: file sizes and times, and the new lines of the two logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from azserve.web.runs import Run, scalar_row

log = logging.getLogger("azserve.web")

QUEUE_EVENTS = 256
"""Events held for one slow page; past that its stream is closed (the browser reconnects and
fetches afresh)."""

Event = dict[str, Any]


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _listing(d: Path, pattern: str) -> tuple[Any, ...]:
    if not d.is_dir():
        return ()
    return tuple(sorted((p.name, _stat(p)) for p in d.glob(pattern)))


class Subscriber:
    """One open event stream: a bounded queue; ``None`` in it ends the stream."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(QUEUE_EVENTS + 1)
        self.overflowed = False

    def put(self, event: Event | None) -> None:
        if self.overflowed:
            return
        if event is not None and self.queue.qsize() >= QUEUE_EVENTS:
            self.overflowed = True
            event = None  # the end of the stream instead
        self.queue.put_nowait(event)


class Watcher:
    """Polls ``runs`` every ``poll_s`` seconds; ``subscribe`` gets a stream of events."""

    def __init__(self, runs: list[Run], poll_s: float = 1.0) -> None:
        self.runs = runs
        self.poll_s = poll_s
        self.subscribers: set[Subscriber] = set()
        self._seen: dict[tuple[str, str], Any] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Read what the runs have so far (no events for it), then poll in a task."""
        await asyncio.to_thread(self.scan)
        self._task = asyncio.create_task(self._loop(), name="azserve-web-watcher")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for sub in list(self.subscribers):
            sub.put(None)
        self.subscribers.clear()

    def subscribe(self) -> Subscriber:
        sub = Subscriber()
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def publish(self, event: Event) -> None:
        for sub in list(self.subscribers):
            sub.put(event)
            if sub.overflowed:
                self.subscribers.discard(sub)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                events = await asyncio.to_thread(self.scan)
            except OSError as exc:  # a run directory removed or unreadable: say so, go on
                log.warning("watching the runs: %s", exc)
                continue
            for event in events:
                self.publish(event)

    def scan(self) -> list[Event]:
        """One poll of every run: the events since the last (runs in a worker thread)."""
        events: list[Event] = []
        for run in self.runs:
            rows, reset = run.metrics.poll()
            if rows or reset:
                events.append(
                    {
                        "type": "metrics",
                        "run": run.id,
                        "rows": [scalar_row(r) for r in rows],
                        "reset": reset,
                        "status": run.status_rows(),
                    }
                )
            _, reset = run.evals.poll()
            changed = self._changed(
                run,
                {
                    "networks": (
                        _listing(run.checkpoint_dir(), "ckpt-*.safetensors"),
                        len(run.evals.rows),
                        reset,
                    ),
                    "strength": tuple(_stat(d / "ratings.json") for d in run.ladders()),
                    "games": (
                        _stat(run.path / "ladder" / "games.jsonl"),
                        # New segments only (one per checkpoint): self-play stores games
                        # every moment, and a page need not fetch its list that often.
                        tuple(p.name for p in sorted((run.path / "journal").glob("seg-*.azt"))),
                        _listing(run.path, "*/game-*.*"),
                    ),
                    "status": (_stat(run.path / "summary.json"), _stat(run.path / "config.toml")),
                },
            )
            for kind in changed:
                event: Event = {"type": kind, "run": run.id}
                if kind == "status":
                    event["status"] = run.status_rows()
                events.append(event)
        return events

    def _changed(self, run: Run, signatures: dict[str, Any]) -> list[str]:
        out = []
        for kind, sig in signatures.items():
            key = (run.id, kind)
            if key in self._seen and self._seen[key] != sig:
                out.append(kind)
            self._seen[key] = sig
        return out


__all__ = ["QUEUE_EVENTS", "Subscriber", "Watcher"]
