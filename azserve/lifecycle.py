"""Lifecycle of long-lived components: one state machine, watched owner tasks, stop on signals.

Every component with sockets or tasks (server, clients, receiver, sender) holds a
``Lifecycle``. ``begin_start`` refuses a second start; ``spawn`` creates a named task whose
reference is kept; an owner task that ends by raising *fails* the component at once: the state
becomes ``FAILED``, the component's ``on_failure`` fails its pending futures with a clear error,
and ``failed`` is set so that the process main can exit non-zero instead of serving a zombie.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import signal
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from azserve.errors import ComponentFailed

log = logging.getLogger("azserve.lifecycle")


class State(enum.Enum):
    """Where a component is in its life; ``value`` is what status replies show."""

    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class Lifecycle:
    """State and owned tasks of one component named ``name``."""

    def __init__(
        self, name: str, on_failure: Callable[[BaseException], None] | None = None
    ) -> None:
        self.name = name
        self.state = State.NEW
        self.error: BaseException | None = None
        """The exception that failed the component (None unless ``FAILED``)."""
        self._on_failure = on_failure
        self._tasks: set[asyncio.Task[Any]] = set()
        self._failed: asyncio.Event | None = None

    # --- state -----------------------------------------------------------------------------

    def begin_start(self) -> None:
        """NEW -> STARTING; anything else is a second start and raises ``RuntimeError``."""
        if self.state is not State.NEW:
            raise RuntimeError(f"{self.name} cannot start: it is {self.state.value}")
        self.state = State.STARTING

    def started(self) -> None:
        """STARTING -> RUNNING (unless a task failed meanwhile)."""
        if self.state is State.STARTING:
            self.state = State.RUNNING

    def begin_close(self) -> bool:
        """-> CLOSING. False when there is nothing to close (never started, or already closing
        or closed); a failed component still closes (its sockets are open)."""
        if self.state in (State.NEW, State.CLOSING, State.CLOSED):
            self.state = State.CLOSED if self.state is State.NEW else self.state
            return False
        self.state = State.CLOSING
        return True

    def closed(self) -> None:
        if self.state is not State.FAILED:
            self.state = State.CLOSED

    @property
    def running(self) -> bool:
        return self.state is State.RUNNING

    @property
    def failed(self) -> asyncio.Event:
        """Set when an owner task died (await it beside a stop event in a process main)."""
        if self._failed is None:
            self._failed = asyncio.Event()
            if self.state is State.FAILED:
                self._failed.set()
        return self._failed

    def check_running(self, error: type[Exception]) -> None:
        """Raise ``error`` naming the state unless RUNNING (calls into a closed component)."""
        if self.state is not State.RUNNING:
            detail = f": {self.error!r}" if self.error is not None else ""
            raise error(f"{self.name} is {self.state.value}{detail}")

    # --- tasks -----------------------------------------------------------------------------

    def spawn(
        self, coro: Coroutine[Any, Any, Any], name: str, owner: bool = True
    ) -> asyncio.Task[Any]:
        """Run ``coro`` as a named task. An ``owner`` task (one that must live as long as the
        component) that raises fails the component; any other task that raises is logged."""
        task = asyncio.create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._task_done(t, owner))
        return task

    def _task_done(self, task: asyncio.Task[Any], owner: bool) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if owner and self.state in (State.STARTING, State.RUNNING):
            self.fail(exc, task.get_name())
        else:
            log.error("task %s died", task.get_name(), exc_info=exc)

    def fail(self, exc: BaseException, where: str = "") -> None:
        """Mark the component failed (once): log, run ``on_failure``, set ``failed``."""
        if self.state is State.FAILED:
            return
        self.state = State.FAILED
        self.error = exc
        log.error("%s failed%s: %r", self.name, f" in {where}" if where else "", exc, exc_info=exc)
        if self._on_failure is not None:
            self._on_failure(ComponentFailed(f"{self.name} failed: {exc!r}"))
        self.failed.set()

    def tasks(self, names: Iterable[str] | None = None) -> list[asyncio.Task[Any]]:
        """Live tasks, optionally only those spawned under ``names``."""
        if names is None:
            return list(self._tasks)
        wanted = {f"{self.name}:{n}" for n in names}
        return [t for t in self._tasks if t.get_name() in wanted]

    async def cancel(self, names: Iterable[str] | None = None) -> None:
        """Cancel the live tasks (or only ``names``) and wait until they have ended."""
        tasks = self.tasks(names)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def stop_on_signals(
    signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM),
) -> asyncio.Event:
    """An event set by SIGINT/SIGTERM on the running loop: the one signal set-up of every
    process main."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    return stop


async def until_stopped(stop: asyncio.Event, *components: Lifecycle) -> Lifecycle | None:
    """Wait until ``stop`` is set or one of ``components`` fails; returns the failed one."""
    waiters: dict[asyncio.Future[Any], Lifecycle | None] = {
        asyncio.ensure_future(stop.wait()): None
    }
    for c in components:
        waiters[asyncio.ensure_future(c.failed.wait())] = c
    try:
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
    for w in done:
        if waiters[w] is not None:
            return waiters[w]
    return None
