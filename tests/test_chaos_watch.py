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
    rates,
    recovery_s,
    rss_mb,
    throughput,
)

START = datetime(2026, 12, 7, 23, 59, 50)


def status(hms: str, games: int) -> str:
    return (
        f"{hms} I learner: steps/s 3.10  samples/s 800  loss 1.2 (pi 1.0 v 0.2)  reuse 1.00  "
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
    flow = throughput("\n".join(lines), START, [(30.0, 40.0)], 15.0, 60.0)
    # windows end at 25, 40, 55, 70 s: 10, 10, 1.33, 10 games/s; back at 70 s
    assert flow["median_games_per_s"] == 10.0
    assert flow["before_games_per_s"] == [10.0]  # the window ending at 25 s
    assert flow["recovery_s"] == [30.0] and flow["ok"] is True


def test_a_heal_is_judged_against_the_rate_before_its_strike_when_that_was_lower() -> None:
    """The fleet stored 10 games/s for 300 s, then 4 (something else held the cores); a network
    strike from 440 s to 445 s changed nothing. Against the 4 it found it is back at once;
    against the run's median (10) it would never be, and fail the 60 s bound."""
    games, lines = 0, []
    for k in range(101):  # a status line every 5 s, 10 s to 510 s after START
        t = 10 + 5 * k
        lines.append(status(f"00:{(t - 10) // 60:02d}:{(t - 10) % 60:02d}", games))
        games += 50 if t < 310 else 20
    flow = throughput("\n".join(lines), START, [(440.0, 445.0), (100.0, 110.0)], 15.0, 60.0)
    assert flow["median_games_per_s"] == 10.0
    assert flow["before_games_per_s"][0] == 4.0 and flow["recovery_s"][0] == 15.0  # at 460 s
    assert flow["recovery_vs_median_s"][0] == 61.0  # never back to 8, and the run went on
    # the second strike found the median's rate: judged against it, as before
    assert flow["before_games_per_s"][1] == 10.0 and flow["recovery_s"][1] == 5.0  # at 115 s
    assert flow["ok"] is True


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
