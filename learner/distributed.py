"""A data-parallel learner: ``learner.processes = N`` ranks of one torch.distributed group
(gloo on a CPU, NCCL on CUDA) train one model on one global batch.

Rank 0 is the learner (``learner.learn.Learner``): it receives every trajectory, holds the
replay, samples the global batch of ``trainer.batch_size`` rows, augments it, and hands each
rank its shard of ``batch_size / N`` rows. Each rank computes the loss and gradients of its
shard; the gradients are averaged across ranks before the update, and batch normalisation
uses the statistics of the whole global batch (``GlobalBatchNorm2d``), so N ranks make the
update one process makes on the whole batch (tests/test_learner_ranks.py checks it, within
float tolerance). Freshness and reuse are counted once, on rank 0's replay, so they hold
globally by construction. Only rank 0 checkpoints, publishes and numbers versions.

The wire between ranks is torch.distributed's collectives only: a control broadcast each step
(``STEP`` with the learning rate, ``PING`` while rank 0 waits for data, ``STOP``), a scatter of
the shards, the gradient all-reduce; at start rank 0 broadcasts its whole training state as
safetensors bytes (never a pickle), so every rank resumes from the same checkpoint.

A rank that dies breaks the group: the others' next collective fails (or times out after
``learner.rank_timeout_s``), rank 0 raises, and the process that runs the learner exits
non-zero, so its supervisor (``azserve train``, ``azserve launch``) restarts the group from
the newest checkpoint.
"""

from __future__ import annotations

import fcntl
import ipaddress
import logging
import os
import socket
import struct
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from azserve.targets import target_spec
from learner.replay import Batch

log = logging.getLogger("learner.distributed")

STOP, STEP, PING = 0.0, 1.0, 2.0
"""Control words of the per-step broadcast."""


def pin_interface(backend: str, rendezvous: str) -> str:
    """Point gloo (or NCCL) at the network interface that routes to the rendezvous host, unless
    the user did (``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``). Left alone, gloo binds the
    address the host name resolves to, and falls back to loopback where that is not local (a
    network namespace, a host with a stale /etc/hosts), which no other host can reach. Returns
    the interface chosen ("" when none was: loopback rendezvous, or the user's setting)."""
    var = "NCCL_SOCKET_IFNAME" if backend == "nccl" else "GLOO_SOCKET_IFNAME"
    if os.environ.get(var):
        return ""
    parsed = urlsplit(rendezvous)
    if parsed.scheme != "tcp" or not parsed.hostname or parsed.port is None:
        return ""
    try:
        target = socket.gethostbyname(parsed.hostname)
        if ipaddress.ip_address(target).is_loopback:
            return ""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, parsed.port))  # no packet: only the route is looked up
            local = s.getsockname()[0]
    except OSError:
        return ""  # gloo reports what it cannot reach
    name = interface_of(local)
    if name:
        os.environ[var] = name
    return name


def interface_of(address: str) -> str:
    """The name of the local interface that holds IPv4 ``address`` ("" when none does)."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                ifreq = struct.pack("256s", name.encode()[:15])
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, ifreq)
            except OSError:  # no IPv4 address on it
                continue
        if socket.inet_ntoa(raw[20:24]) == address:
            return name
    return ""


_SIOCGIFADDR = 0x8915


class RankGroup:
    """This process's membership of the learner's group."""

    def __init__(
        self, rank: int, world: int, rendezvous: str, device: torch.device, timeout_s: float
    ) -> None:
        self.rank, self.world = rank, world
        self.device = device
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        # Collectives move tensors on the device NCCL runs on; gloo's live on the CPU.
        self.comm_device = device if self.backend == "nccl" else torch.device("cpu")
        interface = pin_interface(self.backend, rendezvous)
        if interface:
            log.info("rank %d: collectives over %s (the route to %s)", rank, interface, rendezvous)
        dist.init_process_group(
            self.backend,
            init_method=rendezvous,
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=timeout_s),
        )
        log.info("rank %d of %d joined %s (%s)", rank, world, rendezvous, self.backend)

    def close(self, broken: bool = False) -> None:
        """Leave the group: a barrier first (unless ``broken``), so that no rank tears down
        its side while another still talks to it (gloo aborts the process then)."""
        if not dist.is_initialized():
            return
        if not broken:
            try:
                dist.barrier()
            except RuntimeError as exc:  # a rank is gone: leave anyway
                log.warning("rank %d: leaving a broken group: %s", self.rank, exc)
        dist.destroy_process_group()

    # --- control ---------------------------------------------------------------------------

    def send_control(self, word: float, lr: float = 0.0) -> None:
        """Rank 0: the next command for every rank."""
        dist.broadcast(torch.tensor([word, lr], dtype=torch.float64, device=self.comm_device), 0)

    def recv_control(self) -> tuple[float, float]:
        """Rank > 0: wait for rank 0's next command."""
        t = torch.zeros(2, dtype=torch.float64, device=self.comm_device)
        dist.broadcast(t, 0)
        return float(t[0]), float(t[1])

    # --- state -----------------------------------------------------------------------------

    def broadcast_bytes(self, data: bytes | None) -> bytes:
        """Rank 0 gives ``data``; every rank returns it."""
        n = torch.tensor([len(data) if data is not None else 0], dtype=torch.int64)
        n = n.to(self.comm_device)
        dist.broadcast(n, 0)
        if self.rank == 0:
            assert data is not None
            buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.comm_device)
        else:
            buf = torch.empty(int(n.item()), dtype=torch.uint8, device=self.comm_device)
        dist.broadcast(buf, 0)
        return data if self.rank == 0 and data is not None else bytes(buf.cpu().numpy())

    # --- the shards ------------------------------------------------------------------------

    def scatter_batch(
        self,
        batch: Batch | None,
        shapes: tuple[tuple[int, ...], ...],
        targets: Sequence[str] = (),
    ) -> Batch:
        """Rank 0 gives the global ``batch`` (rows divisible by the world); every rank gets
        its shard. ``shapes``: the shard's (obs, policy, outcome) shapes; ``targets``: the
        targets trained (``azserve.targets``), each sent with its mask, their shapes following
        from the obs and policy shapes."""
        rows, obs_shape, num_actions = shapes[0][0], shapes[0][1:], shapes[1][1]
        fields: list[tuple[str, tuple[int, ...], np.dtype]] = [
            ("obs", shapes[0], np.dtype(np.uint8)),
            ("policy", shapes[1], np.dtype(np.float32)),
            ("outcome", shapes[2], np.dtype(np.float32)),
        ]
        for name in targets:
            dtype, shape = target_spec(name, rows, obs_shape, num_actions)
            fields += [(name, shape, dtype), (f"{name} mask", (rows,), np.dtype(np.uint8))]
        out = {}
        for name, shape, dtype in fields:
            mine = torch.empty(shape, dtype=_TORCH[dtype], device=self.comm_device)
            parts = None
            if self.rank == 0:
                assert batch is not None
                whole = torch.from_numpy(np.ascontiguousarray(_field(batch, name), dtype))
                parts = [p.contiguous().to(self.comm_device) for p in whole.chunk(self.world)]
            dist.scatter(mine, parts, src=0)
            out[name] = mine.cpu().numpy()
        # Versions stay with rank 0's replay (freshness is counted there); a shard needs none.
        version = np.zeros(len(out["outcome"]), np.int64)
        return Batch(
            obs=out["obs"],
            policy=out["policy"],
            outcome=out["outcome"],
            version=version,
            targets={n: out[n] for n in targets},
            target_mask={n: out[f"{n} mask"].astype(bool) for n in targets},
        )

    def average_gradients(self, params: list[nn.Parameter]) -> None:
        """Every rank's gradients replaced by their mean over the ranks (one all-reduce)."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads]).to(self.comm_device)
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The mean over the ranks of a small tensor (losses for the metrics rows)."""
        t = values.detach().to(self.comm_device, torch.float64).clone()
        dist.all_reduce(t)
        return t / self.world


_TORCH = {
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.float32): torch.float32,
}


def _field(batch: Batch, name: str) -> np.ndarray:
    """One of a batch's arrays by its name in ``scatter_batch`` (a target's mask as uint8)."""
    if name in ("obs", "policy", "outcome"):
        return getattr(batch, name)
    if name.endswith(" mask"):
        return batch.target_mask[name.removesuffix(" mask")].astype(np.uint8)
    return batch.targets[name]


class _SumOverRanks(torch.autograd.Function):
    """y = the sum of x over the ranks; the gradient of x is the sum of y's gradients over
    the ranks (every rank's loss depends on every rank's x through y)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        g = grad.clone()
        dist.all_reduce(g)
        return g


class GlobalBatchNorm2d(nn.BatchNorm2d):
    """``BatchNorm2d`` whose training statistics are those of the global batch: the
    per-channel sums and sums of squares are all-reduced (differentiably, so gradients flow
    through them as through one process's batch norm). The same parameters and buffers as
    ``BatchNorm2d`` (a state dict loads either way); with no group, or in eval mode, it is
    ``BatchNorm2d``. torch's ``SyncBatchNorm`` does this on GPUs only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or not dist.is_initialized() or dist.get_world_size() == 1:
            return super().forward(x)
        c = self.num_features
        xf = x.float()
        count = torch.tensor([float(xf.shape[0] * xf.shape[2] * xf.shape[3])], device=x.device)
        stats = torch.cat([xf.sum(dim=(0, 2, 3)), (xf * xf).sum(dim=(0, 2, 3)), count])
        stats = _SumOverRanks.apply(stats)
        total = stats[2 * c]
        mean = stats[:c] / total
        var = (stats[c : 2 * c] / total - mean * mean).clamp_min(0.0)
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                assert self.num_batches_tracked is not None and self.running_var is not None
                self.num_batches_tracked.add_(1)
                momentum = (
                    1.0 / float(self.num_batches_tracked)
                    if self.momentum is None
                    else self.momentum
                )
                unbiased = var * (total / (total - 1).clamp_min(1.0))
                self.running_mean.mul_(1 - momentum).add_(mean.detach(), alpha=momentum)
                self.running_var.mul_(1 - momentum).add_(unbiased.detach(), alpha=momentum)
        y = (xf - mean[None, :, None, None]) * torch.rsqrt(var + self.eps)[None, :, None, None]
        if self.affine:
            y = y * self.weight[None, :, None, None] + self.bias[None, :, None, None]
        return y.to(x.dtype)


def globalize_batchnorm(model: nn.Module) -> int:
    """Turn every ``BatchNorm2d`` of ``model`` into a ``GlobalBatchNorm2d`` in place (the same
    parameters and buffers); returns how many."""
    n = 0
    for m in model.modules():
        if type(m) is nn.BatchNorm2d:
            m.__class__ = GlobalBatchNorm2d
            n += 1
    return n


__all__ = ["PING", "STEP", "STOP", "GlobalBatchNorm2d", "RankGroup", "globalize_batchnorm"]
