"""The compiled MCTS core (``actors._mcts_core``, the C sources under actors/core/), built by
``pip install -e .`` with the C compiler present. It is optional: if it cannot be built, the
actors run the pure-Python search (``actors.mcts``), which is also the tests' oracle. Everything
else is in pyproject.toml.

The games are the files of actors/core/games/: each defines ``GAME_<file stem>``, and the list of
stems reaches actors/core/registry.c as the macro ``AZ_GAME_LIST``, so a new game is one new file.
"""

from pathlib import Path

from setuptools import Extension, setup

CORE = Path("actors/core")
GAMES = sorted(CORE.glob("games/*.c"))
GAME_LIST = " ".join(f"X({p.stem})" for p in GAMES)

setup(
    ext_modules=[
        Extension(
            "actors._mcts_core",
            [str(p) for p in sorted(CORE.glob("*.c")) + GAMES],
            depends=[str(p) for p in sorted(CORE.glob("*.h"))],
            define_macros=[("AZ_GAME_LIST", GAME_LIST)],
            # No fused multiply-add: every score must round exactly as the Python search's.
            # Hidden symbols: the files share names such as `expand`; only PyInit is exported.
            extra_compile_args=[
                "-O2",
                "-ffp-contract=off",
                "-fno-fast-math",
                "-fvisibility=hidden",
            ],
            optional=True,
        )
    ]
)
