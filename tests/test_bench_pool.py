"""``python -m azserve.perf.pool``: both variants play the same games (same seeds, same
simulations) on the instant evaluator, and the report says what each cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.games import ConnectFour
from actors.games.compiled import compiled_available
from azserve.perf import pool as bench_pool

pytestmark = pytest.mark.skipif(
    not compiled_available(ConnectFour()), reason="actors._mcts_core was not built"
)


@pytest.mark.parametrize("algorithm", ["gumbel", "puct"])
def test_both_variants_play_the_same_games(tmp_path: Path, algorithm: str) -> None:
    out = tmp_path / "pool.json"
    argv = ["--games", "16", "--per-round", "24", "--rounds", "2", "--simulations", "8"]
    assert bench_pool.main([*argv, "--algorithm", algorithm, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    pool, leaf = report["pool"], report["leaf"]
    assert pool["games"] == leaf["games"] == 48
    # The same seeds give the same games whichever way the leaves are driven: to the count.
    assert pool["simulations"] == leaf["simulations"] > 48 * 8 * 5
    for v in (pool, leaf):
        assert v["cpu_s"] > 0
        assert v["simulations_per_cpu_s"] == pytest.approx(v["simulations"] / v["cpu_s"], rel=0.01)


def test_unknown_variants_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench_pool.main(["--variants", "pool,fast"])
    assert "unknown variant 'fast'" in capsys.readouterr().err


def test_with_the_cache_every_variant_plays_the_same_games(tmp_path: Path) -> None:
    """With ``--cache-mb``, the compiled store (``pool``), the Python store (``pool-pystore``)
    and the per-leaf path play the same games, and the cache answers some of their leaves."""
    out = tmp_path / "cache.json"
    argv = ["--games", "16", "--per-round", "24", "--rounds", "1", "--simulations", "8"]
    variants = ["--variants", "pool,pool-pystore,leaf", "--cache-mb", "4"]
    assert bench_pool.main([*argv, *variants, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["cache_mb"] == 4
    runs = [report[v] for v in ("pool", "pool-pystore", "leaf")]
    assert len({r["simulations"] for r in runs}) == 1 and runs[0]["games"] == 24
    # The same games start from one position: the cache answers part of their leaves.
    assert all(0 < r["cache_hit_rate"] < 1 for r in runs)
    # Nearly the same hits: the compiled store looks a stepped tree's next leaf up at once, the
    # Python one at the next round, so a search answered to its end by the cache finishes a
    # round earlier there, and which leaves share a round (and miss together) moves a little.
    assert abs(runs[0]["cache_hit_rate"] - runs[1]["cache_hit_rate"]) < 0.02


def test_a_negative_cache_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench_pool.main(["--cache-mb", "-1"])
    assert "--cache-mb: must be >= 0" in capsys.readouterr().err
