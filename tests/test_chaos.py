"""``azserve bench chaos``: its books (actor lives from real log lines, stored games from a real
journal, versions), its strikes, and the short form of the real thing: five network
namespaces, ``azserve launch`` on the ssh engine, random kill -9, SIGSTOP and host crashes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from azserve.cli.bench import CHAOS_KINDS
from azserve.perf.chaos import KINDS, Injector
from azserve.perf.chaos_books import _caught_up, _lives_of_servers, journal_games, score
from azserve.perf.chaos_fleet import GROUPS, SERVERS, working
from azserve.protocol import Trajectory
from azserve.run.actor_lives import actor_lives, killed_in_play
from learner.journal import Journal
from tests.netns import unavailable

REPO = Path(__file__).resolve().parents[1]


def status(
    games: int, acked: int, pending: int, latest: int, rate: float = 2.5, waits: str = ""
) -> str:
    """An actor status line as ``actors.selfplay`` writes it (``waits``: its tail, the longest
    waits, which an older actor did not write)."""
    return (
        f"20:00:{games % 60:02d} I actors.selfplay: games/s {rate:.2f}  positions/s 484.4  "
        f"sims/s 13164  evals/s 12704  in flight 128  loop lag 0.2 ms  moves/s 484.4  "
        f"games {games}  positions recorded/moves played 2422/2422  latest v{latest}  "
        f"W/D/L 96/0/69  resigned 0  false resign 0/35  trajectories sent {acked + pending} "
        f"acked {acked} resent 0 pending {pending}  abandoned 0  cache hit 27.9% hits 17719 "
        "shared 0 misses 45807 entries 43498 8.6 MB evictions 0" + waits
    )


def test_actor_lives_from_the_lines_the_actor_writes() -> None:
    summary = {"actor": "b", "games": 30, "abandoned": {"server lost": 2}, "sent": 30,
               "acked": 29, "resent": 1, "undelivered": 1,
               "longest_wait_s": {"eval": 4.25, "version": 0.0}}  # fmt: skip
    text = "\n".join(
        [
            "20:00:00 I actors: actor started: a, 16 game coroutines",
            status(10, 9, 1, 0),
            status(
                20, 18, 2, 3, waits="  trees 4 nodes 0.1 MB  longest wait 2.5 s eval 7.0 s version"
            ),  # then kill -9: no summary
            "20:00:30 I actors: waiting for the inference server",
            "20:00:31 I actors: actor started: b, 16 game coroutines",
            status(5, 5, 0, 4),
            f"20:00:40 I actors: actor summary: {json.dumps(summary)}",
        ]
    )
    a, b = actor_lives(text.splitlines())
    assert killed_in_play([a, b]) == 16
    assert (a.actor, a.games, a.finished, a.acked, a.pending, a.clean) == (
        "a",
        16,
        20,
        18,
        2,
        False,
    )
    assert a.latest == [0, 3]
    assert (a.eval_wait_s, a.version_wait_s) == (2.5, 7.0)  # its last status line's
    assert (b.eval_wait_s, b.version_wait_s) == (4.25, 0.0)  # its summary's
    assert (b.actor, b.finished, b.acked, b.pending, b.clean) == ("b", 30, 29, 1, True)
    assert b.abandoned == {"server lost": 2} and b.undelivered == 1
    # a summary with no start line before it (an older actor) is a life of its own
    (old,) = actor_lives([f"20:00:40 I actors: actor summary: {json.dumps(summary)}"])
    assert old.actor == "b" and old.clean and old.finished == 30


def test_work_is_seen_in_each_roles_log() -> None:
    assert working("learner", "I learner: published v7 to 2/2 servers in 40 ms")
    assert not working("learner", "I learner: resumed step 40")
    assert working("s0", "I azserve.server: version 3 live in 31 ms (resident [2, 3])")
    assert working("east", status(3, 3, 0, 1))
    assert not working("east", status(0, 0, 0, 1, rate=0.0))


def test_a_restarted_server_must_be_caught_up() -> None:
    start = "20:00:00 I azserve.backends.torch: torch backend: {'compile': 'none'} on cpu"
    live = "20:00:01 I azserve.server: version {} live in 5 ms (resident [0])".format
    log = "\n".join([start, live(0), live(1), live(2), start, live(0), live(2), live(1), live(3)])
    lives = list(_lives_of_servers(log))
    assert lives == [[0, 1, 2], [0, 2, 1, 3]] and _caught_up(lives)  # 1 after 2: a restore
    assert not _caught_up([[0, 1, 2], [0, 1]])


def test_the_journal_counts_each_game_once_and_the_duplicates(tmp_path: Path) -> None:
    journal = Journal(tmp_path, sync_ms=None)
    obs = np.zeros((2, 2, 3, 3), np.uint8)
    policy = np.full((2, 9), 1 / 9, np.float32)
    outcome = np.ones(2, np.float32)
    for actor, game_id in [("a", 0), ("a", 1), ("b", 0), ("a", 1)]:
        if actor == "b":
            journal.rotate(0)  # a second segment
        traj = Trajectory(actor=actor, game_id=game_id, game="tictactoe", version=0, length=2,
                          result=1.0)  # fmt: skip
        journal.append(traj, obs, policy, outcome)
    journal.close()
    assert journal_games(tmp_path) == ({"a": 2, "b": 1}, 1)


def test_strikes_are_drawn_from_the_seed() -> None:
    def picks(seed: int) -> list[tuple[str, str]]:
        inj = Injector(None, Path("."), seed, (20, 60), 120, Path("/dev/null"))  # type: ignore[arg-type]
        return [inj.pick() for _ in range(200)]

    assert picks(7) == picks(7) and picks(7) != picks(8)
    kinds = {k for k, _ in picks(7)}
    targets = {t for _, t in picks(7)}
    assert kinds == set(KINDS) and targets == {"learner", *SERVERS, *GROUPS}
    # dealt in rounds: every kind once in each run of len(KINDS) strikes
    first = [k for k, _ in picks(7)]
    assert all(sorted(first[i : i + 5]) == sorted(KINDS) for i in range(0, 200, 5))
    assert CHAOS_KINDS == KINDS  # the parser's spelling of them
    assert score({"win": 3, "draw": 2, "loss": 5}) == 0.4 and score(None) is None


def run_chaos(
    argv: list[str], out: Path, timeout: float
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run ``azserve bench chaos`` (``argv``, writing its JSON to ``out``): the process and
    its result, whose exit status must match its verdict (1 when a check failed)."""
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    r = json.loads(out.read_text())
    assert done.returncode == (0 if r["verdicts"]["ok"] else 1)
    return done, r


@pytest.mark.faults
@pytest.mark.cluster
@pytest.mark.timeout(480)
def test_chaos_for_ninety_seconds_loses_nothing(tmp_path: Path) -> None:
    if unavailable():
        pytest.skip(unavailable() or "")
    out = tmp_path / "chaos.json"
    argv = [
        sys.executable, "-m", "azserve.cli.main", "bench", "chaos", "--config", "tictactoe",
        "--minutes", "1.5", "--interval", "3,6", "--quiet-s", "10", "--seed", "11",
        "--games", "16", "--net-s", "2,6",
        "--work-dir", str(tmp_path / "fleet"), "--json", str(out),
    ]  # fmt: skip
    done, r = run_chaos(argv, out, timeout=450)
    v = r["verdicts"]
    failed = [k for k, ok in v.items() if not ok and k != "ok"]
    assert v["ok"], (failed, r["versions_detail"], r["games_abandoned"], r["recovery_s"])
    assert r["strikes"] >= 2 and r["acked_lost"] == 0 and r["duplicates"] == 0
    assert r["games_stored"] > 0 and r["actor_lives"] >= 2
    # every role's memory was sampled, and the throughput after each heal judged where it could
    assert set(r["memory_peak_mb"]) == {"learner", "s0", "s1", "east", "west"}
    assert all(mb > 0 for mb in r["memory_peak_mb"].values())
    assert r["throughput"]["median_games_per_s"] > 0
    assert r["games_started"] == r["games_stored"] + sum(r["games_abandoned"].values())
    # every group's waits were measured, each within its bound (verdict waits_bounded)
    waits, bounds = r["longest_wait_s"], r["longest_wait_bound_s"]
    assert set(waits) == {"east", "west"} and all(w["eval"] > 0 for w in waits.values())
    assert all(waits[g][k] <= bounds[g][k] for g in waits for k in ("eval", "version"))
    assert sum(n for by_role in r["kills"].values() for n in by_role.values()) == r["strikes"]
    # the launcher's own count is the journal's
    assert r["launcher_summary"]["games_stored"] == r["games_stored"]
    lines = (tmp_path / "fleet" / "chaos.jsonl").read_text().splitlines()
    strikes = [json.loads(line) for line in lines]
    assert len(strikes) == r["strikes"] and all(s["recovered_s"] is not None for s in strikes)
    # the network's own faults among them, each healed: seed 11 deals them first (a delay on
    # s1's link, then a partition), so two strikes are enough
    faults = {s["kind"]: s["fault"] for s in strikes if s["fault"]}
    assert {"partition", "link"} <= set(faults), [s["kind"] for s in strikes]
    assert faults["partition"].startswith("partition ") and faults["link"].split()[0] in (
        "loss",
        "rate",
        "delay",
    )
    # every host's delay forwarder ran from the start (``link`` is among the kinds) and carried
    # the fleet's connections
    forwarded = [p.read_text() for p in (tmp_path / "fleet" / "links").glob("slowlink-*.log")]
    assert len(forwarded) == 5 and all("forwarding on 127.0.0.1:" in t for t in forwarded)
    assert sum("slowlink: connection " in t for t in forwarded) >= 3  # the learner, east, west


def test_each_network_fault_loads_in_a_namespace_and_heals() -> None:
    """Every script a partition or a bad link writes is one nft takes, and the heal leaves the
    host's firewall and link as they were."""
    import shutil

    from azserve.perf.netfaults import clear_fault, loss_rules, partition_rules, set_fault
    from azserve.perf.netns import destroy_lan, make_lan

    if unavailable() or shutil.which("nft") is None:
        pytest.skip(unavailable() or "nft not installed")
    lan = make_lan(2)
    try:
        host, peer = lan[0], lan[1]
        faults = [
            partition_rules(w, p) for w in ("both", "in", "out") for p in (None, peer.address)
        ]
        for fault in [*faults, loss_rules(1), loss_rules(20), "tbf 64", "tbf 1024"]:
            set_fault(host, fault)
            listed = host.run(["nft", "list", "ruleset"]).stdout + host.run(["tc", "qdisc"]).stdout
            assert "azchaos" in listed or "tbf" in listed, fault
            clear_fault(host)
            assert "azchaos" not in host.run(["nft", "list", "ruleset"]).stdout
            assert "tbf" not in host.run(["tc", "qdisc"]).stdout
        # a partition from all drops what the peer sends, silently: a connection to a closed
        # port times out instead of being refused at once; healed, it is refused again
        probe = (
            "import socket, sys\n"
            "try:\n"
            f"    socket.create_connection(({host.address!r}, 9), timeout=1.5)\n"
            "except ConnectionRefusedError: sys.exit(0)\n"
            "except OSError: sys.exit(3)\n"
        )
        set_fault(host, partition_rules("in", None))
        assert peer.run([sys.executable, "-c", probe]).returncode == 3
        clear_fault(host)
        assert peer.run([sys.executable, "-c", probe]).returncode == 0
    finally:
        destroy_lan(lan)
