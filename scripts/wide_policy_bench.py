"""Wide policies, dense against sparse: bytes per position on the wire, in the journal and in the
replay (exact), and the learner's samples/s with each replay layout (A B A B, one process).

    .venv/bin/python scripts/wide_policy_bench.py --config chess [--games 4] [--steps 12]
        [--threads 1] [--json OUT]

Positions come from self-play games of the config's game played by its own search
(``make_search`` with the config's ``[mcts]``: for chess, Gumbel at 16 simulations, whose
policy target covers every legal move) against a zero-cost evaluator (uniform logits, value 0),
so the legal-move counts and the policies' nonzero entries are a real game's.

- request: an ``eval`` of 128 of those positions (``client.max_rows``), dense (obs only) and
  sparse (obs, offsets, legal actions), header included, per position;
- reply: its ``result``, float32 logits ``[rows, A]`` against float16 legal logits ``[n]``;
- trajectory: each game's ``traj`` message, dense against sparse, without targets (the chess
  config's) and with the ``reply`` target (``trainer.reply_weight`` above 0);
- journal: the same records in a trajectory file (``azserve.trajfile``), bytes per position;
- replay: the policy store's bytes per position (``replay.policy_width`` 0 against -1) and the
  whole position (obs, outcome, version, time, fresh flag, policy);
- client scatter: the actor's cost of a sparse reply made dense again (``sparse.scatter``, as
  the search pool does per round), microseconds per row;
- learner: ``Replay.sample`` + ``Trainer.step`` at ``trainer.batch_size`` on a replay filled with
  those games, the two layouts taking turns step by step; samples/s and the sampling's share.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from actors.games import make_game
from actors.searches import make_search
from azserve import protocol as P
from azserve import sparse
from azserve.config.presets import resolve_config
from azserve.config.schema import load_config
from azserve.sparse import SparseRows
from azserve.trajarrays import flatten
from azserve.trajfile import write_record
from learner.replay import Replay
from learner.trainer import Trainer


def play(config: Any, games: int, seed: int) -> list[tuple[np.ndarray, np.ndarray, list]]:
    """``games`` self-play games: (obs [T,C,H,W], policy [T,A], legal actions per position)."""
    game = make_game(config.game)
    zeros = np.zeros(game.num_actions, np.float32)

    async def evaluate(obs: np.ndarray, *legal: Any) -> tuple[np.ndarray, float]:
        return zeros, 0.0

    async def one(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list]:
        search = make_search(game, config.mcts, rng)
        state, obs, policy, legal, move = game.initial_state(), [], [], [], 0
        while not game.is_terminal(state):
            res = await search.search(state, evaluate, True)
            target, action = search.choose(res, move)
            obs.append(search.encode_root(state))
            policy.append(target)
            legal.append(np.array(game.legal_actions(state)))
            state = game.apply(state, action)
            search.advance(action)
            move += 1
        return np.stack(obs), np.stack(policy), legal

    rng = np.random.default_rng(seed)
    return [asyncio.run(one(rng)) for _ in range(games)]


def _bytes(frames: list[Any]) -> int:
    return sum(len(f) for f in frames)


def wire_bytes(played: list, num_actions: int, rows: int) -> dict[str, Any]:
    obs = np.concatenate([o for o, _, _ in played])
    legal = [a for _, _, ls in played for a in ls]
    positions = len(obs)
    stack, acts = obs[:rows], legal[:rows]
    req_dense = _bytes(P.encode(P.EvalRequest(id=1), [stack]))
    offsets, index = sparse.ragged(acts)
    req_sparse = _bytes(P.encode(P.EvalRequest(id=1), [stack, offsets, index]))
    reply = P.EvalReply(id=1, version=0, latest=0)
    value = np.zeros(len(stack), np.float32)
    rep_dense = _bytes(P.encode(reply, [np.zeros((len(stack), num_actions), np.float32), value]))
    logits16 = np.random.default_rng(0).standard_normal(len(index)).astype(np.float16)
    rep_sparse = _bytes(P.encode(reply, [logits16, value]))
    # What the actor pays to turn a sparse reply back into dense rows (the search pool's round).
    t0, n = time.perf_counter(), 50
    for _ in range(n):
        sparse.scatter(offsets, index, logits16, num_actions, sparse.ILLEGAL_LOGIT)
    scatter_us = (time.perf_counter() - t0) / n / len(stack) * 1e6
    arms = ("dense", "sparse", "dense+reply", "sparse+reply")
    traj = dict.fromkeys(arms, 0)
    journal = {k: io.BytesIO() for k in arms}
    nonzero = []
    for g, (o, policy, _) in enumerate(played):
        t = len(o)
        outcome = np.zeros(t, np.float32)
        reply_t = np.zeros_like(policy)
        reply_t[:-1] = policy[1:]
        for kind in arms:
            sp = kind.startswith("sparse")
            msg = P.Trajectory(actor="a", game_id=g, game="x", version=0, length=t, result=0.0)
            pol: Any = SparseRows.from_dense(policy) if sp else policy
            extra: list[Any] = []
            if kind.endswith("+reply"):  # the reply target (a trainer.reply_weight above 0)
                msg.targets = ["reply"]
                extra = [SparseRows.from_dense(reply_t) if sp else reply_t]
            if sp:
                msg.sparse = True
            traj[kind] += _bytes(P.encode(msg, flatten(o, pol, outcome, extra)))
            write_record(journal[kind], msg, o, pol, outcome, *extra)  # type: ignore[arg-type]
        nonzero += list((policy > 0).sum(axis=1))
    return {
        "positions": positions,
        "legal_moves_mean": round(float(np.mean([len(a) for a in legal])), 1),
        "policy_nonzero_mean": round(float(np.mean(nonzero)), 1),
        "policy_nonzero_max": int(np.max(nonzero)),
        "request_per_position": {
            "dense": round(req_dense / len(stack)),
            "sparse": round(req_sparse / len(stack)),
        },
        "reply_per_position": {
            "dense": round(rep_dense / len(stack)),
            "sparse": round(rep_sparse / len(stack)),
        },
        "client_scatter_us_per_row": round(scatter_us, 2),
        "trajectory_per_position": {k: round(v / positions) for k, v in traj.items()},
        "journal_per_position": {
            k: round(len(f.getvalue()) / positions) for k, f in journal.items()
        },
    }


def fill(config: Any, played: list, width: int, capacity: int) -> Replay:
    cfg = replace(config.replay, capacity=capacity, min_size=1, policy_width=width)
    game = make_game(config.game)
    replay = Replay(cfg, game.obs_shape, game.num_actions)
    rng = np.random.default_rng(0)
    while replay.metrics().inserted < capacity:
        o, policy, _ = played[int(rng.integers(len(played)))]
        outcome = rng.choice([-1.0, 1.0], len(o)).astype(np.float32)
        replay.insert(o, SparseRows.from_dense(policy) if width else policy, outcome, 0)
    return replay


def replay_bytes(replay: Replay, capacity: int) -> dict[str, int]:
    fixed = (
        (replay._obs.nbytes + replay._outcome.nbytes + replay._version.nbytes)
        + replay._time.nbytes
        + replay._fresh.nbytes
    )
    return {
        "policy_per_position": round(replay.policy_bytes / capacity),
        "position": round((fixed + replay.policy_bytes) / capacity),
    }


def learner_ab(config: Any, replays: dict[str, Replay], steps: int) -> dict[str, Any]:
    trainer = Trainer(config.net, config.trainer)
    bs = config.trainer.batch_size
    times: dict[str, list[float]] = {k: [] for k in replays}
    sample_s: dict[str, list[float]] = {k: [] for k in replays}
    for r in replays.values():  # warm up: first allocations, first graph
        trainer.step(r.sample(bs, trainer.rng))
    for _ in range(steps):
        for k, r in replays.items():  # A B A B: the machine's noise hits both alike
            t0 = time.perf_counter()
            batch = r.sample(bs, trainer.rng)
            t1 = time.perf_counter()
            trainer.step(batch)
            times[k].append(time.perf_counter() - t0)
            sample_s[k].append(t1 - t0)
    out: dict[str, Any] = {}
    for k in replays:
        med = statistics.median(times[k])
        out[k] = {
            "samples_per_s": round(bs / med, 1),
            "sample_ms": round(1e3 * statistics.median(sample_s[k]), 2),
            "step_ms": round(1e3 * med, 1),
        }
    names = list(replays)
    out["ratio_sparse_over_dense"] = round(
        out[names[1]]["samples_per_s"] / out[names[0]]["samples_per_s"], 3
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="chess")
    ap.add_argument("--games", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12, help="timed steps per layout")
    ap.add_argument("--capacity", type=int, default=20000, help="replay positions for the A/B")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(resolve_config(args.config), args.sets)
    game = make_game(config.game)
    t0 = time.perf_counter()
    played = play(config, args.games, seed=1)
    result: dict[str, Any] = {
        "config": args.config,
        "game": config.game,
        "num_actions": game.num_actions,
        "play_s": round(time.perf_counter() - t0, 1),
        **wire_bytes(played, game.num_actions, config.client.max_rows),
    }
    # A narrow game's sparse arm keeps every action (lossless): it shows what sparse would cost.
    width = -1 if game.num_actions > sparse.AUTO_MIN_ACTIONS else game.num_actions
    replays = {
        "dense": fill(config, played, 0, args.capacity),
        "sparse": fill(config, played, width, args.capacity),
    }
    result["replay"] = {k: replay_bytes(r, args.capacity) for k, r in replays.items()}
    if args.steps:
        result["learner"] = learner_ab(config, replays, args.steps)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
