"""``azserve analyze``: a JSON-lines analysis engine.

Input, one object per line: ``{"id": ..., "game": "tictactoe"|"connect4"|..., "moves": [...]}``,
the moves from the initial position as action numbers or as the game's move text (chess: UCI
``e2e4`` or SAN ``e4``), and for a game with a position notation its field (chess: ``"fen"``)
to start from instead. A field the request does not know is an error naming it (with the
closest known one), never silently ignored. Output, one line per input line, in order:
``{"id": ..., "policy": [A floats], "value": v, "move": m, "move_text": "e4", "visits": [A ints]}``
(``visits`` only with sims > 0), or ``{"id": ..., "error": "...", "field": "..."}`` for a bad
line; the engine goes on. With the checkpoint's ``mcts.solver`` on (and sims > 0) a row also
has what the search proved (``proven``): ``"proven": {"result": "win", "value": 1.0, "plies":
3}`` for the root (null while unproven; plies to the game's end, the shortest win or the
longest loss) and ``"proven_moves"``, each proven move's ``{"move": a, "move_text": ...,
"result": ..., "value": ..., "plies": ...}`` by action (value for the side to move, plies
counting the move); ``move`` is then the proof's. A Go checkpoint also takes requests in the
shape of KataGo's analysis engine (vertices, komi, rules, board size, turns, visits), answered
with one line per turn asked for (vertices, win rates, priors, principal variations):
``azserve.engines.gtp.analyze``. Lines already waiting are analysed together, so bulk input
runs at batched speed while an interactive caller gets each answer as soon as its line is read.
"""

from __future__ import annotations

import argparse
import difflib
import json
import queue
import sys
import threading
from typing import IO, Any

import numpy as np

from actors.search import Proof
from azserve.arena.agent import Agent, agent_from_checkpoint, run_sync
from azserve.engines.gtp.analyze import (
    GoRequest,
    RequestError,
    analyze_go,
    is_go_request,
    parse_go_request,
)

MAX_CHUNK = 512


def _load(line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed JSON: {exc.msg}") from None
    except RecursionError:
        raise ValueError("malformed JSON: nested too deep") from None
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object")
    return obj


def parse_line(line: str, agent: Agent, game_name: str) -> tuple[Any, Any]:
    """(id, state) for a valid line; raises ValueError with a message for a bad one."""
    return _parse_obj(_load(line), agent, game_name)


def _plays(obj: dict[str, Any], agent: Agent, game_name: str) -> bool:
    """Whether the request's ``game`` (absent: any) is the checkpoint's game or the rules that
    game encodes (a ``go9-features`` net answers requests for ``go9``)."""
    return obj.get("game", game_name) in (game_name, agent.game.rules)


def _parse_obj(obj: dict[str, Any], agent: Agent, game_name: str) -> tuple[Any, Any]:
    game = agent.game
    if not _plays(obj, agent, game_name):
        raise RequestError(
            f"unknown game {obj['game']!r}: this engine's checkpoint plays {game_name!r}", "game"
        )
    known = {"id", "game", "moves"} | ({game.position_field} if game.position_field else set())
    unknown = sorted(set(obj) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RequestError(
            f"unknown field {unknown[0]!r}{hint}; a {game_name} request takes "
            f"{', '.join(sorted(known))}",
            unknown[0],
        )
    state = game.initial_state()
    if game.position_field and game.position_field in obj:
        text = obj[game.position_field]
        if not isinstance(text, str):
            raise RequestError(f"{game.position_field} must be a string", game.position_field)
        try:
            state = game.from_position(text)
        except ValueError as exc:
            raise RequestError(str(exc), game.position_field) from None
    moves = obj.get("moves", [])
    if not isinstance(moves, list):
        raise RequestError("moves must be a list of moves (action numbers or move text)", "moves")
    for i, m in enumerate(moves):
        if game.is_terminal(state):
            raise RequestError(f"move #{i} ({m!r}) comes after the game ended", "moves")
        try:
            if isinstance(m, str):
                a = game.parse_move_at(state, m)
            elif isinstance(m, int) and not isinstance(m, bool):
                a = m
            else:
                raise ValueError("not an action number or move text")
            if a not in game.legal_actions(state):
                raise ValueError("illegal here")
            state = game.apply(state, a)
        except ValueError as exc:
            raise RequestError(f"move #{i} ({m!r}): {exc}", "moves") from None
    if game.is_terminal(state):
        raise RequestError("the game is already over after these moves", "moves")
    return obj.get("id"), state


def _result(value: float, plies: int) -> dict[str, Any]:
    """One proven result as the JSON shows it (``value`` for the side choosing)."""
    word = "win" if value > 0 else "loss" if value < 0 else "draw"
    return {"result": word, "value": float(value), "plies": int(plies)}


def proven(proof: Proof, agent: Agent, state: Any) -> dict[str, Any]:
    """A row's ``proven`` (the root's result, None while unproven) and ``proven_moves`` (each
    proven move's, by action) from the solver's ``proof`` ([A])."""
    moves = [
        {"move": int(a), "move_text": agent.game.format_move_at(state, int(a)),
         **_result(proof.values[a], proof.action_plies[a])}
        for a in np.flatnonzero(proof.action_plies >= 0)
    ]  # fmt: skip
    root = None if proof.value is None else _result(proof.value, proof.plies)
    return {"proven": root, "proven_moves": moves}


def _line_id(line: str) -> Any:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return None
    return obj.get("id") if isinstance(obj, dict) else None


def analyze_lines(
    lines: list[str], agent: Agent, game_name: str, sims: int
) -> list[dict[str, Any]]:
    """Analyse a chunk of input lines; the output objects in the lines' order: one per line,
    or for a Go request (``azserve.engines.gtp.analyze``) one per turn it asks for."""
    out: list[list[dict[str, Any]]] = [[] for _ in lines]
    good: list[tuple[int, Any, Any]] = []
    go_requests: list[tuple[int, GoRequest]] = []
    is_go = "gtp" in agent.game.protocols
    for i, line in enumerate(lines):
        try:
            obj = _load(line)
            if is_go and is_go_request(obj):
                if not _plays(obj, agent, game_name):
                    raise RequestError(
                        f"unknown game {obj['game']!r}: this engine's checkpoint plays "
                        f"{game_name!r}",
                        "game",
                    )
                go_requests.append((i, parse_go_request(obj, agent.game)))  # type: ignore[arg-type]
                continue
            rid, state = _parse_obj(obj, agent, game_name)
            good.append((i, rid, state))
        except RequestError as exc:
            out[i] = [{"id": _line_id(line), "error": str(exc), "field": exc.field}]
        except ValueError as exc:
            out[i] = [{"id": _line_id(line), "error": str(exc)}]
        except (TypeError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            # A field of a type the parsers did not expect: still this line's error alone.
            out[i] = [{"id": _line_id(line), "error": f"bad request: {exc!r}"[:300]}]
    if good:
        results = agent.analyze_sync([s for _, _, s in good], sims)
        for (i, rid, state), a in zip(good, results):
            row: dict[str, Any] = {
                "id": rid,
                "policy": [round(float(p), 6) for p in a.policy],
                "value": round(a.value, 6),
                "move": a.move,
                "move_text": agent.game.format_move_at(state, a.move),
            }
            if a.visits is not None:
                row["visits"] = [int(v) for v in a.visits]
            if a.proof is not None:
                row.update(proven(a.proof, agent, state))
            out[i] = [row]
    if go_requests:
        answers = run_sync(
            analyze_go([r for _, r in go_requests], agent.evaluator, agent.mcts_cfg, sims)
        )
        for (i, _), rows in zip(go_requests, answers):
            out[i] = rows
    return [row for rows in out for row in rows]


def serve_stream(src: IO[str], dst: IO[str], agent: Agent, game_name: str, sims: int) -> int:
    """Answer every line of ``src`` on ``dst``; returns the number of lines answered."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        try:
            for line in src:
                if line.strip():
                    lines.put(line)
        finally:  # even when reading fails (e.g. undecodable input), the engine must not hang
            lines.put(None)

    threading.Thread(target=read, daemon=True, name="analyze-reader").start()
    answered = 0
    done = False
    while not done:
        first = lines.get()
        if first is None:
            break
        chunk = [first]
        while len(chunk) < MAX_CHUNK:
            try:
                nxt = lines.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                done = True
                break
            chunk.append(nxt)
        for row in analyze_lines(chunk, agent, game_name, sims):
            dst.write(json.dumps(row) + "\n")
        dst.flush()
        answered += len(chunk)
    return answered


def run_analyze(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    # The input first: a missing file is reported before the network loads.
    src = sys.stdin if args.input == "-" else open(args.input)  # noqa: SIM115 - closed below
    cfg, agent = agent_from_checkpoint(args.checkpoint, args.config, args.overrides, args.game)
    sims = cfg.eval.sims if args.sims is None else args.sims
    try:
        serve_stream(src, sys.stdout, agent, cfg.game, sims)
    finally:
        if src is not sys.stdin:
            src.close()
    return 0
