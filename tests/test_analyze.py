"""The JSON-lines analysis engine: one answer per line, in order; policies are distributions over
legal moves; visits count the new simulations; bad lines get an error and the engine goes on."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from actors.games import make_game
from azserve.arena.agent import Agent, agent_from_checkpoint
from azserve.config.schema import load_config, to_dict
from azserve.engines.analyze import analyze_lines, serve_stream
from azserve.errors import ConfigError, WeightsError
from azserve.files import atomic_write_bytes
from azserve.model.network import build_net
from azserve.model.weights import state_dict_to_bytes
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"
GAME = make_game("tictactoe")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A freshly saved learner checkpoint of a tic-tac-toe net (random weights, seed 3)."""
    cfg = load_config(TTT)
    trainer = Trainer(replace(cfg.net, seed=3), replace(cfg.trainer, device="cpu"))
    return save_checkpoint(
        tmp_path_factory.mktemp("ckpt"), 10, 1, trainer.state_dict(), to_dict(cfg)
    )


@pytest.fixture(scope="module")
def agent(checkpoint: Path) -> Agent:
    cfg, agent = agent_from_checkpoint(str(checkpoint))
    assert cfg.game == "tictactoe"
    return agent


def line(rid: object, moves: list[int], **extra: object) -> str:
    return json.dumps({"id": rid, "game": "tictactoe", "moves": moves, **extra})


POSITIONS = [[], [4], [0, 4], [0, 4, 8, 2], [0, 1, 2, 3, 4, 5]]


def check_policy(row: dict, moves: list[int]) -> np.ndarray:
    legal = GAME.legal_mask(GAME.from_moves(moves))
    policy = np.array(row["policy"])
    assert policy.shape == (9,)
    assert np.all(policy >= 0)
    assert policy.sum() == pytest.approx(1.0, abs=1e-5)
    assert np.all(policy[~legal] == 0)
    assert legal[row["move"]]
    assert -1.0 <= row["value"] <= 1.0
    return policy


def test_raw_policy_lines_in_order(agent: Agent) -> None:
    lines = [line(i, m) for i, m in enumerate(POSITIONS)]
    out = analyze_lines(lines, agent, "tictactoe", sims=0)
    assert [r["id"] for r in out] == list(range(len(POSITIONS)))
    for row, moves in zip(out, POSITIONS):
        policy = check_policy(row, moves)
        assert "visits" not in row
        assert row["move"] == int(np.argmax(policy))


def test_raw_policy_matches_the_network(agent: Agent, checkpoint: Path) -> None:
    cfg = load_config(TTT)
    trainer = Trainer(replace(cfg.net, seed=3), replace(cfg.trainer, device="cpu"))
    state = GAME.from_moves([0, 4])
    logits, value = agent.evaluator.infer(GAME.encode(state)[None])
    (row,) = analyze_lines([line("x", [0, 4])], agent, "tictactoe", sims=0)
    legal = GAME.legal_mask(state)
    want = np.where(legal, np.exp(logits[0] - logits[0][legal].max()), 0.0)
    np.testing.assert_allclose(row["policy"], want / want.sum(), atol=2e-6)
    assert row["value"] == pytest.approx(float(value[0]), abs=2e-6)
    # ... and the checkpoint's weights are the trainer's (seed 3), not a fresh default net.
    with torch.inference_mode():
        ref_logits, _ = trainer.model.eval()(torch.from_numpy(GAME.encode(state)[None]).float())
    np.testing.assert_allclose(logits, ref_logits.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sims", [1, 7, 32])
def test_visits_count_the_simulations(agent: Agent, sims: int) -> None:
    lines = [line(i, m) for i, m in enumerate(POSITIONS)]
    out = analyze_lines(lines, agent, "tictactoe", sims=sims)
    assert [r["id"] for r in out] == list(range(len(POSITIONS)))
    for row, moves in zip(out, POSITIONS):
        check_policy(row, moves)
        visits = np.array(row["visits"])
        legal = GAME.legal_mask(GAME.from_moves(moves))
        assert visits.shape == (9,) and visits.dtype.kind == "i"
        assert visits.sum() == sims  # the root gets exactly `sims` new simulations
        assert np.all(visits[~legal] == 0)
        assert visits[row["move"]] == visits.max()  # the most visited move


def test_analysis_is_deterministic(agent: Agent) -> None:
    lines = [line(i, m) for i, m in enumerate(POSITIONS)]
    assert analyze_lines(lines, agent, "tictactoe", 16) == analyze_lines(
        lines, agent, "tictactoe", 16
    )


@pytest.mark.parametrize(
    ("moves", "best"),
    [
        ([0, 3, 1, 4], 2),  # X wins at once on 2 (O also threatens 5)
        ([0, 4, 1], 2),  # O must block 2
        ([4, 0, 8, 2], 1),  # X must block 1
    ],
)
def test_search_finds_forced_moves_with_a_random_net(
    agent: Agent, moves: list[int], best: int
) -> None:
    # Terminal values are exact, so enough simulations find these whatever the network says.
    (row,) = analyze_lines([line(0, moves)], agent, "tictactoe", sims=200)
    assert row["move"] == best, row


BAD_LINES = [
    ('{"id": 1, "moves": [0, ', None, "malformed JSON"),
    ('{"id": 2, "moves": [0, 0]}', 2, "illegal"),
    ('{"id": 3, "moves": [9]}', 3, "illegal"),
    ('{"id": 4, "moves": [-1]}', 4, "illegal"),
    ('{"id": 5, "moves": [0, 3, 1, 4, 2]}', 5, "already over"),
    ('{"id": 6, "moves": [0, 3, 1, 4, 2, 5]}', 6, "after the game ended"),
    ('{"id": 7, "game": "chess", "moves": []}', 7, "unknown game 'chess'"),
    ('{"id": 8, "game": "connect4", "moves": []}', 8, "unknown game 'connect4'"),
    ("[1, 2, 3]", None, "expected a JSON object"),
    ('"moves"', None, "expected a JSON object"),
    ("42", None, "expected a JSON object"),
    ('{"id": 9, "moves": "0 4"}', 9, "moves must be a list"),
    ('{"id": 10, "moves": [0, 4.0]}', 10, "move #1 (4.0): not an action number or move text"),
    ('{"id": 11, "moves": [true]}', 11, "move #0 (True): not an action number or move text"),
    ('{"id": 12, "mvoes": [0]}', 12, "unknown field 'mvoes' (did you mean 'moves'?)"),
    ('{"id": 13, "moves": ["x"]}', 13, "move #0 ('x')"),
    ('{"id": 14, "fen": "8/8/8/8/8/8/8/8 w - - 0 1"}', 14, "unknown field 'fen'"),
]


@pytest.mark.parametrize("sims", [0, 4])
def test_bad_lines_get_errors_and_the_engine_goes_on(agent: Agent, sims: int) -> None:
    lines, expect = [], []
    for i, (text, rid, message) in enumerate(BAD_LINES):
        lines += [text, line(f"ok{i}", POSITIONS[i % len(POSITIONS)])]
        expect += [(rid, message), (f"ok{i}", None)]
    out = analyze_lines(lines, agent, "tictactoe", sims)
    assert len(out) == len(lines)
    for row, (rid, message), text in zip(out, expect, lines):
        assert row["id"] == rid, (text, row)
        if message is None:
            check_policy(row, json.loads(text)["moves"])
            assert ("visits" in row) == (sims > 0)
        else:
            assert set(row) in ({"id", "error"}, {"id", "error", "field"}), row
            assert message in row["error"], (text, row)


def test_lines_without_id_or_game(agent: Agent) -> None:
    out = analyze_lines(['{"moves": [4]}', "{}"], agent, "tictactoe", 0)
    assert [r["id"] for r in out] == [None, None]
    check_policy(out[0], [4])
    check_policy(out[1], [])


def test_serve_stream_answers_every_line_in_order(agent: Agent) -> None:
    lines = []
    for i in range(600):  # more than one chunk of MAX_CHUNK lines
        moves = POSITIONS[i % len(POSITIONS)]
        lines.append(line(i, moves) if i % 7 else f'{{"id": {i}, "moves": [0, 0]}}')
    src = io.StringIO("\n".join(lines[:300]) + "\n\n   \n" + "\n".join(lines[300:]) + "\n")
    dst = io.StringIO()
    assert serve_stream(src, dst, agent, "tictactoe", 2) == 600
    out = [json.loads(x) for x in dst.getvalue().splitlines()]
    assert [r["id"] for r in out] == list(range(600))  # blank lines get no answer
    for i, row in enumerate(out):
        if i % 7:
            assert sum(row["visits"]) == 2
        else:
            assert "illegal" in row["error"]


class _Broken(io.StringIO):
    """Input that fails after its first line, as undecodable stdin does."""

    def __iter__(self):
        yield '{"id": 1, "moves": []}\n'
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")


def test_serve_stream_ends_when_reading_fails(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors: list[type[BaseException]] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_type))
    dst = io.StringIO()
    assert serve_stream(_Broken(), dst, agent, "tictactoe", 0) == 1  # answers, then ends
    assert json.loads(dst.getvalue())["id"] == 1
    assert errors == [UnicodeDecodeError]  # the reader's error is reported, not swallowed


def test_plain_weights_need_a_game_or_config(tmp_path: Path) -> None:
    cfg = load_config(REPO / "configs" / "connect4.toml")
    path = tmp_path / "w.safetensors"
    atomic_write_bytes(path, state_dict_to_bytes(build_net(cfg.net, seed=1).state_dict()))
    with pytest.raises(ConfigError, match="carries no config"):
        agent_from_checkpoint(str(path))
    got, agent = agent_from_checkpoint(
        str(path), overrides=["backend.torch.compile=none"], game="connect4"
    )
    assert got.game == "connect4" and agent.game.name == "connect4"
    (row,) = analyze_lines(
        ['{"id": "c", "game": "connect4", "moves": [3, 3, 3]}'], agent, "connect4", 8
    )
    assert len(row["policy"]) == 7 and sum(row["visits"]) == 8
    with pytest.raises(WeightsError, match="not found"):
        agent_from_checkpoint(str(tmp_path / "missing.safetensors"), game="connect4")


def test_analyze_subprocess(checkpoint: Path) -> None:
    lines = [line(1, []), "not json", line(2, [0, 4]), line(3, [0, 3, 1, 4])]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "azserve.cli.main",
            "analyze",
            "--checkpoint",
            str(checkpoint),
            "--sims",
            "200",
        ],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=110,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [r["id"] for r in out] == [1, None, 2, 3]
    assert "malformed JSON" in out[1]["error"]
    for row, moves in ((out[0], []), (out[2], [0, 4]), (out[3], [0, 3, 1, 4])):
        check_policy(row, moves)
        assert sum(row["visits"]) == 200
    assert out[3]["move"] == 2


def test_a_checkpoint_is_evaluated_on_its_configs_compiled_backend(tmp_path: Path) -> None:
    """``backend.*`` of the checkpoint's config is honoured in-process as by the server when
    ``eval.compile = "backend"`` (the default, ``none``, runs analysis eager): a Go net whose
    config compiles (inductor, one bucket) runs on the compiled graph, in the plan's dtype, and
    agrees with eager fp32 on the same weights; two agents of that net share the backend (one
    compile), each its own version; closing one leaves the other."""
    cfg = load_config(
        REPO / "configs" / "go9-alphazero.toml",
        [
            "net.blocks=1",
            "net.channels=8",
            "backend.torch.compile=inductor",
            "backend.torch.batch_buckets=[8]",
            "eval.compile=backend",
        ],
    )
    trainer = Trainer(replace(cfg.net, seed=5), replace(cfg.trainer, device="cpu"))
    path = save_checkpoint(tmp_path, 10, 1, trainer.state_dict(), to_dict(cfg))
    _, compiled = agent_from_checkpoint(str(path))
    _, second = agent_from_checkpoint(str(path))
    plan = compiled.served.backend.status()
    assert plan["compile"] == "inductor" and plan["buckets"] == [8]
    assert second.served is compiled.served
    assert second.evaluator.version != compiled.evaluator.version
    go = make_game("go9")
    eager = Agent(go, cfg.net, trainer.state_dict()["model"], compiled.mcts_cfg)
    assert eager.served is not compiled.served
    states = [go.initial_state(), go.apply(go.initial_state(), 40)]
    p_compiled, v_compiled = compiled.policy_value(states)
    p_eager, v_eager = eager.policy_value(states)
    tol = 0.02 if plan["dtype"] == "bfloat16" else 1e-4
    np.testing.assert_allclose(p_compiled, p_eager, atol=tol)
    np.testing.assert_allclose(v_compiled, v_eager, atol=tol)
    compiled.close()
    (a,) = second.analyze_sync(states[:1], 16)  # the shared backend still serves the other
    assert a.visits is not None and a.visits.sum() == 16


def test_moves_as_text_and_the_answer_in_the_games_notation(agent: Agent) -> None:
    """A move may be the game's text (tic-tac-toe's is the cell number) and the answer says
    its move in that notation too."""
    out = analyze_lines(
        [line(1, [0, 4]), json.dumps({"id": 2, "moves": ["0", "4"]})], agent, "tictactoe", 0
    )
    assert out[0]["policy"] == out[1]["policy"]
    assert out[1]["move_text"] == GAME.format_move(out[1]["move"])


def test_a_chess_request_starts_from_its_fen_and_speaks_moves(tmp_path: Path) -> None:
    """Chess: ``fen`` sets the position (a bogus one is an error naming the field, not the
    start position analysed), moves may be UCI or SAN, the answer's move is SAN."""
    from tests.test_uci import chess_checkpoint

    _, chess = agent_from_checkpoint(str(chess_checkpoint(tmp_path)))
    fen = "6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1"  # Ra8 mates
    rows = analyze_lines(
        [
            json.dumps({"id": "fen", "fen": fen}),
            json.dumps({"id": "bogus", "fen": "not a fen"}),
            json.dumps({"id": "uci", "moves": ["e2e4", "e7e5"]}),
            json.dumps({"id": "san", "moves": ["e4", "e5"]}),
            json.dumps({"id": "typo", "mvoes": ["e4"]}),
            json.dumps({"id": "illegal", "moves": ["e5"]}),
        ],
        chess,
        "chess",
        2,
    )
    by = {r["id"]: r for r in rows}
    game = chess.game
    start = game.from_fen(fen)
    assert by["fen"]["move"] in game.legal_actions(start)
    assert by["fen"]["move_text"] == game.san(start, by["fen"]["move"])
    policy = np.array(by["fen"]["policy"])
    assert np.array_equal(policy > 0, game.legal_mask(start))  # the FEN's moves, not the start's
    assert game.parse_move_at(start, "Ra8") in game.legal_actions(start)
    assert by["bogus"]["field"] == "fen" and "FEN" in by["bogus"]["error"]
    assert by["uci"]["policy"] == by["san"]["policy"]
    after = game.from_moves([game.parse_move_at(game.initial_state(), "e4")])
    after = game.apply(after, game.parse_move_at(after, "e5"))
    assert by["san"]["move"] in game.legal_actions(after)
    assert by["typo"]["field"] == "mvoes" and "did you mean 'moves'" in by["typo"]["error"]
    assert by["illegal"]["field"] == "moves" and "move #0 ('e5')" in by["illegal"]["error"]
