"""``scripts/threads_effect.py``: a server log's status lines are grouped by the thread count
in force when they were written, weighted by the time each covers."""

from __future__ import annotations

from pathlib import Path

from tests import conftest

REPO = Path(__file__).resolve().parents[1]


def load_script():  # type: ignore[no-untyped-def]
    return conftest.load_script("threads_effect")


def status(t: str, rows: str, batch: float, busy: int) -> str:
    return (
        f"{t} I azserve.server: rows/s {rows}  req/s 20  batch {batch}  busy {busy}%  queued 0  "
        "p50 1.0 ms  p99 2.0 ms  versions [0] latest 0  errors 0 dropped 0"
    )


def test_lines_are_grouped_by_the_thread_count_in_force() -> None:
    mod = load_script()
    lines = [
        status("10:00:00", "0", 0.0, 0),  # before traffic: left out
        status("10:00:05", "1,000", 100.0, 90),
        "10:00:06 I azserve.backends.torch: compute threads 1 -> 2 (0.90 cores idle)",
        status("10:00:10", "2,000", 120.0, 100),
        status("10:00:20", "3,000", 128.0, 100),  # a 10 s window
        "10:00:21 I azserve.backends.torch: compute threads 2 -> 1 (0.05 cores idle)",
        status("10:00:25", "1,200", 110.0, 96),
    ]
    got = mod.effect(lines)
    assert got[1]["seconds"] == 10 and got[1]["rows_per_s"] == 1100
    assert got[1]["busy"] == 0.93 and got[1]["status_lines"] == 2
    assert got[2]["seconds"] == 15 and got[2]["rows_per_s"] == round((5 * 2000 + 10 * 3000) / 15, 1)
    assert got[2]["mean_batch"] == round((5 * 120 + 10 * 128) / 15, 1)


def test_a_status_lines_own_thread_count_is_in_force() -> None:
    """Servers now write the count in force on every status line (the switch lines are DEBUG)."""
    mod = load_script()
    lines = [
        status("10:00:05", "1,000", 100.0, 90) + "  threads 1",
        status("10:00:10", "2,000", 120.0, 100) + "  threads 2",
        status("10:00:20", "3,000", 128.0, 100) + "  threads 2",
    ]
    got = mod.effect(lines, start_threads=4)
    assert set(got) == {1, 2}
    assert got[2]["seconds"] == 15 and got[2]["status_lines"] == 2
