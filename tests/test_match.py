"""``azserve match``: complete games against a real GnuGo (skipped, saying why, only where it
is not installed: scripts/system_deps.sh installs it as root), against our own ``azserve gtp``
through the same GTP client, and the referee's rules for resignations, forfeits and disputes."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from actors.games import make_game
from azserve.app.match import RESIGN, GameResult, Player, Refused, play_one, sgf, summarize, wilson
from tests.test_cli import azserve_cmd
from tests.test_gtp import go_checkpoint

pytestmark = pytest.mark.usefixtures("torch_one_thread")

GNUGO = shutil.which("gnugo") or shutil.which("gnugo", path="/usr/games")


def replay_sgf(text: str) -> list[int]:
    """The moves of one of our SGF files, as actions, checked legal under our rules."""
    game = make_game("go9")
    body = text.split(";")[2:]
    s, moves = game.initial_state(), []
    for node in body:
        coords = node[2 : node.index("]")]
        a = (
            game.pass_action
            if not coords
            else (8 - (ord(coords[1]) - 97)) * 9 + ord(coords[0]) - 97
        )
        assert a in game.legal_actions(s), (moves, a)
        s = game.apply(s, a)
        moves.append(a)
    return moves


def run_match(tmp_path: Path, opponent: str, games: int) -> tuple[dict, str]:
    go_checkpoint(tmp_path / "run")
    out = tmp_path / "out"
    argv = ["match", "--checkpoint", str(tmp_path / "run"), "--opponent", opponent,
            "--games", str(games), "--sims", "2", "--out", str(out)]  # fmt: skip
    p = subprocess.run(azserve_cmd(*argv), capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary == json.loads((out / "match.json").read_text())
    return summary, p.stderr


def check_complete(summary: dict, out: Path, games: int) -> None:
    assert summary["games"] == games and summary["disputed"] == 0
    assert summary["forfeits"] == {"ours": 0, "theirs": 0}  # no illegal move from either side
    assert summary["as_black"]["games"] == summary["as_white"]["games"] == games // 2
    assert summary["wins"] + summary["draws"] + summary["losses"] == games
    for i, result in enumerate(summary["results"]):
        text = (out / f"game-{i:04d}.sgf").read_text()
        assert f"RE[{result}]" in text and "KM[7.5]" in text and "SZ[9]" in text
        moves = replay_sgf(text)
        assert moves, text


@pytest.mark.skipif(GNUGO is None, reason="GnuGo not installed (Debian: apt-get install gnugo; "
                    "make test installs it as root)")  # fmt: skip
def test_a_match_against_real_gnugo(tmp_path: Path) -> None:
    summary, err = run_match(tmp_path, "gnugo --mode gtp --level 0", 2)
    check_complete(summary, tmp_path / "out", 2)
    assert summary["opponent"] == "gnugo --mode gtp --level 0"
    assert "game 2/2: azserve white" in err
    lo, hi = summary["ci95"]
    assert 0.0 <= lo <= summary["win_rate"] <= hi <= 1.0


def test_a_match_against_our_own_gtp_engine(tmp_path: Path) -> None:
    """The GTP client against ``azserve gtp`` (no GnuGo needed): both sides' moves pass both
    sides' rules to the end."""
    go_checkpoint(tmp_path / "engine")
    cmd = " ".join([*map(str, azserve_cmd("gtp")), "--checkpoint", str(tmp_path / "engine"),
                    "--sims", "0"])  # fmt: skip
    summary, _ = run_match(tmp_path, cmd, 2)
    check_complete(summary, tmp_path / "out", 2)


def test_a_missing_opponent_is_one_line(tmp_path: Path) -> None:
    go_checkpoint(tmp_path / "run")
    argv = ["match", "--checkpoint", str(tmp_path / "run"), "--opponent", "no-such-engine-x",
            "--games", "2", "--out", str(tmp_path / "out")]  # fmt: skip
    p = subprocess.run(azserve_cmd(*argv), capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert (
        "'no-such-engine-x' not found on PATH or in /usr/games" in p.stderr.strip().splitlines()[-1]
    )


class Scripted(Player):
    """Plays a fixed list of moves (a fake: the test is about the referee)."""

    def __init__(self, moves: list[int], refuse: int | None = None) -> None:
        self.moves = moves
        self.refuse = refuse
        self.told: list[int] = []

    def tell(self, color: int, action: int) -> None:
        if action == self.refuse:
            raise Refused("no")
        self.told.append(action)

    def genmove(self, color, state):  # type: ignore[no-untyped-def]
        return self.moves.pop(0)


def test_the_referee_scores_resignations_forfeits_and_disputes() -> None:
    go = make_game("go9")
    # Two passes end the game: the empty board is white's by komi.
    r = play_one(go, 0, 0, Scripted([go.pass_action]), Scripted([go.pass_action]))
    assert (r.winner, r.reason, r.result, r.won) == (1, "score", "W+7.5", False)
    r = play_one(go, 1, 1, Scripted([RESIGN]), Scripted([40]))  # we are white; white resigns
    assert (r.winner, r.reason, r.result, r.won) == (0, "resign", "B+R", False)
    r = play_one(go, 2, 0, Scripted([40, 41]), Scripted([40]))  # white plays on black's stone
    assert (r.winner, r.reason, r.result, r.won) == (0, "forfeit", "B+F", True)
    r = play_one(go, 3, 0, Scripted([40]), Scripted([], refuse=40))
    assert (r.winner, r.reason, r.result) == (None, "disputed", "Void")
    s = summarize([r, GameResult(4, 0, 0, "score", "B+3.5", [40, 81, 81])], "x")
    assert s["games"] == 2 and s["disputed"] == 1 and s["wins"] == 1 and s["win_rate"] == 1.0
    text = sgf(go, GameResult(0, 0, 0, "score", "B+3.5", [30, 81]), "a", "b]")
    assert (
        text == "(;GM[1]FF[4]CA[UTF-8]AP[azserve]SZ[9]KM[7.5]RU[Tromp-Taylor]PB[a]PW[b\\]]"
        "RE[B+3.5];B[df];W[])\n"
    )  # D4 is column d, row 4 from the bottom = SGF row f


def test_the_wilson_interval() -> None:
    lo, hi = wilson(20, 40)
    assert math.isclose(lo, 0.3519, abs_tol=1e-3) and math.isclose(hi, 0.6481, abs_tol=1e-3)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0
    assert wilson(0, 0) == (0.0, 1.0)
