"""``make test`` runs two workers with ``--dist loadgroup``: the cluster tests share one worker
(tests/conftest.py marks them), and modules with an expensive module fixture keep theirs on one.
This checks that the installed pytest and pytest-xdist honour ``xdist_group`` at all: a pytest
that ignores it (9.2 with xdist 3.8) spreads a group over both workers without a word."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GROUPED = """
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("i", range(8))
def test_member(i):
    pass
"""


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", str(tmp_path),
         str(tmp_path / "test_grouped.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    workers = re.findall(r"\[(gw\d+)\].*PASSED", done.stdout)
    assert len(workers) == 8, done.stdout[-3000:]
    assert len(set(workers)) == 1, f"the group ran on {sorted(set(workers))}: {done.stdout[-2000:]}"
