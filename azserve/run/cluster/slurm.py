"""Slurm: the nodes of the allocation the launcher runs in (``salloc`` or an ``sbatch`` script).

``SLURM_JOB_NODELIST`` holds Slurm's compressed host list (``gpu[01-03,07],cpu5``); it is
expanded here, the same way ``scontrol show hostnames`` does, so the launcher needs no Slurm
tool on the path to plan.
"""

from __future__ import annotations

import os
import re

from azserve.errors import ConfigError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_nodelist(text: str) -> list[str]:
    """``"gpu[01-03,07],cpu5"`` -> ``["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]``."""
    out: list[str] = []
    for item in _split_top(text.strip()):
        if not item:
            continue
        out.extend(_expand_one(item, text))
    return out


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"SLURM_JOB_NODELIST={text!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ConfigError(f"SLURM_JOB_NODELIST={text!r}: unbalanced '['")
    parts.append("".join(cur))
    return parts


def _expand_one(item: str, whole: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if m is None:
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    out = []
    for rng in m.group(1).split(","):
        r = _RANGE.match(rng.strip())
        if r is None:
            raise ConfigError(f"SLURM_JOB_NODELIST={whole!r}: bad range {rng!r}")
        lo, hi = r.group(1), r.group(2) or r.group(1)
        if int(hi) < int(lo):
            raise ConfigError(f"SLURM_JOB_NODELIST={whole!r}: range {rng!r} runs backwards")
        width = len(lo)
        for n in range(int(lo), int(hi) + 1):
            # the tail may hold another bracket (``a[1-2]b[3-4]``): expand it too
            out.extend(_expand_one(f"{head}{n:0{width}d}{tail}", whole))
    return out


def allocation_nodes() -> list[str]:
    """The allocation's nodes, in Slurm's order; a clear error outside an allocation."""
    text = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not text:
        raise ConfigError(
            "engine = 'slurm': not inside a Slurm allocation (SLURM_JOB_NODELIST is unset); "
            "run the launch in `salloc` or an sbatch script (configs/cluster/slurm.sbatch)"
        )
    return expand_nodelist(text)


__all__ = ["allocation_nodes", "expand_nodelist"]
