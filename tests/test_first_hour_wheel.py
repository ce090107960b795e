"""An installed azserve needs no checkout: a wheel built from this tree, installed into a
directory of its own and run from an empty directory, finds its shipped configs and the
Connect Four positions and trains tic-tac-toe (a few steps) to a report."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.test_first_hour_readme import BUDGET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # real trainings: 1-2 min

REPO = Path(__file__).resolve().parents[1]


def _setuptools() -> tuple[int, ...]:
    from importlib.metadata import version

    return tuple(int(x) for x in version("setuptools").split(".")[:2])


def test_wheel_outside_the_checkout_trains_tictactoe(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    # Without isolation when this interpreter's setuptools can build wheels itself (>= 70.1),
    # else pip fetches the build backend pyproject.toml asks for.
    offline = ["--no-build-isolation"] if _setuptools() >= (70, 1) else []
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *offline,
         "-w", str(wheels), str(REPO)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("azserve-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"azserve/configs/tictactoe.toml", "azserve/configs/connect4.toml"} <= set(names)
    assert "azserve/data/connect4_move_scores.tsv" in names
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", str(site), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    # Data files are real files in the install, not links back into the checkout.
    shipped = site / "azserve" / "configs" / "tictactoe.toml"
    assert shipped.is_file() and not shipped.is_symlink()
    assert not (site / "azserve" / "data" / "connect4_move_scores.tsv").is_symlink()

    work = tmp_path / "elsewhere"
    work.mkdir()
    # The installed copy first on the path (before the checkout the venv points at).
    env = dict(os.environ, PYTHONPATH=str(site), AZSERVE_SET=BUDGET)
    probe = subprocess.run(
        [sys.executable, "-c", "import azserve, azserve.config.presets as p; "
         "print(azserve.__file__); print(p.resolve_data_path('data/connect4/move_scores.tsv'))"],
        capture_output=True, text=True, env=env, cwd=work, timeout=60,
    )  # fmt: skip
    module, data = probe.stdout.split()
    assert module.startswith(str(site)) and data.startswith(str(site)), probe.stdout
    run = subprocess.run(
        [sys.executable, "-m", "azserve.cli.main", "train", "--config", "tictactoe",
         "--run-dir", "run", "--set", "server.metrics_port=0", "--set", "learner.metrics_port=0",
         "--set", "actors.metrics_port=0"],
        capture_output=True, text=True, env=env, cwd=work, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "stopped: step budget of 3 reached" in run.stdout
    assert (work / "run" / "report.png").is_file()
