"""Go requests to ``azserve analyze``, in the shape of KataGo's analysis engine where it
applies, and their answers.

A request (one JSON object per line)::

    {"id": "a", "moves": [["B", "E5"], ["W", "C3"]], "initialStones": [["B", "D4"]],
     "initialPlayer": "B", "komi": 7.5, "rules": "tromp-taylor", "boardXSize": 9,
     "boardYSize": 9, "analyzeTurns": [0, 2], "maxVisits": 64}

- ``moves``: [colour, vertex] pairs played in order (either colour may move twice);
  ``initialStones``: stones on the board before them; ``initialPlayer``: who moves first
  (default: white after black-only initial stones, else black).
- ``rules``: area scoring only, as the net was trained (positional superko, no suicide):
  ``tromp-taylor``, ``chinese``, ``chinese-ogs``, ``chinese-kgs``, ``aga``, ``bga``,
  ``new-zealand`` or a JSON object with ``"scoring": "AREA"``; the named rules' ko and
  suicide details are played as ours. ``japanese``, ``korean`` and territory scoring are
  refused by name.
- ``boardXSize``/``boardYSize``: must be the checkpoint's size (an error says which it plays).
- ``komi``: a finite number within the board's points (default 7.5).
- ``analyzeTurns``: the turns to analyse (0 = before the first move; default the last).
- ``maxVisits``: simulations per turn (default ``--sims``; 0 = the raw net).

Any other field is refused with its name. Each analysed turn gets one line::

    {"id": "a", "turnNumber": 2, "moveInfos": [{"move": "D5", "visits": 12, "winrate": 0.53,
     "prior": 0.08, "order": 0, "pv": ["D5", "E4"]}, ...],
     "rootInfo": {"winrate": 0.51, "visits": 65, "currentPlayer": "B", "nps": 900}}

Win rates are the side to move's (KataGo's ``reportAnalysisWinratesAs = SIDETOMOVE``), in
[0, 1]; ``nps``: the search's simulations per second (not KataGo's); ``policy`` (the net's
priors in KataGo's layout) with ``includePolicy``; no score or ownership fields (the served path
returns the policy and the value only: a request asking for ownership gets a warning line
first, ``NOT_REPORTED``). A bad request gets ``{"id": ..., "error": "...", "field": "..."}``
and the engine goes on.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from actors.games.go.rules import Go, GoState
from azserve.engines.gtp.board import Board, GtpError
from azserve.engines.gtp.report import Report, from_progress
from azserve.engines.search import EngineSearch, engine_mcts

FIELDS = {"id", "game", "moves", "initialStones", "initialPlayer", "komi", "rules",
          "boardXSize", "boardYSize", "analyzeTurns", "maxVisits", "includePolicy",
          "priority"}  # fmt: skip
"""The fields a Go request may have, honoured (``priority``: requests are answered in order,
so it changes nothing)."""
NOT_REPORTED = {"includeOwnership": "ownership", "includeOwnershipStdev": "ownership",
                "includeMovesOwnership": "ownership", "includePVVisits": "visits along each pv",
                "overrideSettings": "settings overridden per request",
                "reportDuringSearchEvery": "answers during the search"}  # fmt: skip
"""Fields KataGo's clients send (KaTrain and Lizzie ask for ownership in every request) that
this engine reads and cannot honour: the request is answered all the same, after a
``{"id", "warning", "field"}`` line for each, as KataGo warns of a field it does not use."""
GO_ONLY = (FIELDS | set(NOT_REPORTED)) - {"id", "game", "moves"}
"""Fields that make a line a Go request (so do ``moves`` given as [colour, vertex] pairs)."""
AREA_RULES = {"tromp-taylor", "chinese", "chinese-ogs", "chinese-kgs", "aga", "bga",
              "new-zealand", "area"}  # fmt: skip
TERRITORY_RULES = {"japanese", "korean", "territory", "stone-scoring", "aga-button"}


class RequestError(ValueError):
    """A bad request: the message, and the field at fault ("" for the line as a whole)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class GoRequest:
    """A parsed Go request: the positions of the turns to analyse."""

    id: Any
    game: Go
    turns: list[tuple[int, GoState]]
    """(turn number, position), in the order asked."""
    visits: int | None
    """None: the engine's default."""
    include_policy: bool = False
    """Answer with the net's policy over the board (``policy``: KataGo's layout)."""
    warnings: tuple[tuple[str, str], ...] = ()
    """(field, message) of each field read and not honoured (``NOT_REPORTED``)."""


def is_go_request(obj: dict[str, Any]) -> bool:
    """Whether a line is a Go request (KataGo's fields), not the action-number format."""
    moves = obj.get("moves")
    pairs = isinstance(moves, list) and any(isinstance(m, list) for m in moves)
    return pairs or any(key in obj for key in GO_ONLY)


def _color(value: Any, field: str) -> int:
    if not isinstance(value, str) or value.upper() not in ("B", "W", "BLACK", "WHITE"):
        raise RequestError(f"{field}: player {value!r} is not B or W", field)
    return 0 if value.upper().startswith("B") else 1


def _stones(value: Any, field: str, game: Go) -> list[tuple[int, int]]:
    if not isinstance(value, list):
        raise RequestError(f"{field} must be a list of [player, vertex] pairs", field)
    out = []
    for i, pair in enumerate(value):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str)):
            raise RequestError(f"{field}[{i}]: expected [player, vertex], got {pair!r}", field)
        color = _color(pair[0], field)
        try:
            point = game.parse_move(pair[1])
        except ValueError as e:
            raise RequestError(f"{field}[{i}]: {str(e).split(': ', 1)[-1]}", field) from None
        if pair[1].strip().isdigit():
            raise RequestError(f"{field}[{i}]: {pair[1]!r} is not a vertex such as D4", field)
        out.append((color, point))
    return out


def _rules(value: Any) -> None:
    if isinstance(value, dict):
        scoring = str(value.get("scoring", "")).upper()
        if scoring != "AREA":
            raise RequestError(
                f"rules: scoring {value.get('scoring')!r}: only area scoring is supported "
                "(the net was trained under Tromp-Taylor rules)",
                "rules",
            )
        return
    if not isinstance(value, str):
        raise RequestError("rules must be a name such as tromp-taylor, or a JSON object", "rules")
    name = value.lower()
    if name in TERRITORY_RULES:
        raise RequestError(
            f"rules {value!r}: territory scoring is not supported; area rules only "
            f"({', '.join(sorted(AREA_RULES))})",
            "rules",
        )
    if name not in AREA_RULES:
        raise RequestError(
            f"rules {value!r}: unknown; area rules only ({', '.join(sorted(AREA_RULES))})",
            "rules",
        )


def _int(value: Any, field: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise RequestError(f"{field} must be an integer >= {low}, got {value!r}", field)
    return value


def parse_go_request(obj: dict[str, Any], net_game: Go) -> GoRequest:
    """A Go request for a net of ``net_game`` (its size, and its encoding: the request's states
    are that game's); RequestError naming the bad field."""
    size = net_game.size
    unknown = sorted(set(obj) - FIELDS - set(NOT_REPORTED))
    if unknown:
        raise RequestError(
            f"unknown field(s) {', '.join(unknown)}; a Go request takes {', '.join(sorted(FIELDS))}",
            unknown[0],
        )
    for key in ("boardXSize", "boardYSize"):
        if key in obj and _int(obj[key], key, 1) != size:
            raise RequestError(
                f"{key} {obj[key]}: this checkpoint plays {size}x{size} "
                f"(boardXSize and boardYSize must both be {size})",
                key,
            )
    if "rules" in obj:
        _rules(obj["rules"])
    komi = obj.get("komi", 7.5)
    if isinstance(komi, bool) or not isinstance(komi, (int, float)) or not math.isfinite(komi) \
            or abs(komi) > size * size:  # fmt: skip
        raise RequestError(
            f"komi {komi!r} must be a finite number in -{size * size}..{size * size}", "komi"
        )
    game = net_game.with_komi(float(komi))
    board = Board(game)
    initial = _stones(obj.get("initialStones", []), "initialStones", game)
    moves = _stones(obj.get("moves", []), "moves", game)
    first = _color(obj["initialPlayer"], "initialPlayer") if "initialPlayer" in obj else None
    try:
        board.place(initial, first)
    except GtpError as e:
        raise RequestError(f"initialStones: {e}", "initialStones") from None
    states = [board.state]
    for i, (color, point) in enumerate(moves):
        try:
            board.play(color, point)
        except GtpError as e:
            raise RequestError(f"moves[{i}]: {e}", "moves") from None
        states.append(board.state)
    turns = obj.get("analyzeTurns", [len(moves)])
    if not isinstance(turns, list) or not turns:
        raise RequestError("analyzeTurns must be a non-empty list of turn numbers", "analyzeTurns")
    chosen = []
    for t in turns:
        _int(t, "analyzeTurns")
        if t > len(moves):
            raise RequestError(
                f"analyzeTurns: turn {t} is past the last ({len(moves)})", "analyzeTurns"
            )
        if game.is_terminal(states[t]):
            raise RequestError(f"analyzeTurns: turn {t}: the game is over", "analyzeTurns")
        chosen.append((t, states[t]))
    visits = _int(obj["maxVisits"], "maxVisits") if "maxVisits" in obj else None
    for key in ("includePolicy", *NOT_REPORTED):
        if key in obj and key != "overrideSettings" and not isinstance(obj[key], bool):
            raise RequestError(f"{key} must be true or false", key)
    warnings = tuple(
        (key, f"{key}: this engine does not report {what}; the rest of the request is answered")
        for key, what in NOT_REPORTED.items()
        if key in obj and obj[key] not in (False, None, {})
    )
    return GoRequest(obj.get("id"), game, chosen, visits, bool(obj.get("includePolicy")), warnings)


def board_policy(game: Go, actions: Any, priors: Any) -> list[float]:
    """The net's priors over the board as KataGo writes ``policy``: ``size * size + 1`` floats,
    row by row from the top left, the pass last; -1 where the move is illegal."""
    n = game.size
    out = [-1.0] * (n * n + 1)
    for a, p in zip(actions, priors):
        row, col = divmod(int(a), n)
        out[n * n if int(a) == game.pass_action else (n - 1 - row) * n + col] = round(float(p), 6)
    return out


def answer(
    req: GoRequest, turn: int, state: GoState, r: Report, policy: list[float] | None = None
) -> dict[str, Any]:
    """One analysed turn as a JSON-ready dict (with ``policy`` when given)."""
    fmt = req.game.format_move
    out = {
        "id": req.id,
        "turnNumber": turn,
        "moveInfos": [
            {
                "move": fmt(m.move),
                "visits": m.visits,
                "winrate": round(m.winrate, 6),
                "prior": round(m.prior, 6),
                "order": k,
                "pv": [fmt(a) for a in m.pv],
            }
            for k, m in enumerate(r.infos)
        ],  # fmt: skip
        "rootInfo": {
            "winrate": round(r.winrate, 6),
            "visits": r.visits,
            "currentPlayer": "BW"[state.color],
            "nps": r.nps,
        },
    }
    if policy is not None:
        out["policy"] = policy
    return out


async def analyze_go(
    requests: list[GoRequest], evaluate: Any, mcts: Any, sims: int
) -> list[list[dict[str, Any]]]:
    """Every turn of every request searched at once (their leaves share batches); the
    answers per request, in its turns' order."""

    async def one(req: GoRequest, turn: int, state: GoState) -> dict[str, Any]:
        search = EngineSearch(evaluate, engine_mcts(mcts))
        visits = sims if req.visits is None else req.visits
        if visits == 0:
            progress = await search.raw(req.game, state)
        else:
            progress = await search.run(req.game, state, visits)
        policy = None
        if req.include_policy:
            policy = board_policy(req.game, progress.report.actions, progress.report.priors)
        return answer(req, turn, state, from_progress(progress), policy)

    jobs = [one(req, t, s) for req in requests for t, s in req.turns]
    flat = await asyncio.gather(*jobs)
    out, k = [], 0
    for req in requests:
        warned = [{"id": req.id, "warning": text, "field": key} for key, text in req.warnings]
        out.append(warned + flat[k : k + len(req.turns)])
        k += len(req.turns)
    return out


__all__ = [
    "AREA_RULES",
    "FIELDS",
    "GoRequest",
    "RequestError",
    "analyze_go",
    "answer",
    "board_policy",
    "is_go_request",
    "parse_go_request",
]
