"""The compiled MCTS tree (``actors._mcts_core``), built by ``pip install -e .`` with the C
compiler present. It is optional: if it cannot be built, the actors run the pure-Python search
(``actors.mcts``), which is also the tests' oracle. Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "actors._mcts_core",
            ["actors/_mcts_core.c", "actors/_games.c"],
            depends=["actors/_games.h"],
            # No fused multiply-add: every score must round exactly as the Python search's.
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        )
    ]
)
