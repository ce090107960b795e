"""Every file of actors/core/games/ is a registered game with a Python reference it agrees with.

The compiled table is built from the files present (setup.py); a built-in Python game names
its entry with ``core_name``. For each file: it is in the table, some game of
``BUILTIN_GAMES`` names it, and each such game plays random games in lockstep with the
compiled rules (``play_in_lockstep``). A new C file without a Python reference, or one the
build has not registered, fails here by name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.games import BUILTIN_GAMES, make_game
from actors.games.compiled import core, core_name, core_rules
from tests.test_core_rules import lockstep_games, play_in_lockstep

pytestmark = pytest.mark.skipif(core is None, reason="actors._mcts_core was not built")

GAME_FILES = Path(__file__).resolve().parents[1] / "actors" / "core" / "games"


def game_files() -> set[str]:
    """The stems of actors/core/games/*.c: the compiled games there are."""
    return {p.stem for p in GAME_FILES.glob("*.c")}


def references() -> dict[str, str | None]:
    """Each built-in Python game's compiled entry (``core_name``; None for none)."""
    return {name: core_name(make_game(name)) for name in BUILTIN_GAMES}


def registry_problems(files: set[str], table: set[str], refs: dict[str, str | None]) -> list[str]:
    """What is wrong between the game files, the compiled table and the Python games."""
    out = [
        f"actors/core/games/{stem}.c is not in the compiled table: rebuild the core "
        "(pip install -e .)"
        for stem in sorted(files - table)
    ]
    out += [
        f"{name}: in the compiled table, with no actors/core/games/{name}.c (a stale build)"
        for name in sorted(table - files)
    ]
    named = set(refs.values())
    out += [
        f"actors/core/games/{stem}.c: no built-in Python game names it (a Game subclass with "
        f"core_name = {stem!r}, listed in actors.games.BUILTIN_GAMES)"
        for stem in sorted(files - named)
    ]
    out += [
        f"{game}: core_name {entry!r} has no actors/core/games/{entry}.c"
        for game, entry in sorted(refs.items())
        if entry is not None and entry not in files
    ]
    return out


def lockstep_cases() -> list[tuple[str, str | None]]:
    """(file stem, built-in game) for each game naming each file; (stem, None) for a file no
    game names, so that it fails in the lockstep test too."""
    refs = references()
    cases: list[tuple[str, str | None]] = []
    for stem in sorted(game_files()):
        names = [name for name, entry in refs.items() if entry == stem]
        cases += [(stem, name) for name in names] or [(stem, None)]
    return cases


def test_every_game_file_is_registered_and_has_a_reference() -> None:
    assert game_files(), f"no game files found in {GAME_FILES}"
    assert registry_problems(game_files(), set(core.GAMES), references()) == []


def test_the_check_names_a_file_without_registration_or_reference() -> None:
    """The check is not vacuous: a new file the build missed, with no Python game naming it;
    a stale table entry; a Python game naming a file that is not there."""
    files, table, refs = game_files(), set(core.GAMES), references()
    problems = registry_problems(files | {"mygame"}, table, refs)
    assert problems == [
        "actors/core/games/mygame.c is not in the compiled table: rebuild the core "
        "(pip install -e .)",
        "actors/core/games/mygame.c: no built-in Python game names it (a Game subclass with "
        "core_name = 'mygame', listed in actors.games.BUILTIN_GAMES)",
    ]
    assert registry_problems(files, table | {"old"}, refs) == [
        "old: in the compiled table, with no actors/core/games/old.c (a stale build)"
    ]
    assert registry_problems(files, table, {**refs, "mine": "nofile"}) == [
        "mine: core_name 'nofile' has no actors/core/games/nofile.c"
    ]


@pytest.mark.parametrize(("stem", "name"), lockstep_cases())
def test_each_game_file_plays_as_its_python_reference(stem: str, name: str | None) -> None:
    assert name is not None, f"actors/core/games/{stem}.c has no Python reference"
    game = make_game(name)
    games = lockstep_games(name)
    assert play_in_lockstep(game, core_rules(game), games) > games
