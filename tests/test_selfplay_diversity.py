"""``scripts/selfplay_diversity.py``: a checkpoint's self-play, measured for repeats under
variants of the move choice; no temperature plays one game over and over."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from azserve.config.load import to_dict
from azserve.config.schema import load_config
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer
from tests import conftest

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]


def load_script():  # type: ignore[no-untyped-def]
    return conftest.load_script("selfplay_diversity")


def test_measure_counts_repeats_and_openings(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_script()
    games = [  # (moves, recorded positions, first player's result)
        ([0, 1, 2], [b"a", b"b", b"c"], 1.0),
        ([0, 1, 3], [b"a", b"b", b"d"], 0.0),
        ([4, 1, 2], [b"a", b"e", b"f"], -1.0),
        ([0, 1, 2], [b"a", b"b", b"c"], 1.0),
    ]
    it = iter(games)

    async def play(agent, cfg, seed):  # type: ignore[no-untyped-def]
        return next(it)

    monkeypatch.setattr(mod, "play", play)
    row = asyncio.run(mod.measure(None, None, "x", 4, 2, 0))
    assert (row.games, row.positions) == (4, 12)
    assert row.distinct == round(6 / 12, 4)  # a b c d e f
    assert row.openings == 2 / 4  # (0, 1) and (4, 1)
    assert (row.wins, row.draws, row.losses, row.mean_moves) == (2, 1, 1, 3.0)


def test_variants_play_real_games_from_a_checkpoint(tmp_path: Path) -> None:
    cfg = load_config(REPO / "configs" / "tictactoe.toml")
    trainer = Trainer(replace(cfg.net, seed=3), replace(cfg.trainer, device="cpu"))
    ckpt = save_checkpoint(tmp_path, 10, 1, trainer.state_dict(), to_dict(cfg))
    out = tmp_path / "rows.json"
    rc = load_script().main(
        [
            str(ckpt),
            "--games",
            "24",
            "--ply",
            "9",
            "--json",
            str(out),
            "--variant",
            "cold=mcts.algorithm=puct mcts.temperature=0 mcts.dirichlet_fraction=0",
            "--variant",
            "hot=mcts.algorithm=gumbel mcts.temperature=3 mcts.temperature_moves=9",
        ]
    )
    assert rc == 0
    cold, hot = json.loads(out.read_text())
    assert (cold["variant"], hot["variant"]) == ("cold", "hot")
    for row in (cold, hot):
        assert row["games"] == 24 == row["wins"] + row["draws"] + row["losses"]
        assert row["positions"] == round(row["mean_moves"] * 24)  # every move recorded
    # No noise, no temperature: the same game every time, but for ties of the visit counts.
    assert cold["openings"] <= 0.25 < 0.5 < hot["openings"]
    assert hot["distinct"] > 2 * cold["distinct"]
