"""Many games' compiled searches driven in rounds: one message per round, no future per leaf.

With one coroutine per game, every leaf costs a future, a task wake-up, a share of the
coalescer's tick and a reply routed to it: on an accelerator host those Python costs, not the
search, set the actor side's speed (docs/benchmarks.md, "The actor side at full load"). The
pool keeps the game coroutines for what happens once per move (move choice, recording,
resignation) and takes the leaves off them: ``await pool.search(...)`` hands the game's
compiled tree to the pool, and the game wakes again when its search is done.

The pool runs lanes of at most ``max_rows`` searches (the client's message size). A lane's
round: every search of the lane has one leaf waiting; the leaves of each weights version go
out as one ``[n, C, H, W]`` evaluation; when the answers come back each tree takes its answer
in C (expand, back up, descend to its next leaf), searches that are done resolve their future,
and the next round starts with the searches added meanwhile. Two or more lanes keep several
batches in flight, as the game coroutines did.

- **Same search, same results.** Each tree receives the same calls, in the same order, with
  the same answers, as ``search`` makes them (``actors.compiled_mcts.CompiledSearch``), and the
  noise is drawn from the game's own generator at the same point: for the same seed and
  evaluator the visit counts, moves and training targets are those of the per-leaf path
  (tests/test_searchpool.py).
- **The evaluation cache** (``actors.evalcache``) is consulted for each leaf before it joins a
  round (a hit is fed at once) and filled from each well-formed reply; leaves in flight are
  not joined. With the compiled store the lookups happen in C, in the loop that steps the
  trees (``Cache.step``): a search's leaves are answered from the cache until one misses, and
  only the root's lookup (followed by the search's setup in Python) stays in Python.
- **Failures stay per search.** An evaluation's error (``VersionUnavailable``, a timeout, a
  server error) fails the searches of that version's message, whose trees are reset; a
  cancelled search (its game stopped) is dropped at its next round.
"""

from __future__ import annotations

import asyncio
import logging
from itertools import compress
from typing import Any, TypeGuard

import numpy as np

from actors.compiled_mcts import CompiledSearch
from actors.evalcache import EvalCache
from actors.games import State
from actors.games.compiled import step_many
from azserve import sparse as _sparse
from azserve.errors import ComponentFailed
from azserve.lifecycle import Lifecycle

log = logging.getLogger("actors.searchpool")

Evaluate = Any
"""``evaluate(obs [n, C, H, W], version) -> awaitable (logits [n, A], values [n])``:
``EvalClient.evaluate_rows`` (the lane's stack is one message, sent as it is)."""


class _Job:
    """One search in a lane: its tree, the leaf it waits on and the future of its result."""

    __slots__ = (
        "search", "tree", "version", "obs", "fut", "root", "root_asked", "noise", "sims",
        "counter", "looked",
    )  # fmt: skip

    def __init__(
        self,
        search: CompiledSearch,
        version: int,
        fut: asyncio.Future[Any],
        noise: bool,
        sims: int,
        counter: Any,
    ) -> None:
        self.search = search
        self.tree = search.tree
        self.version = version
        self.obs = np.empty(search.game.obs_shape, np.uint8)
        self.fut = fut
        self.root = False  # the leaf it waits on is the root
        self.root_asked = 0  # 1 when the root was evaluated (not reused)
        self.noise = noise
        self.sims = sims
        self.counter = counter
        self.looked = False  # the leaf it waits on missed the compiled cache already

    def feed(self, logits: Any, value: Any) -> bool:
        """Give the waiting leaf its answer; True when the search is done (result set)."""
        if self.root:
            self.tree.expand_root(logits, value)
            self.search.prepare(self.noise, self.sims)
            self.root = False
            more = self.tree.descend(self.obs)
        else:
            more = self.tree.step(logits, value, self.obs)
        if more:
            return False
        self.finish()
        return True

    def finish(self) -> None:
        """The search is done: its result, and its leaves counted for its game."""
        evaluations = self.asked(0)
        self.count(0)
        self.fut.set_result(self.search.result(evaluations))

    def asked(self, pending: int) -> int:
        """Leaves asked for by this search: its root's, those answered since (the tree counts
        them), and ``pending`` asked for and not fed."""
        if self.root:  # waiting on its root: nothing else asked yet
            return pending
        return self.root_asked + self.tree.fed + pending

    def count(self, pending: int) -> None:
        """Add the search's leaves asked for to its game's counter (once, as it leaves)."""
        if self.counter is not None:
            self.counter.asked += self.asked(pending)


class SearchPool:
    """Drives the compiled searches handed to ``search``; see the module docstring.

    Args:
        evaluate: the client's evaluation of a stack on a version.
        max_rows: most searches per lane (leaves per message).
        stats: counts ``evaluations`` and ``simulations`` as leaves are asked for, like the
            per-leaf path (``SelfPlayStats``; None: not counted).
        cache: the process's evaluation cache, or None.
        sparse: send each leaf's legal actions (``evaluate(stack, version, legal)``, the
            client's sparse request) and scatter the float16 logits that come back into dense
            float32 rows (``azserve.sparse.ILLEGAL_LOGIT`` elsewhere) before the trees and the
            cache see them.
    """

    def __init__(
        self,
        evaluate: Evaluate,
        max_rows: int,
        stats: Any = None,
        cache: EvalCache | None = None,
        sparse: bool = False,
    ) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self._evaluate = evaluate
        self.max_rows = max_rows
        self.stats = stats
        self.cache = cache
        self.sparse = sparse
        self.store = cache.compiled if cache is not None else None
        """The cache's compiled store (``Cache.step``), or None: looked up once, not per round."""
        self._lanes: list[_Lane] = []
        # Every lane task is an owner task: one that dies by raising fails the pool (its
        # searches' futures get the error, and later searches are refused with it).
        self.lifecycle = Lifecycle("search-pool")
        self.lifecycle.begin_start()
        self.lifecycle.started()

    @staticmethod
    def supports(search: Any) -> TypeGuard[CompiledSearch]:
        """Whether the pool can drive ``search`` (a compiled one, one leaf at a time)."""
        return isinstance(search, CompiledSearch) and search.sequential

    def search(
        self,
        search: CompiledSearch,
        state: State,
        version: int,
        add_noise: bool,
        sims: int,
        counter: Any = None,
    ) -> asyncio.Future[Any]:
        """Start ``search`` from ``state`` on ``version``: a future of its result
        (``SearchResult`` or ``GumbelResult``), or of the evaluation's error. ``counter.asked``
        (its game's ``selfplay.GameLeaves``) counts the leaves asked for (the search's
        evaluations, cache hits included)."""
        self.lifecycle.check_running(ComponentFailed)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        job = _Job(search, version, fut, add_noise, sims, counter)
        try:
            if search.begin(state):
                job.root = True
                job.root_asked = 1
                job.tree.root_obs(job.obs)
            else:
                search.prepare(add_noise, sims)
                if not job.tree.descend(job.obs):  # every simulation ended on a terminal
                    fut.set_result(search.result(0))
                    return fut
        except BaseException:
            job.tree.reset()
            raise
        self._lane().add(job)
        return fut

    def _lane(self) -> _Lane:
        best = None
        for lane in self._lanes:
            if lane.size < self.max_rows and (best is None or lane.size < best.size):
                best = lane
        if best is None:
            best = _Lane(self, len(self._lanes))
            self._lanes.append(best)
        return best

    async def aclose(self) -> None:
        """Stop every lane (their searches' futures are cancelled). A lane that died before
        has failed the pool already (``lifecycle.error``), so its error is not lost here."""
        self.lifecycle.begin_close()
        lanes, self._lanes = self._lanes, []
        for lane in lanes:
            lane.close()
        await asyncio.gather(*(lane.task for lane in lanes), return_exceptions=True)
        self.lifecycle.closed()

    @property
    def lanes(self) -> int:
        return len(self._lanes)


class _Lane:
    """Up to ``max_rows`` searches that go out together, round after round."""

    def __init__(self, pool: SearchPool, index: int) -> None:
        self.pool = pool
        self.size = 0
        self._next: list[_Job] = []
        self._current: list[_Job] = []
        self._wake = asyncio.Event()
        self.task = pool.lifecycle.spawn(self._run(), f"lane-{index}")

    def add(self, job: _Job) -> None:
        self.size += 1
        self._next.append(job)
        self._wake.set()

    def close(self) -> None:
        self.task.cancel()

    async def _run(self) -> None:
        error: BaseException | None = None
        try:
            while True:
                if not self._next:
                    self._wake.clear()
                    await self._wake.wait()
                self._current, self._next = self._next, []
                await self._round(self._current)
                # The games whose searches just finished take their move and hand in their next
                # search before the next round goes out: without this yield each round missed
                # them, about one search in sixteen at 16 simulations (rounds of 120 of 128).
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug in the lane: its searches fail with it
            error = exc
            raise
        finally:
            for job in [*self._current, *self._next]:
                if job.fut.done() and not job.fut.cancelled():
                    continue  # finished: its game owns the tree again
                job.tree.reset()
                if error is None:
                    job.fut.cancel()
                elif not job.fut.done():
                    job.fut.set_exception(ComponentFailed(f"search pool lane failed: {error!r}"))

    async def _round(self, jobs: list[_Job]) -> None:
        pool = self.pool
        cache, store = pool.cache, pool.store
        # Per version: the searches waiting on an inner leaf, then those waiting on their root
        # (fed one by one: a root's answer is followed by the search's setup in Python).
        groups: dict[int, tuple[list[_Job], list[_Job]]] = {}
        fresh: dict[int, list[_Job]] = {}  # inner leaves the compiled cache has not seen yet
        for job in jobs:
            if job.fut.done():  # cancelled: its game stopped
                self._drop(job)
                continue
            if cache is not None and not job.looked:
                if store is not None and not job.root:
                    fresh.setdefault(job.version, []).append(job)
                    continue
                if not self._lookup(job, cache):
                    continue
            _join(groups, job)
        for version, batch in fresh.items():  # their leaves answered in C while they hit
            for job in self._step_inner(batch, None, None, version):
                _join(groups, job)
        if not groups:
            return
        sent = []
        for version, (inner, roots) in groups.items():
            group = inner + roots if roots else inner
            # The one copy of the leaves between the trees and the socket: the client sends
            # this buffer as it is (evaluate_rows), and the cache keys its rows from it.
            joined = b"".join([j.obs for j in group])  # type: ignore[misc]
            stack = np.frombuffer(joined, np.uint8).reshape(len(group), *group[0].obs.shape)
            self._asked(len(group))
            try:
                if pool.sparse:  # each leaf's legal actions, ragged (-1: a root's)
                    legal = _sparse.ragged(
                        [j.tree.leaf_actions(-1 if j.root else 0) for j in group]
                    )
                    ask = _densify(pool._evaluate(stack, version, legal), legal, group)
                else:
                    ask = pool._evaluate(stack, version)
                sent.append((version, inner, group, stack, ask))
            except Exception as exc:  # noqa: BLE001 - a closed client: its searches fail
                self._fail(group, exc)
        answers = await asyncio.gather(*(s[4] for s in sent), return_exceptions=True)
        again = self._next
        for (version, inner, group, stack, _), answer in zip(sent, answers, strict=True):
            if isinstance(answer, BaseException):
                self._fail(group, answer)
                continue
            logits, values = answer
            if cache is not None and _well_formed(logits, values, group):
                cache.put_rows(version, stack, logits, values)
            first = 0
            if inner and _fast(logits, values):
                again.extend(self._step_inner(inner, logits, values, version))
                first = len(inner)
            if first == len(group):
                continue
            vals = values.tolist()  # the same doubles the tree reads from float32 scalars
            for i in range(first, len(group)):
                job = group[i]
                if self._answer(job, logits[i], vals[i]):
                    again.append(job)

    def _lookup(self, job: _Job, cache: EvalCache) -> bool:
        """Answer ``job``'s leaves from the cache in Python while they hit (its root, or any
        leaf without the compiled store); True when it waits on a leaf that missed."""
        while True:
            hit = cache.lookup(job.version, job.obs)
            if hit is None:
                return True
            self._asked(1)
            if not self._answer(job, *hit):
                return False

    def _step_inner(self, inner: list[_Job], logits: Any, values: Any, version: int) -> list[_Job]:
        """The first ``len(inner)`` rows of a reply to their searches, stepped in C at once
        (``step_many``: what ``_answer`` does per search, the same calls on each tree); with
        the compiled cache, each tree's next leaves are answered from it while they hit
        (``Cache.step``; ``logits=None``: only that, for leaves not yet looked up). Returns
        the searches that wait on a leaf (looked up, when the cache is compiled)."""
        trees, outs = [j.tree for j in inner], [j.obs for j in inner]
        cache, store = self.pool.cache, self.pool.store
        if store is not None:
            assert cache is not None  # the store is the cache's
            flags, errors, hits = store.step(
                trees, logits, values, outs, version, cache.kind(inner[0].obs)
            )
            self._asked(hits)
        else:
            flags, errors = step_many(trees, logits, values, outs)
        waiting = list(compress(inner, flags))
        for job in waiting:
            job.looked = store is not None
        done = list(compress(inner, flags.translate(_NOT)))
        if not done:
            return waiting
        failed = dict(errors) if errors else {}
        if failed:
            index = {id(j): i for i, j in enumerate(inner)}
        for job in done:
            if failed and (exc := failed.get(index[id(job)])) is not None:
                # Bad logits and the like: this search fails; the leaf was asked, not fed.
                self._fail([job], exc, pending=1)
                continue
            self.size -= 1
            if job.fut.done():  # cancelled meanwhile: its game stopped
                job.count(0)
                job.tree.reset()
                continue
            job.finish()
        return waiting

    def _asked(self, n: int) -> None:
        stats = self.pool.stats
        if stats is not None:
            stats.evaluations += n
            stats.simulations += n

    def _answer(self, job: _Job, logits: Any, value: Any) -> bool:
        """Answer ``job``'s leaf; True when it waits for another (in ``job.obs``), False when
        it left the lane (done, failed or cancelled)."""
        if job.fut.done():
            self._drop(job, pending=1)
            return False
        try:
            done = job.feed(logits, value)
        except Exception as exc:  # noqa: BLE001 - bad logits and the like: this search fails
            self._fail([job], exc, pending=1)
            return False
        if done:
            self.size -= 1
        return not done

    def _drop(self, job: _Job, pending: int = 0) -> None:
        """A cancelled search leaves; ``pending``: a leaf of it asked for and not fed."""
        job.count(pending)
        job.tree.reset()
        self.size -= 1

    def _fail(self, group: list[_Job], exc: BaseException, pending: int = 1) -> None:
        """The searches of ``group`` fail with ``exc``; each had ``pending`` leaves asked for
        and not fed (the one that failed)."""
        for job in group:
            job.count(pending)
            job.tree.reset()
            self.size -= 1
            if job.fut.done():
                continue
            if isinstance(exc, asyncio.CancelledError):  # the client cancelled the evaluation
                job.fut.cancel()
            else:
                job.fut.set_exception(exc)


_NOT = bytes.maketrans(b"\x00\x01", b"\x01\x00")


def _well_formed(logits: Any, values: Any, group: list[_Job]) -> bool:
    """Whether a reply may be cached: one row of the game's width per leaf, numbers (a
    malformed one fails its searches, and must not answer others from the cache later)."""
    shape = (len(group), group[0].search.game.num_actions)
    return (
        isinstance(logits, np.ndarray)
        and logits.shape == shape
        and logits.dtype.kind == "f"
        and isinstance(values, np.ndarray)
        and values.shape == (len(group),)
        and values.dtype in _FLOATS
    )


async def _densify(answer: Any, legal: tuple[np.ndarray, np.ndarray], group: list[_Job]) -> Any:
    """A sparse reply (logits float16 ``[k]``, values ``[n]``) as dense float32 rows."""
    logits, values = await answer
    if len(logits) != len(legal[1]):
        raise ValueError(f"a sparse reply of {len(logits)} logits for {len(legal[1])} actions")
    width = group[0].search.game.num_actions
    return _sparse.scatter(*legal, logits, width, _sparse.ILLEGAL_LOGIT), values


def _join(groups: dict[int, tuple[list[_Job], list[_Job]]], job: _Job) -> None:
    """Add ``job``'s leaf to its version's round: inner leaves first, then roots. Its next leaf
    is looked up again (``looked`` is set only by the step that looked it up)."""
    job.looked = False
    parts = groups.get(job.version)
    if parts is None:
        parts = groups[job.version] = ([], [])
    parts[job.root].append(job)


def _fast(logits: Any, values: Any) -> bool:
    """Whether ``step_many`` takes the reply as it is (float32 or float64 rows)."""
    return (
        step_many is not None
        and isinstance(logits, np.ndarray)
        and isinstance(values, np.ndarray)
        and logits.ndim == 2
        and values.ndim == 1
        and logits.dtype in _FLOATS
        and values.dtype in _FLOATS
    )


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
