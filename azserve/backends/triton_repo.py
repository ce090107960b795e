"""The Triton model repository azserve writes: ``config.pbtxt`` plus one directory per version.

Layout (``root`` = ``backend.triton.repository``, ``name`` = ``backend.triton.model_name``)::

    root/name/config.pbtxt        max_batch_size, version_policy latest K, instance_group, ...
    root/name/N/model.py          python form: triton_model/model.py, copied per version
    root/name/N/model.safetensors python form: the weights, exactly as loaded
    root/name/N/model.pt          pytorch form: TorchScript for pytorch_libtorch

A version directory appears atomically: it is staged in a sibling temp directory of ``root``
(same filesystem, outside the repository, so Triton never sees a half-written version), then
renamed to ``N/``. Removal renames it out first for the same reason.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from azserve.backends.base import BackendConfig
from azserve.errors import ConfigError, WeightsError
from azserve.files import atomic_write_bytes
from azserve.model.device import DTYPES
from azserve.model.network import AlphaZeroNet, build_net
from azserve.model.spec import NetConfig
from azserve.model.weights import bytes_to_state_dict, load_strict

MODEL_PY = Path(__file__).parent / "triton_model" / "model.py"
"""The python-backend model copied into every version directory."""
WEIGHTS_FILE = "model.safetensors"
TORCHSCRIPT_FILE = "model.pt"
MAX_BATCH_SIZE = 4096
"""config.pbtxt ``max_batch_size``: an upper bound on rows per request (the azserve batcher's
``max_batch_size`` is far below it); Triton rejects larger requests."""

_AZSERVE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class TensorNames:
    """Tensor names in config.pbtxt and on the wire for one model form."""

    obs: str
    """Input: UINT8 ``[B, C, H, W]``."""
    logits: str
    """Output: FP32 ``[B, A]``."""
    value: str
    """Output: FP32 ``[B]`` (``[B, 1]`` on the wire: config dims ``[1]`` reshaped to ``[]``)."""


TENSOR_NAMES: dict[str, TensorNames] = {
    "python": TensorNames("obs", "logits", "value"),
    # libtorch maps names by the <name>__<index> convention: input 0, outputs 0 and 1 of the tuple.
    "pytorch": TensorNames("obs__0", "logits__0", "value__1"),
}


def _instance_group(cfg: BackendConfig) -> str:
    """``backend.device`` -> instance_group: cpu = KIND_CPU, cuda[:N] = KIND_GPU, auto = Triton's."""
    kind = ""
    if cfg.device == "cpu":
        kind = " kind: KIND_CPU"
    elif cfg.device.startswith("cuda"):
        _, _, index = cfg.device.partition(":")
        kind = " kind: KIND_GPU" + (f" gpus: [ {int(index)} ]" if index else "")
    return f"instance_group [ {{ count: {cfg.triton.instance_count}{kind} }} ]"


def _param(key: str, value: str) -> str:
    return f"parameters {{ key: {json.dumps(key)} value: {{ string_value: {json.dumps(value)} }} }}"


def config_pbtxt(net: NetConfig, cfg: BackendConfig, max_batch_size: int = MAX_BATCH_SIZE) -> str:
    """The model's config.pbtxt for ``cfg.triton.model_form`` (complete: auto-complete stays off)."""
    names = TENSOR_NAMES[cfg.triton.model_form]
    c, h, w = net.obs_shape
    if cfg.triton.model_form == "python":
        head = ['backend: "python"']
        params = [
            _param("net", json.dumps(dataclasses.asdict(net))),
            _param("dtype", cfg.fixed_dtype),
            _param("threads", str(cfg.threads)),
            _param("azserve_root", str(_AZSERVE_ROOT)),
        ]
    else:
        head = ['platform: "pytorch_libtorch"']
        params = [_param("INFERENCE_MODE", "true")]
    lines = [
        f"name: {json.dumps(cfg.triton.model_name)}",
        *head,
        f"max_batch_size: {max_batch_size}",
        f"version_policy: {{ latest: {{ num_versions: {cfg.triton.keep_versions} }} }}",
        f'input [ {{ name: "{names.obs}" data_type: TYPE_UINT8 dims: [ {c}, {h}, {w} ] }} ]',
        "output [",
        f'  {{ name: "{names.logits}" data_type: TYPE_FP32 dims: [ {net.num_actions} ] }},',
        f'  {{ name: "{names.value}" data_type: TYPE_FP32 dims: [ 1 ] reshape: {{ shape: [ ] }} }}',
        "]",
        _instance_group(cfg),
    ]
    if cfg.triton.dynamic_batching:
        # No extra delay: Triton only merges requests already queued behind a busy instance, so
        # its batching never stacks a second wait on azserve's max_queue_delay_us.
        lines.append("dynamic_batching { max_queue_delay_microseconds: 0 }")
    return "\n".join(lines + params) + "\n"


class _ScriptedNet(nn.Module):
    """What libtorch runs: uint8 planes ``[B, C, H, W]`` -> (logits ``[B, A]``, value ``[B]``) f32."""

    def __init__(self, net: AlphaZeroNet, dtype: torch.dtype) -> None:
        super().__init__()
        self.net = net
        self.dtype = dtype

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, value = self.net(obs.to(self.dtype))
        return logits.float(), value.float()


def torchscript_bytes(net: NetConfig, blob: bytes, dtype: str = "float32") -> bytes:
    """safetensors weights -> a scripted ``_ScriptedNet`` (device-free: libtorch places it)."""
    module = build_net(net, seed=None)
    load_strict(module, bytes_to_state_dict(blob))
    wrapped = _ScriptedNet(module.to(DTYPES[dtype]).eval(), DTYPES[dtype])
    buf = io.BytesIO()
    with warnings.catch_warnings():
        # torch deprecates TorchScript, but it is the format pytorch_libtorch loads.
        warnings.filterwarnings("ignore", r"`torch\.jit\.\w+` is deprecated", DeprecationWarning)
        torch.jit.save(torch.jit.script(wrapped), buf)
    return buf.getvalue()


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class ModelRepository:
    """Writes and removes the versions of one model in a Triton model repository."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        net: NetConfig,
        cfg: BackendConfig,
        max_batch_size: int = MAX_BATCH_SIZE,
    ) -> None:
        if not str(root):
            raise ConfigError(
                "backend.triton.repository: set it to tritonserver's --model-repository"
            )
        self.root = Path(root).resolve()
        self.net = net
        self.cfg = cfg
        self.max_batch_size = max_batch_size
        self.model_dir = self.root / cfg.triton.model_name
        self.names = TENSOR_NAMES[cfg.triton.model_form]
        self._stage_prefix = f".{self.root.name}.{cfg.triton.model_name}.staging-"

    def prepare(self) -> None:
        """Write config.pbtxt; drop version directories and staging leftovers of earlier runs.

        Stale versions must go: with ``latest { num_versions: K }`` a leftover high-numbered
        directory would crowd out every version this run loads.
        """
        self.model_dir.mkdir(parents=True, exist_ok=True)
        for v in self.versions():
            self.remove_version(v)
        for leftover in self.root.parent.glob(f"{self._stage_prefix}*"):
            shutil.rmtree(leftover, ignore_errors=True)
        text = config_pbtxt(self.net, self.cfg, self.max_batch_size)
        atomic_write_bytes(self.model_dir / "config.pbtxt", text.encode())

    def version_dir(self, version: int) -> Path:
        return self.model_dir / str(version)

    def versions(self) -> list[int]:
        """Version directories present, ascending."""
        if not self.model_dir.is_dir():
            return []
        return sorted(
            int(p.name) for p in self.model_dir.iterdir() if p.is_dir() and p.name.isdigit()
        )

    def write_version(self, version: int, blob: bytes) -> int:
        """Stage version ``version`` from safetensors ``blob`` and rename it into place.

        Returns the size of the weights file written (``model.safetensors`` or ``model.pt``).
        """
        if version < 0:
            raise WeightsError(f"Triton version directories are numbers >= 0, got {version}")
        stage = Path(tempfile.mkdtemp(prefix=self._stage_prefix, dir=self.root.parent))
        try:
            if self.cfg.triton.model_form == "python":
                shutil.copyfile(MODEL_PY, stage / MODEL_PY.name)
                weights, data = stage / WEIGHTS_FILE, blob
            else:
                weights = stage / TORCHSCRIPT_FILE
                data = torchscript_bytes(self.net, blob, self.cfg.fixed_dtype)
            _write_synced(weights, data)
            self.remove_version(version)  # re-loading a version replaces it
            os.rename(stage, self.version_dir(version))
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        return len(data)

    def remove_version(self, version: int) -> None:
        """Rename the version directory out of the repository, then delete it (no-op if absent)."""
        target = self.version_dir(version)
        if not target.exists():
            return
        trash = Path(tempfile.mkdtemp(prefix=self._stage_prefix, dir=self.root.parent))
        os.rename(target, trash / "old")
        shutil.rmtree(trash, ignore_errors=True)
