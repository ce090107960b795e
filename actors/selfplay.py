"""Self-play: K game coroutines in one process sharing one EvalClient and one trajectory sink.

Each game pins the latest weights version known at its start and uses it for every evaluation
until its end; the finished game becomes one ``Trajectory`` (obs, search policy, outcome).
The search is PUCT or Gumbel (``mcts.algorithm``); with playout cap randomization
(``mcts.full_search_fraction < 1``) only the moves given the full search are recorded.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actors.config import ActorsConfig
from actors.evalcache import EvalCache
from actors.finished import FinishedGame, game_result, game_targets, to_message
from actors.games import Game, State, make_game
from actors.games.compiled import live_trees
from actors.material import MaterialTrack, has_material
from actors.search import MCTSConfig, Search, SearchResult
from actors.searches import make_search
from actors.searchpool import SearchPool
from actors.sinks import TrajectorySink
from azserve import sparse
from azserve.client import EvalClient
from azserve.errors import (
    RemoteError,
    RequestTimeout,
    ServerClosed,
    VersionRetired,
    VersionUnavailable,
)
from azserve.metrics import RateMeter
from azserve.sparse import SparseRows

log = logging.getLogger("actors.selfplay")


@dataclass
class SelfPlayStats:
    """Counters of one actor process (cheap, always on)."""

    games: int = 0
    positions: int = 0
    """Positions recorded as training targets (the full-search moves)."""
    moves: int = 0
    """Moves played, recorded or not."""
    simulations: int = 0
    evaluations: int = 0
    resigned: int = 0
    no_resign_games: int = 0
    false_resign: int = 0
    """No-resign games where the side that would have resigned did not lose (calibration)."""
    adjudicated: int = 0
    """Drawn games that counted as won (``mcts.cap_win_margin``); in ``results`` as wins."""
    results: dict[int, int] = field(default_factory=lambda: {1: 0, 0: 0, -1: 0})
    """First player's outcomes: +1 win, 0 draw, -1 loss."""
    loop_lag_ms: float = 0.0
    abandoned: dict[str, int] = field(default_factory=dict)
    """Games given up, by reason (``version_lost``, ``timeout``, a server error type)."""
    version_waits: int = 0
    """Searches that waited for their game's version to be restored."""
    longest_version_wait_s: float = 0.0
    """The longest a move waited for its version (until it was served again or its game was
    given up): at most ``actors.version_wait_s``."""
    unrecorded_games: int = 0
    """Finished games with no recorded position (none had the full search), not sent."""


class GameAbandoned(Exception):
    """A game that cannot go on (``reason``); counted, never raised out of the process."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class GameLeaves:
    """One game's route to its leaf evaluations, on the version pinned at its start: a search
    the process's ``SearchPool`` can drive goes there (its leaves batched with other games'),
    any other is awaited leaf by leaf through the evaluation cache and the client. ``asked``
    counts the leaves this game's current search asked for, on either route. With sparse
    replies (``client.sparse_policy``) a search hands each leaf's legal actions and its
    float16 logits come back scattered into a dense float32 row (``sparse.ILLEGAL_LOGIT``
    elsewhere), below the cache, so every search and the cache see dense rows as before."""

    __slots__ = ("_ask", "_one", "_pool", "_stats", "asked", "sparse", "version")

    def __init__(
        self,
        game: Game,
        client: EvalClient,
        version: int,
        stats: SelfPlayStats,
        cache: EvalCache | None,
        pool: SearchPool | None,
        sparse_replies: bool = False,
    ) -> None:
        self.version = version
        self.sparse = sparse_replies
        ask: Any = _dense_evaluate(client, game.num_actions) if self.sparse else client.evaluate
        self._ask: Any = (
            cache.evaluator(ask, version)
            if cache is not None
            else lambda obs, *legal: ask(obs, version, *legal)  # binds the pin
        )
        self._one = len(game.obs_shape)
        self._pool = pool
        self._stats = stats
        self.asked = 0

    def evaluate(self, obs: np.ndarray, legal: np.ndarray | None = None) -> Any:
        """One leaf (or a stack of them). Counted as the leaves are asked for, so that the
        status line's rates are steady: the games start together, and counts at the end of
        each search came in bursts of every game's search at once."""
        n = 1 if obs.ndim == self._one else len(obs)
        self.asked += n
        self._stats.evaluations += n
        self._stats.simulations += n
        return self._ask(obs) if legal is None else self._ask(obs, legal)

    def search(self, search: Search, state: State, add_noise: bool, sims: int) -> Any:
        """An awaitable of ``search``'s result from ``state``, on this game's version."""
        if self._pool is not None and SearchPool.supports(search):
            return self._pool.search(search, state, self.version, add_noise, sims, self)
        search.leaf_legal = self.sparse
        return search.search(state, self.evaluate, add_noise, sims)


def _dense_evaluate(client: EvalClient, num_actions: int) -> Any:
    """``evaluate(obs, version, legal)``: one leaf asked for sparse, answered as a dense
    float32 row ``[num_actions]`` (``ILLEGAL_LOGIT`` off ``legal``) and its value."""
    fill = sparse.ILLEGAL_LOGIT

    async def evaluate(obs: np.ndarray, version: int, legal: np.ndarray) -> Any:
        logits, value = await client.evaluate(obs, version, legal)
        row = np.full(num_actions, fill, np.float32)
        row[legal] = logits
        return row, value

    return evaluate


async def search_on_version(
    mcts: Search,
    state: State,
    leaves: GameLeaves,
    wait_s: float,
    stats: SelfPlayStats,
    num_simulations: int,
    add_noise: bool = True,
) -> tuple[Search, SearchResult]:
    """One move's search on the game's pinned version. If the server lost that version (it
    restarted), the search waits, bounded by ``wait_s``, for the learner to restore it, and
    starts the move again with a fresh tree; it never moves to another version (a version the
    server retired while no lease pinned it, an actor host stopped past its lease, is given up
    at once: ``version_retired``). Returns the
    tree used (fresh after a retry) and the result; ``GameAbandoned`` when it cannot go on."""
    deadline = None
    while True:
        try:
            if deadline is not None:  # this attempt came after a wait: how long it was
                waited = time.monotonic() - (deadline - wait_s)
                stats.longest_version_wait_s = max(stats.longest_version_wait_s, waited)
            return mcts, await leaves.search(mcts, state, add_noise, num_simulations)
        except VersionRetired as exc:  # gone for good: no restore will come
            raise GameAbandoned("version_retired", str(exc)) from None
        except VersionUnavailable as exc:
            now = time.monotonic()
            deadline = deadline if deadline is not None else now + wait_s
            if now >= deadline:
                waited = now - (deadline - wait_s)
                stats.longest_version_wait_s = max(stats.longest_version_wait_s, waited)
                raise GameAbandoned("version_lost", str(exc)) from None
            stats.version_waits += 1
            await asyncio.sleep(min(0.5, max(0.0, deadline - now)))
            # The failed search left virtual losses and partial statistics: start afresh.
            mcts = make_search(mcts.game, mcts.config, mcts.rng)
        except RequestTimeout as exc:
            raise GameAbandoned("timeout", str(exc)) from None
        except ServerClosed as exc:  # the server said it is shutting down
            raise GameAbandoned("server_closed", str(exc)) from None
        except RemoteError as exc:  # Overloaded, BackendUnavailable, ...
            raise GameAbandoned(exc.type, exc.message) from None


async def play_game(
    game: Game,
    mcts_cfg: MCTSConfig,
    client: EvalClient,
    rng: np.random.Generator,
    stats: SelfPlayStats,
    version_wait_s: float = 30.0,
    cache: EvalCache | None = None,
    pool: SearchPool | None = None,
    targets: bool = False,
    sparse_replies: bool = False,
    sparse_targets: bool = False,
    material_plies: int = 0,
    moves_left: bool = False,
) -> FinishedGame:
    """Play one game against itself on the version pinned at its start, through the
    process's evaluation ``cache`` if any, its compiled searches driven by the process's
    ``pool`` if any (the same results either way). Raises ``GameAbandoned`` when its version
    cannot be served (see ``search_on_version``). With ``targets``, the game's targets come
    with it (``game_targets``); with ``sparse_targets`` its policies (and reply) are
    ``SparseRows``; with ``sparse_replies`` its leaves are evaluated sparse (``GameLeaves``);
    with ``targets`` and ``material_plies`` > 0, a game with material (chess, shogi) adds its
    material targets, ``material_ahead`` that many plies ahead (actors/material.py); with
    ``targets`` and ``moves_left``, the plies from each recorded position to the game's stop.

    Playout cap randomization: each move gets the full search (``num_simulations``, recorded)
    with probability ``full_search_fraction``, else a fast one (``fast_simulations``, played
    but not recorded). PUCT's fast searches have no root noise (KataGo); Gumbel's keep it,
    since its root noise is also how its moves are sampled."""
    mcts = make_search(game, mcts_cfg, rng)
    capped = mcts_cfg.full_search_fraction < 1.0
    with client.pin_latest() as version:
        leaves = GameLeaves(game, client, version, stats, cache, pool, sparse_replies)
        state = game.initial_state()
        obs, policies, movers = [], [], []
        plies: list[int] = []  # the ply of each recorded position
        replies: list[np.ndarray | None] = []  # the next recorded move's target, per position
        material = targets and material_plies > 0 and has_material(game)
        track = MaterialTrack(game, material_plies) if material else None
        resign_allowed = mcts.sample_resign_allowed()
        would_resign: int | None = None  # mover who would have resigned in a no-resign game
        resigner: int | None = None
        move = 0
        previous_recorded = False  # whether the last move played was recorded (replies[-1])
        while not game.is_terminal(state):
            full = not capped or rng.random() < mcts_cfg.full_search_fraction
            sims = mcts_cfg.num_simulations if full else mcts_cfg.fast_simulations
            noise = full or mcts_cfg.algorithm == "gumbel"
            mcts, res = await search_on_version(
                mcts, state, leaves, version_wait_s, stats, sims, noise
            )
            # terminal leaves; the root's own evaluation
            stats.simulations += sims - leaves.asked
            leaves.asked = 0
            mover = game.to_play(state)
            if mcts.should_resign(res.root_value, move, resign_allowed):
                resigner = mover
                break
            if would_resign is None and mcts.should_resign(res.root_value, move, True):
                would_resign = mover
            target, action = mcts.choose(res, move)
            if targets and full and previous_recorded:  # the opponent's reply to it
                replies[-1] = target
            if full:
                obs.append(mcts.encode_root(state))
                policies.append(target)
                movers.append(mover)
                plies.append(move)
                replies.append(None)
            previous_recorded = full
            if track is not None:
                track.play(state, full)
            state = game.apply(state, action)
            mcts.advance(action)
            move += 1
    first_result, adjudicated = game_result(game, state, resigner, mcts_cfg)
    movers_a = np.array(movers, dtype=np.int64)
    outcome = np.where(movers_a == 0, first_result, -first_result).astype(np.float32)
    stats.games += 1
    stats.positions += len(obs)
    stats.moves += move
    stats.results[int(np.sign(first_result))] += 1
    stats.resigned += resigner is not None
    stats.adjudicated += adjudicated
    if not resign_allowed:
        stats.no_resign_games += 1
        loser = 0 if first_result < 0 else 1 if first_result > 0 else None
        stats.false_resign += would_resign is not None and would_resign != loser
    policy = np.stack(policies) if policies else np.zeros((0, game.num_actions), np.float32)
    played_out = resigner is None
    # Where the game stopped is known only now: each recorded position's plies to it.
    left = move - np.array(plies, np.float32) if targets and moves_left else None
    extra = game_targets(game, state, movers_a, replies, played_out, track, left) if targets else {}
    return FinishedGame(
        obs=np.stack(obs) if obs else np.zeros((0, *game.obs_shape), np.uint8),
        policy=SparseRows.from_dense(policy) if sparse_targets else policy,
        outcome=outcome,
        version=version,
        result=first_result,
        resigned=resigner is not None,
        moves=move,
        targets={
            k: SparseRows.from_dense(v) if sparse_targets and k == "reply" else v
            for k, v in extra.items()
        },
    )


class SelfPlay:
    """Runs ``cfg.games`` game coroutines until stopped or ``max_games`` finished."""

    def __init__(
        self,
        game_name: str,
        cfg: ActorsConfig,
        mcts_cfg: MCTSConfig,
        client: EvalClient,
        sink: TrajectorySink,
        actor_id: str,
    ) -> None:
        self.game = make_game(game_name)
        self.cfg = cfg
        self.mcts_cfg = mcts_cfg
        self.client = client
        self.sink = sink
        self.actor_id = actor_id
        self.stats = SelfPlayStats()
        self.cache = EvalCache(int(cfg.cache_mb * 2**20)) if cfg.cache_mb > 0 else None
        self.pool: SearchPool | None = None  # made in run(): it needs the running loop
        self._sparse_replies = sparse.wanted(client.cfg.sparse_policy, self.game.num_actions)
        self._next_game_id = 0
        self._done = asyncio.Event()
        self.games = cfg.games
        """Games in flight: game workers ``0 .. games - 1`` start new games (``set_games``)."""
        self.lane_rows = 0
        """Searches per lane of the pool (0: ``client.max_rows``; ``set_games``)."""
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._rngs: dict[int, np.random.Generator] = {}
        self._changed = asyncio.Event()  # set_games started workers: run() waits on them too

    @property
    def playing(self) -> int:
        """Game workers alive (in a game, or about to start one)."""
        return sum(not t.done() for t in self._workers.values())

    def set_games(self, n: int, lane_rows: int = 0) -> None:
        """Games in flight from now on (``actors.inflight``: the autopilot's games file), and
        with ``lane_rows`` the searches per lane of the pool (each lane's round is one message:
        the server's best batch). Lowering abandons nothing: a worker numbered ``n`` or above
        ends after the game it is playing. Raising starts the missing workers at once (before
        ``run``, ``run`` starts ``n``). A new lane size takes each search at its next move."""
        if n < 1:
            raise ValueError(f"games in flight must be >= 1, got {n}")
        self.lane_rows = lane_rows
        if self.pool is not None:
            self.pool.max_rows = (
                min(lane_rows, self.client.cfg.max_rows) or self.client.cfg.max_rows
            )
        if n == self.games:
            return
        log.info("games in flight: %d -> %d", self.games, n)
        self.games = n
        if not self._workers:  # run() has not started: it starts n
            return
        for i in range(n):
            task = self._workers.get(i)
            if task is None or task.done():
                self._spawn(i)
        self._changed.set()

    def _spawn(self, index: int) -> None:
        self._workers[index] = asyncio.create_task(self._worker(index), name=f"game-{index}")

    async def run(self, stop: asyncio.Event) -> SelfPlayStats:
        """Play until ``stop`` is set or the game budget is spent; games in progress then end."""
        if self.cfg.search_pool:
            self.pool = SearchPool(
                self.client.evaluate_rows,
                min(self.lane_rows, self.client.cfg.max_rows) or self.client.cfg.max_rows,
                self.stats,
                self.cache,
                self._sparse_replies,
            )
        for i in range(self.games):
            self._spawn(i)
        monitors = [asyncio.create_task(self._lag_monitor(), name="loop-lag")]
        if self.cfg.status_interval_s:
            monitors.append(asyncio.create_task(self._status_loop(), name="status"))
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._done.wait())]
        try:
            # A worker ends by itself at the game budget, after its game when set_games lowered
            # the count below its number, or by raising.
            while pending := [t for t in self._workers.values() if not t.done()]:
                self._changed.clear()
                changed = asyncio.ensure_future(self._changed.wait())
                done, _ = await asyncio.wait(
                    [*waiters, changed, *pending], return_when=asyncio.FIRST_COMPLETED
                )
                changed.cancel()
                if any(w in done for w in waiters):
                    break
                for w in done:
                    if w is not changed and w.exception() is not None:
                        raise w.exception()  # type: ignore[misc]
        finally:
            workers = list(self._workers.values())
            for t in [*workers, *monitors, *waiters]:
                t.cancel()
            await asyncio.gather(*workers, *monitors, *waiters, return_exceptions=True)
            if self.pool is not None:
                await self.pool.aclose()
        return self.stats

    async def _worker(self, index: int) -> None:
        # A worker started again after set_games lowered and raised the count goes on with its
        # own stream: a fresh one would replay its number's openings.
        rng = self._rngs.get(index)
        if rng is None:
            seed = [self.cfg.seed, zlib.crc32(self.actor_id.encode()), index]
            rng = self._rngs[index] = np.random.default_rng(seed)
        while index < self.games:
            if self.cfg.max_games and self._next_game_id >= self.cfg.max_games:
                return
            game_id = self._next_game_id
            self._next_game_id += 1
            try:
                finished = await play_game(
                    self.game,
                    self.mcts_cfg,
                    self.client,
                    rng,
                    self.stats,
                    self.cfg.version_wait_s,
                    self.cache,
                    self.pool,
                    self.cfg.targets,
                    self._sparse_replies,
                    sparse.wanted(self.cfg.sparse_policy, self.game.num_actions),
                    self.cfg.material_ahead_plies,
                    self.cfg.moves_left,
                )
            except GameAbandoned as exc:
                if not self.client.lifecycle.running:
                    raise  # the client is closed or broken: not one game's problem
                self._abandoned(exc)
                continue
            if not len(finished.outcome):  # no move had the full search: nothing to train on
                self.stats.unrecorded_games += 1
            else:
                msg, arrays = to_message(finished, self.actor_id, game_id, self.game.name)
                await self.sink.send(msg, *arrays)
            if self.cfg.max_games and self.stats.games >= self.cfg.max_games:
                self._done.set()

    def _abandoned(self, exc: GameAbandoned) -> None:
        n = self.stats.abandoned.get(exc.reason, 0) + 1
        self.stats.abandoned[exc.reason] = n
        if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th ...: a storm stays a few lines
            log.warning("game abandoned (%s, %d so far): %s", exc.reason, n, exc)

    async def _lag_monitor(self, period: float = 0.1) -> None:
        """Event-loop lag: how late a timer fires, smoothed."""
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(period)
            lag = max(0.0, (loop.time() - t - period) * 1e3)
            self.stats.loop_lag_ms = 0.8 * self.stats.loop_lag_ms + 0.2 * lag

    async def _status_loop(self) -> None:
        rates = RateMeter()
        start = time.monotonic()
        for key in ("games", "positions", "moves", "simulations", "evaluations"):
            rates.rate(key, getattr(self.stats, key), start)
        while True:
            await asyncio.sleep(self.cfg.status_interval_s)
            s = self.stats
            now = time.monotonic()
            sink = self.sink.stats()
            log.info(
                # The prefix up to "loop lag" is parsed by azserve bench selfplay: keep its order.
                "games/s %.2f  positions/s %.1f  sims/s %.0f  evals/s %.0f  in flight %d  "
                "loop lag %.1f ms  moves/s %.1f  games %d  positions recorded/moves played %d/%d  "
                "latest v%d  W/D/L %d/%d/%d  resigned %d  false resign %d/%d  adjudicated %d  "
                "trajectories sent %d acked %d resent %d pending %d  abandoned %s  %s  "
                "trees %d nodes %.1f MB  longest wait %.1f s eval %.1f s version",
                rates.rate("games", s.games, now),
                rates.rate("positions", s.positions, now),
                rates.rate("simulations", s.simulations, now),
                rates.rate("evaluations", s.evaluations, now),
                self.client.pending_rows(),
                s.loop_lag_ms,
                rates.rate("moves", s.moves, now),
                s.games,
                s.positions,
                s.moves,
                self.client.latest_version,
                s.results[1],
                s.results[0],
                s.results[-1],
                s.resigned,
                s.false_resign,
                s.no_resign_games,
                s.adjudicated,
                sink.sent,
                sink.acked,
                sink.resent,
                sink.pending,
                s.abandoned or "0",
                self.cache.stats.line() if self.cache is not None else "cache off",
                *_trees(),
                self.client.stats.longest_wait_s,
                s.longest_version_wait_s,
            )


def _trees() -> tuple[int, float]:
    """(nodes, MB) of the process's compiled trees, for the status line."""
    nodes, size = live_trees()
    return nodes, size / 1e6
