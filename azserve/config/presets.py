"""What a name on the command line stands for: the configs that ship inside the package
(``--config tictactoe``), the Connect Four benchmark positions, and a run directory's newest
checkpoint (``--checkpoint runs/c4``).

The checkout's ``configs/*.toml`` and ``data/connect4/move_scores.tsv`` are the files people
edit; ``azserve/configs/`` and ``azserve/data/`` hold symlinks to them, which a wheel build
copies as package data, so an installed ``azserve`` outside the checkout finds the same files.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from azserve.errors import AzserveError, ConfigError

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


def newest_checkpoint_in(arg: str) -> str:
    """``arg`` itself when it is not a directory; else the newest checkpoint of a run
    directory (``RUN/checkpoints/``) or of a checkpoint directory."""
    p = Path(arg)
    if not p.is_dir():
        return arg
    from learner.checkpoint import latest_checkpoint

    found = latest_checkpoint(p / "checkpoints") or latest_checkpoint(p)
    if found is None:
        raise AzserveError(f"no checkpoint (ckpt-*.safetensors) in {p} or {p / 'checkpoints'}")
    return str(found)
