"""The games of a run, as the pages list them and play them through: the ladder's
(``RUN/ladder/games.jsonl`` and its record files), matches' (a directory of the run holding
``azserve match``'s ``game-NNNN`` records) and recent self-play games (the learner's journal,
``RUN/journal/seg-*.azt``: each game's positions and the search's policy at each).

A self-play trajectory stores positions, not moves: the moves are found again by playing, from
the initial state, the one legal action whose position encodes as the next stored one (the
policy's favourites tried first, so that it is quick). A game whose positions were not all
stored (playout cap randomization) or whose first position is not the initial one is played
through as far as that goes, and says where it stops.

Nothing here writes; every function reads files a run already has.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from actors.games import Game, State
from azserve.errors import AzserveError
from azserve.sparse import SparseRows
from azserve.trajfile import read_trajectory_file
from azserve.web import boards

LADDER = "ladder"
MATCH = "match"
SELFPLAY = "selfplay"

RECORD_SUFFIXES = (".sgf", ".pgn", ".txt", ".kif", ".csa")
_SEGMENT = re.compile(r"^seg-(\d+)\.azt$")
_MATCH_GAME = re.compile(r"^game-(\d+)\.[a-z]+$")


@dataclass(frozen=True)
class GameEntry:
    """One game in a run's list."""

    id: str
    """``ladder-K`` (line K of games.jsonl), ``match-DIR-FILE``, ``selfplay-SEG-I``."""
    source: str
    """``ladder``, ``match`` or ``selfplay``."""
    title: str
    result: str
    moves: int
    time: float | None
    """Unix time the game ended (the file's time for a match game), where known."""
    record: str | None = None
    """The game's record file, relative to the run directory."""


class GameNotFound(AzserveError):
    """No such game in the run (a bad id, or a file pruned since it was listed)."""


# --- the ladder -------------------------------------------------------------------------------


def _ladder_lines(run: Path) -> list[dict[str, Any]]:
    path = run / "ladder" / "games.jsonl"
    if not path.is_file():
        return []
    out = []
    data = path.read_bytes()
    for line in data[: data.rfind(b"\n") + 1].splitlines():  # a torn last line is skipped
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({})
    return out


def ladder_record_name(record: dict[str, Any], suffix: str) -> str:
    """The record file the ladder wrote for ``record`` under ``ladder/games/`` (as
    ``azserve.arena.ladder.play.store_record`` names it)."""
    name = f"{record['black']}_v_{record['white']}_{record['k']}"
    return re.sub(r"[^A-Za-z0-9@._-]+", "_", name)[:150] + suffix


def _ladder_entry(run: Path, k: int, g: dict[str, Any]) -> GameEntry:
    found = [
        f"ladder/games/{ladder_record_name(g, suffix)}"
        for suffix in RECORD_SUFFIXES
        if (run / "ladder" / "games" / ladder_record_name(g, suffix)).is_file()
    ]
    return GameEntry(
        id=f"{LADDER}-{k}",
        source=LADDER,
        title=f"{g['black']} v {g['white']}",
        result=f"{g.get('result', '')} ({g.get('reason', '')})",
        moves=len(g.get("moves", [])),
        time=g.get("time"),
        record=found[0] if found else None,
    )


# --- matches ----------------------------------------------------------------------------------


def _match_files(run: Path) -> list[Path]:
    """``azserve match``'s record files in the run's directories (``--out`` under the run)."""
    out = []
    for d in sorted(p for p in run.iterdir() if p.is_dir()):
        out += [
            f
            for f in sorted(d.iterdir())
            if _MATCH_GAME.match(f.name) and f.suffix in RECORD_SUFFIXES and f.is_file()
        ]
    return out


def _match_id(f: Path) -> str:
    return f"{MATCH}-{f.parent.name}-{f.name}"


def _match_entry(run: Path, f: Path) -> GameEntry:
    info, moves = record_summary(f)
    return GameEntry(
        id=_match_id(f),
        source=MATCH,
        title=info.get("players", f"{f.parent.name}/{f.name}"),
        result=info.get("result", ""),
        moves=moves,
        time=f.stat().st_mtime,
        record=f"{f.parent.name}/{f.name}",
    )


_SGF_MOVE = re.compile(r";\s*[BW]\s*\[")


def record_summary(path: Path) -> tuple[dict[str, str], int]:
    """A record file's players, result and number of moves, read without playing it (the
    list of games shows many): SGF's ``PB``/``PW``/``RE`` and move nodes, PGN's tags and
    move words, or ``Game.record``'s text."""
    text = path.read_text(errors="replace")
    info: dict[str, str] = {}
    if path.suffix == ".sgf":
        tags = dict(re.findall(r"\b(PB|PW|RE)\[([^\]]*)\]", text))
        info["players"] = f"{tags.get('PB', '?')} v {tags.get('PW', '?')}"
        if "RE" in tags:
            info["result"] = tags["RE"]
        return info, len(_SGF_MOVE.findall(text))
    if path.suffix == ".pgn":
        tags, words = _pgn_parts(text)
        info["players"] = f"{tags.get('White', '?')} v {tags.get('Black', '?')}"
        if "Result" in tags:
            info["result"] = tags["Result"]
        return info, len(words)
    info, words = _text_parts(text)
    return info, len(words)


def _text_parts(text: str) -> tuple[dict[str, str], list[str]]:
    """``Game.record``'s plain text: ``#`` lines (players first, then the result), then the
    moves on one line."""
    info: dict[str, str] = {}
    words: list[str] = []
    for line in text.splitlines():
        if line.startswith("# result:"):
            info["result"] = line.removeprefix("# result:").strip()
        elif line.startswith("#") and "players" not in info:
            info["players"] = line.lstrip("# ").split(",")[0].split(": ", 1)[-1]
        elif line.strip() and not line.startswith("#"):
            words = line.split()
    return info, words


def read_record(game: Game, path: Path) -> tuple[dict[str, str], list[int]]:
    """A record file's players and result (``{"players", "result"}`` where it names them)
    and its moves as actions, read as its suffix says: SGF (Go), PGN (chess), otherwise
    ``Game.record``'s text (``#`` lines, then the moves on one line). ValueError when a move
    does not parse or is illegal."""
    text = path.read_text(errors="replace")
    if path.suffix == ".sgf":
        return _read_sgf(game, text)
    if path.suffix == ".pgn":
        tags, words = _pgn_parts(text)
        info = {"players": f"{tags.get('White', '?')} v {tags.get('Black', '?')}"}
        if "Result" in tags:
            info["result"] = tags["Result"]
        return info, _parse_moves(game, words)
    info, words = _text_parts(text)
    return info, _parse_moves(game, words)


def _read_sgf(game: Game, text: str) -> tuple[dict[str, str], list[int]]:
    from actors.games.go import sgf

    try:
        rec = sgf.read(text)
    except sgf.SgfError as e:
        raise ValueError(str(e)) from None
    if game.pass_action is None:
        raise ValueError(f"{game.name} has no SGF records")
    info = {"players": f"{rec.info.get('PB', '?')} v {rec.info.get('PW', '?')}"}
    if "RE" in rec.info:
        info["result"] = rec.info["RE"]
    actions = [game.pass_action if p is None else p for _, p in rec.moves]
    _parse_moves(game, [str(a) for a in actions])  # legal, in order
    return info, actions


_PGN_TAG = re.compile(r'^\[(\w+)\s+"(.*)"\]\s*$')
_PGN_NOISE = re.compile(r"\{[^}]*\}|\([^)]*\)|;[^\n]*|\$\d+")
_PGN_RESULTS = ("1-0", "0-1", "1/2-1/2", "*")


def _pgn_parts(text: str) -> tuple[dict[str, str], list[str]]:
    """A PGN's tags and its moves' words (no numbers, comments, variations or result)."""
    tags, body = {}, []
    for line in text.splitlines():
        m = _PGN_TAG.match(line.strip())
        if m:
            tags[m.group(1)] = m.group(2)
        else:
            body.append(line)
    words = [
        re.sub(r"^\d+\.+", "", w)
        for w in _PGN_NOISE.sub(" ", "\n".join(body)).split()
        if w not in _PGN_RESULTS and not re.fullmatch(r"\d+\.+", w)
    ]
    return tags, [w for w in words if w]


def _parse_moves(game: Game, words: list[str]) -> list[int]:
    """Moves as the game writes them (``parse_move_at`` at each position), checked legal in
    order; a last illegal move (a forfeit's, as records keep it) is kept and ends the game."""
    s = game.initial_state()
    out = []
    for i, w in enumerate(words):
        a = game.parse_move_at(s, w)
        out.append(a)
        if a not in game.legal_actions(s):
            if i != len(words) - 1:
                raise ValueError(f"move {i + 1} ({w}) is illegal")
            break
        s = game.apply(s, a)
    return out


# --- self-play --------------------------------------------------------------------------------


def segments(run: Path) -> list[tuple[int, Path]]:
    """The journal's segments, newest first."""
    d = run / "journal"
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _SEGMENT.match(p.name))]
    return sorted(found, reverse=True)


def _selfplay_entries(run: Path, game: Game, limit: int) -> list[GameEntry]:
    out: list[GameEntry] = []
    for seg, path in segments(run):
        try:
            records = list(read_trajectory_file(path))
        except (OSError, AzserveError):  # pruned while read, or a foreign file
            continue
        mtime = path.stat().st_mtime if path.exists() else None
        for i in range(len(records) - 1, -1, -1):
            msg = records[i][0]
            out.append(
                GameEntry(
                    id=f"{SELFPLAY}-{seg}-{i}",
                    source=SELFPLAY,
                    title=f"{msg.actor} game {msg.game_id}, version {msg.version}",
                    result=_selfplay_result(game, msg.result, msg.resigned),
                    moves=msg.moves or msg.length,
                    time=mtime,
                )
            )
            if len(out) >= limit:
                return out
    return out


def _selfplay_result(game: Game, first: float, resigned: bool) -> str:
    """A self-play game's result (``Trajectory.result``: from the first player's side) in the
    game's sides' names: ``black wins``, ``draw``, ``white wins (resigned)``."""
    text = "draw" if first == 0 else f"{game.sides[0 if first > 0 else 1]} wins"
    return text + (" (resigned)" if resigned else "")


def _policy_row(policy: np.ndarray | SparseRows, t: int) -> dict[int, float]:
    if isinstance(policy, SparseRows):
        lo, hi = int(policy.offsets[t]), int(policy.offsets[t + 1])
        return {int(a): float(w) for a, w in zip(policy.index[lo:hi], policy.weight[lo:hi])}
    row = policy[t]
    return {int(a): float(row[a]) for a in np.flatnonzero(row)}


def replay_positions(
    game: Game, obs: np.ndarray, policies: list[dict[int, float]]
) -> tuple[list[State], list[int], str]:
    """The states and moves of a stored self-play game: ``states[t]`` encodes as ``obs[t]``
    and ``moves[t]`` leads from it to ``states[t + 1]``; the last stored position's move is
    the one legal action that ends the game (none when it does not end, or several do).
    Returns (states, moves, note): ``note`` says where it stopped short, "" when it reached
    the end."""
    s = game.initial_state()
    if not np.array_equal(game.encode(s), obs[0]):
        return [], [], "its first stored position is not the initial one"
    states: list[State] = [s]
    moves: list[int] = []
    for t in range(1, len(obs)):
        legal = game.legal_actions(s)
        order = sorted(legal, key=lambda a: -policies[t - 1].get(a, 0.0))
        nxt = None
        for a in order:
            after = game.apply(s, a)
            if np.array_equal(game.encode(after), obs[t]):
                nxt = (a, after)
                break
        if nxt is None:
            return states, moves, f"position {t + 1} was not stored after position {t}"
        moves.append(nxt[0])
        s = nxt[1]
        states.append(s)
    ending = [a for a in game.legal_actions(s) if game.is_terminal(game.apply(s, a))]
    if len(ending) == 1:
        moves.append(ending[0])
        states.append(game.apply(s, ending[0]))
        return states, moves, ""
    if ending:
        return (
            states,
            moves,
            (
                f"its last move is one of {len(ending)} that end the game (the journal keeps "
                "positions, not moves)"
            ),
        )
    return states, moves, "its last stored position is not the end of the game"


def _selfplay_game(run: Path, game: Game, seg: int, i: int) -> dict[str, Any]:
    path = run / "journal" / f"seg-{seg:09d}.azt"
    try:
        found = next((r for n, r in enumerate(read_trajectory_file(path)) if n == i), None)
    except FileNotFoundError:
        raise GameNotFound(f"{path.name} is gone (the journal keeps recent segments)") from None
    if found is None:
        raise GameNotFound(f"no self-play game {i} in {path.name}")
    msg, obs, policy, outcome, _ = found
    policies = [_policy_row(policy, t) for t in range(len(obs))]
    states, moves, note = replay_positions(game, obs, policies)
    if states and msg.resigned and not game.is_terminal(states[-1]):
        note = "resigned"
    elif msg.length != (msg.moves or msg.length):
        note = f"{note}; {msg.length} of {msg.moves} positions were stored".lstrip("; ")
    frames = []
    for t, s in enumerate(states):
        frame: dict[str, Any] = {"position": boards.position(game, s)}
        if t > 0:
            frame["move"] = boards.move(game, states[t - 1], moves[t - 1])
        if t < len(obs):
            frame["policy"] = boards.policy(game, s, policies[t])
            # outcome[t]: the game's result from the side to move at t, as training sees it.
            frame["outcome"] = float(outcome[t])
        frames.append(frame)
    return {
        "title": f"self-play: {msg.actor} game {msg.game_id}, version {msg.version}",
        "result": _selfplay_result(game, msg.result, msg.resigned),
        "note": note,
        "frames": frames,
    }


# --- the run's games --------------------------------------------------------------------------


def list_games(run: Path, game: Game | None, limit: int = 60) -> list[dict[str, Any]]:
    """The run's games, newest first within each source: ladder, matches, self-play (each at
    most ``limit``)."""
    lines = _ladder_lines(run)
    ladder = [
        _ladder_entry(run, k, g)
        for k, g in list(enumerate(lines))[::-1][:limit]
        if {"black", "white", "k"} <= g.keys()
    ]
    matches = [_match_entry(run, f) for f in _match_files(run)[::-1][:limit]]
    selfplay = _selfplay_entries(run, game, limit) if game is not None else []
    return [asdict(e) for e in (*ladder, *matches, *selfplay)]


def load_game(run: Path, game: Game, game_id: str) -> dict[str, Any]:
    """One game played through: ``{"board", "title", "result", "note", "record", "frames"}``,
    each frame a position (``boards.position``), the move that led to it (``boards.move``)
    and, for self-play, the search's policy there and the result it was trained towards."""
    source, _, rest = game_id.partition("-")
    record: str | None = None
    if source == LADDER and rest.isdigit():
        lines = _ladder_lines(run)
        k = int(rest)
        if k >= len(lines) or not {"moves", "black", "white", "k"} <= lines[k].keys():
            raise GameNotFound(f"no ladder game {k}")
        g = lines[k]
        actions = _parse_moves(game, list(g["moves"]))
        entry = _ladder_entry(run, k, g)
        out = {"title": entry.title, "result": entry.result, "note": g.get("why", "")}
        record = entry.record
    elif source == MATCH:
        found = [f for f in _match_files(run) if _match_id(f) == game_id]
        if not found:
            raise GameNotFound(f"no match game {rest!r}")
        f = found[0]
        info, actions = read_record(game, f)
        out = {"title": info.get("players", f.name), "result": info.get("result", ""),
               "note": ""}  # fmt: skip
        record = f"{f.parent.name}/{f.name}"
    elif source == SELFPLAY and re.fullmatch(r"\d+-\d+", rest):
        seg, i = (int(x) for x in rest.split("-"))
        out = _selfplay_game(run, game, seg, i)
        return {"id": game_id, "board": boards.board_of(game), "record": None, **out}
    else:
        raise GameNotFound(f"no game {game_id!r}")
    frames = _frames(game, actions)
    return {"id": game_id, "board": boards.board_of(game), "record": record, **out,
            "frames": frames}  # fmt: skip


def _frames(game: Game, actions: list[int]) -> list[dict[str, Any]]:
    s = game.initial_state()
    frames: list[dict[str, Any]] = [{"position": boards.position(game, s)}]
    for a in actions:
        m = boards.move(game, s, a)
        if a not in game.legal_actions(s):  # a forfeit's illegal last move, as recorded
            frames.append({"position": boards.position(game, s), "move": {**m, "illegal": True}})
            break
        s = game.apply(s, a)
        frames.append({"position": boards.position(game, s), "move": m})
    return frames


__all__ = [
    "GameEntry",
    "GameNotFound",
    "ladder_record_name",
    "list_games",
    "load_game",
    "read_record",
    "record_summary",
    "replay_positions",
    "segments",
]
