"""``azserve web``: the server on a real loopback port serving real run directories. A real
tic-tac-toe run (``azserve train --web 0``, watched while it trains, then ``azserve ladder``):
its JSON figures are its files' own, a row appended to its log reaches an open event stream,
its ladder and self-play games play through. Go and chess records written by the project's own
writers play through move for move. Safety: paths stay inside the run, loopback by default, a
token beyond it, a foreign Host refused, nothing but GET; a bad run path is one clear line.
In Debian's headless Chromium (where installed; tests/web_browser.py drives it): the status
page updates, the rating chart draws, a Go and a chess game step through on their boards, and a
bad URL answers 404 while the pages go on."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from actors.games import make_game
from actors.games.go import sgf
from azserve.web import WebServer, find_runs
from azserve.web.games import read_record
from learner.runlog import read_metrics
from tests.web_browser import Browser, chromium_path
from tests.web_runs import REPO, TrainedRun, azserve, game_run, train_watched

# One worker takes the module (make test's --dist loadgroup): its run is made once, not per worker.
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("web")]  # the run: ~40 s


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    root = tmp_path_factory.mktemp("web")
    return train_watched(root / "ttt", root / "train.log")


@pytest.fixture(scope="module")
def games_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("games")
    game_run(root, "go9")
    game_run(root, "chess")
    return root


@asynccontextmanager
async def served(*paths: Path, **kw: Any) -> AsyncIterator[tuple[WebServer, aiohttp.ClientSession]]:
    """The runs in ``paths`` on a free loopback port, and a client session for it."""
    kw.setdefault("poll_s", 0.1)
    async with WebServer(find_runs(list(paths)), port=0, **kw) as server:
        base = f"http://127.0.0.1:{server.port}"
        # unsafe: keep cookies for an IP address, as browsers do (the token's cookie)
        async with aiohttp.ClientSession(base, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            yield server, http


async def get(http: aiohttp.ClientSession, path: str, status: int = 200) -> Any:
    async with http.get(path) as r:
        body = await r.text()
        assert r.status == status, f"{path}: {r.status} {body[:300]}"
        return json.loads(body) if r.content_type == "application/json" else body


# --- the run's figures -----------------------------------------------------------------------------


def test_the_pages_updated_while_the_run_trained(trained: TrainedRun) -> None:
    """``azserve train --web 0`` printed its address and sent learner rows as they came."""
    assert trained.url.startswith("http://127.0.0.1:")
    (event,) = trained.events
    assert event["run"] == "ttt" and event["rows"][-1]["step"] > 0
    labels = [r["label"] for r in event["status"]]
    assert labels[:2] == ["state", "run"] and "learner" in labels


async def test_json_endpoints_return_the_runs_figures(trained: TrainedRun) -> None:
    run = trained.path
    rows = read_metrics(run / "metrics.jsonl")
    evals = read_metrics(run / "eval.jsonl")
    ratings = json.loads((run / "ladder" / "ratings.json").read_text())
    async with served(run) as (_, http):
        (desc,) = (await get(http, "/api/runs"))["runs"]
        assert desc["id"] == "ttt" and desc["game"] == "tictactoe"
        assert desc["board"]["kind"] == "grid" and desc["board"]["style"] == "tictactoe"

        page = await get(http, "/api/runs/ttt")
        assert page["config"] == (run / "config.toml").read_text()
        assert page["summary"] == json.loads((run / "summary.json").read_text())
        status = {r["label"]: r["text"] for r in page["status"]}
        assert status["state"].startswith("stopped: ")
        assert f"step {rows[-1]['step']}" in status["run"]
        assert f"loss {rows[-1]['loss']:.3f}" in status["learner"]
        assert "report.png" in page["files"]

        got = (await get(http, "/api/runs/ttt/metrics"))["rows"]
        assert [r["step"] for r in got] == [r["step"] for r in rows]
        assert got[-1]["loss"] == rows[-1]["loss"] and "games_by_version" not in got[-1]

        nets = (await get(http, "/api/runs/ttt/networks"))["networks"]
        kept = sorted(int(p.name[5:14]) for p in (run / "checkpoints").glob("ckpt-*"))
        assert sorted(n["step"] for n in nets if n["kept"]) == kept
        by_step = {n["step"]: n for n in nets}
        last = evals[-1]
        assert by_step[last["step"]]["scores"]["vs_random.win"] == last["vs_random"]["win"]
        for p in ratings["players"]:
            if p.get("run") == "ttt" and p["games"]:
                assert by_step[p["step"]]["rating"]["elo"] == pytest.approx(p["elo"])

        (ladder,) = (await get(http, "/api/strength"))["ladders"]
        assert ladder["id"] == "ttt/ladder" and ladder["runs"] == ["ttt"]
        assert ladder["games"] == ratings["games"]
        assert {p["player"] for p in ladder["players"]} == {p["player"] for p in ratings["players"]}
        assert next(p for p in ladder["players"] if p["player"] == "random")["anchor"]


async def test_sse_delivers_a_new_status_row_when_one_is_appended(
    trained: TrainedRun, tmp_path: Path
) -> None:
    run = tmp_path / "ttt"
    shutil.copytree(trained.path, run)
    last = read_metrics(run / "metrics.jsonl")[-1]
    async with served(run) as (_, http), http.get("/api/events") as stream:
        assert stream.headers["Content-Type"] == "text/event-stream"
        row = {**last, "time": last["time"] + 10, "step": 123456, "loss": 0.25}
        with (run / "metrics.jsonl").open("a") as f:  # as the learner's RunLog appends it
            f.write(json.dumps(row) + "\n")
        event = await asyncio.wait_for(_next_event(stream, "metrics"), 10)
    assert [r["step"] for r in event["rows"]] == [123456] and event["run"] == "ttt"
    status = {r["label"]: r["text"] for r in event["status"]}
    assert "step 123k" in status["run"] and "loss 0.250" in status["learner"]


async def _next_event(stream: aiohttp.ClientResponse, kind: str) -> dict[str, Any]:
    name = ""
    async for raw in stream.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and name == kind:
            return json.loads(line[6:])  # type: ignore[no-any-return]
    raise AssertionError("the stream ended")


async def test_a_new_checkpoint_and_a_new_game_are_announced(
    trained: TrainedRun, tmp_path: Path
) -> None:
    run = tmp_path / "ttt"
    shutil.copytree(trained.path, run)
    async with served(run) as (_, http), http.get("/api/events") as stream:
        newest = max((run / "checkpoints").glob("ckpt-*"))
        shutil.copy(newest, run / "checkpoints" / "ckpt-000099999.safetensors")
        assert (await asyncio.wait_for(_next_event(stream, "networks"), 10))["run"] == "ttt"
        nets = (await get(http, "/api/runs/ttt/networks"))["networks"]
        assert nets[0]["step"] == 30 and nets[0]["kept"]  # the header's step, not the name's
        with (run / "ladder" / "games.jsonl").open("a") as f:
            f.write((run / "ladder" / "games.jsonl").read_text().splitlines()[0] + "\n")
        assert (await asyncio.wait_for(_next_event(stream, "games"), 10))["run"] == "ttt"


# --- games ---------------------------------------------------------------------------------------


async def test_a_ladder_game_plays_through_with_its_record(trained: TrainedRun) -> None:
    store = [
        json.loads(x) for x in (trained.path / "ladder" / "games.jsonl").read_text().splitlines()
    ]
    async with served(trained.path) as (_, http):
        games = (await get(http, "/api/runs/ttt/games"))["games"]
        ladder = [g for g in games if g["source"] == "ladder"]
        assert len(ladder) == len(store) and ladder[0]["id"] == f"ladder-{len(store) - 1}"
        g = await get(http, f"/api/runs/ttt/games/{ladder[0]['id']}")
        moves = [f["move"]["text"] for f in g["frames"][1:]]
        assert moves == store[-1]["moves"]
        assert g["frames"][0]["position"]["cells"] == "." * 9
        record = await get(http, f"/api/runs/ttt/files/{g['record']}")
        assert record.splitlines()[-1].split() == moves


async def test_a_selfplay_game_plays_through_its_stored_positions(trained: TrainedRun) -> None:
    """Each stored position is the one the found moves reach, with the search's policy; the
    last move is played when it is the only one that ends the game, and said otherwise."""
    from azserve.web.boards import cells

    game = make_game("tictactoe")
    async with served(trained.path) as (_, http):
        games = (await get(http, "/api/runs/ttt/games"))["games"]
        selfplay = [g for g in games if g["source"] == "selfplay"][:8]
        assert selfplay and selfplay[0]["id"].startswith("selfplay-")
        for entry in selfplay:
            g = await get(http, f"/api/runs/ttt/games/{entry['id']}")
            frames, s = g["frames"], game.initial_state()
            for f in frames[1:]:
                s = game.apply(s, f["move"]["action"])
                assert f["position"]["cells"] == cells(game, s)
            if g["note"] == "":
                assert len(frames) == entry["moves"] + 1 and game.is_terminal(s)
            else:
                assert g["note"].startswith("its last move is one of "), g["note"]
                assert len(frames) == entry["moves"] and not game.is_terminal(s)
            stored = frames[: entry["moves"]]
            assert all(abs(sum(p["p"] for p in f["policy"]) - 1) < 0.02 for f in stored)


@pytest.mark.parametrize("spec", ["go9", "chess"])
async def test_go_and_chess_records_play_through_as_written(games_root: Path, spec: str) -> None:
    """Each move on the board is the record's: the SGF as the project's reader reads it; the
    PGN as python-chess reads it."""
    import chess.pgn

    run = games_root / spec
    game = make_game(spec)
    async with served(run) as (_, http):
        games = (await get(http, f"/api/runs/{spec}/games"))["games"]
        matches = [g for g in games if g["source"] == "match"]
        assert len(matches) == 2
        for entry in matches:
            g = await get(http, f"/api/runs/{spec}/games/{entry['id']}")
            text = (run / g["record"]).read_text()
            assert await get(http, f"/api/runs/{spec}/files/{g['record']}") == text
            played = [f["move"] for f in g["frames"][1:]]
            if spec == "go9":
                want = [game.pass_action if p is None else p for _, p in sgf.read(text).moves]
                assert [m["action"] for m in played] == want
                assert g["board"]["style"] == "go" and g["board"]["colLabels"][:9] == list(
                    "ABCDEFGHJ"
                )
            else:
                pgn = chess.pgn.read_game(__import__("io").StringIO(text))
                assert [m["uci"] for m in played] == [m.uci() for m in pgn.mainline_moves()]
                board = pgn.end().board()
                assert g["frames"][-1]["position"]["fen"].split()[0] == board.board_fen()
                assert g["board"]["kind"] == "chess"


@pytest.mark.parametrize("spec", ["go9", "chess"])
async def test_selfplay_moves_are_found_again_from_the_positions(
    games_root: Path, spec: str
) -> None:
    run = games_root / spec
    game = make_game(spec)
    async with served(run) as (_, http):
        games = (await get(http, f"/api/runs/{spec}/games"))["games"]
        selfplay = sorted((g for g in games if g["source"] == "selfplay"), key=lambda g: g["id"])
        for entry, record in zip(selfplay, sorted((run / "match").iterdir())):
            g = await get(http, f"/api/runs/{spec}/games/{entry['id']}")
            _, actions = read_record(game, record)
            found = [f["move"]["action"] for f in g["frames"][1:]]
            # The last stored position's move is found only when it is the one ending the game.
            assert found[: len(actions) - 1] == actions[:-1] or found == actions
            assert g["frames"][0]["policy"][0]["p"] == 0.75


# --- safety and errors -----------------------------------------------------------------------------


async def test_paths_outside_the_run_are_refused(trained: TrainedRun, tmp_path: Path) -> None:
    run = tmp_path / "ttt"
    shutil.copytree(trained.path, run)
    (tmp_path / "secret.txt").write_text("not yours")
    (run / "link.txt").symlink_to(tmp_path / "secret.txt")
    async with served(run) as (_, http):
        for path in (
            "/api/runs/ttt/files/..%2Fsecret.txt",
            "/api/runs/ttt/files/%2E%2E/secret.txt",
            "/api/runs/ttt/files/link.txt",
            "/api/runs/ttt/files/%2Fetc%2Fpasswd",
            "/api/runs/ttt/files/ladder",
            "/static/..%2F..%2Fweb%2Fserver.py",
        ):
            async with http.get(path) as r:
                assert r.status in (403, 404), path
                assert "not yours" not in await r.text()
        await get(http, "/api/runs/ttt/files/config.toml")


async def test_bad_urls_answer_404_and_the_server_keeps_serving(trained: TrainedRun) -> None:
    async with served(trained.path) as (_, http):
        await get(http, "/api/runs/nope", 404)
        await get(http, "/api/runs/ttt/games/ladder-999", 404)
        await get(http, "/api/runs/ttt/games/selfplay-999-0", 404)
        await get(http, "/api/runs/ttt/games/../../x", 404)
        await get(http, "/no/such/page", 404)
        async with http.post("/api/runs") as r:
            assert r.status == 405
        assert (await get(http, "/api/runs"))["runs"][0]["id"] == "ttt"
        assert "<title>azserve web</title>" in await get(http, "/")


async def test_loopback_by_default_and_a_token_beyond(trained: TrainedRun) -> None:
    runs = find_runs([trained.path])
    assert WebServer(runs).host == "127.0.0.1" and WebServer(runs).token is None
    beyond = WebServer(runs, host="0.0.0.0")
    assert beyond.token and f"?token={beyond.token}" in beyond.url
    async with served(trained.path) as (server, http):
        assert server._runner is not None
        assert [a[0] for a in server._runner.addresses] == ["127.0.0.1"]
        async with http.get("/api/runs", headers={"Host": "evil.example:80"}) as r:
            assert r.status == 403  # a DNS name pointed at loopback by another site
    async with served(trained.path, token="s3cret") as (server, http):
        await get(http, "/api/runs", 401)
        async with http.get("/?token=s3cret") as r:
            assert r.status == 200 and r.cookies["azserve_token"].value == "s3cret"
        await get(http, "/api/runs")  # the cookie now
        async with aiohttp.ClientSession() as other:
            async with other.get(f"http://127.0.0.1:{server.port}/api/runs",
                                 headers={"Authorization": "Bearer s3cret"}) as r:  # fmt: skip
                assert r.status == 200
            async with other.get(f"http://127.0.0.1:{server.port}/api/runs?token=wrong") as r:
                assert r.status == 401


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(azserve("web", *args), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)  # fmt: skip


def test_a_bad_run_path_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "other" / "deeper").mkdir(parents=True)
    for arg, says in (
        (tmp_path / "missing", "no such run directory"),
        (tmp_path / "file", "a file, not a run directory"),
        (tmp_path / "other", "not a run directory"),
    ):
        out = _cli(str(arg), "--port", "0")
        assert out.returncode == 1, out
        assert out.stderr.strip().count("\n") == 0 and says in out.stderr, out.stderr
        assert out.stderr.startswith("azserve web: ") and "Traceback" not in out.stderr


def test_the_command_serves_until_sigterm(trained: TrainedRun, games_root: Path) -> None:
    cmd = azserve("web", str(trained.path), str(games_root), "--port", "0")
    with subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO) as proc:
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            assert "ttt, chess, go9 at http://127.0.0.1:" in line, line
            url = line.split(" at ")[1].split()[0]

            async def check() -> list[str]:
                async with aiohttp.ClientSession() as http, http.get(url + "api/runs") as r:
                    return [x["id"] for x in (await r.json())["runs"]]

            assert asyncio.run(check()) == ["ttt", "chess", "go9"]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_train_takes_web_port() -> None:
    from azserve.cli.main import build_parser, subcommand

    parser = build_parser()
    train = subcommand(parser, "train")
    assert train is not None
    args = parser.parse_args(["train", "--config", "tictactoe", "--run-dir", "x", "--web", "8080"])
    assert args.web == 8080
    assert parser.parse_args(["train", "--config", "tictactoe", "--run-dir", "x"]).web is None
    web: Callable[..., Any] = parser.parse_args(["web", "runs/a"]).run
    assert callable(web) and parser.parse_args(["web", "runs/a"]).host == "127.0.0.1"


# --- in a browser ----------------------------------------------------------------------------------


@pytest.mark.skipif(chromium_path() is None, reason="no chromium (apt-get install chromium)")
async def test_the_pages_in_a_browser(
    trained: TrainedRun, games_root: Path, tmp_path: Path
) -> None:
    """The run's page, strength, a Go and a chess game, a bad URL: one browser, one server."""
    run = tmp_path / "ttt"
    shutil.copytree(trained.path, run)
    runs = find_runs([run, games_root])
    async with WebServer(runs, port=0, poll_s=0.1) as server, Browser() as b:
        base = f"http://127.0.0.1:{server.port}/"

        # The run: its status rows, its loss chart, and a row appended shows at once.
        await b.open(base + "#run")
        await b.wait_for("document.querySelectorAll('#status tr').length >= 6")
        await b.wait_for("document.querySelector('#chart-loss canvas') !== null")
        await b.wait_for("document.getElementById('live').classList.contains('on')")
        last = read_metrics(run / "metrics.jsonl")[-1]
        with (run / "metrics.jsonl").open("a") as f:
            f.write(json.dumps({**last, "time": last["time"] + 5, "step": 123456}) + "\n")
        await b.wait_for("document.getElementById('status').textContent.includes('step 123k')")

        # Strength: the ladder's chart and table.
        await b.open(base + "#strength")
        await b.wait_for("document.querySelector('#ladders canvas') !== null")
        assert await b.evaluate("document.querySelectorAll('#ladders table tr').length") > 2

        # A Go game: every frame's stones as the record's moves leave them.
        await b.open(base + "?run=go9#games/match-match-game-0000.sgf")
        await b.wait_for("document.querySelectorAll('#board svg circle.stone').length > 0")
        frames = await b.evaluate(
            "fetch('/api/runs/go9/games/match-match-game-0000.sgf').then(r => r.json())"
            ".then(g => g.frames.map(f => f.position.cells.replace(/\\./g, '').length))"
        )
        await b.evaluate("document.getElementById('first').click()")
        for k in (0, 1, 2, len(frames) - 1):
            await b.evaluate(
                f"(s => {{ s.value = {k}; s.dispatchEvent(new Event('input')); }})"
                "(document.getElementById('slider'))"
            )
            stones = await b.evaluate("document.querySelectorAll('#board svg circle.stone').length")
            assert stones == frames[k], k
        await b.evaluate("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowLeft'}))")
        assert await b.evaluate("document.getElementById('slider').value") == str(len(frames) - 2)

        # A chess game on chessground: 32 pieces at the start, the final FEN's at the end.
        await b.open(base + "?run=chess#games/match-match-game-0000.pgn")
        await b.wait_for("document.querySelectorAll('#board cg-board piece').length > 0")
        fen = await b.evaluate(
            "fetch('/api/runs/chess/games/match-match-game-0000.pgn').then(r => r.json())"
            ".then(g => g.frames[g.frames.length - 1].position.fen)"
        )
        pieces = sum(c.isalpha() for c in fen.split()[0])
        await b.wait_for(f"document.querySelectorAll('#board cg-board piece').length === {pieces}")
        await b.evaluate("document.getElementById('first').click()")
        await b.wait_for("document.querySelectorAll('#board cg-board piece').length === 32")

        # A bad URL is a 404, and the pages go on working.
        assert await b.evaluate("fetch('/no/such/page').then(r => r.status)") == 404
        assert await b.evaluate("fetch('/api/runs/nope').then(r => r.status)") == 404
        await b.open(base + "#networks")
        await b.wait_for("document.querySelectorAll('#networks tr').length > 1")
        assert not [line for line in b.console if "exception" in line], b.console


# --- boards (pure) ---------------------------------------------------------------------------------


def test_each_game_gets_its_board_and_a_custom_game_its_text() -> None:
    from actors.games.tictactoe import TicTacToe
    from azserve.web import boards

    styles = {"go9": "go", "go13": "go", "othello": "othello", "connect4": "connect4",
              "tictactoe": "tictactoe"}  # fmt: skip
    for spec, style in styles.items():
        assert boards.board_of(make_game(spec))["style"] == style
    assert boards.board_of(make_game("chess"))["kind"] == "chess"

    go = make_game("go9")
    s = go.initial_state()
    d4 = go.parse_move("D4")
    assert boards.where(go, s, d4) == {"target": (5, 3)}  # row 4 from the bottom of 9
    assert boards.where(go, s, go.pass_action) == {}
    after = boards.position(go, go.apply(s, d4))["cells"]
    assert after[5 * 9 + 3] == "X" and after.count(".") == 80
    chess = make_game("chess")
    e4 = chess.parse_move_at(chess.initial_state(), "e4")
    assert boards.move(chess, chess.initial_state(), e4) | {"by": 0} == {
        "action": e4, "text": "e4", "by": 0, "uci": "e2e4"}  # fmt: skip

    class Toy(TicTacToe):
        name = "toy"  # a game of one's own: no board of ours, its text

    toy = Toy()
    assert boards.board_of(toy)["kind"] == "text"
    assert boards.position(toy, toy.initial_state())["text"] == toy.render(toy.initial_state())
