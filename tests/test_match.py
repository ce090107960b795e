"""``azserve match``: complete games against a real GnuGo (skipped, saying why, only where it
is not installed: scripts/system_deps.sh installs it as root), against our own ``azserve gtp``
through the same GTP client, and the referee's rules for resignations, forfeits, disputes and
dead stones (GnuGo's own scoring against ours)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from actors.games import make_game
from actors.games.go.rules import EMPTY
from actors.games.go.sgf import sgf
from azserve.arena.match import GameResult, play_one, summarize
from azserve.arena.players import (
    RESIGN,
    GtpPlayer,
    OpenSpielMctsPlayer,
    Player,
    RandomPlayer,
    Refused,
    Verdict,
    honest_argv,
    parse_gtp_score,
    parse_spec,
)
from azserve.arena.ratings import wilson
from azserve.arena.referee import play_game
from azserve.errors import ConfigError
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


def run_match(
    tmp_path: Path, opponent: str, games: int, *extra: str, out_name: str = "out"
) -> tuple[dict, str]:
    if not (tmp_path / "run").exists():
        go_checkpoint(tmp_path / "run")
    out = tmp_path / out_name
    argv = ["match", "--checkpoint", str(tmp_path / "run"), "--opponent", opponent,
            "--games", str(games), "--sims", "2", "--out", str(out), *extra]  # fmt: skip
    p = subprocess.run(azserve_cmd(*argv), capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary == json.loads((out / "match.json").read_text())
    return summary, p.stderr


def check_complete(summary: dict, out: Path, games: int) -> None:
    assert summary["games"] == games and summary["disputed"] == 0, summary["disputes"]
    assert summary["forfeits"] == {"ours": 0, "theirs": 0}  # no illegal move from either side
    assert summary["as_black"]["games"] == summary["as_white"]["games"] == games // 2
    assert summary["wins"] + summary["draws"] + summary["losses"] == games
    for i, result in enumerate(summary["results"]):
        text = (out / f"game-{i:04d}.sgf").read_text()
        assert f"RE[{result}]" in text and "KM[7.5]" in text and "SZ[9]" in text
        # Our side is named by its checkpoint (the version GTP reports), not just "azserve".
        assert re.search(r"P[BW]\[azserve [^]]*-go9-features-step\d+-w[0-9a-f]{8}\]", text), text
        moves = replay_sgf(text)
        assert moves, text


@pytest.mark.skipif(GNUGO is None, reason="GnuGo not installed (Debian: apt-get install gnugo; "
                    "make test installs it as root)")  # fmt: skip
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_match_against_real_gnugo(tmp_path: Path, jobs: int) -> None:
    """With ``--jobs 2`` both games at once, each worker with its own GnuGo."""
    summary, err = run_match(tmp_path, "gnugo --mode gtp --level 0", 2, "--jobs", str(jobs))
    check_complete(summary, tmp_path / "out", 2)
    assert summary["opponent"] == "gnugo --mode gtp --level 0"
    assert summary["opponent_command"] == (
        "gnugo --mode gtp --level 0 --chinese-rules --capture-all-dead --positional-superko"
    )
    # Every game played out was scored by GnuGo too, and GnuGo agreed on the winner.
    assert summary["checked_by_opponent"] == 2 - summary["resigned"]["ours"] - summary["resigned"][
        "theirs"
    ] - sum(summary["forfeits"].values())
    assert "game 2/2: azserve white" in err
    lo, hi = summary["ci95"]
    assert 0.0 <= lo <= summary["win_rate"] <= hi <= 1.0


def test_a_match_against_our_own_gtp_engine(tmp_path: Path) -> None:
    """The GTP client against ``azserve gtp`` (no GnuGo needed): both sides' moves pass both
    sides' rules to the end. Random nets pass with dead stones on the board: the engine's
    final_score takes them off (as GnuGo's does), the referee counts the stones as they
    stand, so a game may end disputed, never forfeited."""
    go_checkpoint(tmp_path / "engine")
    cmd = " ".join([*map(str, azserve_cmd("gtp")), "--checkpoint", str(tmp_path / "engine"),
                    "--sims", "0"])  # fmt: skip
    summary, _ = run_match(tmp_path, cmd, 2)
    assert summary["games"] == 2 and summary["forfeits"] == {"ours": 0, "theirs": 0}
    for d in summary["disputes"]:
        assert "the referee (our rules, the board as it stands)" in d["why"], d
    for i, result in enumerate(summary["results"]):
        assert replay_sgf((tmp_path / "out" / f"game-{i:04d}.sgf").read_text()), result


def test_jobs_play_the_games_one_job_plays(tmp_path: Path) -> None:
    """Each game's players are seeded by the match's seed and the game's number: two jobs
    (worker processes, games finishing in any order) play the very games one job plays, and
    match.json lists them in order."""
    one, _ = run_match(tmp_path, "random", 6, out_name="one")
    two, err = run_match(tmp_path, "random", 6, "--jobs", "2", out_name="two")
    assert "6 games against random" in err and "2 games at a time" in err
    check_complete(two, tmp_path / "two", 6)
    assert two["results"] == one["results"] and two["as_black"] == one["as_black"]
    for i in range(6):
        a = replay_sgf((tmp_path / "one" / f"game-{i:04d}.sgf").read_text())
        b = replay_sgf((tmp_path / "two" / f"game-{i:04d}.sgf").read_text())
        assert a == b and len(a) > 10, i
    assert len({tuple(replay_sgf((tmp_path / "one" / f"game-{i:04d}.sgf").read_text()))
                for i in range(6)}) == 6  # fmt: skip


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
    s = summarize([r, GameResult(0, "score", "B+3.5", [40, 81, 81], index=4, our_color=0)], "x")
    assert s["games"] == 2 and s["disputed"] == 1 and s["wins"] == 1 and s["win_rate"] == 1.0
    text = sgf(go, GameResult(0, "score", "B+3.5", [30, 81]), "a", "b]")
    assert (
        text == "(;GM[1]FF[4]CA[UTF-8]AP[azserve]SZ[9]KM[7.5]RU[Tromp-Taylor]PB[a]PW[b\\]]"
        "RE[B+3.5];B[df];W[])\n"
    )  # D4 is column d, row 4 from the bottom = SGF row f


def test_the_wilson_interval() -> None:
    lo, hi = wilson(20, 40)
    assert math.isclose(lo, 0.3519, abs_tol=1e-3) and math.isclose(hi, 0.6481, abs_tol=1e-3)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0
    assert wilson(0, 0) == (0.0, 1.0)


def dead_stone_opening(go) -> list[int]:  # type: ignore[no-untyped-def]
    """Black walls column E, white column F (black ahead by 1.5 with komi), then a lone white
    stone at B5 deep in black's area: dead to any Go player, alive to Tromp-Taylor as the
    stones stand (and it makes black's 35 points of territory neutral)."""
    moves = []
    for row in range(1, 10):
        moves += [go.parse_move(f"E{row}"), go.parse_move(f"F{row}")]
    return [*moves, go.pass_action, go.parse_move("B5")]


class Passer(Player):
    """Passes at every turn (a fake: the test is about the referee and the real GnuGo)."""

    name = "passer"

    def genmove(self, color, state):  # type: ignore[no-untyped-def]
        return 81


@pytest.mark.skipif(GNUGO is None, reason="GnuGo not installed (Debian: apt-get install gnugo; "
                    "make test installs it as root)")  # fmt: skip
def test_dead_stones_left_on_the_board_make_a_dispute_never_a_win() -> None:
    """Both sides pass with the dead white stone still on the board: Tromp-Taylor gives white
    the game, GnuGo's own final_score gives black. The referee records a dispute with both
    scores; it never hands the game to the side the dead stone favours."""
    go = make_game("go9")
    gnugo = GtpPlayer("gnugo --mode gtp --level 1")
    try:
        r = play_game(go, Passer(), gnugo, [*dead_stone_opening(go), go.pass_action])
    finally:
        gnugo.close()
    assert (r.winner, r.reason, r.result) == (None, "disputed", "Void")
    assert r.scores["referee"].startswith("W+") and r.scores["white"] == "B+1.5"
    assert "scores it B+1.5" in r.why
    text = sgf(go, r, "passer", "gnugo")
    assert "RE[Void]" in text and "white B+1.5" in text


@pytest.mark.skipif(GNUGO is None, reason="GnuGo not installed (Debian: apt-get install gnugo; "
                    "make test installs it as root)")  # fmt: skip
def test_gnugo_under_the_referees_rules_plays_the_dead_stones_out() -> None:
    """The same position with GnuGo to move as black: run with --capture-all-dead it takes the
    dead stone before it passes, so the board as it stands is the true score and both scorers
    agree (B+1.5)."""
    go = make_game("go9")
    gnugo = GtpPlayer("gnugo --mode gtp --level 1")
    try:
        r = play_game(go, gnugo, Passer(), dead_stone_opening(go))
    finally:
        gnugo.close()
    assert (r.winner, r.reason, r.result) == (0, "score", "B+1.5")
    assert r.scores == {"referee": "B+1.5", "black": "B+1.5"}
    state = go.initial_state()
    for a in r.moves:
        state = go.apply(state, a)
    assert state.board[go.parse_move("B5")] == EMPTY  # captured, not left on the board


def test_gnugo_is_run_under_the_referees_rules() -> None:
    assert honest_argv(["/usr/games/gnugo", "--mode", "gtp", "--level", "1"]) == [
        "/usr/games/gnugo", "--mode", "gtp", "--level", "1",
        "--chinese-rules", "--capture-all-dead", "--positional-superko",
    ]  # fmt: skip
    assert honest_argv(["gnugo", "--chinese-rules"]).count("--chinese-rules") == 1
    with pytest.raises(ConfigError, match="--japanese-rules: our referee scores by area"):
        honest_argv(["gnugo", "--japanese-rules"])
    assert honest_argv(["katago", "gtp"]) == ["katago", "gtp"]  # other engines: as given


def test_scores_and_specs_parse() -> None:
    assert parse_gtp_score("B+1.5") == Verdict(0, "B+1.5")
    assert parse_gtp_score("W+R") == Verdict(1, "W+R")
    assert parse_gtp_score("0") == Verdict(None, "0")
    for bad in ("", "B+", "X+3", "B+abc"):
        with pytest.raises(ValueError):
            parse_gtp_score(bad)
    assert parse_spec("random") == ("random", "")
    assert parse_spec("gtp:gnugo --mode gtp") == ("gtp", "gnugo --mode gtp")
    assert parse_spec("gnugo --mode gtp") == ("gtp", "gnugo --mode gtp")
    assert parse_spec("openspiel-mcts:300") == ("openspiel-mcts", "300")
    assert parse_spec("checkpoint:runs/a") == ("checkpoint", "runs/a")
    for bad in ("", "openspiel-mcts:x", "openspiel-mcts:0", "checkpoint:"):
        with pytest.raises(ConfigError):
            parse_spec(bad)


class Scorer(Scripted):
    """Scripted moves and a fixed verdict on the finished game."""

    def __init__(self, moves: list[int], verdict: Verdict | None) -> None:
        super().__init__(moves)
        self.verdict = verdict

    def final_score(self) -> Verdict | None:
        return self.verdict


def test_an_opponent_that_agrees_on_the_winner_but_not_the_margin_still_counts() -> None:
    go = make_game("go9")
    r = play_one(go, 0, 0, Scripted([81]), Scorer([81], Verdict(1, "W+6.5")))
    assert (r.winner, r.reason, r.result) == (1, "score", "W+7.5")
    assert r.scores == {"referee": "W+7.5", "white": "W+6.5"} and r.margin_differs
    s = summarize([r], "x")
    assert s["margin_differs"] == 1 and s["checked_by_opponent"] == 1 and s["disputed"] == 0


def test_openspiel_mcts_takes_the_ladders_63_bit_game_seeds() -> None:
    pytest.importorskip("pyspiel")
    from azserve.arena.ladder.store import game_seed

    game = make_game("tictactoe")
    seed = game_seed(0, ("tictactoe@100", "openspiel-mcts:20"), 3)
    assert seed >= 2**32  # what the bot's 32-bit generator refused
    first = play_game(game, OpenSpielMctsPlayer(20, seed), RandomPlayer(1))
    again = play_game(game, OpenSpielMctsPlayer(20, seed), RandomPlayer(1))
    assert first.moves == again.moves  # the seed still decides the game


def _line(game, words: str) -> list[int]:  # type: ignore[no-untyped-def]
    """The actions of a line of moves as the game reads them, from the start."""
    s, out = game.initial_state(), []
    for w in words.split():
        out.append(game.parse_move_at(s, w))
        s = game.apply(s, out[-1])
    return out


def test_the_referee_writes_results_and_verdicts_as_each_game_does() -> None:
    """Results by the game's own words (``Game.result_text``/``score_text``), verdicts keyed
    by its side names, and the game's own record (``record_text``): no ``B+`` or ``black`` for
    tic-tac-toe, PGN's results and colours for chess."""
    from azserve.arena.referee import record_text

    ttt = make_game("tictactoe")
    r = play_game(ttt, Scripted([0, 1, 2]), Scripted([3, 4]))
    assert (r.winner, r.reason, r.result, r.scores) == (0, "score", "first wins",
                                                        {"referee": "first wins"})  # fmt: skip
    assert play_game(ttt, Scripted([0]), Scripted([RESIGN])).result == "first wins"
    r = play_game(ttt, Scripted([4]), Scripted([4]))
    assert (r.winner, r.reason, r.result) == (0, "forfeit", "first wins")
    r = play_game(ttt, Scripted([0]), Scripted([], refuse=0))
    assert (r.winner, r.reason, r.result) == (None, "disputed", "void")
    text = record_text(ttt, play_game(ttt, Scripted([0, 1, 2]), Scripted([3, 4])), ("a", "b"))
    assert text.splitlines()[1:] == ["# result: first wins (score)", "0 3 1 4 2"]
    assert "B+" not in text and "black" not in text

    chess = make_game("chess")
    mate = _line(chess, "f3 e5 g4 Qh4#")
    r = play_game(chess, Scripted(mate[0::2]), Scorer(mate[1::2], Verdict(1, "0-1")))
    assert (r.winner, r.result, r.scores) == (1, "0-1", {"referee": "0-1", "black": "0-1"})
    r = play_game(chess, Scripted(mate[0::2]), Scorer(mate[1::2], Verdict(0, "1-0")))
    assert (r.winner, r.reason, r.result) == (None, "disputed", "*")
    assert "scores it 1-0, the referee (our rules, the board as it stands) 0-1" in r.why
    pgn = record_text(chess, r, ("w", "b"))
    assert '[Result "*"]' in pgn and "1. f3 e5 2. g4 Qh4#" in pgn and "black 1-0" in pgn
    ours = GameResult(**vars(play_game(chess, Scripted(mate[0::2]), Scripted(mate[1::2]))),
                      our_color=1)  # fmt: skip
    s = summarize([ours], "x", chess.sides)
    assert s["as_black"] == {"games": 1, "wins": 1, "draws": 0} and s["results"] == ["0-1"]
