"""Checkpoints: one ``.safetensors`` file per checkpoint, written atomically, never pickled.

Layout of ``ckpt-<step:09d>.safetensors``:

- tensors ``model.<name>``: the network's state dict (``azserve serve --checkpoint`` loads these;
  ``azserve.model.weights.load_weights_file`` strips the prefix);
- tensors ``<section>.<path>``: every other tensor of the trainer state, e.g.
  ``optim.state.3.momentum_buffer``, ``rng.numpy``;
- string metadata: ``format``, ``step``, ``version``, ``time``, ``config`` (the resolved config as
  JSON) and ``state``: the non-model trainer state as JSON in which each tensor is replaced by
  ``{"__tensor__": "<key>"}`` (dicts are stored as key/value pairs so that integer keys, like the
  optimizer's parameter ids, survive).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors import safe_open

from azserve.errors import WeightsError
from azserve.files import atomic_write_bytes
from azserve.model.weights import state_dict_to_bytes

log = logging.getLogger("learner.checkpoint")

FORMAT = "azserve.checkpoint/1"
"""Value of the ``format`` metadata key; bumped on an incompatible layout change."""

_NAME = re.compile(r"^ckpt-(\d+)\.safetensors$")


@dataclass(frozen=True)
class CheckpointMeta:
    """What a checkpoint says about itself besides the model and optimizer tensors."""

    path: Path
    step: int
    version: int
    time: float
    """Unix time of writing."""
    config: dict[str, Any]
    """The resolved config saved with it."""
    extra: dict[str, Any]
    """The rest of the trainer state (``step``, ``version``, ``rng``, ``scaler``...)."""


class Checkpoint(NamedTuple):
    """A loaded checkpoint; unpacks as ``model_state, optimizer_state, meta``."""

    model: dict[str, torch.Tensor]
    optim: dict[str, Any]
    meta: CheckpointMeta

    def trainer_state(self) -> dict[str, Any]:
        """The dict ``Trainer.load_state_dict`` takes."""
        return {"model": self.model, "optim": self.optim, **self.meta.extra}


def checkpoint_path(directory: str | os.PathLike[str], step: int) -> Path:
    return Path(directory) / f"ckpt-{step:09d}.safetensors"


def save_checkpoint(
    directory: str | os.PathLike[str],
    step: int,
    version: int,
    trainer_state: dict[str, Any],
    config_dict: dict[str, Any],
    *,
    keep_last: int = 5,
    keep_every: int = 0,
) -> Path:
    """Write ``trainer_state`` (``Trainer.state_dict()``: a ``model`` state dict plus any nested
    dicts/lists/tuples of tensors and JSON scalars) atomically, then apply retention.

    Returns the new file's path. On any failure no partial file is left behind.
    """
    tensors = {f"model.{k}": v for k, v in trainer_state["model"].items()}
    rest = {k: v for k, v in trainer_state.items() if k != "model"}
    tree = _encode(rest, [], tensors)
    metadata = {
        "format": FORMAT,
        "step": str(step),
        "version": str(version),
        "time": repr(time.time()),
        "config": json.dumps(config_dict),
        "state": json.dumps(tree),
    }
    path = checkpoint_path(directory, step)
    atomic_write_bytes(path, state_dict_to_bytes(tensors, metadata))
    prune_checkpoints(directory, keep_last=keep_last, keep_every=keep_every)
    return path


def list_checkpoints(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file in ``directory``, oldest first."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found)


def latest_checkpoint(directory: str | os.PathLike[str]) -> Path | None:
    """The checkpoint with the highest step, or None when there is none."""
    found = list_checkpoints(directory)
    return found[-1][1] if found else None


def journal_from(path: str | os.PathLike[str]) -> int:
    """The first journal segment after a checkpoint (``learner.journal``), from its header
    alone (no tensors read); 0 when the header is unreadable or predates the journal."""
    try:
        with safe_open(str(path), framework="pt") as f:
            tree = json.loads((f.metadata() or {}).get("state", "{}"))
        top = dict(tree.get("__dict__", []))  # the encoded state (see _encode): a keyed list
        return int(top.get("journal_from", 0))
    except Exception:  # noqa: BLE001 - safetensors' own errors, OSError, JSON: keep everything
        return 0


def newest_readable_checkpoint(
    directory: str | os.PathLike[str],
) -> tuple[Checkpoint | None, list[Path]]:
    """The newest checkpoint that reads, and the newer ones that did not: each of those is
    renamed ``*.bad`` (set aside, kept for inspection, out of the retention count)."""
    bad: list[Path] = []
    for _, path in reversed(list_checkpoints(directory)):
        try:
            return load_checkpoint(path), bad
        except WeightsError as exc:
            aside = path.with_name(path.name + ".bad")
            log.error("checkpoint %s is unreadable (%s): set aside as %s", path, exc, aside.name)
            os.replace(path, aside)
            bad.append(aside)
    return None, bad


def prune_checkpoints(
    directory: str | os.PathLike[str], *, keep_last: int, keep_every: int = 0
) -> list[Path]:
    """Delete checkpoints other than the last ``keep_last`` and multiples of ``keep_every``."""
    found = list_checkpoints(directory)
    recent = {p for _, p in found[-keep_last:]} if keep_last > 0 else set()
    removed = []
    for step, p in found:
        if p in recent or (keep_every > 0 and step % keep_every == 0):
            continue
        p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def trainer_state_to_bytes(trainer_state: dict[str, Any]) -> bytes:
    """``Trainer.state_dict()`` as safetensors bytes (the checkpoint's layout, no file): how
    a data-parallel learner's rank 0 hands every rank the same state (learner/distributed.py)."""
    tensors = {f"model.{k}": v for k, v in trainer_state["model"].items()}
    rest = {k: v for k, v in trainer_state.items() if k != "model"}
    tree = _encode(rest, [], tensors)
    return state_dict_to_bytes(tensors, {"format": FORMAT, "state": json.dumps(tree)})


def trainer_state_from_bytes(data: bytes) -> dict[str, Any]:
    """The state ``trainer_state_to_bytes`` wrote, as ``Trainer.load_state_dict`` takes it."""
    from safetensors.torch import load

    tensors = load(data)
    state = _decode(json.loads(_metadata_of(data)["state"]), tensors)
    state["model"] = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    return state


def _metadata_of(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of safetensors bytes (its JSON header)."""
    n = int.from_bytes(data[:8], "little")
    return dict(json.loads(data[8 : 8 + n]).get("__metadata__") or {})


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read a checkpoint written by ``save_checkpoint``; raises ``WeightsError`` if unreadable."""
    p = Path(path)
    try:
        with safe_open(str(p), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - not a dict
    except Exception as exc:  # safetensors raises its own error types, and OSError
        raise WeightsError(f"cannot read checkpoint {p}: {exc}") from exc
    if metadata.get("format") != FORMAT:
        raise WeightsError(f"{p}: not an azserve checkpoint (format {metadata.get('format')!r})")
    try:
        state = _decode(json.loads(metadata["state"]), tensors)
        optim = state.pop("optim", {})
        meta = CheckpointMeta(
            path=p,
            step=int(metadata["step"]),
            version=int(metadata["version"]),
            time=float(metadata["time"]),
            config=json.loads(metadata["config"]),
            extra=state,
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise WeightsError(f"{p}: bad checkpoint metadata: {exc}") from exc
    model = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    return Checkpoint(model=model, optim=optim, meta=meta)


def _encode(obj: Any, path: list[str], tensors: dict[str, torch.Tensor]) -> Any:
    """A nested state as JSON-able data, moving tensors into ``tensors`` under dotted keys."""
    if isinstance(obj, torch.Tensor):
        key = ".".join(path)
        tensors[key] = obj
        return {"__tensor__": key}
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(f"{'.'.join(path)}: cannot save dict key {k!r}")
            items.append([k, _encode(v, [*path, str(k)], tensors)])
        return {"__dict__": items}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, [*path, str(i)], tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, [*path, str(i)], tensors) for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"{'.'.join(path)}: cannot save a {type(obj).__name__} in a checkpoint")


def _decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        if "__tuple__" in obj:
            return tuple(_decode(v, tensors) for v in obj["__tuple__"])
        return {k: _decode(v, tensors) for k, v in obj["__dict__"]}
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    return obj
