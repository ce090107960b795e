"""Gumbel AlphaZero search and playout cap randomization, on exact expectations: mctx's
sequential-halving schedules, bandits whose improved policy is known in closed form, forced
wins found with few simulations, and self-play recording only the fully searched moves."""

from __future__ import annotations

import asyncio
import logging
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from actors import selfplay
from actors.config import ActorsConfig
from actors.games import ConnectFour, Game, TicTacToe
from actors.games.solver import TicTacToeSolver
from actors.gumbel import GumbelSearch, completed_q
from actors.search import GumbelMoves, MCTSConfig, PuctMoves, considered_visits
from actors.searches import make_search
from actors.selfplay import SelfPlay, SelfPlayStats, play_game
from actors.sinks import BaseSink
from azserve.client import ClientConfig, EvalClient
from azserve.config.schema import load_config
from azserve.errors import ConfigError
from azserve.perf.selfplay import parse_status_lines
from tests.conftest import MakeServer

pytestmark = pytest.mark.timeout(60)

TTT, C4 = TicTacToe(), ConnectFour()


class Bandit(Game):
    """One move, then over: arm ``a`` is worth ``q[a]`` to the player who pulls it."""

    name = "bandit"
    obs_shape = (1, 1, 1)

    def __init__(self, q: list[float]) -> None:
        self.q = q
        self.num_actions = len(q)

    def initial_state(self) -> tuple:
        return ()

    def legal_actions(self, s: tuple) -> list[int]:
        return [] if s else list(range(self.num_actions))

    def apply(self, s: tuple, a: int) -> tuple:
        return (a,)

    def is_terminal(self, s: tuple) -> bool:
        return bool(s)

    def terminal_value(self, s: tuple) -> float:
        return -self.q[s[0]]  # for the side to move after the pull: the other player

    def to_play(self, s: tuple) -> int:
        return len(s)

    def encode(self, s: tuple) -> np.ndarray:
        return np.zeros(self.obs_shape, dtype=np.uint8)

    def symmetries(self, obs: np.ndarray, policy: np.ndarray) -> list:
        return [(obs, policy)]

    def render(self, s: tuple) -> str:
        return repr(s)


def constant(logits: np.ndarray, value: float = 0.0):
    """An evaluator returning the same logits and value everywhere, counting its calls."""

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        evaluate.calls += 1
        return np.asarray(logits, dtype=np.float32), value

    evaluate.calls = 0
    return evaluate


def gumbel(game: Game, seed: int = 0, **overrides: Any) -> GumbelSearch:
    return GumbelSearch(
        game, MCTSConfig(algorithm="gumbel", **overrides), np.random.default_rng(seed)
    )


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def sigma_reference(
    raw: float, prior: np.ndarray, n: np.ndarray, q: np.ndarray, c_visit=50.0, c_scale=0.1
) -> np.ndarray:
    """Appendix D of the paper, written out with numpy (mctx's transform, independently)."""
    seen = n > 0
    if seen.any():
        mixed = (raw + n.sum() * (prior[seen] * q[seen]).sum() / prior[seen].sum()) / (1 + n.sum())
    else:
        mixed = raw
    done = np.where(seen, q, mixed)
    done = (done - done.min()) / max(done.max() - done.min(), 1e-8)
    return (c_visit + n.max()) * c_scale * done


# --- the schedule ------------------------------------------------------------------------------

# mctx/_src/tests/seq_halving_test.py, case by case (max_num_considered, num_simulations, expected).
MCTX_SCHEDULES = [
    (8, 24, [0] * 8 + [1] * 4 + [2] * 4 + [3, 3, 4, 4, 5, 5, 6, 6]),
    (
        8,
        47,
        [0] * 8
        + [1] * 4
        + [2] * 4
        + [3] * 4
        + [4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15]
        + [16, 16, 17],
    ),  # fmt: skip
    (8, 2, [0, 0]),
    (8, 13, [0] * 8 + [1] * 4 + [2]),
    (7, 24, [0] * 7 + [1, 1, 1, 2, 2, 2] + [3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8]),
    (0, 16, list(range(16))),
    (1, 16, list(range(16))),
]


@pytest.mark.parametrize(("k", "n", "expected"), MCTX_SCHEDULES)
def test_schedule_matches_mctx(k: int, n: int, expected: list[int]) -> None:
    assert considered_visits(k, n) == tuple(expected)


async def test_root_visits_follow_sequential_halving() -> None:
    # 8 arms of distinct value, uniform prior, no noise: 8 arms once, the best 4 twice more,
    # the best 2 four times more (k=8, n=24 above).
    q = [0.1, -0.5, 0.9, 0.3, -0.2, 0.7, 0.0, 0.5]
    game = Bandit(q)
    ev = constant(np.zeros(8))
    res = await gumbel(game, num_simulations=24, num_sampled_actions=8).search((), ev, False)
    order = np.argsort(q)[::-1]
    assert res.visits[order].tolist() == [7, 7, 3, 3, 1, 1, 1, 1]
    assert res.num_evaluations == ev.calls == 1  # the root; the arms are terminal
    survivors = np.flatnonzero(np.isfinite(res.scores))
    assert sorted(survivors) == sorted(order[:2])


async def test_fewer_legal_actions_than_sampled_and_one_legal_action() -> None:
    # k is capped at the legal actions (here 3 < 16): each arm first, then the best two.
    game = Bandit([0.2, 0.6, -0.4])
    res = await gumbel(game, num_simulations=7).search((), constant(np.zeros(3)), False)
    assert res.visits.tolist() == [3, 3, 1]  # schedule (3, 7): 0 0 0 1 1 2 2
    one = Bandit([0.5])
    res = await gumbel(one, num_simulations=5).search((), constant(np.zeros(1)), True)
    assert res.visits.tolist() == [5] and res.policy.tolist() == [1.0]


# --- bandits with a known improved policy --------------------------------------------------------


async def test_improved_policy_with_every_arm_visited() -> None:
    q = np.array([0.4, -0.2, 0.8, 0.0])
    logits = np.array([1.0, 0.5, -1.0, 0.2])
    game = Bandit(q.tolist())
    search = gumbel(game, num_simulations=4)
    res = await search.search((), constant(logits, value=0.3), False)
    assert res.visits.tolist() == [1, 1, 1, 1]
    prior = softmax(logits)
    sigma = sigma_reference(0.3, prior, res.visits, q)
    np.testing.assert_allclose(res.policy, softmax(np.log(prior) + sigma), rtol=1e-6)
    np.testing.assert_allclose(res.root_prior, prior, rtol=1e-6)
    # Every arm is a survivor; the move is the best logits + sigma: arm 2's value outweighs
    # its low prior here, (50 + 1) * 0.1 * 1 = 5.1 against a logit gap of 2.
    assert search.select_action(res, move_number=100) == int(np.argmax(np.log(prior) + sigma)) == 2
    assert res.root_value == pytest.approx((0.3 + q.sum()) / 5)


async def test_improved_policy_completes_unvisited_arms_with_the_mixed_value() -> None:
    q = np.array([0.5, -0.5, 0.9, 0.1, -0.9])
    logits = np.array([2.0, 1.5, 0.0, -0.5, -1.0])
    game = Bandit(q.tolist())
    res = await gumbel(game, num_simulations=2, num_sampled_actions=2).search(
        (), constant(logits, value=-0.25), False
    )
    assert res.visits.tolist() == [1, 1, 0, 0, 0]  # without noise, top-2 = the 2 likeliest
    prior = softmax(logits)
    sigma = sigma_reference(-0.25, prior, res.visits, q)
    # Mixed value: (-0.25 + 2 * (p0 * 0.5 + p1 * -0.5) / (p0 + p1)) / 3, for arms 2, 3 and 4.
    mixed = (-0.25 + 2 * (prior[0] * 0.5 - prior[1] * 0.5) / (prior[0] + prior[1])) / 3
    done = np.array([0.5, -0.5, mixed, mixed, mixed])
    assert sigma[2] == pytest.approx((50 + 1) * 0.1 * (mixed + 0.5) / 1.0)
    np.testing.assert_allclose(
        sigma, (50 + 1) * 0.1 * (done - done.min()) / (done.max() - done.min())
    )
    np.testing.assert_allclose(res.policy, softmax(np.log(prior) + sigma), rtol=1e-6)


def test_completed_q_matches_the_reference_and_rescales() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        k = int(rng.integers(2, 8))
        prior = softmax(rng.normal(size=k))
        n = rng.integers(0, 5, size=k)
        q = rng.uniform(-1, 1, size=k)
        raw = float(rng.uniform(-1, 1))
        got = completed_q(raw, prior.tolist(), n.tolist(), (q * n).tolist(), 50.0, 0.1)
        np.testing.assert_allclose(got, sigma_reference(raw, prior, n, q), rtol=1e-9, atol=1e-12)
    # Nothing visited: every completed Q is the raw value, so sigma is 0 everywhere.
    assert completed_q(0.7, [0.5, 0.5], [0, 0], [0.0, 0.0], 50.0, 0.1) == [0.0, 0.0]


async def test_improvement_with_noise_is_reproducible_and_samples_without_replacement() -> None:
    game = Bandit([0.0] * 6)
    ev = constant(np.zeros(6))
    seen = set()
    for seed in range(12):
        a = await gumbel(game, seed, num_simulations=3, num_sampled_actions=3).search((), ev, True)
        b = await gumbel(game, seed, num_simulations=3, num_sampled_actions=3).search((), ev, True)
        assert a.visits.tolist() == b.visits.tolist() and a.gumbel.tolist() == b.gumbel.tolist()
        assert sorted(a.visits.tolist()) == [0, 0, 0, 1, 1, 1]  # 3 distinct arms
        # With equal logits and values, the sampled top-3 are the 3 largest Gumbels.
        assert set(np.flatnonzero(a.visits)) == set(np.argsort(a.gumbel)[-3:])
        seen.add(tuple(np.flatnonzero(a.visits)))
    assert len(seen) > 3  # the noise really varies the sample


# --- forced wins with few simulations -------------------------------------------------------------


async def test_connect_four_win_found_against_the_prior() -> None:
    # X (to move) wins by playing column 0 (three X stacked there); the prior likes column 6
    # best and column 0 least (7x apart). Eight simulations visit every column once (k = 7),
    # then give the 8th to the best of three: without noise the win, sigma = (50 + 1) * 0.1 =
    # 5.1 up; with noise, whichever survivor the Gumbels favour (they are a sample).
    state = C4.from_moves([0, 1, 0, 1, 0, 2])
    logits = np.array([-1.0, 0, 0, 0, 0, 0, 1.0])
    prior = softmax(logits)
    search = gumbel(C4, num_simulations=8)
    quiet = await search.search(state, constant(logits), False)
    assert quiet.visits.tolist() == [2, 1, 1, 1, 1, 1, 1]
    assert search.select_action(quiet, 0) == search.select_action(quiet, 100) == 0
    for seed in range(5):
        search = gumbel(C4, seed, num_simulations=8)
        res = await search.search(state, constant(logits), True)
        assert res.visits.min() == 1 and res.visits.sum() == 8
        # The target: the win's logit plus (50 + 2) * 0.1 against the others' (Q 0, rescaled 0).
        want = softmax(np.log(prior) + 5.2 * (np.arange(7) == 0))
        np.testing.assert_allclose(res.policy, want, rtol=1e-5)
        assert res.policy[0] > 0.85 > prior[0] + 0.8


async def test_connect_four_forced_block_below_the_root() -> None:
    # O threatens to complete column 1; X must block there. With a uniform zero evaluator, the
    # deterministic selection below the root finds O's win after every other X move.
    state = C4.from_moves([0, 1, 2, 1, 3, 1])
    search = gumbel(C4, num_simulations=64, num_sampled_actions=7)
    res = await search.search(state, constant(np.zeros(7)), False)
    assert search.select_action(res, 100) == 1
    assert int(np.argmax(res.policy)) == 1


async def test_exact_values_give_optimal_moves_in_every_tictactoe_position() -> None:
    # With the true minimax values as the network's value, one visit per legal move is enough:
    # the policy-improvement guarantee at its simplest. Every reachable position, 9 simulations.
    solver = TicTacToeSolver()
    values = {TTT.encode(s).tobytes(): float(solver.value(s)) for s in solver.reachable_states()}

    async def exact(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return np.zeros(9, np.float32), values[obs.tobytes()]

    wrong = 0
    for s in solver.reachable_nonterminal_states():
        search = gumbel(TTT, num_simulations=len(TTT.legal_actions(s)), reuse_tree=False)
        res = await search.search(s, exact, False)
        wrong += search.select_action(res, 100) not in solver.optimal_actions(s)
    assert wrong == 0


# --- move choice, root noise and resignation for both algorithms ---------------------------------


async def test_gumbel_temperature_adds_the_noise_only_in_the_opening() -> None:
    game = Bandit([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    for seed in range(10):
        search = gumbel(game, seed, num_simulations=6, temperature_moves=4)
        res = await search.search((), constant(np.zeros(6)), True)
        # Every arm got one visit, so every arm survives: mctx's action is argmax g + scores.
        assert np.isfinite(res.scores).all()
        assert search.select_action(res, 3) == int(np.argmax(res.gumbel + res.scores))
        assert search.select_action(res, 4) == int(np.argmax(res.scores)) == 5
        cold = gumbel(game, seed, num_simulations=6, temperature=0.0)
        assert cold.select_action(res, 0) == 5


async def test_gumbel_target_opening_samples_the_improved_policy_at_temperature() -> None:
    game = Bandit([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    for temperature in (1.0, 3.0):
        search = gumbel(
            game,
            7,
            num_simulations=6,
            temperature_moves=4,
            gumbel_opening="target",
            temperature=temperature,
        )
        res = await search.search((), constant(np.zeros(6)), False)
        want = res.policy.astype(np.float64) ** (1 / temperature)
        want /= want.sum()
        draws = 20_000
        got = np.bincount([search.select_action(res, 3) for _ in range(draws)], minlength=6)
        # Within 5 standard errors of the tempered target, every arm.
        sd = np.sqrt(want * (1 - want) / draws)
        assert (np.abs(got / draws - want) < 5 * sd + 1e-9).all(), (got / draws, want)
        # Past the opening: the best survivor, as with "halving".
        assert search.select_action(res, 4) == int(np.argmax(res.scores)) == 5
    # Hotter spreads the moves: the best arm is chosen less often at 3 than at 1.
    assert want[5] < (res.policy[5] / res.policy.sum())


def test_gumbel_opening_is_checked() -> None:
    with pytest.raises(ValueError, match="gumbel_opening must be 'halving' or 'target'"):
        MCTSConfig(algorithm="gumbel", gumbel_opening="sample")  # type: ignore[arg-type]


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
def test_resignation_rule_is_the_same_for_both(algorithm: str) -> None:
    cfg = MCTSConfig(algorithm=algorithm, resign_threshold=-0.9, resign_min_moves=3)
    search = make_search(TTT, cfg, np.random.default_rng(0))
    # one rule for every search: the Python references and the compiled forms alike
    assert isinstance(search, GumbelMoves if algorithm == "gumbel" else PuctMoves)
    assert search.should_resign(-0.95, 3, True)
    assert not search.should_resign(-0.95, 2, True)  # too early
    assert not search.should_resign(-0.95, 3, False)  # a no-resign game
    assert not search.should_resign(-0.85, 10, True)
    draws = MCTSConfig(algorithm=algorithm, no_resign_fraction=0.3)
    allowed = make_search(TTT, draws, np.random.default_rng(1))
    frac = np.mean([allowed.sample_resign_allowed() for _ in range(2000)])
    assert 0.65 < frac < 0.75


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
async def test_root_noise_only_with_add_noise(algorithm: str) -> None:
    cfg = MCTSConfig(algorithm=algorithm, num_simulations=16, num_sampled_actions=4)
    state = C4.from_moves([3, 3])
    logits = np.linspace(-1, 1, 7)
    quiet = [
        (
            await make_search(C4, cfg, np.random.default_rng(s)).search(
                state, constant(logits), False
            )
        )
        for s in range(4)
    ]
    assert all(r.visits.tolist() == quiet[0].visits.tolist() for r in quiet)
    noisy = {
        tuple(
            (
                await make_search(C4, cfg, np.random.default_rng(s)).search(
                    state, constant(logits), True
                )
            ).visits
        )
        for s in range(6)
    }
    assert len(noisy) > 1


# --- playout cap randomization --------------------------------------------------------------------


class FakeClient:
    """The two EvalClient calls ``play_game`` makes, answered by a constant evaluator."""

    def __init__(self, game: Game) -> None:
        self.evaluate_fn = constant(np.zeros(game.num_actions))

    @contextmanager
    def pin_latest(self):  # type: ignore[no-untyped-def]
        yield 0

    def evaluate(self, obs: np.ndarray, version: int):  # type: ignore[no-untyped-def]
        return self.evaluate_fn(obs)


class Recording:
    """Wraps a search, logging each call's position, budget, noise and policy target."""

    def __init__(self, inner: Any, log: list) -> None:
        self.inner, self.log = inner, log
        self.game, self.config, self.rng = inner.game, inner.config, inner.rng

    async def search(self, state, evaluate, add_noise, num_simulations=None):  # type: ignore[no-untyped-def]
        res = await self.inner.search(state, evaluate, add_noise, num_simulations)
        self.log.append((state, num_simulations, add_noise, res))
        return res

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
async def test_playout_cap_records_only_full_searches(
    algorithm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list = []
    real = selfplay.make_search
    monkeypatch.setattr(selfplay, "make_search", lambda *a: Recording(real(*a), log))
    cfg = MCTSConfig(
        algorithm=algorithm,
        num_simulations=12,
        fast_simulations=3,
        full_search_fraction=0.25,
        resign_threshold=-2.0,
    )
    stats = SelfPlayStats()
    rng = np.random.default_rng(7)
    games = [await play_game(C4, cfg, FakeClient(C4), rng, stats) for _ in range(6)]  # type: ignore[arg-type]
    full = [entry for entry in log if entry[1] == 12]
    assert {entry[1] for entry in log} == {3, 12}
    assert stats.moves == len(log) == sum(g.moves for g in games)
    assert stats.positions == len(full) == sum(len(g.outcome) for g in games)
    assert 0.1 < len(full) / len(log) < 0.4  # about full_search_fraction of the moves
    assert stats.simulations == 12 * len(full) + 3 * (len(log) - len(full))
    # The recorded positions are exactly the fully searched ones, in order, with their targets.
    recorded = np.concatenate([g.obs for g in games if len(g.outcome)])
    assert np.array_equal(recorded, np.stack([C4.encode(e[0]) for e in full]))
    policies = np.concatenate([g.policy for g in games if len(g.outcome)])
    for p, (_, _, _, res) in zip(policies, full, strict=True):
        want = res.policy if algorithm == "gumbel" else res.visits / res.visits.sum()
        np.testing.assert_allclose(p, want, rtol=1e-6)
    # PUCT's fast searches drop the root noise; Gumbel's keep it (it samples the moves).
    assert all(e[2] for e in full)
    assert all(e[2] == (algorithm == "gumbel") for e in log if e[1] == 3)


def test_config_keys_are_checked() -> None:
    ttt = "configs/tictactoe.toml"
    cfg = load_config(ttt, ["mcts.algorithm=gumbel", "mcts.num_sampled_actions=4"])
    assert cfg.mcts.algorithm == "gumbel" and cfg.mcts.num_sampled_actions == 4
    for override, named in [
        ("mcts.algorithm=alphabeta", "mcts.algorithm"),
        ("mcts.c_scale=-1", "mcts.c_scale"),
        ("mcts.full_search_fraction=1.5", "mcts.full_search_fraction"),
        ("mcts.full_search_fraction=0", "full_search_fraction"),
        ("mcts.num_sampled_actions=0", "mcts.num_sampled_actions"),
    ]:
        with pytest.raises(ConfigError, match=named):
            load_config(ttt, [override])
    with pytest.raises(ConfigError, match="fast_simulations=64"):
        load_config(ttt, ["mcts.full_search_fraction=0.5", "mcts.fast_simulations=64"])


async def test_gumbel_selfplay_with_playout_cap_against_the_real_server(
    make_server: MakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="actors.selfplay")
    server = await make_server()
    cfg = MCTSConfig(
        algorithm="gumbel",
        num_simulations=8,
        num_sampled_actions=4,
        full_search_fraction=0.5,
        fast_simulations=2,
        resign_threshold=-2.0,
    )
    async with EvalClient(ClientConfig(server=server.endpoint)) as client, _ListSink() as sink:
        sp = SelfPlay(
            "tictactoe",
            ActorsConfig(games=8, max_games=12, status_interval_s=0.05),
            cfg,
            client,
            sink,
            "g0",
        )
        stats = await asyncio.wait_for(sp.run(asyncio.Event()), 45)
    # The status line shows positions recorded of moves played, and bench selfplay still
    # parses its rates.
    lines = [r.getMessage() for r in caplog.records if "positions recorded" in r.getMessage()]
    assert lines and parse_status_lines("\n".join(lines))
    assert stats.games >= 12
    assert len(sink.items) + stats.unrecorded_games == stats.games
    assert stats.positions < stats.moves
    assert sum(t.length for t, *_ in sink.items) == stats.positions
    for traj, obs, policy, outcome in sink.items:
        assert 5 <= traj.moves <= 9 and 1 <= traj.length <= traj.moves
        assert obs.shape == (traj.length, 2, 3, 3)
        assert np.allclose(policy.sum(1), 1.0)
        occupied = (obs[:, 0] + obs[:, 1]).reshape(traj.length, 9) > 0
        assert np.all(policy[occupied] == 0)  # the improved policy covers legal moves only
        assert set(np.unique(outcome)) <= {-1.0, 0.0, 1.0}


class _ListSink(BaseSink):
    """A local sink that keeps what it is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list = []

    async def _put(self, traj, obs, policy, outcome) -> None:  # type: ignore[no-untyped-def]
        await super()._put(traj, obs, policy, outcome)
        self.items.append((traj, obs.copy(), policy.copy(), outcome.copy()))
