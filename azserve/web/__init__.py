"""``azserve web``: a run watched in a browser. An asyncio server (aiohttp) that reads only what
runs already write (``runs``: logs, checkpoints' headers, ratings; ``games``: the ladder's,
matches' and self-play games) and pages that update live from server-sent events (``watch``);
boards for Go, chess, Othello, Connect Four and tic-tac-toe, text for any other game
(``boards``). docs/web.md."""

from azserve.web.runs import Run, find_runs, run_at
from azserve.web.server import WebServer, serve, serve_in_thread

__all__ = ["Run", "WebServer", "find_runs", "run_at", "serve", "serve_in_thread"]
