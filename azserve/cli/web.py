"""``azserve web``: watch runs in a browser (docs/web.md)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from azserve.config.argtypes import LOG_LEVELS, float_in, int_in, log_level


def register(sub: Any) -> None:
    p = sub.add_parser(
        "web",
        help="watch runs in a browser: status, losses, ratings, networks and games on a board",
        description="Serve web pages of one or more runs, updated live as the runs write their "
        "files: the status rows and losses, the ladder's ratings against time, every "
        "checkpoint with its rating and scores, and the games (self-play, ladder, matches) "
        "on a board with a move slider. Read-only; on loopback unless --host says otherwise, "
        "and then with an access token. RUN: a run directory (azserve train's), or a "
        "directory of runs (azserve compare's).",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; anything but loopback needs the token")  # fmt: skip
    p.add_argument("--port", type=int_in(0, 65535), default=8080, help="port (0: a free one)")
    p.add_argument("--token", default=None,
                   help="access token to require (default: none on loopback, a random one "
                   "printed with the address elsewhere)")  # fmt: skip
    p.add_argument("--poll", type=float_in(0.05), default=1.0,
                   help="seconds between looks at the runs' files")  # fmt: skip
    p.add_argument(
        "--log-level", type=log_level, default="INFO", help=f"one of {', '.join(LOG_LEVELS)}"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.web import WebServer, find_runs, serve

    runs = find_runs(args.runs)  # a bad path ends here, in one line

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def ready(server: WebServer) -> None:
            names = ", ".join(r.label for r in server.runs.values())
            print(f"azserve web: {names} at {server.url} (Ctrl-C stops)", file=sys.stderr,
                  flush=True)  # fmt: skip

        await serve(runs, args.host, args.port, args.token, args.poll, ready, stop)

    asyncio.run(main())
    return 0
