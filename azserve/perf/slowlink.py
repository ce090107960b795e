"""Delay with jitter on a namespaced host's links, where the kernel has no ``netem``.

``tc qdisc ... netem`` is the usual way to slow a link; this kernel answers "Specified qdisc
kind is unknown" (and has no ``fq`` either, so eBPF timestamps cannot stand in). The chaos
fleet makes delay as Toxiproxy does, in front of the TCP endpoints, but transparently: every
host runs one forwarder (``python -m azserve.perf.slowlink``), and an nftables ``nat`` table
in the host's namespace (``redirect_rules``) sends each TCP connection the host opens to
another host of the LAN to the forwarder on loopback. The forwarder reads where the connection
was going (``SO_ORIGINAL_DST``, from conntrack), opens its own connection there (with a
socket mark the table lets through, so the partition and loss rules and the rate limit still
act on it) and copies bytes both ways.

Normally it copies at once. The fleet's shared control file (JSON, ``{"ADDRESS": [DELAY_MS,
JITTER_MS], ...}``, polled every 0.1 s) slows a host: every chunk read on a connection from or
to a listed address is held ``DELAY_MS`` plus a uniform draw of up to ``JITTER_MS`` before it is
written on (both ways, so a round trip through a slowed host takes at least twice the delay).
A stream keeps its order, as TCP does: a chunk never leaves before the one read before it, so
jitter delays what follows it (head-of-line blocking) and reorders nothing.

Memory is bounded: a direction holds at most ``MAX_HELD`` bytes in flight; past that it stops
reading until the held bytes drain, so the sender's socket buffers fill and its TCP backs off,
as behind a slow link. A forwarder holds at most ``MAX_HELD`` bytes times twice its open
connections (a few per host in the fleet). Root only (nftables, ``SO_MARK``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import struct
import time
from collections import deque
from pathlib import Path

MARK = 0x4A5A
"""The forwarder's own connections carry this mark; the redirect lets them through."""
MAX_HELD = 4 << 20
"""Bytes a direction of a connection holds at most before it stops reading."""
_SO_ORIGINAL_DST = 80
_TABLE = "azlink"
_POLL_S = 0.1


def redirect_rules(subnet: str, own: str, port: int) -> str:
    """An nftables script sending the host's TCP connections to ``subnet`` (but its own
    address, and the forwarder's own connections) to the forwarder on ``port``."""
    return "\n".join([
        f"table ip {_TABLE} {{",
        "  chain out {",
        "    type nat hook output priority -100; policy accept;",
        f"    meta mark {MARK:#x} return",
        f"    ip daddr {own} return",
        f"    ip daddr {subnet} meta l4proto tcp redirect to :{port}",
        "  }",
        "}", "",
    ])  # fmt: skip


class Delays:
    """The control file's delays, re-read when it changes; ``{address: (delay_s, jitter_s)}``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.table: dict[str, tuple[float, float]] = {}
        self._stamp: tuple[int, int] | None = None

    def refresh(self) -> None:
        try:
            st = self.path.stat()
        except OSError:
            self.table, self._stamp = {}, None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            raw = json.loads(self.path.read_text() or "{}")
            table = {a: (float(d) / 1e3, float(j) / 1e3) for a, (d, j) in raw.items()}
        except (OSError, ValueError, TypeError) as exc:  # a half-written file: next poll
            print(f"slowlink: control file unreadable ({exc}); keeping the delays", flush=True)
            return
        self.table, self._stamp = table, stamp

    def of(self, *addresses: str) -> tuple[float, float]:
        """The slowest delay among ``addresses`` (a connection is slow if either end is)."""
        found = [self.table[a] for a in addresses if a in self.table]
        return max(found) if found else (0.0, 0.0)


def write_delays(path: Path, table: dict[str, tuple[float, float]]) -> None:
    """Replace the control file atomically: ``{address: (delay_ms, jitter_ms)}``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({a: [d, j] for a, (d, j) in table.items()}))
    os.replace(tmp, path)


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """Where a redirected connection was going (conntrack's record of it)."""
    raw = sock.getsockopt(socket.SOL_IP, _SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), port


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    delays: Delays,
    ends: tuple[str, str],
) -> None:
    """Copy one direction, each chunk held as ``delays`` says, in order, at most ``MAX_HELD``
    bytes held."""
    held: deque[tuple[float, bytes]] = deque()
    size = 0
    more = asyncio.Event()
    room = asyncio.Event()
    room.set()
    done = False

    async def send() -> None:
        nonlocal size
        while True:
            if not held:
                if done:
                    return
                more.clear()
                await more.wait()
                continue
            due, chunk = held[0]
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            held.popleft()
            size -= len(chunk)
            writer.write(chunk)
            await writer.drain()
            if size < MAX_HELD:
                room.set()

    sender = asyncio.create_task(send())
    last = 0.0
    try:
        while True:
            await room.wait()
            chunk = await reader.read(65536)
            if not chunk:
                break
            delay, jitter = delays.of(*ends)
            now = time.monotonic()
            due = max(last, now + delay + (random.uniform(0.0, jitter) if jitter else 0.0))
            last = due
            held.append((due, chunk))
            size += len(chunk)
            if size >= MAX_HELD:
                room.clear()
            more.set()
        done = True
        more.set()
        await sender
        if writer.can_write_eof():
            writer.write_eof()
    finally:
        sender.cancel()


class Forwarder:
    """The host's forwarder: accepts redirected connections on loopback and carries each to
    where it was going."""

    def __init__(self, own: str, control: Path) -> None:
        self.own = own
        self.delays = Delays(control)
        self.connections = 0
        self.failed = 0

    async def handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sock = cw.get_extra_info("socket")
        host, port = "?", 0
        try:
            host, port = original_destination(sock)
            out = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            out.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
            out.setblocking(False)
            await asyncio.get_running_loop().sock_connect(out, (host, port))
            sr, sw = await asyncio.open_connection(sock=out)
        except OSError as exc:  # refused or unreachable: the client sees its connection close
            self.failed += 1
            print(f"slowlink: to {host}:{port} failed ({exc})", flush=True)
            cw.close()
            return
        self.connections += 1
        print(f"slowlink: connection {self.connections} to {host}:{port}", flush=True)
        ends = (self.own, host)
        up = asyncio.ensure_future(_pipe(cr, sw, self.delays, ends))
        down = asyncio.ensure_future(_pipe(sr, cw, self.delays, ends))
        try:
            await asyncio.wait((up, down), return_when=asyncio.FIRST_EXCEPTION)
            await asyncio.gather(up, down)
        except (OSError, asyncio.IncompleteReadError):
            pass  # one side reset: close both
        finally:
            for t in (up, down):
                t.cancel()
            for w in (sw, cw):
                w.close()

    async def serve(self, port: int) -> None:
        server = await asyncio.start_server(self.handle, "127.0.0.1", port)
        print(f"slowlink: forwarding on 127.0.0.1:{port} for {self.own}", flush=True)
        async with server:
            while True:
                self.delays.refresh()
                await asyncio.sleep(_POLL_S)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m azserve.perf.slowlink", description=__doc__)
    p.add_argument("--own", required=True, help="this host's address")
    p.add_argument("--port", type=int, required=True, help="loopback port to accept on")
    p.add_argument("--control", type=Path, required=True, help="the shared delays file")
    args = p.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(Forwarder(args.own, args.control).serve(args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
