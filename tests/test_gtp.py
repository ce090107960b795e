"""``azserve gtp``: a GTP session against the real command (a tiny random-weights Go
checkpoint), every command the issue lists, the failures GTP asks for, and the engine's rules
in-process."""

from __future__ import annotations

import asyncio
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from actors.games import make_game
from azserve.config.schema import load_config, to_dict
from azserve.engines.gtp.board import Board, GtpError
from azserve.engines.gtp.engine import Engine, MoveSource
from azserve.engines.gtp.report import MoveInfo, Report
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer
from tests.test_cli import azserve_cmd

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]


def go_checkpoint(directory: Path, config: str = "go9") -> Path:
    """A learner checkpoint of a one-block, 8-channel Go net (9x9 unless ``config`` says): of
    go9.toml, the default, a features net with its target heads (its pooling, every third
    block, is beyond the one block)."""
    cfg = load_config(
        REPO / "configs" / f"{config}.toml",
        [
            "net.blocks=1",
            "net.channels=8",
            "net.global_pool_channels=4",
            "backend.torch.compile=none",
        ],
    )
    trainer = Trainer(replace(cfg.net, seed=3), replace(cfg.trainer, device="cpu"))
    return save_checkpoint(directory / "checkpoints", 40, 5, trainer.state_dict(), to_dict(cfg))


def replies(out: str) -> list[str]:
    """GTP replies: blocks ending in a blank line."""
    return [block.strip("\n") for block in out.split("\n\n") if block.strip()]


def test_a_gtp_session_with_the_real_command(tmp_path: Path) -> None:
    go_checkpoint(tmp_path / "run")
    session = [
        "protocol_version",
        "7 name",
        "version",
        "known_command genmove",
        "known_command kgs-genmove_cleanup",
        "list_commands",
        "boardsize 19",
        "boardsize 9",
        "clear_board",
        "komi 7.5",
        "play b D4",
        "play b E5",  # out of turn: GTP 2 allows it, white moves next
        "play w D4",  # occupied
        "play w Z1",  # off the board
        "genmove w",
        "undo",
        "final_score",
        "play w E6",
        "showboard",
        "# a comment line, ignored",
        "gogui-analyze_commands",
        "play black pass",
        "play white pass",
        "genmove b",  # the game is over: pass again
        "quit",
        "name",  # after quit: never read
    ]
    p = subprocess.run(
        azserve_cmd("gtp", "--checkpoint", str(tmp_path / "run"), "--sims", "2"),
        input="\n".join(session) + "\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    r = replies(p.stdout)
    assert r[0] == "= 2"
    assert r[1] == "=7 azserve"
    # The version names the checkpoint: package, game, step 40, a hash of the weights.
    assert re.fullmatch(r"= \d+\.\d+\.\d+\S*-go9-features-step40-w[0-9a-f]{8}", r[2]), r[2]
    assert r[3] == "= true" and r[4] == "= false"
    listed = r[5].removeprefix("= ").split("\n")
    assert {"genmove", "play", "undo", "final_score", "final_status_list", "lz-analyze",
            "kata-analyze", "genmove_analyze", "fixed_handicap", "loadsgf", "time_left",
            "showboard", "quit"} <= set(listed)  # fmt: skip
    assert r[6].startswith("? unacceptable size")
    assert r[7] == r[8] == r[9] == r[10] == r[11] == "="
    assert r[12] == "? illegal move: D4 is occupied"
    assert r[13].startswith("? invalid vertex 'Z1'")
    move = r[14].removeprefix("= ")
    game = make_game("go9")
    assert game.parse_move(move) in game.legal_actions(game.from_moves([30, 40]))
    assert r[15] == "="  # undo: white's move taken back
    # Two black stones on an empty board: all 81 points black's, minus komi.
    assert r[16] == "= B+73.5"
    assert r[17] == "="
    assert "X" in r[18] and "O" in r[18] and "A B C D E F G H J" in r[18]
    assert r[19] == "? unknown command 'gogui-analyze_commands'"
    assert r[20] == r[21] == "="
    assert r[22] == "= pass"
    assert r[23] == "="
    assert len(r) == 24  # nothing after quit


@pytest.mark.parametrize("size", [13, 19])
def test_gtp_plays_at_the_checkpoints_size(size: int, tmp_path: Path) -> None:
    """A 13x13 or 19x19 checkpoint: boardsize takes its size and refuses 9; genmove answers a
    vertex of that board."""
    go_checkpoint(tmp_path / "run", f"go{size}")
    session = ["boardsize 9", f"boardsize {size}", "clear_board", "play b K10", "genmove w"]
    p = subprocess.run(
        azserve_cmd("gtp", "--checkpoint", str(tmp_path / "run"), "--sims", "2"),
        input="\n".join([*session, "quit"]) + "\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    r = replies(p.stdout)
    assert r[0] == f"? unacceptable size: this network plays {size}x{size}"
    assert r[1] == r[2] == r[3] == "="
    game = make_game(f"go{size}")
    move = r[4].removeprefix("= ")
    state = game.from_moves([game.parse_move("K10")])
    assert game.parse_move(move) in game.legal_actions(state)


def test_the_engine_takes_only_its_own_size() -> None:
    e = Engine(Scripted([]), size=19)
    assert e.reply("boardsize 9") == "? unacceptable size: this network plays 19x19\n\n"
    assert e.reply("boardsize 19") == "=\n\n"
    assert e.reply("play b T19") == "=\n\n" and e.reply("play w A1") == "=\n\n"
    assert e.board.game.size == 19 and len(e.board.moves) == 2


class Scripted(MoveSource):
    """Plays a fixed list of moves (a fake: the tests are about the engine's protocol)."""

    def __init__(self, moves: list[int], winrate: float = 0.5) -> None:
        self.moves = moves
        self.winrate = winrate
        self.asked: list[tuple[int, int | None, float | None]] = []

    async def search(self, game, state, visits, deadline=None, on_slice=None):  # type: ignore[no-untyped-def]
        self.asked.append((state.color, visits, deadline))
        move = self.moves.pop(0)
        r = Report((MoveInfo(move, 10, self.winrate, 0.5, (move,)),), self.winrate, 11)
        if on_slice is not None:
            on_slice(r)
        return r


def test_the_engine_refuses_superko_and_suicide_and_keeps_serving() -> None:
    e = Engine(Scripted([]))
    # A ko: black E4 takes white D4; white taking back at once would recreate the board.
    for line in ["play b D5", "play w E5", "play b C4", "play w F4", "play b D3", "play w E3",
                 "play b A9", "play w D4", "play b E4"]:  # fmt: skip
        assert e.reply(line) == "=\n\n", line
    assert e.board.state.board[e.board.game.parse_move("D4")] == 0  # taken
    assert e.reply("play w D4") == "? illegal move: D4 repeats an earlier board (superko)\n\n"
    assert e.reply("play w A8") == "=\n\n"  # still serving
    # Suicide: black into a corner white surrounds.
    for line in ["play b E9", "play w A2", "play b E8", "play w B1"]:
        assert e.reply(line) == "=\n\n", line
    assert e.reply("play b A1") == "? illegal move: A1 is suicide\n\n"
    assert e.reply("frobnicate").startswith("? unknown command")
    assert e.reply("") is None and e.reply("# note") is None
    assert e.reply("komi x").startswith("? syntax error")
    moves = list(e.board.moves)
    assert e.reply("komi 6.5") == "=\n\n" and e.board.game.komi == 6.5
    assert e.board.moves == moves  # the moves stand through a komi change
    assert e.board.state.color == 0  # the suicide was not played: black still to move


def test_board_undo_and_errors() -> None:
    b = Board(make_game("go9"))  # type: ignore[arg-type]
    with pytest.raises(GtpError, match="no move played"):
        b.undo()
    b.play(0, 40)
    with pytest.raises(GtpError, match="is occupied"):
        b.play(1, 40)
    b.undo()
    assert b.state == b.game.initial_state()


def test_a_features_nets_board_keeps_that_games_states() -> None:
    """The default go9 net plays go9-features: the engine's board holds that game's states (the
    ko point, the last moves) as the game reaches them by the moves, through a komi change, a
    pass after the end and setup stones; before, the board held plain Go states and the net
    was fed 4 planes for its 11."""
    feats = make_game("go9-features")
    e = Engine(Scripted([]), game=feats)  # type: ignore[arg-type]
    moves = [1, 2, 9, 20, 19, 12, 11, 10]  # white's 10 takes black's 11: a ko at 11
    for i, a in enumerate(moves):
        assert e.reply(f"play {'bw'[i % 2]} {feats.format_move(a)}") == "=\n\n"
    assert e.board.state == feats.from_moves(moves)
    assert e.board.state.ko == 11 and e.board.state.last == (10, 11, 12)  # type: ignore[attr-defined]
    assert feats.encode(e.board.state).shape == (11, 9, 9)
    assert e.reply("komi 6.5") == "=\n\n"
    assert e.board.game.name == "go9-features" and e.board.game.core_params == (9, 6.5, 1.0)
    assert e.board.state == feats.from_moves(moves)
    for color in "bwb":  # the third pass comes after the end
        assert e.reply(f"play {color} pass") == "=\n\n"
    s = e.board.state
    assert (s.passes, s.ply, s.color, s.last) == (3, 11, 1, (81, 81, 81))  # type: ignore[attr-defined]
    assert e.reply("clear_board") == "=\n\n" and e.reply("set_free_handicap D4 F6") == "=\n\n"
    assert e.board.state == feats.initial_state()._replace(
        board=e.board.state.board, color=1)  # fmt: skip
    assert e.board.state.board.count(1) == 2  # type: ignore[attr-defined]
    assert Engine(Scripted([])).board.game.name == "go9"  # no game given: plain Go


def test_a_failed_analysis_stream_ends_and_the_session_goes_on() -> None:
    class Broken(MoveSource):
        async def search(self, game, state, visits, deadline=None, on_slice=None):  # type: ignore[no-untyped-def]
            raise RuntimeError("the net went away")

    out: list[str] = []
    e = Engine(Broken(), out=out.append)

    async def session() -> str | None:
        assert await e.areply("7 lz-analyze 10") is None
        await asyncio.sleep(0.05)
        await e.stop()  # the stream's blank line, though its search failed
        return await e.areply("name")

    assert asyncio.run(session()) == "= azserve\n\n"
    assert out == ["=7\n", "\n"]


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
def test_genmove_searches_with_the_configured_algorithm(algorithm: str) -> None:
    """The engine's search is ``make_search``'s for the checkpoint's ``mcts`` (compiled where
    the core plays Go), and what GTP shows is read from its ``report()``."""
    from actors.compiled_mcts import CompiledGumbel, CompiledMCTS
    from actors.games.compiled import compiled_available
    from actors.games.go.rules import Go
    from actors.search import PLAY_ALGORITHM, MCTSConfig
    from azserve.engines.gtp.engine import AgentMoves
    from azserve.engines.search import EngineSearch, engine_mcts

    game = Go(9, 7.5)

    async def evaluate(obs: object) -> tuple[object, float]:
        import numpy as np

        return np.zeros(game.num_actions, np.float32), 0.0

    checkpoints = MCTSConfig(algorithm="gumbel", temperature=0.0, temperature_moves=0)  # type: ignore[arg-type]
    # By default an engine plays match's and the ladder's search, whatever self-play used.
    assert engine_mcts(checkpoints).algorithm == PLAY_ALGORITHM == "puct"
    cfg = engine_mcts(checkpoints, algorithm=algorithm)
    lines: list[str] = []
    moves = AgentMoves(EngineSearch(evaluate, cfg), lines.append)
    engine = Engine(moves, game=game, sims=24)
    reply = engine.reply("genmove b")
    assert reply is not None and reply.startswith("= ")
    search = moves.engine.search_for(engine.board.game)
    if compiled_available(game):
        assert type(search) is {"puct": CompiledMCTS, "gumbel": CompiledGumbel}[algorithm]
    assert search.config.algorithm == algorithm
    assert lines and "24 simulations" in lines[-1] and " n/s" in lines[-1]
    assert "visits" in engine.notes[0]
