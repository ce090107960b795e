"""An actor process's lives, read from its log: one life per process (``actors.main`` logs
its id and game coroutines at start, ``START_TAG``, and its summary on a clean exit,
``SUMMARY_TAG``); a life without a summary was killed, and its figures are those of its last
status line. ``azserve train``/``launch`` count a killed life's game coroutines as abandoned;
``azserve bench chaos`` also matches each life's games against the learner's journal."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from actors.main import START_TAG, SUMMARY_TAG

STATUS = re.compile(
    r"games/s ([0-9.]+) .* games (\d+) .* latest v(\d+) .* acked (\d+) resent \d+ pending (\d+)"
)
"""An actor status line (``actors.selfplay``): games/s, games, latest version, acked, pending."""
WAITS = re.compile(r"longest wait ([0-9.]+) s eval ([0-9.]+) s version")
"""The status line's tail: the longest an evaluation and a move's version were waited for."""

KILLED_IN_PLAY = "process died in play"
"""The abandon reason of a dead life's game coroutines: each was mid-game."""


@dataclass
class Life:
    """One actor process's life, from its log."""

    actor: str
    games: int
    """Its game coroutines."""
    finished: int = 0
    acked: int = 0
    pending: int = 0
    undelivered: int = 0
    """Trajectories its summary says the learner never acked."""
    clean: bool = False
    """It wrote its summary (stopped, not killed)."""
    abandoned: dict[str, int] = field(default_factory=dict)
    latest: list[int] = field(default_factory=list)
    eval_wait_s: float = 0.0
    """The longest an evaluation waited for its reply (its summary, or its last status)."""
    version_wait_s: float = 0.0
    """The longest a move waited for its game's version."""


def actor_lives(lines: Iterable[str]) -> list[Life]:
    """The lives in an actor process's log lines, oldest first."""
    lives: list[Life] = []
    for line in lines:
        if START_TAG in line:
            head = line.split(START_TAG, 1)[1].strip()
            actor, _, rest = head.partition(",")
            m = re.search(r"(\d+) game coroutines", rest)
            lives.append(Life(actor.strip(), int(m[1]) if m else 0))
        elif SUMMARY_TAG in line:
            s = json.loads(line.split(SUMMARY_TAG, 1)[1])
            if not lives or lives[-1].clean:  # an actor that logged no start line
                lives.append(Life(str(s.get("actor", "")), 0))
            life = lives[-1]
            life.finished, life.acked, life.clean = s["games"], s["acked"], True
            life.undelivered = int(s.get("undelivered", 0))
            life.abandoned = dict(s["abandoned"])
            life.pending = max(0, s["sent"] - s["acked"])
            waits = s.get("longest_wait_s") or {}
            life.eval_wait_s = float(waits.get("eval", life.eval_wait_s))
            life.version_wait_s = float(waits.get("version", life.version_wait_s))
        elif lives and (m := STATUS.search(line)):
            life = lives[-1]
            life.finished, life.acked, life.pending = int(m[2]), int(m[4]), int(m[5])
            life.latest.append(int(m[3]))
            if w := WAITS.search(line):
                life.eval_wait_s, life.version_wait_s = float(w[1]), float(w[2])
    return lives


def killed_in_play(lives: Iterable[Life]) -> int:
    """Games lost with the processes that died: the game coroutines of every life that wrote
    no summary (read after the run, when every life has ended)."""
    return sum(life.games for life in lives if not life.clean)
