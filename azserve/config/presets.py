"""What ships inside the package, found by name: the configs (``--config tictactoe``) and the
Connect Four benchmark positions.

The checkout's ``configs/*.toml`` and ``data/connect4/move_scores.tsv`` are the files people
edit; ``azserve/configs/`` and ``azserve/data/`` hold symlinks to them, which a wheel build
copies as package data, so an installed ``azserve`` outside the checkout finds the same files.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from azserve.errors import ConfigError

_PACKAGE = Path(str(resources.files("azserve")))
REPO_ROOT = _PACKAGE.parent
"""The checkout's root when running from one (else site-packages, where nothing else is)."""

_DATA = {"data/connect4/move_scores.tsv": _PACKAGE / "data" / "connect4_move_scores.tsv"}
"""Repository-relative data paths -> their package-data copies."""


def shipped_configs() -> list[str]:
    """Names of the configs that ship with the package (``tictactoe``, ``connect4``, ...)."""
    return sorted(p.stem for p in (_PACKAGE / "configs").glob("*.toml"))


def resolve_config(arg: str) -> str:
    """A ``--config`` argument as a readable path: an existing file as given, else a shipped
    config by name (``connect4``, ``connect4.toml`` or ``configs/connect4.toml``)."""
    from azserve.config.load import check_file, suggest

    if Path(arg).exists():
        check_file(Path(arg))  # a directory or /dev/null: said as it is
        return arg
    name = Path(arg).name.removesuffix(".toml")
    shipped = _PACKAGE / "configs" / f"{name}.toml"
    if Path(arg).parent in (Path("."), Path("configs")) and shipped.is_file():
        return str(shipped)
    raise ConfigError(
        f"config file not found: {arg}{suggest(name, shipped_configs())} "
        f"(shipped configs: {', '.join(shipped_configs())})"
    )


def resolve_data_path(path: str) -> Path:
    """A data file named in a config: absolute or relative to the working directory, else
    relative to the checkout's root, else its package-data copy."""
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p
    if (REPO_ROOT / p).exists():
        return REPO_ROOT / p
    return _DATA.get(p.as_posix(), REPO_ROOT / p)
