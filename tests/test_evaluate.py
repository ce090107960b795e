"""Evaluation: the Connect Four benchmark file, mistake rates, tic-tac-toe optimality against
exhaustive minimax, and matches."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from actors.games import make_game
from actors.games.connect4_benchmark import SET_NAMES, MistakeRate, load_positions
from actors.games.minimax import OptimalMoves
from actors.games.solver import TicTacToeSolver
from azserve.arena.agent import Agent
from azserve.arena.evaluate import evaluate_checkpoint, match, resolve_data_path
from azserve.config.schema import EvalConfig, load_config, to_dict
from azserve.model.spec import NetConfig
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]
C4_DATA = EvalConfig().c4_positions
C4_FILE = resolve_data_path(C4_DATA)

pytestmark = pytest.mark.usefixtures("torch_one_thread")
SMALL_C4 = NetConfig(in_channels=2, height=6, width=7, num_actions=7, blocks=1, channels=8)
SMALL_TTT = NetConfig(in_channels=2, height=3, width=3, num_actions=9, blocks=1, channels=8)


def c4_agent(seed: int = 0) -> Agent:
    cfg = load_config(REPO / "configs" / "connect4.toml")
    return Agent(make_game("connect4"), SMALL_C4, None, cfg.mcts, seed=seed)


def ttt_agent(seed: int = 0) -> Agent:
    cfg = load_config(REPO / "configs" / "tictactoe.toml")
    return Agent(make_game("tictactoe"), SMALL_TTT, None, cfg.mcts, seed=seed)


def test_load_c4_benchmark() -> None:
    # The positions are project data: no file outside the repository is needed.
    assert resolve_data_path(C4_DATA).resolve() == REPO / "data" / "connect4" / "move_scores.tsv"
    rows = load_positions(C4_FILE)
    assert len(rows) == 1000
    counts = Counter(r["set"] for r in rows)
    assert set(counts) == set(SET_NAMES) and len(counts) == 6
    assert counts == {
        "Test_L3_R1": 250, "Test_L2_R1": 250, "Test_L2_R2": 250,
        "Test_L1_R1": 125, "Test_L1_R2": 100, "Test_L1_R3": 25,
    }  # fmt: skip
    game = make_game("connect4")
    for r in rows:
        # Zero-based columns: every position replays legally and is not over.
        assert all(0 <= m < 7 for m in r["moves"])
        state = game.from_moves(r["moves"])
        assert not game.is_terminal(state)
        assert r["sign_optimal"] and r["sign_optimal"] <= set(game.legal_actions(state))
    # The first line of the file: moves "6667...", sign_optimal_columns "7" (one-based).
    assert rows[0]["moves"][:4] == [5, 5, 5, 6]
    assert rows[0]["sign_optimal"] == {6}
    # Several-column sets are parsed whole.
    assert any(r["sign_optimal"] == set(range(7)) for r in rows)
    assert load_positions(C4_FILE, limit=10) == rows[:10]


def test_the_games_name_their_benchmarks() -> None:
    assert [type(b) for b in make_game("connect4").benchmarks()] == [MistakeRate]
    assert [type(b) for b in make_game("tictactoe").benchmarks()] == [OptimalMoves]
    assert make_game("othello").benchmarks() == ()


def test_connect4_mistakes_per_set() -> None:
    out = MistakeRate().run(c4_agent(), 0, C4_FILE)
    assert out["positions"] == 1000
    assert "mcts" not in out
    rates = out["policy"]
    assert set(rates) == {"overall", *SET_NAMES.values()}
    for name, rate in rates.items():
        assert 0.0 <= rate <= 1.0, name
    # overall is the position-weighted mean of the sets
    sizes = {SET_NAMES[s]: n for s, n in Counter(r["set"] for r in load_positions(C4_FILE)).items()}
    weighted = sum(rates[k] * n for k, n in sizes.items()) / 1000
    assert rates["overall"] == pytest.approx(weighted)


def test_connect4_mistakes_with_search() -> None:
    out = MistakeRate().run(c4_agent(), 4, C4_FILE, limit=40)
    assert out["positions"] == 40
    for label in ("policy", "mcts"):
        assert 0.0 <= out[label]["overall"] <= 1.0


def test_tictactoe_optimality_of_a_random_net() -> None:
    out = OptimalMoves("tictactoe").run(ttt_agent(), 2)
    assert out["positions"] == 4520
    for key in ("policy_optimal", "mcts_optimal"):
        assert 0.0 <= out[key] <= 1.0
    # Random play is far from perfect, but many positions have several optimal moves.
    assert out["policy_optimal"] < 0.95
    assert set(OptimalMoves("tictactoe").run(ttt_agent(), 0)) == {"positions", "policy_optimal"}


def test_solver_knows_the_game() -> None:
    solver = TicTacToeSolver()
    game = solver.game
    assert solver.value(game.initial_state()) == 0  # perfect play draws
    assert len(solver.reachable_nonterminal_states()) == 4520
    assert solver.optimal_actions(game.from_moves([0, 3, 1, 4])) == {2}


@pytest.mark.parametrize("games", [1, 4, 5])
def test_match_against_random_counts_every_game(games: int) -> None:
    result = match(ttt_agent(), None, games=games, sims=2, seed=1)
    assert set(result) == {"win", "draw", "loss"}
    assert result["win"] + result["draw"] + result["loss"] == games
    assert all(v >= 0 for v in result.values())


def test_a_match_stops_its_games_at_its_deadline() -> None:
    """Games still going at the deadline stop and are counted, not scored (a short run's final
    evaluation is bounded so); a deadline never met changes nothing."""
    import time

    from azserve.arena.evaluate import eval_scalars, scores_text

    agent = c4_agent()
    stopped = match(agent, None, games=4, sims=8, deadline=time.monotonic())
    assert stopped == {"win": 0, "draw": 0, "loss": 0, "unfinished": 4}
    assert "vs_random/score" not in eval_scalars({"vs_random": stopped}, "")
    assert "4 stopped at the time limit" in scores_text({"vs_random": stopped})
    free = match(agent, None, games=4, sims=8, seed=3)
    timed = match(agent, None, games=4, sims=8, seed=3, deadline=time.monotonic() + 600)
    assert timed == {**free, "unfinished": 0}


def test_a_timed_runs_final_evaluation_gets_half_the_run() -> None:
    from azserve.run.evaluations import FINAL_EVAL_MIN_S, final_eval_limit_s

    assert final_eval_limit_s(0) is None  # no time budget: no limit
    assert final_eval_limit_s(1) == FINAL_EVAL_MIN_S  # a 1-minute run: still a minute
    assert final_eval_limit_s(3) == 90.0  # a 3-minute run: half of it
    assert final_eval_limit_s(15) == 450.0
    assert final_eval_limit_s(120) == 600.0  # a 2-hour run: ten minutes at most


def test_a_periodic_evaluation_stops_its_games_at_the_runs_end(tmp_path: Path) -> None:
    """A run's periodic evaluation is given the time budget's end: its match games still going
    then stop, so the run's stop waits for no evaluation of an older checkpoint (a 5-minute
    shogi run's took many minutes after its stop, silently)."""
    import json
    import time
    from dataclasses import replace

    from azserve.config.schema import load_config, to_dict
    from azserve.run.evaluations import RunEvaluations
    from learner.checkpoint import save_checkpoint
    from learner.trainer import Trainer

    cfg = load_config(None, ["game=connect4", "net.blocks=1", "net.channels=8",
                             "eval.match_games=4", "eval.match_sims=8"])  # fmt: skip
    trainer = Trainer(cfg.net, replace(cfg.trainer, device="cpu"))
    save_checkpoint(tmp_path / cfg.checkpoint.dir, 10, 1, trainer.state_dict(), to_dict(cfg))
    notes: list[str] = []
    evals = RunEvaluations(cfg, tmp_path, notes.append)
    evals.start(deadline=time.monotonic())  # the budget is spent
    evals.join()
    row = json.loads((tmp_path / "eval.jsonl").read_text().splitlines()[-1])
    assert row["step"] == 10 and row["vs_random"]["unfinished"] == 4


def test_a_periodic_evaluation_ends_by_the_next_and_runs_below_training() -> None:
    """Its games stop at the next evaluation's time (a minute at least) or the budget's end,
    whichever comes first; its thread runs ``NICE`` below the process (the cores training
    leaves free: a shogi run's evaluation took a core of two from its server)."""
    import os
    import threading

    from azserve.run.evaluations import EVAL_MIN_SLOT_S, NICE, _lower_priority, periodic_deadline

    assert periodic_deadline(100.0, 0.0, 300.0, 0) == 400.0  # no budget: the next one's time
    assert periodic_deadline(100.0, 0.0, 10.0, 0) == 100.0 + EVAL_MIN_SLOT_S
    assert periodic_deadline(100.0, 0.0, 300.0, 5) == 300.0  # the budget ends first
    seen: list[int] = []

    def probe() -> None:
        _lower_priority()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    base = os.getpriority(os.PRIO_PROCESS, 0)  # this thread kept its own
    assert seen == [min(19, base + NICE)] and (base == 19 or base < seen[0])


def test_match_between_agents_and_strong_search_beats_random() -> None:
    result = match(ttt_agent(1), ttt_agent(2), games=4, sims=2, opening_plies=2)
    assert sum(result.values()) == 4
    # 200 simulations with exact terminal values never lose at tic-tac-toe to random play.
    strong = match(ttt_agent(), None, games=4, sims=200)
    assert strong["loss"] == 0 and sum(strong.values()) == 4


def test_evaluate_checkpoint(tmp_path: Path) -> None:
    cfg = load_config(
        REPO / "configs" / "tictactoe.toml",
        [
            "net.blocks=1",
            "net.channels=8",
            "eval.match_games=2",
            "eval.match_sims=2",
            "eval.sims=2",
        ],
    )
    paths = []
    for step, seed in ((10, 1), (20, 2)):
        trainer = Trainer(replace(cfg.net, seed=seed), type(cfg.trainer)(device="cpu"))
        paths.append(
            save_checkpoint(tmp_path, step, step // 10, trainer.state_dict(), to_dict(cfg))
        )
    out = evaluate_checkpoint(cfg, paths[1], full=True, previous=paths[0])
    assert out["tictactoe"]["positions"] == 4520 and "mcts_optimal" in out["tictactoe"]
    for key in ("vs_random", "vs_previous"):
        assert sum(out[key].values()) == 2
    quick = evaluate_checkpoint(cfg, paths[1], full=False)
    assert "mcts_optimal" not in quick["tictactoe"] and "vs_previous" not in quick


def test_eval_matches_are_refereed_games_sharing_openings_in_pairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``azserve eval``'s matches are played under the referee (``play_game_async``: one game
    loop for every judged game), colours alternating, each pair of games from one random
    opening."""
    from azserve.arena import evaluate, referee

    seen = []

    async def spy(game, black, white, opening=()):  # type: ignore[no-untyped-def]
        seen.append((black.name, white.name, list(opening)))
        return await referee.play_game_async(game, black, white, opening)

    monkeypatch.setattr(evaluate, "play_game_async", spy)
    result = match(ttt_agent(1), ttt_agent(2), games=4, sims=2, opening_plies=2)
    assert sum(result.values()) == 4
    assert [s[:2] for s in seen] == [("agent", "opponent"), ("opponent", "agent")] * 2
    assert len(seen[0][2]) == 2 and seen[0][2] == seen[1][2] and seen[2][2] == seen[3][2]
    match(ttt_agent(), None, games=2, sims=2)
    assert [s[:2] for s in seen[4:]] == [("agent", "random"), ("random", "agent")]
