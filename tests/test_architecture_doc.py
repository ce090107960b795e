"""docs/architecture.md's table of floors names every module that exists, and nothing that
does not: a new module fails this test until the doc says where it stands."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("azserve/app/", "actors/", "learner/", "azserve/")
"""The packages the table lists modules under, most specific first."""


def listed() -> dict[str, set[str]]:
    """Root -> the entries the floors table lists under it (``cli``, ``cluster/``, ...)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## The floors", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    out: dict[str, set[str]] = {root: set() for root in ROOTS}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        root = None
        for token in re.findall(r"`([^`]+)`", cells[1]):
            if token in ROOTS:
                root = token
            else:
                assert root is not None, f"{token!r} listed before any package in: {row}"
                out[root].add(token)
    return out


def existing() -> dict[str, set[str]]:
    """Root -> its modules and subpackages as the table would name them."""
    out: dict[str, set[str]] = {root: set() for root in ROOTS}
    for top in ("azserve", "actors", "learner"):
        for path in (REPO / top).rglob("*.py"):
            rel = path.relative_to(REPO).as_posix()
            root = next(r for r in ROOTS if rel.startswith(r))
            rest = rel[len(root) :]
            if "/" in rest:
                out[root].add(rest.split("/", 1)[0] + "/")
            elif rest not in ("__init__.py", "__main__.py"):
                out[root].add(rest.removesuffix(".py"))
    return out


def test_every_module_is_in_the_floors_table() -> None:
    have, doc = existing(), listed()
    missing = {root: sorted(have[root] - doc[root]) for root in ROOTS if have[root] - doc[root]}
    assert not missing, f"modules missing from docs/architecture.md's floors table: {missing}"


def test_the_floors_table_names_no_module_that_is_gone() -> None:
    have, doc = existing(), listed()
    stale = {root: sorted(doc[root] - have[root]) for root in ROOTS if doc[root] - have[root]}
    assert not stale, (
        f"docs/architecture.md's floors table names modules that do not exist: {stale}"
    )
