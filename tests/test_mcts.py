"""MCTS on toy bandits with exact expectations, tactical positions and a perfect-play check."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from actors.games import ConnectFour, Game, TicTacToe
from actors.games.solver import TicTacToeSolver
from actors.mcts import MCTS
from actors.search import MCTSConfig

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
        if s:
            raise ValueError("bandit: over")
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
        return logits, value

    evaluate.calls = 0
    return evaluate


def uniform(game: Game):
    return constant(np.zeros(game.num_actions, dtype=np.float32))


def mcts(game: Game, seed: int = 0, **overrides) -> MCTS:
    return MCTS(game, MCTSConfig(**overrides), np.random.default_rng(seed))


def reference_puct(
    q: list[float], prior: list[float], sims: int, c_puct: float, fpu_reduction: float
) -> list[int]:
    """Independent PUCT on a bandit whose root evaluates to 0.

    Unvisited arms are valued at the root's running mean minus ``fpu_reduction`` times the
    square root of the visited arms' prior mass.
    """
    n = [0] * len(q)
    w = [0.0] * len(q)
    value_sum, visits = 0.0, 1
    for _ in range(sims):
        visited = sum(p for p, k in zip(prior, n, strict=True) if k)
        fpu = value_sum / visits - fpu_reduction * math.sqrt(visited)
        u = c_puct * math.sqrt(visits)
        scores = [(w[a] / n[a] if n[a] else fpu) + u * prior[a] / (1 + n[a]) for a in range(len(q))]
        a = scores.index(max(scores))
        n[a] += 1
        w[a] += q[a]
        value_sum += q[a]
        visits += 1
    return n


@pytest.mark.parametrize(("c_puct", "fpu_reduction"), [(1.25, 0.0), (1.25, 0.5), (3.0, 0.25)])
async def test_bandit_visits_match_reference_exactly(c_puct: float, fpu_reduction: float) -> None:
    q = [0.1, 0.5, -0.3, 0.45, 0.0, 0.6]
    logits = np.array([0.0, -1.0, 1.0, 0.5, 0.2, -3.0], dtype=np.float32)
    prior = np.exp(logits.astype(np.float64))
    prior /= prior.sum()
    game = Bandit(q)
    evaluate = constant(logits)
    search = mcts(game, num_simulations=300, c_puct=c_puct, root_fpu_reduction=fpu_reduction)
    result = await search.search((), evaluate, add_noise=False)
    expected = reference_puct(q, prior.tolist(), 300, c_puct, fpu_reduction)
    assert result.visits.tolist() == expected
    assert result.visits.sum() == 300
    # Terminal children are never evaluated: only the root was.
    assert result.num_evaluations == evaluate.calls == 1
    np.testing.assert_allclose(result.root_prior, prior, rtol=1e-6)
    expected_value = (result.visits @ np.array(q)) / 301
    assert result.root_value == pytest.approx(expected_value)


async def test_equal_values_give_visits_proportional_to_priors() -> None:
    prior = np.array([0.4, 0.3, 0.2, 0.1, 0.0, 0.0, 0.0], dtype=np.float64) + 1e-9
    logits = np.log(prior).astype(np.float32)
    n = 500
    # Zero values and no terminal within reach (Connect Four needs 7 plies): PUCT's greedy
    # rule then settles at n_a + 1 ~ P_a * (N + k), within one visit.
    result = await mcts(C4, num_simulations=n).search(
        C4.initial_state(), constant(logits), add_noise=False
    )
    expected = prior / prior.sum() * (n + 4) - 1
    assert np.all(np.abs(result.visits[:4] - expected[:4]) <= 1.0), result.visits
    assert result.visits[4:].sum() <= 1


@pytest.mark.parametrize(
    ("game", "moves", "best", "sims"),
    [
        (TTT, [0, 1, 3, 4], 6, 30),  # X completes the left column
        (C4, [0, 0, 1, 1, 2, 2], 3, 30),  # X completes the bottom row
        (TTT, [0, 4, 1], 2, 200),  # O must block the top row
        (C4, [0, 6, 0, 5, 0], 0, 400),  # O must block the left column
    ],
    ids=["ttt-win", "c4-win", "ttt-block", "c4-block"],
)
@pytest.mark.parametrize("in_flight", [1, 8])
async def test_wins_and_forced_blocks(
    game: Game, moves: list[int], best: int, sims: int, in_flight: int
) -> None:
    state = game.from_moves(moves)
    search = mcts(game, num_simulations=sims, leaves_in_flight=in_flight)
    result = await search.search(state, uniform(game), add_noise=False)
    assert result.visits.argmax() == best, result.visits
    assert result.visits.sum() == sims
    assert result.visits[~game.legal_mask(state)].sum() == 0
    if moves == [0, 0, 1, 1, 2, 2] or moves == [0, 1, 3, 4]:
        assert result.root_value > 0.5  # the side to move is winning


async def test_terminal_positions() -> None:
    with pytest.raises(ValueError, match="terminal"):
        await mcts(TTT).search(TTT.from_moves([0, 3, 1, 4, 2]), uniform(TTT), add_noise=False)
    # One empty cell left, and filling it ends the game: only the root is ever evaluated.
    state = TTT.from_moves([0, 1, 2, 4, 3, 5, 7, 6])
    evaluate = uniform(TTT)
    result = await mcts(TTT, num_simulations=20).search(state, evaluate, add_noise=False)
    assert result.visits.tolist() == [0] * 8 + [20]
    assert evaluate.calls == result.num_evaluations == 1
    assert result.root_value == pytest.approx(0.0)


async def test_subtree_reuse_keeps_visits() -> None:
    search = mcts(C4, num_simulations=200)
    state = C4.initial_state()
    first = await search.search(state, uniform(C4), add_noise=False)
    a = int(first.visits.argmax())
    search.advance(a)
    evaluate = uniform(C4)
    second = await search.search(C4.apply(state, a), evaluate, add_noise=False)
    # The child's own evaluation is not an edge visit; everything below it is kept.
    assert second.visits.sum() == first.visits[a] - 1 + 200
    assert second.num_evaluations == evaluate.calls <= 200

    fresh = mcts(C4, num_simulations=200, reuse_tree=False)
    await fresh.search(state, uniform(C4), add_noise=False)
    fresh.advance(a)
    evaluate = uniform(C4)
    third = await fresh.search(C4.apply(state, a), evaluate, add_noise=False)
    assert third.visits.sum() == 200 and evaluate.calls == third.num_evaluations == 201

    # A state that is not the kept root's rebuilds the tree.
    search.advance(int(second.visits.argmax()))
    other = await search.search(C4.from_moves([6, 6]), uniform(C4), add_noise=False)
    assert other.visits.sum() == 200


async def test_virtual_loss_evaluates_concurrently() -> None:
    active = peak = calls = 0

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        nonlocal active, peak, calls
        active += 1
        calls += 1
        peak = max(peak, active)
        await asyncio.sleep(0)
        active -= 1
        return np.zeros(7, dtype=np.float32), 0.0

    search = mcts(C4, num_simulations=256, leaves_in_flight=16)
    result = await search.search(C4.initial_state(), evaluate, add_noise=False)
    assert peak == 16
    assert result.visits.sum() == 256 and result.num_evaluations == calls
    # Virtual loss spreads the first round over all seven columns.
    assert result.visits.min() >= 20


def check_tree(node, eval_value: float) -> None:
    """Statistics add up in every expanded node, and no virtual loss is left behind.

    A node's visits are its own evaluation plus its edges' visits; its value sum is its own
    evaluation (``eval_value`` everywhere) plus its edges' value sums; an edge's value sum is
    the child's, seen from the other side.
    """
    assert node.visits == 1 + sum(node.n)
    assert node.value_sum == pytest.approx(eval_value + sum(node.w))
    for i, child in enumerate(node.children):
        if child is None:
            assert node.n[i] == 0
            continue
        assert child.visits == node.n[i]
        assert node.w[i] == pytest.approx(-child.value_sum)
        if child.actions is not None:
            check_tree(child, eval_value)
        else:
            assert child.value_sum == child.visits * child.terminal_value


@pytest.mark.parametrize(("in_flight", "virtual_loss"), [(1, 1.0), (8, 1.0), (8, 0.0), (64, 3.0)])
async def test_tree_statistics_add_up(in_flight: int, virtual_loss: float) -> None:
    search = mcts(C4, num_simulations=300, leaves_in_flight=in_flight, virtual_loss=virtual_loss)
    # Three moves from a win for X, so terminal leaves take part too.
    state = C4.from_moves([3, 3, 2, 2])
    evaluate = constant(np.zeros(7, dtype=np.float32), value=0.3)
    result = await search.search(state, evaluate, add_noise=True)
    assert result.visits.sum() == 300 and result.num_evaluations == evaluate.calls
    check_tree(search._root, 0.3)


async def test_collisions_terminate_with_few_moves() -> None:
    # Two legal moves, many leaves in flight: collisions end rounds early but all sims run.
    state = TTT.from_moves([0, 1, 2, 4, 3, 5, 7])
    search = mcts(TTT, num_simulations=50, leaves_in_flight=8)
    result = await search.search(state, uniform(TTT), add_noise=False)
    assert result.visits.sum() == 50
    assert set(np.flatnonzero(result.visits)) <= {6, 8}


async def test_dirichlet_noise_only_at_the_root() -> None:
    logits = np.array([2.0, 0.0, 0.0, 1.0, 0.0, 0.0, -1.0], dtype=np.float32)
    clean = (np.exp(logits) / np.exp(logits).sum()).tolist()
    search = mcts(C4, num_simulations=100)
    result = await search.search(C4.initial_state(), constant(logits), add_noise=True)
    np.testing.assert_allclose(result.root_prior, clean, rtol=1e-6)
    root = search._root
    assert not np.allclose(root.p, clean) and sum(root.p) == pytest.approx(1.0)
    for child in root.children:
        assert child is not None and child.p == pytest.approx(clean)
    # A search without noise on the same root uses the clean priors again.
    await search.search(C4.initial_state(), constant(logits), add_noise=False)
    assert root.p == pytest.approx(clean)


async def test_noise_changes_the_search_but_is_reproducible() -> None:
    async def visits(seed: int, noise: bool) -> list[int]:
        search = mcts(C4, seed=seed, num_simulations=200)
        result = await search.search(C4.initial_state(), uniform(C4), add_noise=noise)
        return result.visits.tolist()

    assert await visits(1, True) == await visits(1, True)
    assert await visits(1, True) != await visits(1, False)


def test_temperature_schedule() -> None:
    search = mcts(TTT, temperature=1.0, temperature_moves=2)
    visits = np.array([0, 10, 30, 0, 60, 0, 0, 0, 0])
    picks = np.bincount([search.select_action(visits, 1) for _ in range(4000)], minlength=9)
    assert picks[[0, 3, 5, 6, 7, 8]].sum() == 0
    np.testing.assert_allclose(picks / 4000, visits / 100, atol=0.03)
    assert {search.select_action(visits, 2) for _ in range(50)} == {4}
    cold = mcts(TTT, temperature=0.0, temperature_moves=100)
    assert {cold.select_action(visits, 0) for _ in range(50)} == {4}
    sharp = mcts(TTT, temperature=0.25)
    picks = [sharp.select_action(visits, 0) for _ in range(2000)]
    assert 0.9 < picks.count(4) / 2000 < 0.99  # (60^4 / (60^4 + 30^4 + 10^4)) = 0.94
    ties = np.array([5, 0, 5, 0, 0, 0, 0, 0, 0])
    assert {search.select_action(ties, 5) for _ in range(100)} == {0, 2}
    target = MCTS.policy_target(visits)
    assert target.dtype == np.float32 and target.sum() == pytest.approx(1.0)
    assert target[4] == pytest.approx(0.6)


def test_resignation_rule() -> None:
    search = mcts(TTT, resign_threshold=-0.9, resign_min_moves=3, no_resign_fraction=0.2)
    assert search.should_resign(-0.95, 3, resign_allowed=True)
    assert not search.should_resign(-0.95, 2, resign_allowed=True)  # too early
    assert not search.should_resign(-0.95, 3, resign_allowed=False)  # a no-resign game
    assert not search.should_resign(-0.85, 10, resign_allowed=True)
    disabled = mcts(TTT, resign_threshold=-1.0)
    assert not disabled.should_resign(-1.0, 50, resign_allowed=True)
    allowed = [search.sample_resign_allowed() for _ in range(5000)]
    assert 0.77 < sum(allowed) / 5000 < 0.83
    assert all(mcts(TTT, no_resign_fraction=0.0).sample_resign_allowed() for _ in range(100))


async def test_bad_config_and_bad_evaluator() -> None:
    for bad in [
        {"num_simulations": 0},
        {"leaves_in_flight": 0},
        {"temperature": -1.0},
        {"dirichlet_fraction": 1.5},
    ]:
        with pytest.raises(ValueError, match=next(iter(bad))):
            MCTSConfig(**bad)
    search = mcts(TTT, num_simulations=10)
    with pytest.raises(ValueError, match="shape"):
        await search.search(TTT.initial_state(), constant(np.zeros(7, np.float32)), False)

    async def failing(obs: np.ndarray) -> tuple[np.ndarray, float]:
        raise RuntimeError("server gone")

    with pytest.raises(RuntimeError, match="server gone"):
        await search.search(TTT.initial_state(), failing, add_noise=False)
    # The broken tree was dropped: the next search starts afresh.
    result = await search.search(TTT.initial_state(), uniform(TTT), add_noise=False)
    assert result.visits.sum() == 10 and result.num_evaluations == 11


@pytest.fixture(scope="module")
def solver() -> TicTacToeSolver:
    return TicTacToeSolver()


async def test_perfect_play_with_exact_values(solver: TicTacToeSolver) -> None:
    """With exact minimax values at the leaves, MCTS picks an optimal move everywhere."""
    values = {TTT.encode(s).tobytes(): float(solver.value(s)) for s in solver.reachable_states()}
    logits = np.zeros(9, dtype=np.float32)

    async def exact(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return logits, values[obs.tobytes()]

    wrong = []
    for s in solver.reachable_nonterminal_states():
        result = await mcts(TTT, num_simulations=48).search(s, exact, add_noise=False)
        if int(result.visits.argmax()) not in solver.optimal_actions(s):
            wrong.append(TTT.render(s))
    assert not wrong, "\n\n".join(wrong[:3])


async def test_bench_runs_and_reports_every_contender() -> None:
    from azserve.perf.mcts import run

    report = await run(seconds=0.6, simulations=40, in_flight=4, seed=0)
    names = ["azserve", "azserve_in_flight", "azserve_gumbel", "azserve_gumbel_python"]
    for name in [*names, "openspiel_python", "openspiel_cpp"]:
        assert report[name]["simulations"] >= 40 and report[name]["simulations_per_s"] > 0
    assert report["gumbel_core"] == "CompiledGumbel"
    assert report["azserve"]["evaluations"] <= report["azserve"]["simulations"] + 100
