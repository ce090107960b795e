"""``azserve match``: a checkpoint against another engine, game after game, colours alternating;
our rules referee every move, each game is written down (SGF for Go), and the result is the
win rate with a 95% confidence interval.

Opponents:

- any GTP engine, as a command line: ``gnugo --mode gtp --level 1`` (Go). The match sets
  ``boardsize``, ``komi`` and ``clear_board`` itself; a command not found on PATH is looked
  for in /usr/games too (where Debian puts GnuGo).
- ``openspiel-mcts:SIMS``: OpenSpiel's MCTS bot (random rollouts, UCT c = 2) at SIMS
  simulations per move, for any game OpenSpiel shares our action numbering with (Othello, Go).

A move our rules refuse (occupied, suicide, superko, a pass while a disc can be placed) loses
the game for the side that made it (a forfeit, counted apart); an opponent that refuses a
legal move of ours ends the game as disputed (counted, neither side's win). The game ends
where our rules end it (Go: two passes or the move cap; Tromp-Taylor area score).

A deterministic engine against a deterministic engine replays one game per colour, so our
first ``sample_moves`` moves are drawn in proportion to the search's visits (the raw policy's
probabilities with 0 simulations), as self-play's temperature does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from actors.games import Game, State
from azserve.errors import AzserveError, ConfigError

RESIGN = -1
"""An opponent's move: it resigns."""


class PlayerError(AzserveError):
    """An opponent that failed (died, timed out, or answered what GTP does not allow)."""


class Refused(Exception):
    """An opponent that refused a move we told it (its message)."""


class Player:
    """One side of a match: told every move, asked for its own."""

    name = "player"

    def new_game(self, game: Game) -> None:
        """A fresh game of ``game`` from its initial position."""

    def tell(self, color: int, action: int) -> None:
        """``color`` played ``action`` (Refused if the player will not take it)."""

    def genmove(self, color: int, state: State) -> int:
        """The player's move for ``color`` at ``state`` (RESIGN to resign)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class AgentPlayer(Player):
    """A checkpoint's network and search."""

    def __init__(self, agent: Any, sims: int, sample_moves: int, seed: int) -> None:
        self.agent = agent
        self.sims = sims
        self.sample_moves = sample_moves
        self.rng = np.random.default_rng(seed)
        self.name = "azserve"
        self._mine = 0

    def new_game(self, game: Game) -> None:
        self._mine = 0

    def genmove(self, color: int, state: State) -> int:
        a = self.agent.analyze_sync([state], self.sims)[0]
        self._mine += 1
        if self._mine > self.sample_moves:
            return a.move
        weights = a.visits if a.visits is not None and a.visits.sum() > 0 else a.policy
        p = np.asarray(weights, dtype=np.float64)
        return int(self.rng.choice(len(p), p=p / p.sum()))


def find_command(argv: list[str]) -> list[str]:
    """``argv`` with its program resolved on PATH, or in /usr/games; ConfigError if neither."""
    exe = shutil.which(argv[0]) or shutil.which(argv[0], path="/usr/games")
    if exe is None:
        hint = " (Debian: apt-get install gnugo)" if Path(argv[0]).name == "gnugo" else ""
        raise ConfigError(f"--opponent: {argv[0]!r} not found on PATH or in /usr/games{hint}")
    return [exe, *argv[1:]]


class GtpPlayer(Player):
    """An external engine speaking GTP on its stdin/stdout."""

    def __init__(self, command: str, timeout_s: float = 120.0, log: Path | None = None) -> None:
        argv = find_command(shlex.split(command))
        self.name = " ".join(shlex.split(command))
        self.timeout_s = timeout_s
        err = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in close()
        self._err = err
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, bufsize=0
        )
        self._buf = b""
        self.game: Game | None = None

    def send(self, command: str) -> str:
        """One command's reply (the text after ``=``); Refused for a ``?`` reply."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise PlayerError(f"{self.name}: exited (code {self.proc.poll()})") from None
        text = self._read_reply(command)
        if text.startswith("?"):
            raise Refused(text[1:].strip())
        if not text.startswith("="):
            raise PlayerError(f"{self.name}: {command!r} got {text!r}, not a GTP reply")
        return text[1:].strip()

    def _read_reply(self, command: str) -> str:
        deadline = time.monotonic() + self.timeout_s
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n\n" not in self._buf.replace(b"\r", b""):
            left = deadline - time.monotonic()
            if left <= 0:
                raise PlayerError(f"{self.name}: no reply to {command!r} in {self.timeout_s:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise PlayerError(
                        f"{self.name}: exited (code {self.proc.wait()}) during {command!r}"
                    )
                self._buf += chunk
        data = self._buf.replace(b"\r", b"")
        reply, _, rest = data.partition(b"\n\n")
        self._buf = rest
        return reply.decode(errors="replace").strip()

    def new_game(self, game: Game) -> None:
        size = getattr(game, "size", None)
        if size is None:
            raise ConfigError(f"--opponent: a GTP engine plays Go, not {game.name}")
        self.game = game
        for command in (f"boardsize {size}", "clear_board", f"komi {game.komi:g}"):  # type: ignore[attr-defined]
            try:
                self.send(command)
            except Refused as e:
                raise PlayerError(f"{self.name}: refused {command!r}: {e}") from None

    def tell(self, color: int, action: int) -> None:
        assert self.game is not None
        self.send(f"play {'BW'[color]} {self.game.format_move(action)}")

    def genmove(self, color: int, state: State) -> int:
        assert self.game is not None
        try:
            move = self.send(f"genmove {'BW'[color]}")
        except Refused as e:
            raise PlayerError(f"{self.name}: refused genmove: {e}") from None
        if move.lower() == "resign":
            return RESIGN
        try:
            return self.game.parse_move(move)
        except ValueError:
            raise PlayerError(f"{self.name}: genmove answered {move!r}, not a vertex") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout=5)
            except (PlayerError, Refused, subprocess.TimeoutExpired, OSError):
                self.proc.kill()
                self.proc.wait()
        if self._err is not subprocess.DEVNULL:
            self._err.close()  # type: ignore[union-attr]


OPENSPIEL_NAMES = {"othello": ("othello", {}), "go9": ("go", {"board_size": 9, "komi": 7.5})}


class OpenSpielMctsPlayer(Player):
    """OpenSpiel's MCTS bot with random rollouts, on OpenSpiel's own state of the game."""

    def __init__(self, sims: int, seed: int) -> None:
        try:
            import pyspiel  # noqa: F401
        except ImportError:
            raise ConfigError(
                "--opponent openspiel-mcts: needs the open_spiel package (pip install open-spiel)"
            ) from None
        self.sims = sims
        self.seed = seed
        self.name = f"OpenSpiel MCTS ({sims} simulations, random rollouts)"
        self.bot: Any = None
        self.state: Any = None

    def new_game(self, game: Game) -> None:
        import pyspiel
        from open_spiel.python.algorithms import mcts

        if game.name not in OPENSPIEL_NAMES:
            raise ConfigError(f"--opponent openspiel-mcts: plays {', '.join(OPENSPIEL_NAMES)}")
        name, params = OPENSPIEL_NAMES[game.name]
        spiel = pyspiel.load_game(name, params)
        self.seed += 1
        rng = np.random.RandomState(self.seed)
        evaluator = mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=rng)
        self.bot = mcts.MCTSBot(
            spiel, 2.0, self.sims, evaluator, random_state=rng, solve=True, verbose=False
        )
        self.state = spiel.new_initial_state()

    def tell(self, color: int, action: int) -> None:
        if action not in self.state.legal_actions():
            raise Refused(f"OpenSpiel does not allow action {action} here")
        self.state.apply_action(action)

    def genmove(self, color: int, state: State) -> int:
        action = int(self.bot.step(self.state))
        self.state.apply_action(action)
        return action


def make_opponent(spec: str, seed: int, log: Path | None) -> Player:
    if spec.startswith("openspiel-mcts"):
        _, _, sims = spec.partition(":")
        try:
            n = int(sims or "1000")
        except ValueError:
            raise ConfigError(f"--opponent {spec!r}: expected openspiel-mcts:SIMS") from None
        if n < 1:
            raise ConfigError(f"--opponent {spec!r}: SIMS must be at least 1")
        return OpenSpielMctsPlayer(n, seed)
    if not spec.strip():
        raise ConfigError("--opponent: empty; give a GTP command line or openspiel-mcts:SIMS")
    return GtpPlayer(spec, log=log)


@dataclass
class GameResult:
    """One game, from our side."""

    index: int
    our_color: int
    winner: int | None
    """0 black / first player, 1 white / second, None for a draw or a disputed game."""
    reason: str
    """``score``, ``resign``, ``forfeit`` (an illegal move by the loser) or ``disputed``."""
    result: str
    """SGF's RE: ``B+3.5``, ``W+R``, ``B+F``, ``0``, ``Void``."""
    moves: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def won(self) -> bool:
        return self.winner is not None and self.winner == self.our_color


def play_one(game: Game, index: int, our_color: int, ours: Player, theirs: Player) -> GameResult:
    """One game refereed by ``game``'s rules."""
    t0 = time.monotonic()
    players = [ours, theirs] if our_color == 0 else [theirs, ours]
    for p in players:
        p.new_game(game)
    s = game.initial_state()
    moves: list[int] = []

    def done(winner: int | None, reason: str, result: str) -> GameResult:
        return GameResult(index, our_color, winner, reason, result, moves, time.monotonic() - t0)

    while not game.is_terminal(s):
        color = game.to_play(s)
        mover, other = players[color], players[1 - color]
        a = mover.genmove(color, s)
        if a == RESIGN:
            return done(1 - color, "resign", f"{'BW'[1 - color]}+R")
        if a not in game.legal_actions(s):
            moves.append(a)
            return done(1 - color, "forfeit", f"{'BW'[1 - color]}+F")
        moves.append(a)
        s = game.apply(s, a)
        try:
            other.tell(color, a)
        except Refused:
            return done(None, "disputed", "Void")
    return final_result(game, s, done)


def final_result(game: Game, s: State, done: Any) -> GameResult:
    """The result at a terminal state: the score where the game has one (Go), else the
    outcome (Othello: the disc count)."""
    tv = game.terminal_value(s)
    first = tv if game.to_play(s) == 0 else -tv
    winner = None if first == 0 else (0 if first > 0 else 1)
    if hasattr(game, "score"):
        return done(winner, "score", game.format_score(s))  # type: ignore[attr-defined]
    if hasattr(game, "discs"):
        black, white = game.discs(s)  # type: ignore[attr-defined]
        margin = abs(black - white)
        return done(winner, "score", "0" if winner is None else f"{'BW'[winner]}+{margin}")
    return done(winner, "score", "0" if winner is None else f"{'BW'[winner]}+")


def sgf(game: Game, r: GameResult, black: str, white: str) -> str:
    """The game as SGF (FF[4]); Go only."""
    n = game.size  # type: ignore[attr-defined]
    letters = "abcdefghijklmnopqrs"
    props = (
        f"(;GM[1]FF[4]CA[UTF-8]AP[azserve]SZ[{n}]KM[{game.komi:g}]RU[Tromp-Taylor]"  # type: ignore[attr-defined]
        f"PB[{_escape(black)}]PW[{_escape(white)}]RE[{r.result}]"
    )
    body = []
    for i, a in enumerate(r.moves):
        color = "BW"[i % 2]
        if a == game.pass_action:
            body.append(f";{color}[]")
        else:
            row, col = divmod(a, n)
            body.append(f";{color}[{letters[col]}{letters[n - 1 - row]}]")
    return props + "".join(body) + ")\n"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("]", "\\]")


def wilson(wins: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a win rate (95% for z = 1.96)."""
    if n == 0:
        return 0.0, 1.0
    p = wins / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(results: list[GameResult], opponent: str) -> dict[str, Any]:
    scored = [r for r in results if r.reason != "disputed"]
    wins = sum(r.won for r in scored)
    draws = sum(r.winner is None for r in scored)
    n = len(scored)
    points = wins + 0.5 * draws
    lo, hi = wilson(points, n)
    by_color = {}
    for color, label in ((0, "as_black"), (1, "as_white")):
        mine = [r for r in scored if r.our_color == color]
        by_color[label] = {
            "games": len(mine),
            "wins": sum(r.won for r in mine),
            "draws": sum(r.winner is None for r in mine),
        }
    return {
        "opponent": opponent,
        "games": len(results),
        "wins": wins,
        "draws": draws,
        "losses": n - wins - draws,
        "win_rate": points / n if n else 0.0,
        "ci95": [round(lo, 4), round(hi, 4)],
        **by_color,
        "forfeits": {
            "ours": sum(r.reason == "forfeit" and not r.won for r in scored),
            "theirs": sum(r.reason == "forfeit" and r.won for r in scored),
        },
        "resigned": {
            "ours": sum(r.reason == "resign" and not r.won for r in scored),
            "theirs": sum(r.reason == "resign" and r.won for r in scored),
        },
        "disputed": len(results) - n,
        "mean_moves": round(sum(len(r.moves) for r in results) / max(1, len(results)), 1),
        "results": [r.result for r in results],
    }


def run_match(args: argparse.Namespace) -> int:
    """The ``azserve match`` main."""
    import torch

    from azserve.app.agent import agent_from_checkpoint
    from azserve.app.bench.cli import emit

    # One position at a time: a second thread only adds overhead, and with another engine
    # (or a second match) on the cores, torch's spinning threads slowed a Go game 40-fold
    # (205 s against 5 s, measured).
    torch.set_num_threads(1)
    cfg, agent = agent_from_checkpoint(args.checkpoint, args.config, args.overrides, None)
    game = agent.game
    sims = cfg.eval.sims if args.sims is None else args.sims
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    opponent = make_opponent(args.opponent, args.seed, out_dir / "opponent.log")
    ours = AgentPlayer(agent, sims, args.sample_moves, args.seed)
    print(
        f"azserve match: {game.name}, {args.games} games against {opponent.name}, "
        f"{sims} simulations per move; games in {out_dir}",
        file=sys.stderr,
        flush=True,
    )
    results: list[GameResult] = []
    try:
        for i in range(args.games):
            our_color = i % 2
            r = play_one(game, i, our_color, ours, opponent)
            results.append(r)
            names = [ours.name, opponent.name] if our_color == 0 else [opponent.name, ours.name]
            if hasattr(game, "size"):
                (out_dir / f"game-{i:04d}.sgf").write_text(sgf(game, r, *names))
            else:
                moves = " ".join(game.format_move(a) for a in r.moves)
                (out_dir / f"game-{i:04d}.txt").write_text(f"{r.result} ({r.reason})\n{moves}\n")
            wins = sum(x.won for x in results)
            print(
                f"game {i + 1}/{args.games}: azserve {'black' if our_color == 0 else 'white'}, "
                f"{r.result} ({r.reason}, {len(r.moves)} moves, {r.seconds:.0f} s); "
                f"azserve {wins}/{len(results)}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        opponent.close()
    summary = summarize(results, opponent.name)
    summary.update(checkpoint=str(args.checkpoint), game=game.name, sims=sims, out=str(out_dir))
    (out_dir / "match.json").write_text(json.dumps(summary, indent=1) + "\n")
    emit(summary, args.json)
    lo, hi = summary["ci95"]
    print(
        f"azserve match: {summary['wins']}-{summary['draws']}-{summary['losses']} "
        f"(win-draw-loss) against {opponent.name}: win rate {summary['win_rate']:.3f}, "
        f"95% CI {lo:.3f}-{hi:.3f}; forfeits ours {summary['forfeits']['ours']}, "
        f"theirs {summary['forfeits']['theirs']}; disputed {summary['disputed']}",
        file=sys.stderr,
    )
    return 0


__all__ = [
    "AgentPlayer",
    "GameResult",
    "GtpPlayer",
    "OpenSpielMctsPlayer",
    "Player",
    "make_opponent",
    "play_one",
    "run_match",
    "sgf",
    "summarize",
    "wilson",
]
