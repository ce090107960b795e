"""``azserve analyze`` with a Go checkpoint: requests in KataGo's analysis-engine shape (vertices,
initial stones, komi, rules, board size, turns, visits) answered per turn with vertices, win
rates, priors, principal variations and the policy where asked; unknown fields refused by
name, the ownership KataGo's clients ask for answered with a warning; the
action-number format still answered; and the real command end to end."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from actors.games.go.rules import Go
from azserve.arena.agent import Agent, agent_from_checkpoint
from azserve.engines.analyze import analyze_lines
from tests.test_cli import azserve_cmd
from tests.test_gtp import go_checkpoint

pytestmark = pytest.mark.usefixtures("torch_one_thread")

GO = Go(9)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("go") / "run"
    go_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def agent(run: Path) -> Agent:
    ckpt = next((run / "checkpoints").glob("ckpt-*.safetensors"))
    cfg, agent = agent_from_checkpoint(str(ckpt))
    assert cfg.game == "go9-features"  # the default config: the features net
    return agent


def request(**fields: object) -> str:
    base: dict[str, object] = {"id": "q", "rules": "tromp-taylor", "komi": 7.5,
                               "boardXSize": 9, "boardYSize": 9}  # fmt: skip
    return json.dumps({**base, **fields})


def test_turns_are_analysed_with_vertices_winrates_and_pvs(agent: Agent) -> None:
    line = request(
        initialStones=[["B", "C3"], ["B", "G7"]], moves=[["W", "E5"], ["W", "D5"], ["B", "F4"]],
        analyzeTurns=[0, 2, 3], maxVisits=24,
    )  # fmt: skip
    rows = analyze_lines([line], agent, "go9-features", sims=8)
    assert [r["turnNumber"] for r in rows] == [0, 2, 3] and {r["id"] for r in rows} == {"q"}
    # White moved twice: the positions follow the colours given, not alternation.
    players = [r["rootInfo"]["currentPlayer"] for r in rows]
    assert players == ["W", "B", "W"]
    occupied = {0: {"C3", "G7"}, 2: {"C3", "G7", "E5", "D5"}, 3: {"C3", "G7", "E5", "D5", "F4"}}
    for row in rows:
        infos = row["moveInfos"]
        assert infos and [m["order"] for m in infos] == list(range(len(infos)))
        assert sum(m["visits"] for m in infos) == 24  # maxVisits new simulations
        assert infos == sorted(infos, key=lambda m: -m["visits"])
        for m in infos:
            assert 0.0 <= m["winrate"] <= 1.0 and 0.0 <= m["prior"] <= 1.0
            assert m["pv"][0] == m["move"]
            assert m["move"] not in occupied[row["turnNumber"]]
            GO.parse_move(m["move"])  # a vertex (or pass)
        assert 0.0 <= row["rootInfo"]["winrate"] <= 1.0 and row["rootInfo"]["visits"] == 25


def test_the_default_turn_is_the_last_and_zero_visits_is_the_raw_net(agent: Agent) -> None:
    (row,) = analyze_lines(
        [request(moves=[["B", "E5"]], maxVisits=0)], agent, "go9-features", sims=8
    )
    assert row["turnNumber"] == 1 and row["rootInfo"]["currentPlayer"] == "W"
    (best,) = row["moveInfos"]
    assert best["visits"] == 0 and best["move"] != "E5"


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"boardXSize": 19, "boardYSize": 19}, "boardXSize",
         "boardXSize 19: this checkpoint plays 9x9"),
        ({"boardYSize": 13}, "boardYSize", "boardYSize 13: this checkpoint plays 9x9"),
        ({"rules": "japanese"}, "rules", "rules 'japanese': territory scoring is not supported"),
        ({"rules": {"scoring": "TERRITORY"}}, "rules", "only area scoring"),
        ({"rules": "go-moku"}, "rules", "rules 'go-moku': unknown"),
        ({"komi": "seven"}, "komi", "komi 'seven' must be a finite number"),
        ({"komi": 1000}, "komi", "komi 1000 must be a finite number in -81..81"),
        ({"includeOwnership": True, "zzz": 1}, "zzz", "unknown field(s) zzz"),
        ({"includePolicy": "yes"}, "includePolicy", "includePolicy must be true or false"),
        ({"moves": [["B", "Z9"]]}, "moves", "moves[0]: vertex 'Z9' is off the 9x9 board"),
        ({"moves": [["B", "40"]]}, "moves", "moves[0]: '40' is not a vertex"),
        ({"moves": [["X", "D4"]]}, "moves", "player 'X' is not B or W"),
        ({"moves": [["B", "D4"], ["W", "D4"]]}, "moves", "moves[1]: illegal move: D4 is occupied"),
        ({"initialStones": [["B", "D4"], ["W", "D4"]]}, "initialStones", "given twice"),
        ({"moves": [["B", "D4"]], "analyzeTurns": [2]}, "analyzeTurns", "turn 2 is past the last"),
        ({"analyzeTurns": "all"}, "analyzeTurns", "must be a non-empty list"),
        ({"maxVisits": -1}, "maxVisits", "maxVisits must be an integer >= 0"),
        ({"game": "go19"}, "game", "unknown game 'go19'"),
    ],
)  # fmt: skip
def test_bad_requests_are_refused_by_field(
    agent: Agent, fields: dict, field: str, message: str
) -> None:
    good = request(moves=[["B", "E5"]], maxVisits=2)
    rows = analyze_lines([request(**fields), good], agent, "go9-features", sims=2)
    assert rows[0]["id"] == "q" and rows[0]["field"] == field, rows[0]
    assert message in rows[0]["error"], rows[0]["error"]
    assert rows[1]["turnNumber"] == 1 and rows[1]["moveInfos"]  # the engine goes on


def test_a_features_net_answers_for_the_rules_it_encodes(agent: Agent) -> None:
    """The default go9 net plays go9-features; a request may name the rules (go9) or the
    encoding, and another game is refused."""
    base = request(moves=[["B", "E5"]], maxVisits=2)
    rows = analyze_lines(
        [base, request(moves=[["B", "E5"]], maxVisits=2, game="go9"),
         json.dumps({"id": 3, "moves": [40], "game": "go9"}),
         json.dumps({"id": 4, "moves": [40], "game": "go13"})],
        agent, "go9-features", sims=2,
    )  # fmt: skip
    assert all("error" not in r for r in rows[:3]), rows
    assert rows[1]["moveInfos"] and rows[2]["id"] == 3
    assert "unknown game 'go13'" in rows[3]["error"]


def test_the_action_number_format_still_works_for_go(agent: Agent) -> None:
    (row,) = analyze_lines([json.dumps({"id": 7, "moves": [40]})], agent, "go9-features", sims=4)
    assert row["id"] == 7 and len(row["policy"]) == 82 and sum(row["visits"]) == 4


def test_the_real_command_answers_go_requests(run: Path) -> None:
    lines = [
        request(moves=[["B", "E5"], ["W", "C3"]], analyzeTurns=[1, 2], maxVisits=6),
        request(boardXSize=19, boardYSize=19),
        json.dumps({"id": 3, "moves": [40, 30]}),
    ]
    p = subprocess.run(
        azserve_cmd("analyze", "--checkpoint", str(run), "--sims", "4"),
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    rows = [json.loads(x) for x in p.stdout.splitlines()]
    assert [r.get("turnNumber") for r in rows] == [1, 2, None, None]
    assert rows[0]["rootInfo"]["currentPlayer"] == "W" and rows[1]["moveInfos"]
    assert rows[2]["field"] == "boardXSize" and "plays 9x9" in rows[2]["error"]
    assert rows[3]["id"] == 3 and sum(rows[3]["visits"]) == 4


def test_what_katago_clients_send_is_answered(agent: Agent) -> None:
    """KaTrain and Lizzie send includeOwnership and includePolicy in every request: the policy
    comes in KataGo's layout, ownership (not reported) gets KataGo's kind of warning line
    first, and the analysis is answered all the same."""
    line = request(moves=[["B", "E5"], ["W", "C3"]], maxVisits=8, includeOwnership=True,
                   includePolicy=True, priority=1)  # fmt: skip
    warning, row = analyze_lines([line], agent, "go9-features", sims=4)
    assert warning["id"] == "q" and warning["field"] == "includeOwnership"
    assert "does not report ownership" in warning["warning"]
    policy = row["policy"]
    assert len(policy) == 82 and row["turnNumber"] == 2
    # Row by row from the top left: E5 (row 4, col 4 counted from the top) and C3 are taken.
    top_row = [policy[c] for c in range(9)]
    assert policy[4 * 9 + 4] == -1 and policy[(9 - 3) * 9 + 2] == -1
    assert all(p >= 0 for p in top_row) and policy[81] >= 0  # A9..J9 and the pass are legal
    assert sum(p for p in policy if p > 0) == pytest.approx(1.0, abs=1e-4)
    plain = analyze_lines([request(moves=[["B", "E5"], ["W", "C3"]], maxVisits=8)], agent,
                          "go9-features", sims=4)  # fmt: skip
    assert [m["move"] for m in plain[0]["moveInfos"]] == [m["move"] for m in row["moveInfos"]]
    assert "policy" not in plain[0]
