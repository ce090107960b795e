"""The chaos run's books (``azserve bench chaos``): games stored, acked and lost, from the
learner's journal and each actor life's log; versions across every role's restarts; the run's
final evaluation. The checks themselves are in ``azserve.perf.chaos``'s module docstring."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from azserve.perf.chaos_fleet import (
    GROUPS,
    LIVE,
    PUBLISHED,
    SERVER_START,
    SERVERS,
    log_path,
    read_from,
)
from azserve.perf.netns import NetnsLan
from azserve.run.actor_lives import KILLED_IN_PLAY, actor_lives


def journal_games(journal: Path) -> tuple[dict[str, int], int]:
    """Distinct games stored per actor id, and duplicate records, over every segment."""
    from azserve.trajfile import read_trajectory_file

    seen: set[tuple[str, int]] = set()
    per_actor: dict[str, int] = {}
    duplicates = 0
    for path in sorted(journal.glob("seg-*.azt")):
        for traj, *_ in read_trajectory_file(path):
            key = (traj.actor, traj.game_id)
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            per_actor[traj.actor] = per_actor.get(traj.actor, 0) + 1
    return per_actor, duplicates


def _lives_of_servers(text: str) -> Iterator[list[int]]:
    life: list[int] | None = None
    for line in text.splitlines():
        if SERVER_START in line:
            if life is not None:
                yield life
            life = []
        elif (m := LIVE.search(line)) and life is not None:
            life.append(int(m[1]))
    if life is not None:
        yield life


def _caught_up(lives: list[list[int]]) -> bool:
    """Whether every life of a server after its first went live on a version at least as new
    as the newest of the life before (a restarted server starts on version 0 or the newest
    checkpoint and is caught up by the learner). A server's latest version is the newest it
    holds, so it only rises within a life; an older version going live later is a restore,
    for games pinned to it (counted as ``server_restores``)."""
    return all(
        max(b, default=-1) >= max(a, default=-1) for a, b in zip(lives, lives[1:], strict=False)
    )


def _rising(xs: list[int]) -> bool:
    return all(a <= b for a, b in zip(xs, xs[1:], strict=False))


def account(run_dir: Path, lan: NetnsLan, journal: Path, engine: str = "ssh") -> dict[str, Any]:
    """The run's books (see the module docstring), from the logs where ``engine`` puts them."""
    stored_by_actor, duplicates = journal_games(journal)
    by_group = {
        g: actor_lives(read_from(log_path(run_dir, lan, g, engine), 0).splitlines()) for g in GROUPS
    }
    lives = [life for g in GROUPS for life in by_group[g]]
    abandoned: dict[str, int] = {}

    def add(reason: str, n: int) -> None:
        if n > 0:
            abandoned[reason] = abandoned.get(reason, 0) + n

    acked_lost = 0
    for life in lives:
        stored = stored_by_actor.get(life.actor, 0)
        acked_lost += max(0, life.acked - stored)
        for reason, n in life.abandoned.items():
            add(reason, n)
        if not life.clean:
            add(KILLED_IN_PLAY, life.games)
            add("killed before ack", max(0, life.finished - stored))
        else:
            add("not delivered at stop", max(0, life.finished - stored))
    stored_total = sum(stored_by_actor.values())
    learner_text = read_from(log_path(run_dir, lan, "learner", engine), 0)
    published = [int(v) for v in PUBLISHED.findall(learner_text)]
    servers = {
        s: list(_lives_of_servers(read_from(log_path(run_dir, lan, s, engine), 0))) for s in SERVERS
    }
    monotonic = {
        "learner_published": _rising(published),
        **{f"server_{s}_caught_up": _caught_up(ls) for s, ls in servers.items()},
        "actors_latest": all(_rising(life.latest) for life in lives),
    }
    restores = {
        s: sum(v < max(life[: i + 1]) for life in ls for i, v in enumerate(life))
        for s, ls in servers.items()
    }
    unknown = sorted(set(stored_by_actor) - {life.actor for life in lives})
    return {
        "games_started": stored_total + sum(abandoned.values()),
        "games_stored": stored_total,
        "games_abandoned": abandoned,
        "acked_lost": acked_lost,
        "duplicates": duplicates,
        "actor_lives": len(lives),
        "actor_lives_killed": sum(not life.clean for life in lives),
        "stored_from_unknown_actors": len(unknown),
        "versions_published": [published[0], published[-1]] if published else [],
        "server_lives": {s: len(ls) for s, ls in servers.items()},
        "server_restores": restores,
        "versions_monotonic": all(monotonic.values()),
        "versions_detail": monotonic,
        "longest_wait_s": {
            g: {
                "eval": max((life.eval_wait_s for life in ls), default=0.0),
                "version": max((life.version_wait_s for life in ls), default=0.0),
            }
            for g, ls in by_group.items()
        },
    }


WAIT_SLACK_S = 2.0
"""What a wait may exceed its timeout by: the heartbeat that expires it, and the event loop's
lag on a loaded machine."""


def wait_bounds(run_dir: Path, stopped_s: dict[str, float]) -> dict[str, dict[str, float]]:
    """How long an actor group's games may wait, by the run's config: an evaluation
    ``client.request_timeout_s`` (then its game is given up), a move for its version
    ``actors.version_wait_s``, each with ``WAIT_SLACK_S`` and the heartbeat, plus the longest
    ``SIGSTOP`` of the group itself (``stopped_s``: its clock ran while it could not look)."""
    from actors.config import ActorsConfig
    from azserve.client import ClientConfig
    from azserve.config.schema import load_config

    path = run_dir / "config.toml"  # none: the launch failed first (a verdict of its own)
    client, actors = (
        (c.client, c.actors) if path.exists() and (c := load_config(path)) else
        (ClientConfig(), ActorsConfig())
    )  # fmt: skip
    eval_s = client.request_timeout_s + client.heartbeat_s + WAIT_SLACK_S
    version_s = actors.version_wait_s + WAIT_SLACK_S
    return {
        g: {"eval": eval_s + stopped_s.get(g, 0.0), "version": version_s + stopped_s.get(g, 0.0)}
        for g in GROUPS
    }


def final_eval(run_dir: Path) -> dict[str, Any] | None:
    """The run's last full evaluation (``eval.jsonl``), or None."""
    path = run_dir / "eval.jsonl"
    rows = (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if path.exists()
        else []
    )
    full = [r for r in rows if r.get("full")]
    return full[-1] if full else None


def score(result: dict[str, int] | None) -> float | None:
    """(wins + draws / 2) / games of a match result."""
    if not result:
        return None
    games = result.get("win", 0) + result.get("draw", 0) + result.get("loss", 0)
    return (result.get("win", 0) + 0.5 * result.get("draw", 0)) / games if games else None
