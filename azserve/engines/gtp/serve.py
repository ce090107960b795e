"""The GTP engine's process side: command lines read from a file descriptor (length-capped)
by a reader thread, handed to the engine one by one on an event loop, so that an analysis
stream runs in the background and ends when the next line arrives. ``Starting`` answers the
handshake while the net still loads."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from typing import IO

from azserve.engines.gtp.engine import MAX_LINE, Engine, MoveSource
from azserve.engines.gtp.report import Report

TOO_LONG = "\x00too long"
"""What the reader hands on for a line over MAX_LINE (the line itself is dropped)."""


def read_lines(fd: int, limit: int = MAX_LINE) -> Iterator[str]:
    """The lines read from file descriptor ``fd``, decoded; TOO_LONG for a line over ``limit``
    bytes (read to its end and dropped, never held whole). Raw ``os.read``: a thread blocked
    in a buffered stdin's ``readline`` stalled the net's compute thread (measured)."""
    buf = b""
    dropping = False
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            if buf and not dropping:
                yield buf.decode("utf-8", errors="replace")
            return
        buf += chunk
        while True:
            end = buf.find(b"\n")
            if end < 0:
                if len(buf) > limit:
                    if not dropping:
                        yield TOO_LONG
                    dropping, buf = True, b""
                break
            line, buf = buf[: end + 1], buf[end + 1 :]
            if dropping:
                dropping = False  # the end of the line too long
            elif len(line) > limit + 1:
                yield TOO_LONG
            else:
                yield line.decode("utf-8", errors="replace")


EARLY = ("protocol_version", "name", "known_command", "list_commands", "quit")
"""The commands answered before the net is loaded (they need no board or search)."""


class Starting:
    """An engine whose net still loads (``azserve.engines.loading``): the handshake (``EARLY``)
    answered at once, the first other command waits for ``build()`` (run on a thread) and
    goes to the engine it returns, as does everything after."""

    def __init__(self, build: Callable[[], Engine], name: str = "azserve") -> None:
        self._build = build
        self._engine: Engine | None = None
        self._early = Engine(_NoMoves(), name=name)  # answers EARLY only
        self.out: Callable[[str], None] = lambda text: None

    @property
    def done(self) -> bool:
        return (self._engine or self._early).done

    async def engine(self) -> Engine:
        if self._engine is None:
            self._engine = await asyncio.to_thread(self._build)
            self._engine.out = self.out
        return self._engine

    async def areply(self, line: str) -> str | None:
        words = line.split("#", 1)[0].split()
        if words and words[0].isdigit():
            words = words[1:]
        if self._engine is None and (not words or words[0].lower() in EARLY):
            return await self._early.areply(line)
        return await (await self.engine()).areply(line)

    async def stop(self) -> None:
        if self._engine is not None:
            await self._engine.stop()


class _NoMoves(MoveSource):
    """The handshake engine's search: never asked (it answers ``EARLY`` only)."""

    async def search(self, *args: object, **kwargs: object) -> Report:  # pragma: no cover
        raise RuntimeError("no search before the net is loaded")


async def serve_async(engine: Engine | Starting, src: int, write: Callable[[str], None]) -> None:
    """Read commands from file descriptor ``src`` (a reader thread) until ``quit`` or the end of input; reply
    to each. Any line, an empty one too, first ends a running analysis stream."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    engine.out = write

    def reader() -> None:
        try:
            for line in read_lines(src):
                loop.call_soon_threadsafe(lines.put_nowait, line)
        finally:
            loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=reader, daemon=True, name="gtp-reader").start()
    while True:
        line = await lines.get()
        await engine.stop()
        if line is None:
            return
        out = "? line too long\n\n" if line == TOO_LONG else await engine.areply(line)
        if out is not None:
            write(out)
        if engine.done:
            return


def serve(engine: Engine | Starting, stdin: int, stdout: IO[str]) -> None:
    """``serve_async`` on a fresh event loop, writing to ``stdout``."""

    def write(text: str) -> None:
        stdout.write(text)
        stdout.flush()

    asyncio.run(serve_async(engine, stdin, write))


__all__ = ["EARLY", "TOO_LONG", "Starting", "read_lines", "serve", "serve_async"]
