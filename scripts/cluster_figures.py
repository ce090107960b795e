"""The figures of docs/cluster.md, measured with real launches (root: network namespaces).

    .venv/bin/python scripts/cluster_figures.py [--seconds 60] [--out cluster-figures.json]

1. self-play positions/s with two actor hosts (one process each) against one actor host with two
   processes, server and learner on a third namespace, same config, run one after the other;
2. publish-to-live (the learner's "published vN to k/k servers in X ms") with one and with two
   servers on separate namespaces;
3. launch start-up: from the command to the first evaluation served (server rows > 0);
4. (Ray) time from a killed actor process to its replacement's first finished game: the kill
   test of tests/test_cluster_ray.py prints it; run that test with -s to see it.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from azserve.auth import AuthConfig  # noqa: E402
from azserve.errors import AzserveError  # noqa: E402
from azserve.sync_client import SyncClient  # noqa: E402
from tests.netns import destroy_lan, make_lan  # noqa: E402

TTT = REPO / "configs" / "tictactoe.toml"
PUBLISHED = re.compile(r"published v(\d+) to (\d+)/(\d+) servers in (\d+) ms")


def cluster_text(servers: list[tuple[str, str]], groups: list[tuple[str, list[str], int]]) -> str:
    lines = [
        'engine = "ssh"',
        'network = "auto"',
        "insecure = true",
        f'workdir = "{REPO}"',
        f'python = "{sys.executable}"',
        "[ssh]",
        'command = "ip netns exec {host}"',
    ]
    for name, (host, addr) in zip(("s0", "s1"), servers):
        lines += ["[[server]]", f'name = "{name}"', f'host = "{host}"', f'address = "{addr}"']
    host, addr = servers[0]
    lines += ["[learner]", f'host = "{host}"', f'address = "{addr}"']
    for name, hosts, procs in groups:
        lines += ["[[actors]]", f'name = "{name}"', f"hosts = {json.dumps(hosts)}"]
        lines += [f"processes = {procs}", "games = 64"]
    return "\n".join(lines) + "\n"


def launch(text: str, work: Path, seconds: float, first_server: str) -> dict[str, float]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "cluster.toml").write_text(text)
    run_dir = work / "run"
    argv = [
        sys.executable, "-m", "azserve.cli.main", "launch", "--cluster", str(work / "cluster.toml"),
        "--config", str(TTT), "--run-dir", str(run_dir), "--no-progress",
        "--set", "eval.sims=4", "--set", "eval.match_games=2", "--set", "train.eval_every_s=0",
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    first_served = float("nan")
    auth = AuthConfig(allow_insecure_remote=True)
    while time.monotonic() - t0 < 120:
        try:
            with SyncClient(first_server, timeout_s=0.5, auth=auth) as c:
                if c.status()["rows"] > 0:
                    first_served = time.monotonic() - t0
                    break
        except AzserveError:
            pass
        time.sleep(0.2)
    # positions/s over the measured window, from the learner's own counters
    time.sleep(10)  # past the start-up transient
    p0, w0 = _positions(run_dir), time.monotonic()
    time.sleep(seconds)
    p1, w1 = _positions(run_dir), time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(300)
    publishes = [
        int(m.group(4))
        for m in PUBLISHED.finditer((_log(run_dir, "learner")).read_text())
        if int(m.group(1)) > 0
    ]
    return {
        "startup_to_first_eval_s": round(first_served, 2),
        "positions_per_s": round((p1 - p0) / (w1 - w0), 1),
        "publish_to_live_ms_median": statistics.median(publishes) if publishes else float("nan"),
        "publishes": len(publishes),
    }


def _log(run_dir: Path, name: str) -> Path:
    return next((run_dir / "logs").rglob(f"{name}.log"))


def _positions(run_dir: Path) -> int:
    p = run_dir / "metrics.jsonl"
    if not p.exists():
        return 0
    rows = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    return int(rows[-1]["positions"]) if rows else 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--out", default="cluster-figures.json")
    ap.add_argument("--work", default="/tmp/azserve-cluster-figures")
    args = ap.parse_args()
    lan = make_lan(3)
    try:
        h = [(x.name, x.address) for x in lan]
        ep0 = f"tcp://{h[0][1]}:5555"
        work = Path(args.work)
        out = {
            "two_actor_hosts": launch(
                cluster_text([h[0]], [("a", [h[1][0]], 1), ("b", [h[2][0]], 1)]),
                work / "two-hosts",
                args.seconds,
                ep0,
            ),
            "one_actor_host": launch(
                cluster_text([h[0]], [("a", [h[1][0]], 2)]), work / "one-host", args.seconds, ep0
            ),
            "two_servers": launch(
                cluster_text([h[0], h[1]], [("a", [h[2][0]], 1), ("b", [h[2][0]], 1)]),
                work / "two-servers",
                args.seconds,
                ep0,
            ),
        }
    finally:
        destroy_lan(lan)
    text = json.dumps(out, indent=1)
    Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
