"""Self-play against the real server: trajectories are well formed, and every game keeps the
weights version it started with across a swap (checked on the wire, reply by reply)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from actors.config import ActorsConfig
from actors.search import MCTSConfig
from actors.selfplay import SelfPlay
from azserve import protocol as P
from azserve.client import ClientConfig, EvalClient
from tests.conftest import MakeControl, MakeServer, wait_for, weights_blob

pytestmark = pytest.mark.timeout(90)

MCTS = MCTSConfig(num_simulations=8, resign_threshold=-2.0)


class ListSink:
    """Keeps trajectories in memory (the sink is not what these tests are about)."""

    def __init__(self) -> None:
        self.items: list[tuple[P.Trajectory, np.ndarray, np.ndarray, np.ndarray]] = []

    async def start(self) -> None:
        pass

    async def send(
        self, traj: P.Trajectory, obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray
    ) -> None:
        self.items.append((traj, obs.copy(), policy.copy(), outcome.copy()))

    async def aclose(self) -> int:
        return 0


class CheckingClient(EvalClient):
    """An EvalClient that checks, for every eval reply, that the version which served it is
    the version the request pinned."""

    def __init__(self, cfg: ClientConfig) -> None:
        super().__init__(cfg)
        self.requested: dict[int, int] = {}
        self.served: dict[int, int] = {}
        self.mismatches: list[tuple[int, int]] = []

    def _send_request(
        self, version: int, obs: Any, futures: Any, now: float, legal: Any = None
    ) -> None:
        self.requested[self._peek_id()] = version
        super()._send_request(version, obs, futures, now, legal)

    def _peek_id(self) -> int:
        # The next id _send_request will take: itertools.count has no peek, so advance and
        # rebuild it (the sequence is unchanged).
        import itertools

        nxt = next(self._ids)
        self._ids = itertools.chain([nxt], self._ids)  # type: ignore[assignment]
        return nxt

    def _on_reply(self, msg: P.Message, arrays: list[np.ndarray]) -> None:
        if isinstance(msg, P.EvalReply) and msg.id in self.requested:
            want = self.requested[msg.id]
            self.served[msg.version] = self.served.get(msg.version, 0) + 1
            if want != -1 and want != msg.version:
                self.mismatches.append((want, msg.version))
        super()._on_reply(msg, arrays)


async def test_trajectories_are_well_formed(make_server: MakeServer) -> None:
    server = await make_server()
    async with EvalClient(ClientConfig(server=server.endpoint)) as client:
        sink = ListSink()
        sp = SelfPlay(
            "tictactoe",
            ActorsConfig(games=8, max_games=12, status_interval_s=0),
            MCTS,
            client,
            sink,
            "a0",
        )
        stats = await asyncio.wait_for(sp.run(asyncio.Event()), 60)
    assert stats.games >= 12 and len(sink.items) == stats.games
    for traj, obs, policy, outcome in sink.items:
        t = traj.length
        assert 5 <= t <= 9 and traj.version == 0 and traj.actor == "a0" and traj.game == "tictactoe"
        assert obs.shape == (t, 2, 3, 3) and obs.dtype == np.uint8
        assert policy.shape == (t, 9) and np.allclose(policy.sum(1), 1.0)
        assert outcome.shape == (t,) and set(np.unique(outcome)) <= {-1.0, 0.0, 1.0}
        # Zero-sum, alternating turns: consecutive positions see opposite outcomes.
        assert np.all(outcome[:-1] == -outcome[1:])
        assert outcome[0] == traj.result  # position 0 is the first player's
        # The side to move's stones (plane 0) never outnumber the opponent's.
        assert np.all(obs[:, 0].sum((1, 2)) <= obs[:, 1].sum((1, 2)))
        # Policy mass only on empty cells.
        occupied = (obs[:, 0] + obs[:, 1]).reshape(t, 9) > 0
        assert np.all(policy[occupied] == 0)
    assert len({traj.game_id for traj, *_ in sink.items}) == len(sink.items)


async def test_games_keep_their_version_across_a_swap(
    make_server: MakeServer, make_control: MakeControl
) -> None:
    server = await make_server(version_grace_s=60.0)
    ctl = await make_control(server.endpoint)
    client = CheckingClient(ClientConfig(server=server.endpoint))
    await client.start()
    control = EvalClient(ClientConfig(server=server.endpoint))
    await control.start()
    sink = ListSink()
    cfg = ActorsConfig(games=12, status_interval_s=0)
    sp = SelfPlay("tictactoe", cfg, replace(MCTS, num_simulations=16), client, sink, "a0")
    stop = asyncio.Event()
    run = asyncio.create_task(sp.run(stop))
    try:
        await wait_for(lambda: len(sink.items) >= 6, 30)
        started_before = sp._next_game_id  # game ids below this began on version 0
        await ctl.load_weights(1, weights_blob(seed=1))
        await wait_for(lambda: sum(t.version == 1 for t, *_ in sink.items) >= 12, 60)
        stop.set()
        await asyncio.wait_for(run, 30)
    finally:
        stop.set()
        await control.aclose()
        await client.aclose()
    by_id = {t.game_id: t for t, *_ in sink.items}
    before = [t for gid, t in by_id.items() if gid < started_before]
    assert before and all(t.version == 0 for t in before)
    # Games in flight at the swap finished on version 0, after version 1 was live.
    assert any(gid >= 6 for gid in by_id if gid < started_before)
    assert client.mismatches == []
    assert client.served.get(0, 0) > 0 and client.served.get(1, 0) > 0
    # Once a game started on version 1, every later game did too.
    first_v1 = min(gid for gid, t in by_id.items() if t.version == 1)
    assert all(t.version == 1 for gid, t in by_id.items() if gid > first_v1 + cfg.games)


class ResultSink(ListSink):
    """Keeps each trajectory's header and outcomes (chess's policies may be sparse)."""

    async def send(self, traj: P.Trajectory, obs: Any, policy: Any, outcome: np.ndarray) -> None:
        self.items.append((traj, obs, policy, outcome.copy()))


@pytest.mark.parametrize("margin", [0.0, 1.0])
async def test_chess_draws_at_the_cap_go_to_the_side_ahead(
    make_server: MakeServer, margin: float
) -> None:
    """A real chess self-play run capped at 20 plies on a real server: with
    ``mcts.cap_win_margin`` 1 the games drawn at the cap with a material lead count as won
    (``adjudicated``), each trajectory's outcomes following its result; with 0 every
    adjudication is off and capped games stay drawn."""
    from actors.games.compiled import core
    from azserve import InferenceServer
    from azserve.backends import BackendConfig, TorchConfig, make_backend
    from azserve.server.dispatch import InitialWeights
    from tests.conftest import server_config
    from tests.test_sparse_policy import _chess_net

    if core is None:
        pytest.skip("chess needs the compiled core")
    cfg, blob = _chess_net()  # its planes: chess with history 1, whatever the cap
    backend = make_backend(cfg, BackendConfig(device="cpu", torch=TorchConfig(compile="none")))
    server = InferenceServer(server_config("tcp://127.0.0.1:*"), cfg.spec, backend)
    await server.start(InitialWeights(0, blob))
    try:
        async with EvalClient(ClientConfig(server=server.endpoint)) as client:
            sink = ResultSink()
            mcts = MCTSConfig(
                algorithm="gumbel", num_simulations=4, num_sampled_actions=4,
                resign_threshold=-2.0, cap_win_margin=margin,
            )  # fmt: skip
            sp = SelfPlay(
                "chess(max_plies=20,history=1)",
                ActorsConfig(games=8, max_games=24, status_interval_s=0),
                mcts,
                client,
                sink,
                "a0",
            )
            stats = await asyncio.wait_for(sp.run(asyncio.Event()), 80)
    finally:
        await server.aclose()
    decisive = stats.results[1] + stats.results[-1]
    assert stats.games >= 24 and stats.resigned == 0
    if margin == 0:
        assert stats.adjudicated == 0
    else:
        # Twenty plies of a near-random net take material in most games; a mate is rare.
        assert stats.adjudicated >= 3 and decisive >= stats.adjudicated
    for traj, _obs, _policy, outcome in sink.items:
        assert outcome[0] == traj.result and np.all(outcome[:-1] == -outcome[1:])
