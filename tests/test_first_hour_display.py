"""The live display: on a real pseudo-terminal every line fits 80 columns and what follows the
display starts on a fresh line (the last frame stays); elsewhere, timestamped plain lines;
numbers rounded for people."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap

import pyte

from azserve.run.display import Display, Row, bar, human, pct, sig

STAMP = re.compile(r"^\d\d:\d\d:\d\d ")

LONG = "self-play 812.3 pos/s   inference 23,456 rows/s (batch 98.2, busy 81%)   " * 2


def test_plain_lines_are_timestamped() -> None:
    out = io.StringIO()
    d = Display(live=False, stream=out)
    d.start()
    d.note("resumed from step 20, version 3")
    d.update([Row("progress", "[####......] 40%"), Row("inference", "23.5k rows/s")])
    d.close()
    d.note("report: runs/x/report.png")
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert all(STAMP.match(line) for line in lines), lines
    assert lines[1].endswith("progress   [####......] 40%")
    assert lines[2].endswith("inference  23.5k rows/s")


def test_live_frames_fit_80_columns_on_a_pseudo_terminal() -> None:
    """A child process draws on a real pty (wider than 80 columns): several redraws, a note,
    then the summary after ``close``."""
    script = textwrap.dedent(
        f"""
        import fcntl, struct, sys, termios
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 132, 0, 0))
        from azserve.run.display import Display, Row
        d = Display()
        assert d.live
        d.start()
        for i in range(3):
            d.update([Row("progress", f"[{{'#' * i}}] {{i}}"), Row("self-play", {LONG!r})])
            if i == 1:
                d.note("stopping (interrupted (Ctrl-C))...")
        d.close()
        print("SUMMARY games: 12 finished")
        """
    )
    leader, follower = os.openpty()
    p = subprocess.Popen(
        [sys.executable, "-c", script], stdout=follower, stderr=follower, close_fds=True
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert p.wait(timeout=60) == 0, b"".join(chunks).decode()
    screen = pyte.Screen(132, 40)
    pyte.Stream(screen).feed(b"".join(chunks).decode())
    lines = [line.rstrip() for line in screen.display]
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    shown = [line for line in lines if line]
    # The note stays above the frame; the last frame stays on screen, whole, with the summary
    # on a line of its own below it.
    assert shown[0] == "stopping (interrupted (Ctrl-C))..."
    assert shown[1].split() == ["progress", "[##]", "2"]
    assert shown[2].startswith("self-play") and len(shown) > 4
    assert shown[-1] == "SUMMARY games: 12 finished"


def test_numbers_for_people() -> None:
    assert human(1234) == "1,234"
    assert human(56789) == "56.8k"
    assert human(3.2e6) == "3.2M"
    assert human(12.345) == "12.3"
    assert human(float("nan")) == "-"
    assert pct(0.8123) == "81%"
    assert sig({"policy_optimal": 0.98672566371681, "n": 4520, "m": [0.123456]}) == {
        "policy_optimal": 0.987,
        "n": 4520,
        "m": [0.123],
    }
    assert bar(0.5, 10) == "[#####.....]"
