"""Chess's Stockfish move benchmark (actors/games/chess/benchmark.py): the shipped set, the
scoring on hand-made cases and on the set's own labels, the script's format, and the real
``azserve eval`` and training evaluation on a tiny random net."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import chess
import chess.engine
import pytest

from actors.games import benchmarks_by_name, make_game
from actors.games.benchmark import OVERALL
from actors.games.chess.benchmark import (
    FORMAT,
    MCTS_POSITIONS,
    SETS,
    SHIPPED,
    MoveQuality,
    Position,
    mcts_subset,
    read_set,
    score_moves,
    state_of,
)
from azserve.arena.curves import mistake_rates
from azserve.arena.evaluate import evaluate_checkpoint, scores_text
from azserve.cli.main import main
from azserve.config.schema import load_config
from azserve.run.report import eval_series
from tests.test_uci import REPO, chess_checkpoint

pytestmark = pytest.mark.usefixtures("torch_one_thread")

STOCKFISH = shutil.which("stockfish") or shutil.which("stockfish", path="/usr/games")


def _script() -> Any:
    """scripts/chess_benchmark_set.py as a module (it is not in a package)."""
    spec = importlib.util.spec_from_file_location(
        "chess_benchmark_set", REPO / "scripts" / "chess_benchmark_set.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_shipped_set_has_its_promised_size_and_sets() -> None:
    header, positions = read_set()
    assert header["format"] == FORMAT and header["stockfish"].startswith("Stockfish")
    assert header["depth"] >= 8 and header["multipv"] == "every legal move"
    assert len(positions) == header["positions"] >= 2000
    sizes = {s: sum(p.set == s for p in positions) for s in SETS}
    assert sizes == header["sets"]
    assert all(sizes[s] >= 300 for s in ("opening", "middlegame", "endgame")), sizes
    assert sizes["mate"] >= 250 and sizes["hanging"] >= 250, sizes
    assert SHIPPED.stat().st_size < 1 << 20  # shipped in the package: small
    assert len({" ".join(p.fen.split()[:4]) for p in positions}) == len(positions)  # no repeats


@pytest.mark.parametrize("spec", ["chess", "chess(max_plies=256,history=1)", "chess(max_plies=96)"])
def test_every_position_loads_with_each_legal_move_scored(spec: str) -> None:
    """Under the game's own rules (any cap: a position near it is set back in the game), each
    position's legal moves are exactly the labelled ones; each set holds what it says."""
    game = make_game(spec)
    _, positions = read_set()
    for p in positions:
        s = state_of(game, p)
        assert {game.uci(s, a) for a in game.legal_actions(s)} == set(p.scores), p.fen
        assert len(p.scores) > 1
        best = p.scores[p.best]
        if p.set == "mate":
            assert isinstance(best, str) and 1 <= int(best[1:]) <= 3, p
        else:
            assert not isinstance(best, str) and abs(best) <= 1000, p
        if p.set == "hanging":  # the best takes, and not taking is a choice there
            target = chess.Move.from_uci(p.best).to_square
            assert chess.Board(p.fen).piece_at(target) is not None, p
            assert any(chess.Move.from_uci(m).to_square != target for m in p.scores), p
    mates = [int(str(p.scores[p.best])[1:]) for p in positions if p.set == "mate"]
    assert {1, 2, 3} <= set(mates)


def _pos(scores: dict[str, int | str], kind: str = "middlegame") -> Position:
    ordered = dict(sorted(scores.items(), key=lambda kv: -_rank(kv[1])))
    return Position("8/8/8/8/8/8/8/8 w - - 0 1", kind, "", (), ordered)


def _rank(s: int | str) -> float:
    if isinstance(s, str):
        n = int(s[1:])
        return 1e6 - n if n > 0 else -1e6 - n
    return s


def test_the_scoring_on_hand_made_cases() -> None:
    # Centipawns: the loss is the best move's score less the move's; 200 is a blunder.
    p = _pos({"a": 30, "b": -150, "c": -170, "d": -2000})
    assert p.judge("a") == (0, False, False)
    assert p.judge("b") == (180, False, False)
    assert p.judge("c") == (200, True, False)
    assert p.judge("d") == (1000, True, False)  # -2000 is clipped to -1000: a loss of 1000
    # Won either way: scores past 1000 are clipped, so +2500 to +1100 loses nothing.
    assert _pos({"a": 2500, "b": 1100}).judge("b") == (0, False, False)
    # A forced mate thrown away is a blunder even when the position stays won; a mate is found
    # only as fast as the best move mates.
    p = _pos({"a": "#2", "b": "#2", "c": "#5", "d": 1500, "e": 300}, "mate")
    assert p.judge("a") == p.judge("b") == (0, False, True)
    assert p.judge("c") == (0, False, False)
    assert p.judge("d") == (0, True, False)
    assert p.judge("e") == (700, True, False)
    # Walking into a forced mate the best move avoids is a blunder; when every move is mated,
    # the longest resistance is no better by this measure.
    p = _pos({"a": -1200, "b": "#-3"})
    assert p.judge("b") == (0, True, False)
    assert _pos({"a": "#-5", "b": "#-2"}).judge("b") == (0, False, False)
    with pytest.raises(ValueError, match="not a legal move"):
        p.judge("z")

    result = score_moves(
        [_pos({"a": 0, "b": -300}, "opening"), _pos({"a": "#1", "b": 0}, "mate")], ["b", "a"]
    )
    assert result == {
        "blunder": {OVERALL: 0.5, "opening": 1.0, "mate": 0.0},
        "cp_loss": 150.0,
        "mates_found": 1.0,
    }


class Oracle:
    """An agent that plays each position's move by the set's labels (``pick``: the position's
    move), for the raw policy and the search alike."""

    def __init__(self, game: Any, pick: Any) -> None:
        self.game, self.pick = game, pick
        _, positions = read_set()
        self.by_key = {_key(p.fen): p for p in positions}
        self.calls: list[tuple[int, int]] = []

    def analyze_sync(self, states: list[Any], sims: int) -> list[SimpleNamespace]:
        self.calls.append((len(states), sims))
        out = []
        for s in states:
            p = self.by_key[_key(self.game.to_fen(s))]
            out.append(SimpleNamespace(move=self.game.parse_uci(s, self.pick(p))))
        return out


def _key(fen: str) -> str:
    return " ".join(fen.split()[:4])


def test_stockfish_best_moves_score_perfectly_and_the_worst_blunder() -> None:
    game = make_game("chess(max_plies=256,history=1)")
    bench = MoveQuality()
    _, positions = read_set()
    best = Oracle(game, lambda p: p.best)
    r = bench.run(best, sims=8)
    assert best.calls == [(len(positions), 0), (len(mcts_subset(len(positions))), 8)]
    assert r["positions"] == len(positions) and r["mcts_positions"] <= MCTS_POSITIONS
    for label in ("policy", "mcts"):
        assert r[label]["blunder"] == {OVERALL: 0.0, **{s: 0.0 for s in SETS}}
        assert r[label]["cp_loss"] == 0.0 and r[label]["mates_found"] == 1.0

    worst = bench.run(Oracle(game, lambda p: list(p.scores)[-1]), sims=0)
    assert "mcts" not in worst and "mcts_positions" not in worst
    assert worst["policy"]["blunder"][OVERALL] > 0.7 and worst["policy"]["mates_found"] == 0.0
    # Every hanging piece left hanging is a blunder; a few mate positions mate whatever the
    # move (slower: no mate found, but no blunder either).
    assert worst["policy"]["blunder"]["hanging"] == 1.0
    assert worst["policy"]["blunder"]["mate"] > 0.9
    assert worst["policy"]["cp_loss"] > 500
    text = bench.summary(worst)
    assert text.startswith("blunders: raw policy ") and "mates found 0.0%" in text


def test_the_set_is_written_as_the_script_writes_it(tmp_path: Path) -> None:
    """The script's record and file writer, fed labels by hand, give a file the benchmark
    reads back as written; the shipped set has the script's format and fields."""
    script = _script()
    assert script.FORMAT == FORMAT and tuple(script.TARGETS) == SETS
    board = chess.Board()
    for uci in ("e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "g8f6", "f3g5", "d7d5", "e4d5"):
        board.push_uci(uci)
    moves = sorted(board.legal_moves, key=lambda m: m.uci())
    lines = [(m, chess.engine.Cp(-10 * i)) for i, m in enumerate(moves)]
    lines[1] = (moves[1], chess.engine.Mate(-2))
    lines = sorted(lines, key=lambda ms: -script._order(ms[1]))
    row = script.record({"board": board}, "opening", lines)
    assert row["before"]["moves"] == ["g1f3", "b8c6", "f1c4", "g8f6", "f3g5", "d7d5", "e4d5"]
    path = tmp_path / "set.jsonl.gz"
    script.write_set(path, {"format": FORMAT, "positions": 1}, [row])
    first = path.read_bytes()
    script.write_set(path, {"format": FORMAT, "positions": 1}, [row])
    assert path.read_bytes() == first  # the same rows, the same bytes
    _, (p,) = read_set(path)
    assert p.fen == board.fen() and p.set == "opening" and p.scores[moves[1].uci()] == "#-2"
    assert p.best == moves[0].uci() and list(p.scores) == [m.uci() for m, _ in lines]
    s = state_of(make_game("chess"), p)
    assert make_game("chess").to_fen(s).split()[:4] == board.fen().split()[:4]

    header, shipped = read_set()
    assert header["script"] == "scripts/chess_benchmark_set.py"
    assert {"stockfish", "depth", "seed", "games", "sets"} <= set(header)
    script.write_set(tmp_path / "other.jsonl.gz", {"format": "other"}, [])
    with pytest.raises(ValueError, match="not a chess benchmark set"):
        read_set(tmp_path / "other.jsonl.gz")


@pytest.mark.skipif(STOCKFISH is None, reason="stockfish not installed (scripts/system_deps.sh)")
def test_stockfish_labels_five_positions_as_shipped() -> None:
    """Relabelled here by the script's own search, five positions get the shipped scores: the
    labels depend on the position alone (one thread, hash cleared) and the Stockfish version."""
    script = _script()
    header, positions = read_set()
    engine = chess.engine.SimpleEngine.popen_uci(STOCKFISH)
    try:
        engine.configure({"Threads": 1, "Hash": header["hash_mb"]})
        if engine.id.get("name") != header["stockfish"]:
            pytest.skip(
                f"{engine.id.get('name')} here, the set was labelled by {header['stockfish']}"
            )
        for p in positions[:: len(positions) // 5][:5]:
            lines = script.label(engine, chess.Board(p.fen), header["depth"])
            assert {m.uci(): script.label_text(s) for m, s in lines} == p.scores, p.fen
    finally:
        engine.quit()


def test_azserve_eval_and_training_report_the_chess_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tiny random chess net through ``azserve eval``, training's evaluation, the report's
    series and the learning curves' rates."""
    ckpt = chess_checkpoint(tmp_path / "run")
    assert main(["eval", "--checkpoint", str(ckpt), "--sims", "4"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    r = result["chess"]
    n = len(read_set()[1])
    assert r["positions"] == n and r["mcts_positions"] == len(mcts_subset(n))
    for label in ("policy", "mcts"):
        assert set(r[label]["blunder"]) == {OVERALL, *SETS}
        assert 0.0 <= r[label]["blunder"][OVERALL] <= 1.0 and 0 <= r[label]["cp_loss"] <= 1000
        assert 0.0 <= r[label]["mates_found"] <= 1.0
    assert "vs_random" not in result  # a game with a benchmark plays no match unless asked
    assert "blunders: raw policy" in captured.err and "MCTS " in captured.err

    cfg = load_config(
        REPO / "configs" / "chess.toml",
        [
            "net.blocks=1",
            "net.channels=8",
            "backend.torch.compile=none",
            "eval.sims=2",
            "eval.match_games=0",
        ],
    )
    policy_only = evaluate_checkpoint(cfg, ckpt, full=False)
    assert "mcts" not in policy_only["chess"]
    assert policy_only["chess"]["policy"] == r["policy"]  # deterministic, whatever the path
    benches = benchmarks_by_name(cfg.game)
    assert set(benches) == {"chess"}
    assert "blunders: raw policy" in scores_text(policy_only, tuple(benches.values()))
    rows = [{"step": 10, **policy_only}, {"step": 20, **result}]
    series = eval_series(rows, benches)
    assert set(series) == {"policy: blunders", "MCTS: blunders"}
    assert series["policy: blunders"][0] == (10, r["policy"]["blunder"][OVERALL])
    assert mistake_rates(result, "mcts", benches) == r["mcts"]["blunder"]
