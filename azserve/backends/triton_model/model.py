"""Triton python-backend model: azserve's AlphaZeroNet from the version directory's weights.

Triton loads one copy of this file per version directory (``<model>/<N>/model.py``) next to the
weights ``model.safetensors``. It runs the same torch network as the in-process torch backend,
so both backends give the same outputs for the same weights.

Tensors (config.pbtxt, batch dimension B first):
  input  ``obs``    UINT8 ``[B, C, H, W]``
  output ``logits`` FP32  ``[B, A]``
  output ``value``  FP32  ``[B]`` (reported by Triton as ``[B, 1]`` through the config's reshape)

config.pbtxt parameters (string values): ``net`` (NetConfig as JSON), ``dtype``, ``threads`` and
``azserve_root`` (put on sys.path when the stub's Python cannot import azserve by itself).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

WEIGHTS_FILE = "model.safetensors"


def _import_azserve(root: str) -> None:
    """Make ``azserve`` importable (the stub's sys.path may lack the repo)."""
    try:
        import azserve.model  # noqa: F401
    except ImportError:
        sys.path.insert(0, root)


class TritonPythonModel:
    """One model instance: one network on one device, for one version."""

    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        _import_azserve(params.get("azserve_root", ""))
        # Imported here, not at the top: the stub's sys.path may need the repo root first.
        from azserve.model import DTYPES, NetConfig, build_net, bytes_to_state_dict, load_strict

        threads = int(params.get("threads", "0"))
        if threads > 0:
            torch.set_num_threads(threads)
        if args["model_instance_kind"] == "GPU":
            self.device = torch.device(f"cuda:{args['model_instance_device_id']}")
        else:
            self.device = torch.device("cpu")
        self.dtype = DTYPES[params.get("dtype", "float32")]

        net_cfg = NetConfig(**json.loads(params["net"]))
        weights = Path(args["model_repository"]) / args["model_version"] / WEIGHTS_FILE
        net = build_net(net_cfg, seed=None)
        load_strict(net, bytes_to_state_dict(weights.read_bytes(), str(weights)))
        self.net = net.to(self.device, self.dtype).eval()
        # Warm up here: Triton reports the version READY only after initialize returns, so the
        # first real request pays no allocation cost.
        self._forward(np.zeros((1, *net_cfg.obs_shape), np.uint8))

    def _forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """obs uint8 [B, C, H, W] -> (logits [B, A] f32, value [B] f32)."""
        with torch.inference_mode():
            x = torch.from_numpy(obs).to(self.device).to(self.dtype)
            logits, value = self.net(x)
        return logits.float().cpu().numpy(), value.float().cpu().numpy()

    def execute(self, requests: list[Any]) -> list[Any]:
        """Run every request of the (dynamic) batch in one forward pass, then split by rows."""
        obs = [pb_utils.get_input_tensor_by_name(r, "obs").as_numpy() for r in requests]
        # concatenate also copies the read-only shared-memory view torch would warn about
        logits, value = self._forward(np.concatenate(obs))
        rows = sum(o.shape[0] for o in obs)
        if logits.shape[0] != rows or value.shape[0] != rows:
            raise RuntimeError(  # fails every request of the batch
                f"network returned {logits.shape[0]}/{value.shape[0]} rows for {rows}"
            )
        responses = []
        start = 0
        for o in obs:
            end = start + o.shape[0]
            out = [
                pb_utils.Tensor("logits", logits[start:end]),
                pb_utils.Tensor("value", value[start:end]),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=out))
            start = end
        return responses
