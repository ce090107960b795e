"""``azserve ladder`` and its Elo fit: simulated players of known strength recovered inside
the intervals at about the stated rate, the append-only store (a torn line, ``kill -9``
mid-game, a second invocation that continues), pairing, and the real command on tiny Go
checkpoints against random play."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from actors.games import make_game
from azserve.arena.agent import agent_from_checkpoint
from azserve.arena.ladder.output import at_equal_time
from azserve.arena.ladder.schedule import (
    RANDOM,
    Entrant,
    LadderReport,
    candidate_pairs,
    checkpoints_of,
    next_pair,
    referee_game,
    run_ladder,
)
from azserve.arena.ladder.store import Store, colours, game_seed, pair_of, results_of
from azserve.arena.players import AgentPlayer, RandomPlayer
from azserve.arena.ratings import Rating, Result, expected_score, fit
from azserve.arena.referee import play_game
from azserve.config.schema import load_config, to_dict
from azserve.errors import AzserveError
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer
from tests.test_cli import azserve_cmd

REPO = Path(__file__).resolve().parents[1]


def simulate(rng: np.random.Generator, true: dict[str, float], a: str, b: str) -> float:
    """One game between simulated players whose expected score is Bradley-Terry's ``p``, with
    draws the more likely the closer they are (40% of the games of equals)."""
    p = expected_score(true[a], true[b])
    draw = 0.8 * min(p, 1.0 - p)
    u = rng.random()
    return 0.5 if u < draw else (1.0 if u < draw + p - draw / 2 else 0.0)


def test_the_fit_recovers_simulated_players_inside_its_intervals() -> None:
    """Six players of known Elo, every pair 24 games (draws among them), 150 leagues: the true
    ratings fall inside the 95% intervals about 95% of the time, and the estimates are not
    biased by more than a few Elo on average."""
    rng = np.random.default_rng(7)
    true = {RANDOM: 0.0, "a": 150.0, "b": 400.0, "c": 550.0, "d": 800.0, "e": 650.0}
    names = list(true)
    inside = total = 0
    errors = []
    for _ in range(150):
        games = [
            Result(a, b, simulate(rng, true, a, b))
            for i, a in enumerate(names)
            for b in names[i + 1 :]
            for _ in range(24)
        ]
        ratings = fit(games, {RANDOM: 0.0})
        for n in names[1:]:
            r = ratings[n]
            inside += r.lo <= true[n] <= r.hi
            total += 1
            errors.append(r.elo - true[n])
    assert 0.90 <= inside / total <= 0.985, inside / total
    assert abs(float(np.mean(errors))) < 25, np.mean(errors)


def test_the_fit_with_draws_sweeps_fixed_and_unlinked_players() -> None:
    # all draws against random: 0 Elo; a sweep: finite, large, far from 0
    ratings = fit([Result("x", RANDOM, 0.5)] * 20 + [Result("y", RANDOM, 1.0)] * 40, {RANDOM: 0})
    assert abs(ratings["x"].elo) < 1e-6 and ratings["x"].lo < 0 < ratings["x"].hi
    assert 600 < ratings["y"].elo < 1200 and math.isfinite(ratings["y"].hi)
    assert (ratings["y"].games, ratings["y"].score) == (40, 40.0)
    assert ratings[RANDOM].fixed and ratings[RANDOM].lo == ratings[RANDOM].hi == 0.0
    # a pair never linked to the fixed player: relative to each other only, no interval
    ratings = fit([Result("p", "q", 1.0)] * 3, {RANDOM: 0}, players=["new"])
    assert not ratings["p"].anchored and math.isinf(ratings["p"].hi)
    assert ratings["p"].elo > ratings["q"].elo
    assert ratings["new"].games == 0 and math.isinf(ratings["new"].hi)
    with pytest.raises(ValueError, match="outside 0..1"):
        fit([Result("p", "q", 2.0)], {})
    with pytest.raises(ValueError, match="cannot play itself"):
        fit([Result("p", "p", 1.0)], {})


def run_entrants(true: dict[str, float]) -> list[Entrant]:
    out = [Entrant(RANDOM, RANDOM)]
    for i, n in enumerate(k for k in true if k != RANDOM and not k.startswith("gtp")):
        out.append(Entrant(n, f"checkpoint:{n}", "run", (i + 1) * 100, i * 0.5, i * 1000))
    out += [Entrant(k, k) for k in true if k.startswith("gtp")]
    return out


def test_adaptive_pairing_on_simulated_players_recovers_their_order() -> None:
    """The ladder's own loop (fit, choose the pair, play) on simulated checkpoints that grow
    stronger with time and a strong anchor: 400 games recover every rating inside its
    interval (here, for this seed) and put the anchor between the checkpoints it lies
    between; close pairs get more games than lopsided ones."""
    rng = np.random.default_rng(3)
    true = {RANDOM: 0.0, "run@1": 100.0, "run@2": 300.0, "run@3": 500.0, "run@4": 900.0,
            "gtp:strong": 700.0}  # fmt: skip
    entrants = run_entrants(true)
    games: list[dict[str, object]] = []
    counts: dict[tuple[str, str], int] = {}
    ratings: dict[str, Rating] = {}
    for _ in range(400):
        ratings = fit(results_of(games), {RANDOM: 0.0}, players=true)  # type: ignore[arg-type]
        pair = next_pair(entrants, ratings, counts)
        assert pair is not None
        k = counts.get(pair, 0)
        black, white = pair if k % 2 == 0 else pair[::-1]
        s = simulate(rng, true, black, white)
        winner = None if s == 0.5 else (0 if s == 1.0 else 1)
        games.append({"black": black, "white": white, "winner": winner, "reason": "score"})
        counts[pair] = k + 1
    ratings = fit(results_of(games), {RANDOM: 0.0})  # type: ignore[arg-type]
    for n, elo in true.items():
        assert ratings[n].lo <= elo <= ratings[n].hi, (n, ratings[n])
    assert ratings["run@3"].elo < ratings["gtp:strong"].elo < ratings["run@4"].elo
    assert counts[pair_of("run@4", RANDOM)] < counts[pair_of("run@3", "run@4")]
    # colours alternate within a pair
    blacks = [g["black"] for g in games if {g["black"], g["white"]} == {"run@3", "run@4"}]
    assert blacks[:4] == ["run@3", "run@4", "run@3", "run@4"]


def test_pairs_are_neighbours_in_time_anchors_and_other_runs() -> None:
    a = [Entrant(f"a@{s}", "x", "a", s, s / 10, s) for s in (100, 200, 300)]
    b = [Entrant("b@150", "x", "b", 150, 14.9, 1), Entrant("b@900", "x", "b", 900, 90, 1)]
    pairs = candidate_pairs([*a, *b, Entrant(RANDOM, RANDOM)])
    assert pair_of("a@100", "a@200") in pairs and pair_of("a@200", "a@300") in pairs
    assert pair_of("a@100", "a@300") not in pairs  # not neighbours
    assert pair_of("a@100", "b@150") in pairs and pair_of("a@300", "b@150") in pairs
    assert pair_of("a@200", "b@900") not in pairs  # b@150 is nearer in time to a@200
    assert pair_of("a@300", "b@900") in pairs  # and a@300 is the nearest to b@900
    assert all(pair_of(e.name, RANDOM) in pairs for e in [*a, *b])
    # a checkpoint that never played is played first
    counts = {p: 3 for p in pairs if "b@900" not in p}
    assert "b@900" in next_pair([*a, *b, Entrant(RANDOM, RANDOM)], {}, counts)  # type: ignore[operator]
    assert game_seed(0, ("a", "b"), 1) == game_seed(0, ("a", "b"), 1) != game_seed(0, ("a", "b"), 2)


def record(pair: tuple[str, str], k: int) -> dict[str, object]:
    return {"pair": list(pair), "k": k, "black": pair[k % 2], "white": pair[1 - k % 2],
            "winner": 0, "reason": "score"}  # fmt: skip


def test_the_store_cuts_a_torn_line_refuses_gaps_and_a_second_writer(tmp_path: Path) -> None:
    path = tmp_path / "games.jsonl"
    store = Store(path)
    store.append(record(("a", "b"), 0))
    with pytest.raises(AzserveError, match="another ladder is writing"):
        Store(path)
    store.close()
    with open(path, "ab") as f:
        f.write(b'{"pair": ["a", "b"], "k": 1, "bla')  # killed mid-write
    store = Store(path)
    assert store.next_k(("a", "b")) == 1 and len(store.games) == 1
    store.append(record(("a", "b"), 1))
    store.close()
    assert [json.loads(x)["k"] for x in path.read_text().splitlines()] == [0, 1]
    path.write_text(
        json.dumps(record(("a", "b"), 0)) + "\n" + json.dumps(record(("a", "b"), 2)) + "\n"
    )
    with pytest.raises(AzserveError, match=r"games.jsonl:2: game 2 of a v b out of order"):
        Store(path)
    path.write_text("not json\n")
    with pytest.raises(AzserveError, match=r"games.jsonl:1: not a game record"):
        Store(path)


def tiny_run(
    directory: Path,
    steps: tuple[int, ...],
    config: str = "go9-alphazero",
    more: tuple[str, ...] = (),
) -> Path:
    """A run directory of tiny random-weights Go 9x9 checkpoints (1 block, 8 channels) with
    metrics rows placing each step in time: plain AlphaZero nets unless ``config`` says."""
    cfg = load_config(
        REPO / "configs" / f"{config}.toml",
        ["net.blocks=1", "net.channels=8", "eval.sims=2", "backend.torch.compile=none", *more],
    )
    t0 = 1_700_000_000.0
    rows = []
    for i, step in enumerate(steps):
        trainer = Trainer(replace(cfg.net, seed=i), replace(cfg.trainer, device="cpu"))
        save_checkpoint(directory / "checkpoints", step, i, trainer.state_dict(), to_dict(cfg),
                        keep_last=100)  # fmt: skip
        rows.append({"time": t0 + 1800 * (i + 1), "step": step, "positions": 1000 * step})
    rows.insert(0, {"time": t0, "step": 0, "positions": 0})
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return directory


def test_checkpoints_know_their_place_in_the_run(tmp_path: Path) -> None:
    run = tiny_run(tmp_path / "r", (10, 20, 30, 40, 50))
    got = checkpoints_of(run, "r", limit=3)
    assert [e.step for e in got] == [10, 30, 50]
    assert [e.hours for e in got] == [0.5, 1.5, 2.5]
    assert [e.positions for e in got] == [10_000, 30_000, 50_000]
    # besides the even picks, the one nearest to each time asked for (hours 1.0: step 20)
    got = checkpoints_of(run, "r", limit=3, at_hours=(1.1, 2.4))
    assert [e.step for e in got] == [10, 20, 30, 50]
    assert [e.step for e in checkpoints_of(run, "r", limit=1)] == [50]
    with pytest.raises(AzserveError, match="no checkpoint"):
        checkpoints_of(tmp_path, "empty")


def test_runs_of_different_lengths_meet_at_equal_time(tmp_path: Path) -> None:
    """A 2.5-hour run and a 1-hour one on one ladder: the longer brings its checkpoint at the
    shorter's end (hour 1) beside its even picks, so the two are compared at equal time."""
    long = tiny_run(tmp_path / "long", (10, 20, 30, 40, 50))
    short = tiny_run(tmp_path / "short", (5, 7))
    report = run_ladder([str(long), str(short)], [], tmp_path / "ladder", 0,
                        max_checkpoints=2, progress=None)  # fmt: skip
    assert [e.name for e in report.entrants] == [
        "long@10", "long@20", "long@50", "short@5", "short@7",
    ]  # fmt: skip
    assert candidate_pairs(report.entrants).count(("long@20", "short@7")) == 1


def test_the_equal_time_view_reads_each_run_at_the_shortest_runs_end() -> None:
    """Two runs, one of 2.5 hours and one of 1: the view names each one's checkpoint at hour 1
    and the record between those two only (not the longer run's later nets')."""
    e = [Entrant("long@10", "x", "long", 10, 0.5), Entrant("long@20", "x", "long", 20, 1.0),
         Entrant("long@50", "x", "long", 50, 2.5), Entrant("short@5", "x", "short", 5, 0.5),
         Entrant("short@7", "x", "short", 7, 1.1), Entrant(RANDOM, RANDOM)]  # fmt: skip
    games = [Result("long@20", "short@7", 1.0), Result("short@7", "long@20", 0.0),
             Result("long@20", "short@7", 0.5), Result("short@7", "long@20", 1.0),
             Result("long@50", "short@7", 1.0), Result("long@20", RANDOM, 1.0)]  # fmt: skip
    ratings = {x.name: Rating(100.0 * i, 100.0 * i - 50, 100.0 * i + 50, 3, 1.5)
               for i, x in enumerate(e)}  # fmt: skip
    report = LadderReport(0, len(games), ratings, e, 0, games)
    text = at_equal_time(report)
    assert "at 1.10 hours" in text
    assert "short@7   1.10 h  Elo    400 (350 .. 450), 3 games" in text
    assert "long@20   1.00 h  Elo    100" in text
    assert "short@7 v long@20: 1-1-2, 0.38 (0.09-0.78)" in text  # long@20 won 2, drew 1, lost 1
    assert "long@50" not in text
    assert at_equal_time(LadderReport(0, 0, ratings, e[:3] + e[5:], 0, [])) == ""


def test_another_encoding_of_the_same_rules_meets_in_one_ladder(tmp_path: Path) -> None:
    """A go9-alphazero run and a go9 run (go9-features: 11 input planes, pooled blocks, extra
    heads) on one ladder: Go 9x9 referees, and each net follows the game in its own states (the
    features net's last-move and ko planes from the moves it was told). Games of other rules
    refuse."""
    plain = tiny_run(tmp_path / "plain", (10,))
    feats = tiny_run(tmp_path / "feats", (10,), "go9",
                     ("net.global_pool_every=1", "net.global_pool_channels=4"))  # fmt: skip
    report = run_ladder([str(plain), str(feats)], [], tmp_path / "ladder", games=2, sims=2,
                        progress=None)  # fmt: skip
    games = lines(tmp_path / "ladder" / "games.jsonl")
    assert report.played == 2 and {g["game"] for g in games} == {"go9"}
    assert {tuple(sorted(g["pair"])) for g in games} == {("feats@10", "plain@10")}
    assert all(g["reason"] in ("score", "resign") for g in games), games  # no forfeit

    _, agent = agent_from_checkpoint(str(next((feats / "checkpoints").glob("*.safetensors"))))
    go9 = make_game("go9")
    me, other = AgentPlayer(agent, 2, 2, seed=1), RandomPlayer(seed=2)
    r = play_game(go9, me, other)
    assert r.reason == "score" and len(r.moves) > 20
    own = agent.game.from_moves(r.moves)  # the features net's own state, from every move
    assert me._own == own and own.board == go9.from_moves(r.moves).board
    with pytest.raises(AzserveError, match="the runs play different games: go9 .*, connect4"):
        referee_game({"go9": "plain@10", "connect4": "c4@10"})


def lines(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


@pytest.mark.timeout(300)
def test_the_real_command_resumes_after_kill_9_without_losing_or_repeating(tmp_path: Path) -> None:
    """``azserve ladder`` on two tiny Go checkpoints and random play: killed with SIGKILL as
    soon as its first game is stored (the second under way), a second invocation continues
    the same file: every (pair, game number) once, numbers without gaps, colours alternating,
    and a replayed game (same pair, number and seed) gives the same moves."""
    run = tiny_run(tmp_path / "run", (40, 80))
    out = tmp_path / "ladder"
    argv = azserve_cmd("ladder", str(run), "--anchor", "random", "--out", str(out), "--sims", "2")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "first.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([*argv, "--games", "50"], stdout=subprocess.DEVNULL,
                                stderr=err, env=env)  # fmt: skip
        deadline = time.monotonic() + 120
        while len(lines(out / "games.jsonl")) < 1 and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    first = lines(out / "games.jsonl")
    assert len(first) >= 1
    done = subprocess.run([*argv, "--games", "6"], capture_output=True, text=True, env=env,
                          timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr
    games = lines(out / "games.jsonl")
    assert len(games) == len(first) + 6
    assert games[: len(first)] == first  # nothing rewritten
    by_pair: dict[tuple[str, str], list[dict[str, object]]] = {}
    for g in games:
        by_pair.setdefault(tuple(g["pair"]), []).append(g)  # type: ignore[arg-type]
    for pair, gs in by_pair.items():
        assert [g["k"] for g in gs] == list(range(len(gs))), pair
        assert [g["black"] for g in gs] == [colours(0, pair, k)[0] for k in range(len(gs))]
    names = {n for g in games for n in (g["black"], g["white"])}
    assert names <= {"run@40", "run@80", RANDOM}
    g = games[-1]
    assert set(g["players"]) == {g["black"], g["white"]}  # type: ignore[arg-type]
    assert (out / "ratings.json").exists() and (out / "ladder.png").stat().st_size > 0
    assert len(list((out / "games").glob("*.sgf"))) == len(games)
    # the table: every player, random fixed
    assert "random" in done.stdout and "fixed" in done.stdout and "run@80" in done.stdout
    # replaying a stored game from its seed gives the same moves
    replay = tmp_path / "replay"
    pair = tuple(games[0]["pair"])  # type: ignore[arg-type]
    redo = subprocess.run([*argv[:-4], "--out", str(replay), "--sims", "2", "--games", "1"],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert redo.returncode == 0, redo.stderr
    again = lines(replay / "games.jsonl")[0]
    assert tuple(again["pair"]) == pair and again["k"] == 0
    assert again["moves"] == games[0]["moves"] and again["seed"] == games[0]["seed"]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_run_keeps_its_ladder_as_it_trains(tmp_path: Path) -> None:
    """``[ladder]``: rounds of ``azserve ladder`` on the run while it trains, at low priority;
    the summary carries the newest rated checkpoint's Elo with its interval."""
    from tests.conftest import quick_train_argv

    run = tmp_path / "run"
    # Rounds of 2 games: the ladder plays at nice +10 beside the run, and on a loaded machine
    # a round of 4 was still at its second game when a 0.7-minute run ended.
    sets = ["ladder.games=2", "ladder.share=1.0", "ladder.sims=2", "checkpoint.keep_every=20"]
    argv = [*quick_train_argv("tictactoe", run, *sets), "--minutes", "0.8"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=360)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ladder_rounds"] >= 1, (run / "logs" / "ladder.log").read_text()[-2000:]
    rating = summary["rating"]
    assert rating["player"].startswith("run@") and rating["games"] >= 1
    assert rating["lo"] <= rating["elo"] <= rating["hi"]
    games = lines(run / "ladder" / "games.jsonl")
    assert len(games) >= 2 and {g["game"] for g in games} == {"tictactoe"}
    assert (run / "ladder" / "ladder.png").is_file()


def children_of(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.timeout(300)
def test_jobs_play_games_at_once_in_the_order_one_job_keeps(tmp_path: Path) -> None:
    """``azserve ladder --jobs 2``: two worker processes play at once, never one pair twice at
    a time, so each pair's games are stored numbered without gaps, colours alternating; a game
    is the one a single job plays from the same pair, number and seed. Killed with SIGKILL,
    its workers die with it, and a second invocation with jobs continues the same file."""
    run = tiny_run(tmp_path / "run", (40, 80))
    out = tmp_path / "ladder"
    argv = azserve_cmd("ladder", str(run), "--anchor", "random", "--out", str(out), "--sims", "2",
                       "--jobs", "2")  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "first.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([*argv, "--games", "200"], stdout=subprocess.DEVNULL,
                                stderr=err, env=env)  # fmt: skip
        deadline = time.monotonic() + 120
        while len(lines(out / "games.jsonl")) < 3 and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        workers = children_of(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(workers) >= 2, workers  # the two jobs (and a resource tracker, maybe)
    deadline = time.monotonic() + 20
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in workers), "a ladder job outlived its ladder"
    first = lines(out / "games.jsonl")
    done = subprocess.run([*argv, "--games", "10"], capture_output=True, text=True, env=env,
                          timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2 games at a time" in done.stderr
    games = lines(out / "games.jsonl")
    assert len(games) == len(first) + 10 and games[: len(first)] == first
    by_pair: dict[tuple[str, str], list[dict[str, object]]] = {}
    for g in games:
        by_pair.setdefault(tuple(g["pair"]), []).append(g)  # type: ignore[arg-type]
    spans = []
    for pair, gs in by_pair.items():
        assert [g["k"] for g in gs] == list(range(len(gs))), pair
        assert [g["black"] for g in gs] == [colours(0, pair, k)[0] for k in range(len(gs))]
        ends = [float(g["time"]) for g in gs]  # type: ignore[arg-type]
        starts = [e - float(g["seconds"]) for e, g in zip(ends, gs)]  # type: ignore[arg-type]
        assert all(s2 >= e1 - 0.01 for e1, s2 in zip(ends, starts[1:])), pair  # one at a time
        spans += list(zip(starts, ends))
    spans.sort()
    # Two games were in play at once somewhere: the jobs ran side by side.
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans
    assert len(list((out / "games").glob("*.sgf"))) == len(games)
    # One job, in this process, plays the first game of a pair the same way.
    report = run_ladder([str(run)], [RANDOM], tmp_path / "one", games=1, sims=2, progress=None)
    one = lines(tmp_path / "one" / "games.jsonl")[0]
    twin = by_pair[tuple(one["pair"])][0]  # type: ignore[arg-type]
    assert report.played == 1 and one["k"] == 0 and one["seed"] == twin["seed"]
    assert one["moves"] == twin["moves"] and one["result"] == twin["result"]


class _Broken:
    """A worker that cannot start (as one whose checkpoint will not load)."""

    def __init__(self, setup: object) -> None:
        raise RuntimeError("cannot build the players")


def test_a_job_that_cannot_start_stops_the_command_with_a_clear_error() -> None:
    from azserve.arena.pool import GamePool

    pool = GamePool(1, _Broken, None)
    try:
        with pytest.raises(AzserveError, match=r"azserve-job-0 (is gone|died) \(exit code 1\)"):
            pool.submit("a", {"i": 0})
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                list(pool.finished(timeout=1.0))
    finally:
        pool.close()


def test_either_side_of_a_pair_opens_its_first_game_about_half_the_time() -> None:
    """A game's colours are a pure function of its pair, number and the ladder's seed (so a
    resumed ladder plays the same game), the two take turns, and over pairs the first game
    goes to either side about half the time: not to the canonical order's first (random
    play, before every ``run@STEP``)."""
    pairs = [pair_of(RANDOM, f"run@{step}") for step in range(0, 4000, 20)]
    assert all(p[0] == RANDOM for p in pairs)
    for seed in (0, 1):
        firsts = [colours(seed, p, 0)[0] for p in pairs]
        assert 0.4 < firsts.count(RANDOM) / len(pairs) < 0.6, seed
        for p in pairs[:20]:
            assert colours(seed, p, 0) == colours(seed, p, 0)  # stable
            assert [colours(seed, p, k) for k in range(4)] == [
                colours(seed, p, 0),
                colours(seed, p, 0)[::-1],
            ] * 2
    assert [colours(0, p, 0) for p in pairs] != [colours(1, p, 0) for p in pairs]


def test_a_chess_ladder_game_keeps_its_pgn(tmp_path: Path) -> None:
    """The ladder writes every game as its game keeps records: a chess game as PGN beside the
    store line, its players by colour, its result as PGN writes it."""
    import io

    from azserve.arena.ladder.play import play_pair
    from azserve.arena.ladder.schedule import anchor_entrant
    from azserve.arena.lineup import Lineup

    chess = make_game("chess(max_plies=60)")
    entrants = [anchor_entrant("greedy"), anchor_entrant(RANDOM)]
    by_name = {e.name: e for e in entrants}
    lineup = Lineup(chess, tmp_path, 2, 0)
    store = Store(tmp_path / "games.jsonl")
    try:
        g = play_pair(lineup, store, by_name, pair_of("greedy", RANDOM), seed=3)
    finally:
        store.close()
        lineup.close()
    assert g["result"] in ("1-0", "0-1", "1/2-1/2") and g["game"] == "chess"
    (record,) = (tmp_path / "games").glob("*.pgn")
    text = record.read_text()
    assert f'[White "{g["black"]}"]' in text and f'[Black "{g["white"]}"]' in text
    assert f'[Result "{g["result"]}"]' in text and '[Event "azserve ladder"]' in text
    pgn = pytest.importorskip("chess.pgn")
    parsed = pgn.read_game(io.StringIO(text))
    assert parsed is not None and not parsed.errors
    assert len(list(parsed.mainline_moves())) == len(g["moves"])
