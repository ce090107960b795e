"""``azserve bench chaos``: a fleet under random faults; is anything lost?

It builds five hosts on this machine (network namespaces on one bridge, ``bench.netns``; root
only), one role each: the learner (and the run dir), server ``s0``, server ``s1``, actor group
``east`` (on ``s0``) and ``west`` (on ``s1``). Each host makes its own CURVE key pair; only
public keys are copied. Then ``azserve launch`` runs the fleet with the ssh engine
(``ip netns exec HOST`` as the remote command) for ``--minutes``, while an injector, seeded by
``--seed``, strikes every ``--interval`` seconds (20 to 60 by default) from the first published
version to ``--quiet-s`` before the end. Each strike picks a role (server, learner, actors), one
process of it, and a kind:

- ``kill``: ``kill -9`` of the role's process (the launcher restarts it);
- ``stop``: ``SIGSTOP`` for a random 1 to 20 s, then ``SIGCONT`` (a hang, not a death);
- ``host``: ``kill -9`` of every process in the role's namespace at once, its watchdog
  included: a host crash as far as processes go (the kernel's page cache survives, so what the
  journal had written but not fsynced is not lost here; ``learner.journal_sync_ms`` bounds that
  window on a real host, docs/reliability.md);
- ``partition``: the role's host cut off, from every other host or from one, both ways or one
  way, by nftables rules inside its namespace that drop packets silently (as a dead link does;
  a veth taken down is refused at once, which a partition is not), for a time drawn from
  ``--net-s``;
- ``link``: the role's host behind a bad link for a time drawn from ``--net-s``: packet loss
  of 1 to 20% each way (nftables ``numgen random``), its sending rate held to 64-1,024 kbit/s
  with a deep queue (``tc`` ``tbf``, 500 ms of latency allowed), or a delay of 50-500 ms with
  up to half as much again of jitter each way. This kernel has no ``netem``: the delay is made
  by a forwarder on every host that the host's TCP connections to the LAN pass through (an
  nftables redirect; ``azserve.perf.slowlink``), each chunk held as long as the strike says,
  in order; it runs from the start whenever ``link`` is among the kinds.

The kinds come from ``--kinds`` (all by default; ``kill,stop,host`` replays the runs made before
the network strikes), dealt in seeded rounds so that every kind is drawn once a round.

A strike waits for the previous one's recovery. Recovery, from the kill (or the ``SIGCONT``) to
the first sign of the role working again in its log: a server goes live on a version, the
learner publishes one, an actor process reports finished games. Every strike is logged
(``chaos.jsonl`` in the work dir) with its time, kind, role, pids and recovery.

After the run it counts from the learner's journal (every segment is kept:
``learner.journal_keep_all``) and the actors' logs, one actor life at a time
(a life is one process: ``actors.main`` logs its id, START_TAG, and on a clean exit its
summary; a killed life's figures are those of its last status line):

- ``games_stored``: distinct ``(actor, game_id)`` in the journal, which must equal the count
  the learner and the launcher report; ``duplicates``: records more;
- ``acked_lost``: per life, games the actor saw acked (its summary, or its last status line: a
  lower bound) beyond the games of that life in the journal; must be 0;
- ``games_abandoned`` by reason: the actors' own (clean lives), ``process died in play`` (a
  killed life's game coroutines, each mid-game) and ``killed before ack`` (finished games of a killed
  life not in the journal: its last status line's count, so a lower bound);
- ``games_started`` = stored + abandoned; ``versions_monotonic``: the learner's published
  versions never go down across its restarts, no actor life's latest version goes down, and
  each server's restarted life is caught up to at least the newest version of its previous
  life (within a life a server's latest is the newest it holds; an older version that goes
  live is a restore for games pinned to it: ``server_restores``);
- ``max_recovery_s`` against ``--recovery-s``; ``final_eval``: the run's last evaluation and
  whether it is sane (its score against random at least ``--min-score``);
- ``memory_peak_mb`` per role (and while a network strike was on) against ``--memory-mb``,
  and ``throughput``: games stored, or the learner's samples trained, back to 80% of the
  run's median rate within ``--throughput-s`` of each network strike's heal
  (``azserve.perf.chaos_watch``);
- ``longest_wait_s`` per actor group against ``longest_wait_bound_s``: no evaluation waited
  longer than ``client.request_timeout_s`` and no move longer than ``actors.version_wait_s``
  for its version (``chaos_books.wait_bounds`` says the slack).

The fleet's layout is ``azserve.perf.chaos_fleet``, the books ``azserve.perf.chaos_books``.

``--engine ray`` runs the same fleet and strikes under ``azserve launch`` on the Ray engine
(``azserve.perf.chaos_ray``): a sixth host, ``head``, runs Ray's head and the launcher and is
never struck; every role host runs a Ray node with a custom resource named for it, which pins
its role there; the logs are pulled into ``RUN_DIR/logs/ray/``. A keeper starts a host's Ray
node again whenever its raylet is gone (a ``host`` strike kills it; Ray's GCS has it exit after a
partition long enough to mark the node dead), and logs each restart in ``chaos.jsonl``
(``"event": "ray_node_restart"``, with the strike it followed). docs/reliability.md says what
Ray survives and what it does not.

``verdicts.ok`` holds when every check holds; the command exits 1 when one does not.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from azserve.errors import AzserveError
from azserve.perf import chaos_ray, chaos_watch
from azserve.perf.chaos_books import account, final_eval, score, wait_bounds
from azserve.perf.chaos_fleet import (
    GROUPS,
    HOST_OF,
    ROLES,
    SERVERS,
    cluster_text,
    log_path,
    make_keys,
    read_from,
    role_of,
    role_pids,
    size,
    start_links,
    working,
)
from azserve.perf.netfaults import (
    clear_fault,
    loss_rules,
    network_unavailable,
    partition_rules,
    set_fault,
)
from azserve.perf.netns import NetnsHost, NetnsLan, destroy_lan, make_lan, unavailable
from azserve.perf.slowlink import write_delays

KINDS = ("kill", "stop", "host", "partition", "link")
NETWORK_KINDS = ("partition", "link")
NET_S = (2.0, 60.0)
"""Seconds a network strike lasts, drawn uniformly (``--net-s``)."""
STOP_S = (1.0, 20.0)
PULL_SETTLE_S = 3.0
"""Under Ray: how long after a kill the log's offset is taken (the pulls' lag)."""


@dataclass
class Strike:
    """One fault, as logged."""

    n: int
    t_s: float
    """Seconds since the launch started."""
    kind: str
    role: str
    target: str
    """``learner``, a server's name or an actor group's."""
    host: str
    pids: list[int]
    stop_s: float | None = None
    fault: str = ""
    """A network strike's fault, e.g. ``partition both ways from all`` or ``loss 7%``."""
    fault_s: float | None = None
    """How long a network strike lasted."""
    recovered_s: float | None = None
    """Seconds from the kill (or the SIGCONT, or the network healed) to the role's first sign
    of work; None: not within ``--recovery-s``."""
    note: str = ""


# --- the injector ------------------------------------------------------------------------------


class Injector:
    """Seeded strikes on the fleet of ``lan`` while the launcher runs."""

    def __init__(self, lan: NetnsLan, run_dir: Path, seed: int, interval: tuple[float, float],
                 recovery_s: float, out: Path, kinds: tuple[str, ...] = KINDS,
                 net_s: tuple[float, float] = NET_S, engine: str = "ssh") -> None:  # fmt: skip
        self.lan = lan
        self.run_dir = run_dir
        self.engine = engine
        """Where the roles log (``chaos_fleet.log_path``)."""
        self.rng = random.Random(seed)
        self.interval = interval
        self.recovery_s = recovery_s
        self.out = out
        self.kinds = kinds
        self.net_s = net_s
        self._deck: list[str] = []
        self.strikes: list[Strike] = []
        self.net_on = False
        """Whether a network strike is on now (the memory watch's samples say so)."""
        self.delays: Path | None = None
        """The delay forwarders' control file, when they run (``chaos_fleet.start_links``)."""
        self.spared: set[int] = set()
        """Pids a host strike leaves alone: the forwarders, which stand for the kernel."""
        self.current: Strike | None = None
        """The strike under way (until its recovery is logged, then the last one)."""

    def pick(self) -> tuple[str, str]:
        if not self._deck:  # a new round: every kind once, in a seeded order
            self._deck = list(self.kinds)
            self.rng.shuffle(self._deck)
        kind = self._deck.pop()
        role = self.rng.choice(ROLES)
        target = (
            "learner"
            if role == "learner"
            else self.rng.choice(SERVERS)
            if role == "server"
            else self.rng.choice(sorted(GROUPS))
        )
        return kind, target

    def strike(self, t0: float, alive: Any) -> Strike | None:
        """One fault and the wait for its recovery; None when the target had no process to
        strike (restarting already): nothing done, the next strike is drawn."""
        kind, target = self.pick()
        stop_s = round(self.rng.uniform(*STOP_S), 1) if kind == "stop" else None
        host = self.lan[HOST_OF[target]]
        log = log_path(self.run_dir, self.lan, target, self.engine)
        if kind in NETWORK_KINDS:
            return self._network_strike(t0, kind, target, host, log, alive)
        pids = (
            [p for p in host.pids() if p not in self.spared]
            if kind == "host"
            else role_pids(host, target)
        )
        if not pids or not role_pids(host, target):
            return None
        offset = size(log)
        s = Strike(len(self.strikes) + 1, round(time.monotonic() - t0, 1), kind,
                   role_of(target), target, host.name, pids, stop_s)  # fmt: skip
        self.current = s
        sig = signal.SIGSTOP if kind == "stop" else signal.SIGKILL
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if kind == "stop":
            assert stop_s is not None
            time.sleep(stop_s)
            offset = size(log)  # what it wrote before the stop is no sign of work after it
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        elif self.engine == "ray":
            # The launcher pulls a runner's log once a second, and a dead process's tail up to
            # 2 s later: what comes in meanwhile was written before the kill.
            since = time.monotonic()
            time.sleep(PULL_SETTLE_S)
            return self._recovered(s, target, log, size(log), alive, since)
        return self._recovered(s, target, log, offset, alive)

    def _network_strike(
        self, t0: float, kind: str, target: str, host: NetnsHost, log: Path, alive: Any
    ) -> Strike:
        """A partition or a bad link on ``target``'s host for a drawn time, then healed; the
        recovery counts from the heal."""
        seconds = round(self.rng.uniform(*self.net_s), 1)
        peers = [h for h in self.lan if h.name != host.name]
        if kind == "partition":
            way = self.rng.choice(("both", "in", "out"))
            peer = self.rng.choice([None, *peers])
            fault = f"partition {way} from {peer.name if peer else 'all'}"
            apply = partition_rules(way, peer.address if peer else None)
        else:
            draw = self.rng.random() * (3 if self.delays else 2)
            if draw < 1:
                pct = self.rng.randint(1, 20)
                fault, apply = f"loss {pct}%", loss_rules(pct)
            elif draw < 2:
                kbit = self.rng.choice((64, 128, 256, 512, 1024))
                fault, apply = f"rate {kbit} kbit/s", f"tbf {kbit}"
            else:
                ms = self.rng.randint(50, 500)
                jitter = self.rng.randint(0, ms // 2)
                fault, apply = f"delay {ms} ms jitter {jitter} ms", ""
        s = Strike(len(self.strikes) + 1, round(time.monotonic() - t0, 1), kind, role_of(target),
                   target, host.name, [], fault=fault, fault_s=seconds)  # fmt: skip
        self.current = s
        if apply:
            set_fault(host, apply)
        else:
            assert self.delays is not None
            write_delays(self.delays, {host.address: (float(ms), float(jitter))})
        self.net_on = True
        try:
            time.sleep(seconds)
        finally:
            if apply:
                clear_fault(host)
            else:
                assert self.delays is not None
                write_delays(self.delays, {})
            self.net_on = False
        return self._recovered(s, target, log, size(log), alive)

    def _recovered(self, s: Strike, target: str, log: Path, offset: int, alive: Any,
                   since: float | None = None) -> Strike:  # fmt: skip
        """Wait for ``target``'s first sign of work after ``offset`` of its log; log ``s``, its
        recovery counted from ``since`` (None: now)."""
        since = time.monotonic() if since is None else since
        while time.monotonic() - since < self.recovery_s and alive():
            if working(target, read_from(log, offset)):
                s.recovered_s = round(time.monotonic() - since, 1)
                break
            time.sleep(0.5)
        else:
            s.note = "launcher ended first" if not alive() else "not recovered in time"
        self.strikes.append(s)
        with self.out.open("a") as f:
            f.write(json.dumps(asdict(s)) + "\n")
        what = f"{s.fault} for {s.fault_s} s" if s.fault else f"pids {s.pids}"
        print(
            f"chaos: strike {s.n} at {s.t_s:.0f} s: {s.kind} {target} ({s.host}, {what})"
            + (f" for {s.stop_s} s" if s.stop_s else "")
            + (f", back in {s.recovered_s} s" if s.recovered_s is not None else f", {s.note}"),
            flush=True,
        )
        return s

    def last_on(self, host: str) -> Strike | None:
        """The latest strike on ``host`` (the one under way included), or None."""
        started = [*self.strikes, *([self.current] if self.current else [])]
        return next((s for s in reversed(started) if s.host == host), None)

    def run(self, t0: float, start_after: Any, until_s: float, alive: Any) -> None:
        """Strike from when ``start_after()`` holds until ``until_s`` after ``t0``."""
        while alive() and not start_after():
            if time.monotonic() - t0 > until_s:
                return
            time.sleep(1.0)
        next_at = time.monotonic() + self.rng.uniform(*self.interval)
        while alive():
            now = time.monotonic()
            if next_at - t0 > until_s:
                return
            if now < next_at:
                time.sleep(min(1.0, next_at - now))
                continue
            self.strike(t0, alive)
            next_at = max(next_at, time.monotonic()) + self.rng.uniform(*self.interval)


# --- the command -------------------------------------------------------------------------------


def launch_argv(args: Any, cluster: Path, run_dir: Path) -> list[str]:
    argv = [
        sys.executable, "-m", "azserve.cli.main", "launch", "--cluster", str(cluster),
        "--config", args.config, "--run-dir", str(run_dir),
        "--minutes", f"{args.minutes:g}", "--no-progress",
        # every journal segment kept (the accounting reads them all); no periodic evaluation
        # (it would take the cores from the fleet); status every 2 s
        "--set", "learner.journal_keep_all=true",
        "--set", "train.eval_every_s=0", "--set", "train.status_interval_s=2",
        "--set", "actors.status_interval_s=2",
    ]  # fmt: skip
    for s in args.overrides or []:
        argv += ["--set", s]
    return argv


def node_restarted(done: dict[str, Any], injector: Injector, t0: float, out: Path) -> None:
    """Log a Ray node's restart (``RayFleet.keep``) with the strike on its host it followed."""
    last = injector.last_on(done["host"])
    done.update(
        event="ray_node_restart",
        t_s=round(time.monotonic() - t0, 1),
        after_strike=last.n if last else None,
        after_kind=last.kind if last else None,
    )
    with out.open("a") as f:
        f.write(json.dumps(done) + "\n")
    print(
        f"chaos: ray node of {done['target']} started again at {done['t_s']:.0f} s "
        f"(after strike {done['after_strike']}, {done['after_kind']}): "
        + ("up" if done["ok"] else f"failed: {done['note']}")
        + f" in {done['took_s']} s",
        flush=True,
    )


def main(args: Any) -> dict[str, Any]:
    reason = unavailable()
    if reason is not None:
        raise AzserveError(f"bench chaos needs network namespaces: {reason}")
    kinds = tuple(args.kinds)
    if set(kinds) & set(NETWORK_KINDS) and (why := network_unavailable()) is not None:
        raise AzserveError(
            f"--kinds {','.join(kinds)}: the network strikes need {why}; or leave them out "
            "(--kinds kill,stop,host)"
        )
    engine = getattr(args, "engine", "ssh")
    if engine == "ray" and (why := chaos_ray.ray_unavailable()) is not None:
        raise AzserveError(f"--engine ray: {why}")
    lo, hi = args.interval
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="azchaos-"))
    if work.exists() and any(work.iterdir()):
        raise AzserveError(f"--work-dir {work}: not empty (a chaos run starts afresh)")
    work.mkdir(parents=True, exist_ok=True)
    run_dir = work / "run"
    strikes_log = work / "chaos.jsonl"
    lan = make_lan(chaos_ray.HOSTS if engine == "ray" else len(HOST_OF))
    fleet = chaos_ray.RayFleet(lan, work) if engine == "ray" else None
    launcher: subprocess.Popen[bytes] | None = None
    injector = Injector(lan, run_dir, args.seed, (lo, hi), args.recovery_s, strikes_log,
                        kinds, tuple(args.net_s), engine)  # fmt: skip
    t0, start = time.monotonic(), chaos_watch.now()
    memory = chaos_watch.MemoryWatch(
        list(HOST_OF), lambda t: role_pids(lan[HOST_OF[t]], t), lambda: injector.net_on
    )
    links: list[subprocess.Popen[bytes]] = []
    try:
        if "link" in kinds:
            injector.delays = work / "delays.json"
            links = start_links(lan, injector.delays, work / "links")
            injector.spared = {p.pid for p in links}
        cluster = work / "cluster.toml"
        argv, env = launch_argv(args, cluster, run_dir), None
        if fleet is None:
            make_keys(lan, work / "keys")
            cluster.write_text(cluster_text(lan, work / "keys", os.getcwd(), args.games))
        else:  # the launcher is Ray's driver, on the head host; the strikes count from now
            fleet.start()
            cluster.write_text(chaos_ray.cluster_text(lan, fleet.keys, os.getcwd(), args.games))
            argv, env = fleet.head.argv(argv), fleet.env
            t0, start = time.monotonic(), chaos_watch.now()
        with (work / "launch.log").open("wb") as out:
            launcher = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )
        if fleet is not None:
            fleet.keep(lambda done: node_restarted(done, injector, t0, strikes_log))
        print(
            f"chaos: seed {args.seed}, {args.minutes:g} min, strikes ({','.join(kinds)}) every "
            f"{lo:g}-{hi:g} s; "
            f"fleet in {work} (launch.log, chaos.jsonl)",
            flush=True,
        )
        proc = launcher
        memory.start()

        def alive() -> bool:
            return proc.poll() is None

        def first_version() -> bool:
            return "published v1 " in read_from(log_path(run_dir, lan, "learner", engine), 0)

        injector.run(t0, first_version, args.minutes * 60 - args.quiet_s, alive)
        try:
            code = launcher.wait(timeout=args.minutes * 60 + 900)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            code = launcher.wait()
        memory.stop()
        books = account(run_dir, lan, run_dir / "journal", engine)
    finally:
        memory.stop()
        if fleet is not None:
            fleet.stop()  # no node started again while the namespaces go
        if launcher is not None and launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        destroy_lan(lan)  # the forwarders too, and every Ray process
        if fleet is not None:
            fleet.remove()
        for p in links:
            p.wait()
    strikes = injector.strikes
    recoveries = [s.recovered_s for s in strikes]
    heals = [s.t_s + s.fault_s for s in strikes if s.fault_s is not None]
    learner_log = read_from(log_path(run_dir, lan, "learner", engine), 0)
    flow = chaos_watch.throughput(learner_log, start, heals, 15.0, args.throughput_s)
    evaluation = final_eval(run_dir)
    eval_score = score((evaluation or {}).get("vs_random"))
    kills: dict[str, dict[str, int]] = {}
    for s in strikes:
        by_role = kills.setdefault(s.kind, {})
        by_role[s.role] = by_role.get(s.role, 0) + 1
    stopped: dict[str, float] = {}
    for s in strikes:
        if s.kind == "stop" and s.stop_s:
            stopped[s.target] = max(stopped.get(s.target, 0.0), s.stop_s)
    bounds = wait_bounds(run_dir, stopped)
    waits = books["longest_wait_s"]
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    verdicts = {
        "launcher_exit_0": code == 0,
        "accounted": books["stored_from_unknown_actors"] == 0,
        "journal_is_the_learners_count": books["games_stored"] == summary.get("games_stored"),
        "no_acked_lost": books["acked_lost"] == 0,
        "no_duplicates": books["duplicates"] == 0,
        "versions_monotonic": books["versions_monotonic"],
        "every_role_recovered": all(r is not None and r <= args.recovery_s for r in recoveries)
        and all(s.note != "not recovered in time" for s in strikes),
        "final_eval_sane": eval_score is not None and eval_score >= args.min_score,
        "memory_bounded": max(memory.peak_mb.values()) <= args.memory_mb,
        "throughput_recovered": flow["ok"],
        "waits_bounded": all(
            waits[g][k] <= bounds[g][k] for g in waits for k in ("eval", "version")
        ),
        "struck": bool(strikes),
    }
    verdicts["ok"] = all(verdicts.values())
    result = {
        **({"engine": engine} if fleet else {}),  # under ssh, the result of before
        "seed": args.seed,
        "minutes": args.minutes,
        "interval_s": [lo, hi],
        "kinds": list(kinds),
        "net_s": list(args.net_s),
        "recovery_bound_s": args.recovery_s,
        "config": args.config,
        **{k: v for k, v in books.items() if k != "versions_detail"},
        "versions_detail": books["versions_detail"],
        "kills": kills,
        "strikes": len(strikes),
        "max_recovery_s": max((r for r in recoveries if r is not None), default=None),
        "recovery_s": recoveries,
        "restarts": summary.get("restarts", {}),
        **({"ray_node_restarts": chaos_ray.summary(fleet.restarts)} if fleet else {}),
        "memory_peak_mb": {t: round(mb) for t, mb in memory.peak_mb.items()},
        "memory_peak_in_strike_mb": {t: round(mb) for t, mb in memory.peak_in_strike_mb.items()},
        "memory_bound_mb": args.memory_mb,
        "throughput": flow,
        "longest_wait_bound_s": bounds,
        "launcher_summary": summary,
        "final_eval": {
            "step": (evaluation or {}).get("step"),
            "vs_random": (evaluation or {}).get("vs_random"),
            "score_vs_random": eval_score,
        },
        "launcher_exit": code,
        "work_dir": str(work),
        "verdicts": verdicts,
    }
    if not args.work_dir and verdicts["ok"]:
        shutil.rmtree(work, ignore_errors=True)
        result["work_dir"] = None
    return result
