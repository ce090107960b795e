"""The chaos run's watch: memory peaks sampled from real processes, and the throughput's
recovery after a heal read from the learner's status lines as it writes them."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime

from azserve.perf.chaos_watch import (
    MemoryWatch,
    games_over_time,
    mean_rates,
    rates,
    recovery_s,
    rss_mb,
    samples_over_time,
    throughput,
)

START = datetime(2026, 12, 7, 23, 59, 50)


def status(hms: str, games: int, samples: int = 800) -> str:
    return (
        f"{hms} I learner: steps/s 3.10  samples/s {samples}  loss 1.2 (pi 1.0 v 0.2)  reuse 1.00  "
        f"lag 0.50  replay 9000  v12  games {games}  learner busy 40%  inference busy 90%"
    )


def test_status_lines_become_games_over_time_across_midnight() -> None:
    text = "\n".join([
        status("23:59:55", 100),
        "23:59:57 I learner: published v13 to 2/2 servers in 12 ms",
        status("00:00:00", 120),
        status("00:00:05", 150),
    ])  # fmt: skip
    assert games_over_time(text, START) == [(5.0, 100), (10.0, 120), (15.0, 150)]


def test_rates_leave_out_a_window_in_which_the_learner_restarted() -> None:
    series = [(0.0, 0), (5.0, 50), (10.0, 100), (15.0, 20), (20.0, 70), (25.0, 120)]
    assert rates(series, 5.0) == [(5.0, 10.0), (10.0, 10.0), (20.0, 10.0), (25.0, 10.0)]
    assert rates(series, 10.0) == [(10.0, 10.0)]  # 100 -> 70 across the restart: left out


def test_recovery_is_the_first_window_back_near_the_median() -> None:
    windows = [(10.0, 10.0), (20.0, 2.0), (30.0, 5.0), (40.0, 8.5), (50.0, 10.0)]
    assert recovery_s(windows, 15.0, 10.0, 60.0) == 25.0  # 8.5 >= 80% of 10, at 40 s
    assert recovery_s(windows, 45.0, 10.0, 60.0) == 5.0
    assert recovery_s(windows, 52.0, 10.0, 60.0) is None  # the run ended within the bound
    slow = [(10.0, 10.0), *((float(t), 1.0) for t in range(20, 200, 10))]
    assert recovery_s(slow, 15.0, 10.0, 60.0) == 61.0  # never back, and the run went on


def test_throughput_judges_each_heal_against_the_median() -> None:
    stamps = ["00:00:00", "00:00:15", "00:00:30", "00:00:45", "00:01:00"]
    lines = [status(t, g) for t, g in zip(stamps, [0, 150, 300, 320, 470], strict=True)]
    flow = throughput("\n".join(lines), START, [40.0], 15.0, 60.0)
    # windows end at 25, 40, 55, 70 s: 10, 10, 1.33, 10 games/s; back at 70 s
    assert flow["median_games_per_s"] == 10.0
    assert flow["recovery_games_s"] == [30.0] and flow["ok"] is True
    assert flow["recovery_s"] == [15.0]  # the learner trained at its median all along


def test_a_heal_is_back_when_either_side_is_back() -> None:
    """Games stored at 10/s and the learner at 800 samples/s; a strike heals at 40 s and games
    stay at 2/s for two minutes (the rate limiter paying back a burst) while the learner trains
    at its median again from the first window: back then. Neither side back: not."""
    lines, games = [], 0
    for k in range(81):  # every 5 s, 10 s to 410 s after START
        t = 10 + 5 * k
        slow = 40 <= t < 160
        lines.append(status(f"00:{(t - 10) // 60:02d}:{(t - 10) % 60:02d}", games, 800))
        games += 10 if slow else 50
    text = "\n".join(lines)
    assert mean_rates(samples_over_time(text, START), 15.0)[0] == (25.0, 800.0)
    flow = throughput(text, START, [40.0], 15.0, 60.0)
    assert flow["median_games_per_s"] == 10.0 and flow["median_samples_per_s"] == 800.0
    assert flow["recovery_games_s"] == [135.0]  # games alone: back only at 175 s
    assert flow["recovery_s"] == [15.0] and flow["ok"] is True  # the learner's first window
    starved = "\n".join(
        line.replace("samples/s 800", "samples/s 100") if 40 <= 10 + 5 * k < 160 else line
        for k, line in enumerate(lines)
    )
    flow = throughput(starved, START, [40.0], 15.0, 60.0)
    assert flow["recovery_s"] == [135.0] and flow["ok"] is False


def test_memory_watch_samples_the_processes_it_is_given() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "b = bytearray(64 << 20); import time; time.sleep(30)"]
    )
    try:
        while rss_mb(child.pid) < 64:  # until it holds its 64 MiB
            pass
        on = [False]
        watch = MemoryWatch(["me", "child"], lambda t: [os.getpid()] if t == "me" else
                            [child.pid], lambda: on[0])  # fmt: skip
        watch.sample()
        on[0] = True
        watch.sample()
        assert watch.samples == 2
        assert watch.peak_mb["child"] >= 64 and watch.peak_in_strike_mb["child"] >= 64
        assert watch.peak_mb["me"] > 0
    finally:
        child.kill()
        child.wait()
    assert rss_mb(child.pid) == 0.0  # gone: nothing to count
