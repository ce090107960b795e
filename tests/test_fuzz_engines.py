"""Fuzzing what users' programs feed the engines and the ladder: GTP lines, the analysis
engine's JSON lines, and the ladder's ``games.jsonl``. (UCI and USI are fuzzed through their
real commands in tests/test_uci.py's style below, since a GUI drives them as processes.)

What the file proves, for every generated input:

- **GTP** (the engine in-process, a random legal mover behind it): every line gets ``=``/``?``
  and the blank line GTP asks for, or nothing for an empty or comment line; nothing raises;
  after any sequence the engine still answers ``protocol_version``, and its ``printsgf`` record
  replays in the project's SGF reader to the engine's own board.
- **Analysis JSON** (the real ``analyze_lines`` on a tiny random Go net): one reply per line,
  an ``error`` where the line is not a request, with its ``id`` when one can be read; the good
  requests among the junk are answered as alone.
- **The ladder's file**: a damaged ``games.jsonl`` is refused with its path and line number, or
  read whole; the file's bytes are never changed (but a torn last line cut off); the records it
  accepts are ones the fit can use.
- **UCI and USI, as processes**: a stream of random, mutated, huge and binary lines, commands
  out of order and a ``go`` now and then; the engine answers every ``isready`` with ``readyok``
  and every handshake, exits 0 on ``quit``, and never prints a traceback.

``AZSERVE_FUZZ_EXAMPLES`` scales it (``make fuzz``: 200,000); the default keeps ``make test``
short. The long form's counts and findings are in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.games.go import sgf as go_sgf
from actors.games.go.rules import Go
from azserve.engines.gtp.board import Board
from azserve.engines.gtp.engine import COMMANDS, MAX_LINE, Engine, MoveSource
from azserve.engines.gtp.report import MoveInfo, Report
from azserve.errors import AzserveError

EXAMPLES = int(os.environ.get("AZSERVE_FUZZ_EXAMPLES", "1000"))
REPO = Path(__file__).resolve().parents[1]

# --- GTP ------------------------------------------------------------------------------------------


class RandomMoves(MoveSource):
    """A legal random move (or a pass): the tests are about the protocol, not the play."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    async def search(self, game, state, visits, deadline=None, on_slice=None):  # type: ignore[no-untyped-def]
        legal = [int(a) for a in game.legal_actions(state)]
        move = self.rng.choice(legal)
        r = Report((MoveInfo(move, 1, 0.5, 1.0, (move,)),), 0.5, 1)
        if on_slice is not None:
            on_slice(r)
        return r


# Analysis streams and file reads are driven through the real command elsewhere (test_gtp.py).
GTP_FUZZED = tuple(c for c in COMMANDS if "analyze" not in c and c != "loadsgf")
LETTERS = "ABCDEFGHJKLMNOPQRSTZabcdefghjkz"
vertex = st.one_of(
    st.builds(lambda c, n: f"{c}{n}", st.sampled_from(LETTERS), st.integers(-3, 30)),
    st.sampled_from(["pass", "PASS", "resign", "", "A", "11", "Z99", "a1b2"]),
)
colour = st.sampled_from(["b", "w", "black", "white", "B", "W", "x", "", "bw"])
number = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["1e999", "-0", "0x10", "½", "٣"]),
)
junk_word = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=12
)
arg = st.one_of(vertex, colour, number, junk_word)
command = st.one_of(
    st.sampled_from(GTP_FUZZED), st.sampled_from(GTP_FUZZED).map(str.upper), junk_word
)


@st.composite
def gtp_lines(draw: Any) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:  # bytes off the wire, decoded as a lenient reader would
        return draw(st.binary(max_size=64)).decode("latin-1")
    if kind == 1:  # longer than the engine reads
        return "play b " + "A1 " * draw(st.integers(MAX_LINE // 3, MAX_LINE))
    ident = draw(st.sampled_from(["", "", "7 ", "007 ", "-1 ", "99999999999999999999 "]))
    words = [draw(command), *draw(st.lists(arg, max_size=4))]
    comment = draw(st.sampled_from(["", "", " # a comment", "#", " \t"]))
    return ident + " ".join(words) + comment


def _check_gtp_reply(line: str, reply: str | None) -> None:
    if reply is None:  # an empty or comment line, nothing else
        cleaned = line.split("#", 1)[0].strip()
        assert not cleaned or all(ord(ch) < 32 or ord(ch) == 127 for ch in cleaned), line
        return
    assert reply[0] in "=?" and reply.endswith("\n\n"), (line, reply)
    assert "\n\n" not in reply[:-2], (line, reply)  # one response, not two


def _replays(engine: Engine) -> None:
    """printsgf's record, read back by the project's reader and played on a fresh board (as
    loadsgf does), is the engine's board."""
    reply = engine.reply("printsgf")
    assert reply is not None and reply.startswith("= "), reply
    rec = go_sgf.read(reply[2:].strip())
    board = Board(Go(rec.size, rec.komi))
    if rec.setup:
        board.place(rec.setup)
    for colour_, point in rec.moves:
        board.play(colour_, board.game.pass_action if point is None else point)
    assert bytes(board.state.board) == bytes(engine.board.state.board)
    assert board.state.color == engine.board.state.color


@settings(
    max_examples=max(50, EXAMPLES // 10),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(gtp_lines(), min_size=1, max_size=12), st.integers(0, 2**16))
def test_gtp_answers_every_line_in_its_form_and_keeps_its_board(
    lines: list[str], seed: int
) -> None:
    engine = Engine(RandomMoves(seed), size=9, playouts=4)
    # ``printsgf FILE`` writes FILE: in a directory of the example's own, not the repository
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        for line in lines:
            if line.strip().lower().startswith("quit"):
                continue  # the session would end here; quit is checked on its own below
            _check_gtp_reply(line, engine.reply(line))
    assert engine.reply("protocol_version") == "= 2\n\n"
    _replays(engine)


def test_gtp_quit_ends_the_session_with_its_answer() -> None:
    engine = Engine(RandomMoves(0))
    assert engine.reply("5 quit") == "=5\n\n" and engine.done


def test_gtp_plays_long_random_sessions_of_legal_commands() -> None:
    """Mostly well-formed sessions (play, genmove, undo, boardsize, handicap, scoring), the
    kind a controller sends, many moves deep, each checked as above."""
    rng = random.Random(11)
    letters = "ABCDEFGHJ"
    for session in range(max(4, EXAMPLES // 100)):
        engine = Engine(RandomMoves(session), size=9, playouts=4)
        for _ in range(60):
            r = rng.random()
            if r < 0.45:
                line = f"play {rng.choice('bw')} {rng.choice(letters)}{rng.randint(1, 9)}"
            elif r < 0.7:
                line = f"genmove {rng.choice(['b', 'w'])}"
            elif r < 0.8:
                line = "undo"
            elif r < 0.85:
                line = rng.choice(["clear_board", "boardsize 9", "komi 6.5", "showboard"])
            elif r < 0.9:
                line = rng.choice(["fixed_handicap 2", "place_free_handicap 3", "final_score"])
            else:
                line = rng.choice(["final_status_list dead", "time_left b 10 0", "name"])
            _check_gtp_reply(line, engine.reply(line))
        assert engine.reply("protocol_version") == "= 2\n\n"
        _replays(engine)


# --- the ladder's games.jsonl ---------------------------------------------------------------------


def _ladder_file(n: int) -> bytes:
    from azserve.arena.ladder.store import pair_of

    lines = []
    counts: dict[tuple[str, str], int] = {}
    rng = random.Random(n)
    names = ["random", "ckpt-100", "ckpt-200", "uci:stockfish"]
    for _ in range(n):
        a, b = rng.sample(names, 2)
        pair = pair_of(a, b)
        k = counts.get(pair, 0)
        counts[pair] = k + 1
        black, white = pair[k % 2], pair[1 - k % 2]
        lines.append(
            json.dumps(
                {
                    "pair": list(pair),
                    "k": k,
                    "seed": rng.randrange(2**31),
                    "game": "tictactoe",
                    "black": black,
                    "white": white,
                    "winner": rng.choice([0, 1, None]),
                    "reason": rng.choice(["score", "resign", "disputed"]),
                    "result": "1-0",
                    "moves": ["a1", "b2"],
                    "seconds": 0.1,
                },  # fmt: skip
                separators=(",", ":"),
            )
        )
    return ("\n".join(lines) + "\n").encode()


def _mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        i = rng.randrange(len(b)) if b else 0
        if op == 0 and b:  # flip a byte
            b[i] = rng.randrange(256)
        elif op == 1:  # insert junk
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2 and b:  # delete a run
            del b[i : i + rng.randint(1, 20)]
        elif op == 3:  # a field's value swapped for another type
            for key in (b'"k":', b'"pair":', b'"score":'):
                j = bytes(b).find(key, i)
                if j >= 0:
                    end = j + len(key)
                    b[end:end] = rng.choice([b'"x",', b"null,", b"[],", b"-1,", b"1e999,"])
                    break
        elif op == 4:  # a line duplicated
            lines = bytes(b).split(b"\n")
            k = rng.randrange(len(lines))
            lines.insert(k, lines[k])
            b = bytearray(b"\n".join(lines))
        else:  # torn at the end, as a kill mid-write leaves it
            del b[len(b) - rng.randint(1, 30) :]
    return bytes(b)


def test_a_damaged_ladder_file_is_refused_by_line_number_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    from azserve.arena.ladder.store import Store, results_of

    rng = random.Random(3)
    refused = read = 0
    for case in range(max(200, EXAMPLES // 2)):
        good = _ladder_file(rng.randint(1, 30))
        data = _mutate(good, rng)
        path = tmp_path / f"c{case}" / "games.jsonl"
        path.parent.mkdir()
        path.write_bytes(data)
        whole = data[: data.rfind(b"\n") + 1]  # what is kept: a torn last line is cut off
        try:
            store = Store(path)
        except AzserveError as e:
            refused += 1
            text = str(e)
            assert text.startswith(f"{path}:") and text.split(":")[1].isdigit(), text
            assert path.read_bytes() == whole, "a refused file must not change"
            continue
        try:
            read += 1
            assert path.read_bytes() == whole
            results_of(store.games)  # the fit's input: no record it accepted breaks it
        finally:
            store.close()
    assert refused and read  # both outcomes met (a fuzzer that never refuses proves little)


# --- the analysis engine's JSON lines -------------------------------------------------------------


@pytest.fixture(scope="module")
def go_agent() -> Any:
    from azserve.arena.agent import Agent
    from azserve.backends.base import BackendConfig, TorchConfig
    from azserve.config.schema import load_config
    from azserve.model.network import build_net

    cfg = load_config(None, ["game=go9", "net.blocks=1", "net.channels=8", "net.heads=[]",
                             "net.global_pool_every=0"])  # fmt: skip
    net = build_net(cfg.net, seed=0)
    state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    from actors.games import make_game
    from azserve.arena.agent import analysis_mcts

    agent = Agent(make_game("go9"), cfg.net, state, analysis_mcts(cfg),
                  backend=BackendConfig(device="cpu", torch=TorchConfig(compile="none")))  # fmt: skip
    yield agent
    agent.close()


def _analysis_lines(rng: random.Random, n: int) -> tuple[list[str], list[str]]:
    """The lines, and the ids of the well-formed requests among them."""
    good = {"id": "g", "moves": [["B", "E5"], ["W", "C3"]], "rules": "tromp-taylor",
            "komi": 7.5, "boardXSize": 9, "boardYSize": 9, "maxVisits": 4}  # fmt: skip
    out, good_ids = [], []
    for i in range(n):
        r = rng.random()
        req = dict(good, id=f"q{i}")
        if r < 0.2:
            out.append(json.dumps(req))
            good_ids.append(req["id"])
        elif r < 0.4:  # a field of the wrong type or value
            key = rng.choice(list(req))
            req[key] = rng.choice([None, -1, "x", [], {}, 1e308, [["B", "Z99"]], True])
            out.append(json.dumps(req))
        elif r < 0.55:  # an unknown field, or one missing
            if rng.random() < 0.5:
                req[rng.choice(["mvoes", "includeOwnership", "priority", "x" * 300])] = 1
            else:
                req.pop(rng.choice([k for k in req if k != "id"]))
            out.append(json.dumps(req))
        elif r < 0.75:  # mutated text
            text = bytearray(json.dumps(req).encode())
            for _ in range(rng.randint(1, 3)):
                j = rng.randrange(len(text))
                text[j] = rng.randrange(32, 127)
            out.append(text.decode("latin-1"))
        elif r < 0.85:
            out.append(rng.choice(["", "   ", "null", "[]", "42", '"id"', "{", "}{", "\x00\x01"]))
        else:  # nested deep, or huge
            out.append("[" * rng.randint(1, 5000) + "]" * rng.randint(0, 5000))
    return out, good_ids


def test_analysis_answers_every_line_once_and_the_good_ones_as_alone(go_agent: Any) -> None:
    from azserve.engines.analyze import serve_stream

    rng = random.Random(5)
    lines, good_ids = _analysis_lines(rng, max(200, EXAMPLES // 2))
    src, dst = io.StringIO("\n".join(lines) + "\n"), io.StringIO()
    serve_stream(src, dst, go_agent, "go9", sims=4)
    replies = [json.loads(r) for r in dst.getvalue().splitlines()]
    asked = [ln for ln in lines if ln.strip()]
    assert len(replies) == len(asked), (len(replies), len(asked))  # one answer a request
    answered = {json.dumps(r.get("id")) for r in replies if "error" not in r}  # ids may be {}
    assert good_ids and {json.dumps(i) for i in good_ids} <= answered  # each good one answered
    errors = [r for r in replies if "error" in r]
    assert errors and all(isinstance(r["error"], str) and r["error"] for r in errors)


# --- UCI and USI, as processes ---------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    """What a random stream of one engine protocol is made of (``_stream``)."""

    hello: str
    words: tuple[str, ...]
    """Its words, put together at random."""
    positions: tuple[str, ...]
    """``position`` set-ups (``fen ...``/``sfen ...``), some of them bad."""
    moves: tuple[str, ...]
    """Move texts, some illegal or not moves at all."""
    long_moves: str
    """Moves repeated thousands of times in one huge line."""
    gos: tuple[str, ...]
    open_ended: tuple[str, ...]
    ends: tuple[str, ...]
    """What ends an open-ended search, or not (``ponderhit`` after ``go infinite``)."""
    options: tuple[str, ...]
    values: tuple[str, ...]
    idle: tuple[str, ...]


UCI = Dialect(
    hello="uci",
    words=("uci", "isready", "ucinewgame", "position", "startpos", "fen", "moves", "go", "stop",
           "setoption", "name", "value", "Nodes", "Batch", "Algorithm", "e2e4", "e7e5", "g1f3",
           "a7a8q", "nodes", "movetime", "depth", "mate", "wtime", "btime", "winc", "binc",
           "infinite", "ponderhit", "debug", "register"),
    positions=("fen rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
               "fen 8/8/8/8/8/8/8/8 w - - 0 1", "fen k7/8/8/8/8/8/8/7K b - - 0 1",
               "fen not a fen", "fen 8/8/8/8/8/8/8/8/8/8 w"),
    moves=("e2e4", "e7e5", "g1f3", "b8c6", "zz", "e2e5", "0000"),
    long_moves="e2e4 ",
    gos=("go nodes 2", "go depth 1", "go movetime 5", "go mate 1", "go nodes -5", "go nodes x",
         "go wtime 10 btime 10"),
    open_ended=("go infinite",),
    ends=("stop",),
    options=("Nodes", "Batch", "Algorithm", "Nope"),
    values=("4", "-1", "puct", "gumbel", "x", ""),
    idle=("", "isready", "ucinewgame", "stop", "ponderhit"),
)  # fmt: skip

USI = Dialect(
    hello="usi",
    words=("usi", "isready", "usinewgame", "position", "startpos", "sfen", "moves", "go",
           "stop", "setoption", "name", "value", "USI_Hash", "USI_Ponder", "ResignValue",
           "7g7f", "3c3d", "P*5e", "8h2b+", "2b3c", "btime", "wtime", "byoyomi", "binc",
           "winc", "nodes", "infinite", "ponder", "ponderhit", "gameover", "win", "lose",
           "draw", "mate"),
    positions=("sfen lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1",
               "sfen lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
               "sfen 4k4/9/9/9/9/9/9/9/4K4 b 2P 1", "sfen 9/9/9/9/9/9/9/9/9 b - 1",
               "sfen not an sfen",
               "sfen lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b 99P 1"),
    moves=("7g7f", "3c3d", "8h2b+", "3a2b", "P*5e", "zz", "7g7e", "resign"),
    long_moves="7g7f 3c3d ",
    gos=("go nodes 2", "go btime 0 wtime 0 byoyomi 5", "go mate 1", "go nodes -5", "go nodes x",
         "go btime 10 wtime 10", "go btime 100 wtime 100 binc 5 winc 5"),
    open_ended=("go infinite", "go ponder"),
    ends=("stop", "ponderhit"),
    options=("USI_Hash", "ResignValue", "Nope"),
    values=("4", "-1", "true", "x", ""),
    idle=("", "isready", "usinewgame", "stop", "gameover win"),
)  # fmt: skip


def _stream(d: Dialect, rng: random.Random, n: int) -> list[str]:
    """``n`` random lines of dialect ``d`` after its handshake, and ``isready`` last."""
    out = [d.hello]
    for _ in range(n):
        r = rng.random()
        if r < 0.25:
            out.append(" ".join(rng.choice(d.words) for _ in range(rng.randint(1, 8))))
        elif r < 0.4:
            out.append(f"position {rng.choice(d.positions)}"
                       + rng.choice(["", f" moves {d.moves[0]}", " moves"]))  # fmt: skip
        elif r < 0.5:
            out.append("position startpos moves "
                       + " ".join(rng.choice(d.moves) for _ in range(rng.randint(0, 6))))  # fmt: skip
        elif r < 0.6:
            out.append(rng.choice(d.gos))
        elif r < 0.65:
            out += [rng.choice(d.open_ended), rng.choice(d.ends)]
        elif r < 0.75:
            out.append(f"setoption name {rng.choice(d.options)} value {rng.choice(d.values)}")
        elif r < 0.85:
            out.append(bytes(rng.randrange(1, 256) for _ in range(rng.randint(1, 40)))
                       .decode("latin-1").replace("\n", " ").replace("\r", " "))  # fmt: skip
        elif r < 0.9:
            out.append("position startpos moves " + d.long_moves * rng.randint(500, 5000))
        else:
            out.append(rng.choice(d.idle))
    return out + ["isready"]


FUZZ_TIMEOUT_S = int(os.environ.get("AZSERVE_FUZZ_TIMEOUT_S", "300"))


def _survives(command: str, ckpt: Path, lines: list[str], handshake: str) -> None:
    """``azserve COMMAND`` fed ``lines`` then ``quit``: exit 0, no traceback, a ``readyok`` for
    every ``isready`` and a ``HANDSHAKEok`` for every handshake line (answered at once, even
    while a search runs), and a ``bestmove`` when any ``go`` came."""
    from tests.test_cli import azserve_cmd

    proc = subprocess.run(
        [*azserve_cmd(), command, "--checkpoint", str(ckpt), "--sims", "2",
         "--set", "backend.torch.compile=none"],
        input="\n".join(lines) + "\nquit\n",
        capture_output=True,
        text=True,
        encoding="latin-1",
        timeout=FUZZ_TIMEOUT_S - 20,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    out = proc.stdout.splitlines()

    def asked(word: str) -> int:
        return sum(1 for ln in lines if ln.split()[:1] == [word])

    assert out.count("readyok") == asked("isready"), out[-8:]
    assert out.count(f"{handshake}ok") == asked(handshake)
    gos = sum(1 for ln in lines if ln.startswith("go ") or ln == "go")
    assert sum(1 for ln in out if ln.startswith("bestmove")) >= 1 or gos == 0


@pytest.mark.timeout(FUZZ_TIMEOUT_S)
def test_uci_survives_a_stream_of_junk_and_still_answers(tmp_path: Path) -> None:
    from tests.test_uci import chess_checkpoint

    lines = _stream(UCI, random.Random(9), max(200, EXAMPLES // 2))
    _survives("uci", chess_checkpoint(tmp_path), lines, "uci")


@pytest.mark.timeout(FUZZ_TIMEOUT_S)
def test_usi_survives_a_stream_of_junk_and_still_answers(tmp_path: Path) -> None:
    from tests.test_usi import shogi_checkpoint

    lines = _stream(USI, random.Random(10), max(200, EXAMPLES // 2))
    _survives("usi", shogi_checkpoint(tmp_path / "run"), lines, "usi")
