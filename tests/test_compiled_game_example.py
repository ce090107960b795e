"""docs/games.md's worked example of a game at compiled speed, built for real: the checkout's
compiled core and setup.py copied to a scratch directory with the page's ``nim.c`` added to
actors/core/games/, built with the C compiler, then the page's ``nim.py`` checked against it:
``nim`` in the table (found by setup.py, no other edit), its rules in lockstep with the Python
file, and each selection rule's compiled search playing whole games bit for bit as its Python
reference."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import actors.games.compiled as compiled
from actors.games import make_game
from actors.gumbel import GumbelSearch
from actors.mcts import MCTS
from actors.search import MCTSConfig
from actors.searches import make_search
from tests.test_compiled_mcts import ACTIONS, hashed, play_lockstep
from tests.test_core_rules import play_in_lockstep
from tests.test_game_in_one_file import doc_block

REPO = Path(__file__).resolve().parents[1]
COMPILER = (sysconfig.get_config_var("CC") or "cc").split()[0]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("nim"),  # the module fixture builds a core: once, on one worker
    pytest.mark.timeout(600),
    pytest.mark.skipif(compiled.core is None, reason="actors._mcts_core was not built"),
    pytest.mark.skipif(shutil.which(COMPILER) is None, reason=f"no C compiler ({COMPILER})"),
]

REFERENCES = {"puct": MCTS, "gumbel": GumbelSearch}
CONFIGS = {
    "puct": MCTSConfig(num_simulations=24, leaves_in_flight=4, virtual_loss=2.0),
    "gumbel": MCTSConfig(algorithm="gumbel", num_simulations=24, num_sampled_actions=3),
}


@pytest.fixture(scope="module")
def nim_core(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The core built from the checkout's files plus the page's nim.c, loaded as a module of
    its own (the installed core stays as it is)."""
    root = tmp_path_factory.mktemp("nim-core")
    shutil.copytree(REPO / "actors" / "core", root / "actors" / "core")
    shutil.copy(REPO / "setup.py", root / "setup.py")
    (root / "actors" / "core" / "games" / "nim.c").write_text(doc_block("/* nim.c */"))
    build = subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "--build-lib",
            "out",
            "--build-temp",
            "tmp",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=540,
    )
    built = sorted((root / "out" / "actors").glob("_mcts_core*.so"))
    assert build.returncode == 0 and built, build.stdout[-3000:] + build.stderr[-3000:]
    # The module's init is named for its last part: loaded as top-level ``_mcts_core``, beside
    # the installed ``actors._mcts_core``.
    spec = importlib.util.spec_from_file_location("_mcts_core", built[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def nim_file(tmp_path: Path) -> str:
    (tmp_path / "nim.py").write_text(doc_block("# nim.py"))
    return f"{tmp_path / 'nim.py'}:Nim"


def test_the_new_file_is_in_the_table_and_plays_as_the_python_file(
    nim_core: ModuleType, nim_file: str
) -> None:
    assert set(nim_core.GAMES) == {*compiled.core.GAMES, "nim"}
    game = make_game(nim_file)
    rules = nim_core.Rules("nim")
    assert (rules.num_actions, rules.obs_size, rules.max_plies) == (3, 12, 12)
    assert play_in_lockstep(game, rules, 300) > 300
    with pytest.raises(ValueError, match="not a Nim position"):
        rules.legal(b"\x0d\0\0\0\0\0\0\0", b"")  # 13 stones


def test_without_the_file_the_same_class_runs_the_python_search(nim_file: str) -> None:
    game = make_game(nim_file)
    assert "nim" not in compiled.core.GAMES
    assert type(make_search(game, MCTSConfig(), np.random.default_rng(0))) is MCTS


@pytest.mark.parametrize("selection", sorted(REFERENCES))
async def test_the_compiled_searches_play_it_as_the_python_ones(
    selection: str, nim_core: ModuleType, nim_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compiled, "_mcts_core", nim_core)
    monkeypatch.setattr(compiled, "_RULES", {})
    monkeypatch.setitem(ACTIONS, (1, 12), 3)  # the evaluator's policy width for Nim's planes
    game, cfg = make_game(nim_file), CONFIGS[selection]
    for seed in range(3):
        rng = np.random.default_rng
        py = REFERENCES[selection](game, dataclasses.replace(cfg, core="python"), rng(seed))
        cc = make_search(game, dataclasses.replace(cfg, core="compiled"), rng(seed))
        assert type(cc) is not type(py)  # the compiled form, not the reference twice
        assert await play_lockstep(game, py, cc, hashed()) >= 3
