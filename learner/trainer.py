"""The trainer: model, optimizer and learning-rate schedule, one synchronous step at a time.

The async learner loop (receive -> replay -> train -> publish) lives elsewhere and calls
``Trainer.step`` off the event loop. Everything needed to resume exactly is in ``state_dict``.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch

from azserve.errors import ConfigError
from azserve.model.device import native_bf16, resolve_device
from azserve.model.network import NetOutputs, build_net
from azserve.model.spec import NetConfig
from learner.config import TrainerConfig
from learner.distributed import RankGroup, globalize_batchnorm
from learner.loss import Symmetries, alphazero_loss, augment, l2_penalty, target_losses
from learner.replay import Batch

log = logging.getLogger("learner.trainer")


def lr_at(cfg: TrainerConfig, step: int, now: float | None = None) -> float:
    """Learning rate for the update made at ``step`` (0-based) at unix time ``now`` (the
    "run" schedule's clock; the others ignore it): warmup, then the schedule."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "cosine":
        span = max(cfg.total_steps - cfg.warmup_steps, 1)
        return _cosine(cfg, (step - cfg.warmup_steps) / span)
    if cfg.lr_schedule == "run":
        check_run_clock(cfg)
        length = cfg.lr_anneal_fraction * (cfg.run_end_unix - cfg.run_start_unix)
        start = cfg.run_end_unix - length
        return _cosine(cfg, ((time.time() if now is None else now) - start) / length)
    if cfg.lr_schedule == "step":
        return cfg.lr * cfg.lr_gamma ** sum(step >= m for m in cfg.lr_milestones)
    return cfg.lr


def _cosine(cfg: TrainerConfig, progress: float) -> float:
    """From ``lr`` at progress 0 down to ``lr * lr_final_ratio`` at 1 (held outside [0, 1])."""
    progress = min(max(progress, 0.0), 1.0)
    final = cfg.lr * cfg.lr_final_ratio
    return final + (cfg.lr - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def check_run_clock(cfg: TrainerConfig) -> None:
    """The "run" schedule needs the time budget that ``azserve train`` writes into the config."""
    if cfg.lr_schedule == "run" and not cfg.run_end_unix:
        raise ConfigError(
            "trainer.lr_schedule: 'run' anneals over the time budget of `azserve train "
            "--minutes M` (train.minutes), and this learner was given none "
            "(trainer.run_end_unix is unset): run it under `azserve train` with a time "
            "budget, or use 'cosine' with trainer.total_steps"
        )


class Trainer:
    """Owns the network, optimizer and schedule; ``step(batch)`` makes one update.

    ``step_count`` counts updates made (version numbers are the learner's, ``learner.versions``).
    ``rng`` is the numpy generator the loop passes to
    ``Replay.sample``; it drives augmentation too, and is saved with the state.
    """

    def __init__(
        self,
        net_cfg: NetConfig,
        cfg: TrainerConfig,
        symmetries: Symmetries | None = None,
        group: RankGroup | None = None,
        score_scale: float | None = None,
    ) -> None:
        """``score_scale``: what the ``score`` and ``material_ahead`` heads' outputs are the
        target divided by (``Game.score_scale``; None: the board's cells)."""
        check_run_clock(cfg)
        self.targets = cfg.targets()
        """The game's targets trained on (``trainer.*_weight`` above 0)."""
        missing = [t for t in self.targets if t not in net_cfg.heads]
        if missing:
            raise ConfigError(
                f"trainer.{missing[0]}_weight > 0 needs the {missing[0]} head: add "
                f"{missing[0]!r} to net.heads"
            )
        self.group = group
        """The data-parallel group this trainer is one rank of (None: alone)."""
        self.net_cfg = net_cfg
        self.cfg = cfg
        self.score_scale = float(score_scale or net_cfg.height * net_cfg.width)
        self._wdl = net_cfg.value_head == "wdl"
        """The value loss needs ``forward_all``'s win/draw/loss logits."""
        self.device = resolve_device(cfg.device, "trainer.device")
        # Version 0 has one origin: the seeded initial weights of the net section.
        self.model = build_net(net_cfg, seed=net_cfg.seed).to(self.device)
        self._format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        if cfg.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        if group is not None:
            globalize_batchnorm(self.model)  # batch statistics of the global batch
        # The module that runs the step; ``self.model`` keeps the parameters and the state.
        self._forward: Any = torch.compile(self.model) if cfg.compile else self.model
        # With the heads (targets trained) or the WDL logits.
        self._forward_all: Any = self.model.forward_all
        if cfg.compile and (self.targets or self._wdl):
            self._forward_all = torch.compile(self.model.forward_all)
        self._symmetries = symmetries if cfg.augment else None
        self.rng = np.random.default_rng(cfg.seed)
        self.step_count = 0
        on_cuda = self.device.type == "cuda"
        self._amp_dtype: torch.dtype | None = None
        if cfg.amp == "auto":  # bf16 where the device runs it natively
            self._amp_dtype = torch.bfloat16 if native_bf16(self.device) else None
        elif on_cuda:
            self._amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.amp)
        elif cfg.amp == "bf16":
            self._amp_dtype = torch.bfloat16
            if not native_bf16(self.device):
                log.warning(
                    "trainer.amp='bf16': this CPU has no native bf16 (AVX512-BF16 or AMX), so "
                    "it is emulated and slower than float32; set trainer.amp='none'"
                )
        self._scaler = torch.amp.GradScaler("cuda") if self._amp_dtype == torch.float16 else None
        precision = {torch.bfloat16: "bf16 autocast", torch.float16: "fp16 autocast"}
        log.info(
            "trainer on %s: %s%s%s",
            self.device,
            precision[self._amp_dtype] if self._amp_dtype else "float32",
            ", channels-last" if cfg.channels_last else "",
            ", compiled (inductor)" if cfg.compile else "",
        )
        if self._scaler is not None and group is not None:
            raise ConfigError(
                "trainer.amp='fp16' with learner.processes > 1: the gradient scaler is per "
                "process; use amp='bf16' for a data-parallel learner"
            )
        # The usual practice: decay conv/linear weights, not biases or batch-norm parameters.
        self._decayed = [p for p in self.model.parameters() if p.ndim >= 2]
        rest = [p for p in self.model.parameters() if p.ndim < 2]
        wd = cfg.weight_decay if cfg.weight_decay_mode == "optimizer" else 0.0
        groups = [
            {"params": self._decayed, "weight_decay": wd},
            {"params": rest, "weight_decay": 0.0},
        ]
        if cfg.optimizer == "sgd":
            self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
                groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov
            )
        else:
            self.optimizer = torch.optim.AdamW(
                groups, lr=cfg.lr, betas=(cfg.momentum, cfg.adam_beta2)
            )

    def prepare(self, batch: Batch) -> Batch:
        """The batch as the update sees it: augmented by a random symmetry per sample."""
        if self._symmetries is not None:
            return augment(batch, self._symmetries, self.rng)
        return batch

    def lr(self) -> float:
        """The learning rate of the next update."""
        return lr_at(self.cfg, self.step_count)

    def step(
        self, batch: Batch, lr: float | None = None, prepared: bool = False
    ) -> dict[str, float]:
        """One update on ``batch`` (uint8 obs, converted to float on the device).

        ``prepared``: ``batch`` has been through ``prepare`` already (a data-parallel rank's
        shard of a global batch that rank 0 augmented); ``lr``: the learning rate rank 0 sent
        (default: this trainer's schedule). Returns ``loss``, ``policy_loss``,
        ``value_loss``, ``l2``, ``grad_norm`` (before clipping), ``lr``, ``step`` (after the
        update), ``step_ms``, and ``<target>_loss`` of each target trained (``loss`` includes
        them, weighted); with a group, the losses are means over the ranks.
        """
        t0 = time.perf_counter()
        if not prepared:
            batch = self.prepare(batch)
        dev = self.device
        obs = torch.from_numpy(np.ascontiguousarray(batch.obs)).to(dev, non_blocking=True)
        obs = obs.float().contiguous(memory_format=self._format)
        target_pi = torch.from_numpy(np.ascontiguousarray(batch.policy)).to(dev, non_blocking=True)
        target_z = torch.from_numpy(np.ascontiguousarray(batch.outcome)).to(dev, non_blocking=True)
        if lr is None:
            lr = lr_at(self.cfg, self.step_count)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        self.model.train()
        autocast = (
            torch.autocast(device_type=dev.type, dtype=self._amp_dtype)
            if self._amp_dtype is not None
            else nullcontext()
        )
        wdl = None
        with autocast:
            if self.targets or self._wdl:
                outputs = self._forward_all(obs)
                logits, value, wdl = outputs.logits, outputs.value, outputs.wdl
            else:
                logits, value = self._forward(obs)
        l2 = (
            l2_penalty(self._decayed, self.cfg.weight_decay)
            if self.cfg.weight_decay_mode == "loss"
            else None
        )
        parts = alphazero_loss(
            logits, value, target_pi, target_z, value_weight=self.cfg.value_weight, l2=l2, wdl=wdl
        )
        extra: dict[str, torch.Tensor] = {}
        if self.targets:
            extra = self._target_losses(outputs, batch)
            total = parts.total + sum(
                getattr(self.cfg, f"{n}_weight") * loss for n, loss in extra.items()
            )
            parts = parts._replace(total=total)

        self.optimizer.zero_grad(set_to_none=True)
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip is not None else math.inf
        if self._scaler is not None:
            self._scaler.scale(parts.total).backward()
            self._scaler.unscale_(self.optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
            self._scaler.step(self.optimizer)  # skipped by the scaler on inf/NaN gradients
            self._scaler.update()
        else:
            parts.total.backward()
            if self.group is not None:  # the mean gradient of the global batch, on every rank
                self.group.average_gradients(list(self.model.parameters()))
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
            self.optimizer.step()
        self.step_count += 1
        losses = torch.stack([parts.total, parts.policy, parts.value, *extra.values()]).detach()
        if self.group is not None:
            losses = self.group.mean(losses)
        extra_losses = dict(zip(extra, losses[3:].tolist()))
        losses = losses[:3]
        out = [
            *losses.tolist(),
            float(torch.as_tensor(parts.l2).detach()),
            float(grad_norm.detach()),
        ]
        return {
            "loss": out[0],
            "policy_loss": out[1],
            "value_loss": out[2],
            "l2": out[3],
            "grad_norm": out[4],
            "lr": lr,
            "step": float(self.step_count),
            **{f"{n}_loss": loss for n, loss in extra_losses.items()},
            "step_ms": (time.perf_counter() - t0) * 1e3,
        }

    def _target_losses(self, outputs: NetOutputs, batch: Batch) -> dict[str, torch.Tensor]:
        """The unweighted loss of each target trained; a batch without one is a bug (the
        replay keeps every target the trainer asks for)."""
        dev = self.device
        targets, masks = {}, {}
        for name in self.targets:
            if name not in batch.targets:
                raise ValueError(f"batch has no {name!r} target (the replay does not keep it)")
            targets[name] = torch.from_numpy(np.ascontiguousarray(batch.targets[name])).to(dev)
            masks[name] = torch.from_numpy(np.ascontiguousarray(batch.target_mask[name])).to(dev)
        denominators = None
        if self.group is not None and masks:
            # The masked means over the global batch: each rank's sum over the ranks' mean
            # count (shards keep different numbers of positions with a target).
            counts = torch.stack([m.float().sum() for m in masks.values()])
            mean = self.group.mean(counts).to(dev, torch.float32)
            mean = torch.where(mean > 0, mean, torch.ones_like(mean))
            denominators = dict(zip(masks, mean))
        return target_losses(outputs._asdict(), targets, masks, self.score_scale, denominators)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: ``model``, ``optim``, ``step``,
        ``rng`` (numpy generator and torch CPU/CUDA states as uint8 tensors) and, with fp16,
        ``scaler``. Tensors are live references; copy before mutating the trainer further."""
        rng = {"numpy": _numpy_state_to_tensor(self.rng), "torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        state: dict[str, Any] = {
            "model": self.model.state_dict(),
            "optim": self.optimizer.state_dict(),
            "step": self.step_count,
            "rng": rng,
        }
        if self._scaler is not None:
            state["scaler"] = self._scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()`` (from this process or a checkpoint)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optim"])
        self.step_count = int(state["step"])
        rng = state["rng"]
        self.rng = _numpy_state_from_tensor(rng["numpy"])
        torch.set_rng_state(rng["torch"].cpu())
        if "cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"].cpu(), self.device)
        if self._scaler is not None and "scaler" in state:
            self._scaler.load_state_dict(state["scaler"])


def _numpy_state_to_tensor(rng: np.random.Generator) -> torch.Tensor:
    """A PCG64 generator's state as 48 uint8: state (16), inc (16), has_uint32 (8), uinteger (8)."""
    s = rng.bit_generator.state
    if s["bit_generator"] != "PCG64":
        raise TypeError(f"only PCG64 generators can be saved, got {s['bit_generator']}")
    raw = (
        s["state"]["state"].to_bytes(16, "little")
        + s["state"]["inc"].to_bytes(16, "little")
        + int(s["has_uint32"]).to_bytes(8, "little")
        + int(s["uinteger"]).to_bytes(8, "little")
    )
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def _numpy_state_from_tensor(t: torch.Tensor) -> np.random.Generator:
    raw = bytes(t.cpu().numpy().tobytes())
    gen = np.random.Generator(np.random.PCG64())
    gen.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {
            "state": int.from_bytes(raw[0:16], "little"),
            "inc": int.from_bytes(raw[16:32], "little"),
        },
        "has_uint32": int.from_bytes(raw[32:40], "little"),
        "uinteger": int.from_bytes(raw[40:48], "little"),
    }
    return gen
