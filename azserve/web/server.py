"""``azserve web``'s server: aiohttp on asyncio, read-only, bound to loopback unless told.

Routes (every one a GET; any other method is refused):

- ``/``: the page (``static/index.html``), ``/static/...``: its scripts, styles and the
  vendored libraries (``static/vendor/``, built by ``scripts/web_vendor.sh``);
- ``/api/runs``: the runs served; ``/api/runs/RUN``: one run's config, status rows and summary;
  ``/api/runs/RUN/metrics``: the learner's rows; ``/api/runs/RUN/networks``: its checkpoints
  with step, time, rating and scores; ``/api/runs/RUN/games`` and ``.../games/GAME``: its games,
  and one played through; ``/api/runs/RUN/files/PATH``: a file of the run (a game's SGF or
  PGN, report.png), confined to the run's directory;
- ``/api/strength``: every ladder's ratings;
- ``/api/events``: server-sent events (``azserve.web.watch``).

Safety: loopback by default; on another address an access token is required (made up and
printed when none is given), taken from ``?token=`` once and kept in a cookie. On loopback a
request must name a loopback host (``Host:``), which keeps another site's pages from reaching
the server through a DNS name of their own (DNS rebinding). Nothing writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import secrets
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

from actors.games import Game, make_game
from azserve.errors import AzserveError
from azserve.web import boards
from azserve.web.games import GameNotFound, list_games, load_game
from azserve.web.runs import Run, read_ratings, scalar_row
from azserve.web.watch import Subscriber, Watcher

log = logging.getLogger("azserve.web")

STATIC = Path(__file__).resolve().parent / "static"
TOKEN_COOKIE = "azserve_token"
HEARTBEAT_S = 15.0
"""A comment line on every event stream this often, so proxies and browsers keep it open."""
CACHED_GAMES = 64
"""Games played through and kept, newest used last out."""

_MEDIA = {
    ".sgf": "application/x-go-sgf",
    ".pgn": "application/x-chess-pgn",
    ".txt": "text/plain",
    ".toml": "text/plain",
    ".jsonl": "text/plain",
    ".log": "text/plain",
    ".json": "application/json",
    ".png": "image/png",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The host of a ``Host:`` header, without its port (``[::1]:8080`` -> ``::1``)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def confined(root: Path, rel: str) -> Path:
    """``root / rel`` when it is a regular file inside ``root`` (resolved: no ``..`` or
    symbolic link leads out); GameNotFound otherwise."""
    if "\x00" in rel or rel.startswith("/"):
        raise GameNotFound(f"no file {rel!r} in the run")
    path = (root / rel).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise GameNotFound(f"no file {rel!r} in the run")
    return path


class WebServer:
    """The pages of ``runs`` on ``host:port`` (port 0: a free one). ``async with`` it, or
    ``start``/``aclose``."""

    def __init__(
        self,
        runs: list[Run],
        host: str = "127.0.0.1",
        port: int = 8080,
        token: str | None = None,
        poll_s: float = 1.0,
    ) -> None:
        if not runs:
            raise AzserveError("no run to serve")
        self.runs = {r.id: r for r in runs}
        self.host = host
        self.port = port
        self.loopback = is_loopback(host)
        self.token = token if token or self.loopback else secrets.token_urlsafe(16)
        self.watcher = Watcher(runs, poll_s)
        self._runner: web.AppRunner | None = None
        self._games: dict[str, Game] = {}
        self._cache: OrderedDict[tuple[str, str, Any], dict[str, Any]] = OrderedDict()

    @property
    def url(self) -> str:
        """The address to open (with the token, when one is needed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        tail = f"?token={self.token}" if self.token else ""
        return f"http://{host}:{self.port}/{tail}"

    async def __aenter__(self) -> WebServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Read the runs, bind, serve. AzserveError when the port cannot be had."""
        if self._runner is not None:
            raise AzserveError("the web server is already started")
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC, follow_symlinks=False)
        app.router.add_get("/api/runs", self._runs)
        app.router.add_get("/api/strength", self._strength)
        app.router.add_get("/api/events", self._events)
        app.router.add_get("/api/runs/{run}", self._run)
        app.router.add_get("/api/runs/{run}/metrics", self._metrics)
        app.router.add_get("/api/runs/{run}/networks", self._networks)
        app.router.add_get("/api/runs/{run}/games", self._game_list)
        app.router.add_get("/api/runs/{run}/games/{game}", self._game)
        app.router.add_get("/api/runs/{run}/files/{path:.+}", self._file)
        await self.watcher.start()
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self.aclose()
            raise AzserveError(
                f"cannot serve on {self.host}:{self.port}: {exc.strerror or exc} (another --port?)"
            ) from None
        sockets = self._runner.addresses
        if self.port == 0 and sockets:
            self.port = int(sockets[0][1])

    async def aclose(self) -> None:
        """End the event streams, stop serving."""
        await self.watcher.aclose()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    # --- the guard ----------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"])
        if self.loopback and not is_loopback(_host_name(request.host)):
            raise web.HTTPForbidden(text="azserve web: this server answers loopback names only\n")
        set_cookie = False
        if self.token:
            given = request.query.get("token") or request.cookies.get(TOKEN_COOKIE, "")
            bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if not any(secrets.compare_digest(t, self.token) for t in (given, bearer) if t):
                raise web.HTTPUnauthorized(
                    text="azserve web: an access token is needed: open the address "
                    "`azserve web` printed (with ?token=...)\n"
                )
            set_cookie = "token" in request.query
        response = await handler(request)
        if set_cookie and not response.prepared:
            response.set_cookie(TOKEN_COOKIE, self.token or "", httponly=True, samesite="Strict")
        return response

    # --- pages and data -----------------------------------------------------------------------

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    def _run_of(self, request: web.Request) -> Run:
        run = self.runs.get(request.match_info["run"])
        if run is None:
            raise web.HTTPNotFound(
                text=json.dumps({"error": f"no run {request.match_info['run']!r}"}),
                content_type="application/json",
            )
        return run

    def _game_of(self, run: Run) -> Game | None:
        """The run's game (made once), None before its config is written. A game that cannot
        be made (a custom game whose file moved) is None too, and its games are not listed."""
        spec = run.game_spec()
        if spec is None:
            return None
        if spec not in self._games:
            try:
                self._games[spec] = make_game(spec)
            except (ValueError, ImportError, OSError) as exc:
                log.warning("run %s: game %r: %s", run.label, spec, exc)
                return None
        return self._games[spec]

    async def _runs(self, request: web.Request) -> web.StreamResponse:
        def describe(run: Run) -> dict[str, Any]:
            game = self._game_of(run)
            return {
                "id": run.id,
                "label": run.label,
                "path": str(run.path),
                "game": run.game_spec(),
                "board": boards.board_of(game) if game is not None else None,
            }

        return _json(
            {"runs": await asyncio.to_thread(lambda: [describe(r) for r in self.runs.values()])}
        )

    async def _run(self, request: web.Request) -> web.StreamResponse:
        run = self._run_of(request)

        def read() -> dict[str, Any]:
            files = ("report.png", "summary.json", "ladder/ladder.png", "curves.png")
            return {
                "id": run.id,
                "label": run.label,
                "path": str(run.path),
                "game": run.game_spec(),
                "config": run.config_text(),
                "status": run.status_rows(),
                "summary": run.summary(),
                "files": [f for f in files if (run.path / f).is_file()],
            }

        return _json(await asyncio.to_thread(read))

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        run = self._run_of(request)
        return _json({"rows": [scalar_row(r) for r in run.metrics.rows]})

    async def _networks(self, request: web.Request) -> web.StreamResponse:
        run = self._run_of(request)

        def read() -> list[dict[str, Any]]:
            players = []
            for d in run.ladders():
                players += (read_ratings(d) or {}).get("players", [])
            return run.networks(players)

        return _json({"networks": await asyncio.to_thread(read)})

    async def _strength(self, request: web.Request) -> web.StreamResponse:
        def read() -> list[dict[str, Any]]:
            ladders: dict[Path, dict[str, Any]] = {}
            for run in self.runs.values():
                for d in run.ladders():
                    if d in ladders:
                        ladders[d]["runs"].append(run.id)
                        continue
                    data = read_ratings(d)
                    if data is not None:
                        ladders[d] = {**data, "id": f"{d.parent.name}/{d.name}",
                                      "runs": [run.id]}  # fmt: skip
            return list(ladders.values())

        return _json({"ladders": await asyncio.to_thread(read)})

    async def _game_list(self, request: web.Request) -> web.StreamResponse:
        run = self._run_of(request)
        games = await asyncio.to_thread(lambda: list_games(run.path, self._game_of(run)))
        return _json({"games": games})

    async def _game(self, request: web.Request) -> web.StreamResponse:
        run = self._run_of(request)
        game_id = request.match_info["game"]
        game = self._game_of(run)
        if game is None:
            return _error(404, f"run {run.label}: no game to play through yet (no config.toml)")
        key = (run.id, game_id, _game_signature(run.path, game_id))
        if key in self._cache:
            self._cache.move_to_end(key)
            return _json(self._cache[key])
        try:
            data = await asyncio.to_thread(load_game, run.path, game, game_id)
        except GameNotFound as exc:
            return _error(404, str(exc))
        except (ValueError, AzserveError, OSError) as exc:  # a record that does not read
            return _error(422, f"game {game_id}: {exc}")
        self._cache[key] = data
        while len(self._cache) > CACHED_GAMES:
            self._cache.popitem(last=False)
        return _json(data)

    async def _file(self, request: web.Request) -> web.StreamResponse:
        run = self._run_of(request)
        try:
            path = confined(run.path, request.match_info["path"])
        except GameNotFound as exc:
            return _error(404, str(exc))
        media = _MEDIA.get(path.suffix, "application/octet-stream")
        headers = {"Content-Type": media + ("; charset=utf-8" if media == "text/plain" else "")}
        return web.FileResponse(path, headers=headers)

    # --- live -------------------------------------------------------------------------------

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        sub = self.watcher.subscribe()
        try:
            await response.write(b"retry: 2000\n: azserve web\n\n")
            await _pump(sub, response)
        except ConnectionResetError:
            pass  # the page went away
        finally:
            self.watcher.unsubscribe(sub)
        return response


async def _pump(sub: Subscriber, response: web.StreamResponse) -> None:
    """Write ``sub``'s events to the stream until its end (None), a heartbeat when quiet."""
    while True:
        try:
            event = await asyncio.wait_for(sub.queue.get(), HEARTBEAT_S)
        except TimeoutError:
            await response.write(b": heartbeat\n\n")
            continue
        if event is None:
            return
        data = dumps(event)
        await response.write(f"event: {event['type']}\ndata: {data}\n\n".encode())


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def finite(x: Any) -> Any:
    """``x`` with every NaN or infinity (a loss before the first step) as None: what JSON, and
    so the browser, can read."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def dumps(x: Any) -> str:
    """Strict JSON of ``x`` (``finite``), compact."""
    return json.dumps(finite(x), separators=(",", ":"), allow_nan=False, default=str)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=dumps)


def _game_signature(run: Path, game_id: str) -> Any:
    """What changes when a game id could name another game: the size of the file it is in
    (a replaced ladder store, a rewritten match record); self-play segments only grow."""
    if game_id.startswith("ladder-"):
        f = run / "ladder" / "games.jsonl"
    elif game_id.startswith("match-"):  # match-DIR-FILE: FILE is game-NNNN.suffix
        f = run / game_id.removeprefix("match-").replace("-game-", "/game-")
    else:
        return None
    try:
        return f.stat().st_mtime_ns
    except OSError:
        return None


async def serve(
    runs: list[Run],
    host: str,
    port: int,
    token: str | None,
    poll_s: float,
    ready: Callable[[WebServer], None],
    stop: asyncio.Event,
) -> None:
    """Serve ``runs`` until ``stop`` is set; ``ready`` is told the server once it listens."""
    async with WebServer(runs, host, port, token, poll_s) as server:
        ready(server)
        await stop.wait()


@contextlib.contextmanager
def serve_in_thread(
    runs: list[Run], host: str = "127.0.0.1", port: int = 8080, token: str | None = None
) -> Iterator[WebServer]:
    """The web server on a thread of its own (its own event loop) while the ``with`` body runs:
    ``azserve train --web`` serves its run beside the supervisor's loop. Raises what
    ``serve`` raised when it could not start."""
    started = threading.Event()
    box: dict[str, Any] = {}

    def main() -> None:
        async def go() -> None:
            stop = asyncio.Event()
            box["stop"] = (asyncio.get_running_loop(), stop)

            def ready(server: WebServer) -> None:
                box["server"] = server
                started.set()

            await serve(runs, host, port, token, 1.0, ready, stop)

        try:
            asyncio.run(go())
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc
        finally:
            started.set()

    thread = threading.Thread(target=main, name="azserve-web", daemon=True)
    thread.start()
    started.wait()
    if "error" in box:
        raise box["error"]
    try:
        yield box["server"]
    finally:
        loop, stop = box["stop"]
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)


__all__ = ["STATIC", "WebServer", "confined", "is_loopback", "serve", "serve_in_thread"]
