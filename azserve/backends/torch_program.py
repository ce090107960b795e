"""How the torch backend runs a network: the execution path (eager, TorchScript, inductor), the
compute dtype and memory format, chosen once at start; batch buckets; per-version weights.

A ``Program`` turns one version's state dict into ``Weights`` (on the loader thread, off the hot
path) and runs ``program(weights, x)`` on the compute thread:

- ``eager``: the module itself.
- ``jit``: frozen, inference-optimised TorchScript traced per version (about a second for the
  5x64 net; the trace is of that version's weights, so each load pays it, off the hot path).
- ``inductor``: ``torch.compile`` of a *functional* forward whose weights are inputs, of the
  BatchNorm-folded net (``azserve.model.fold``): one graph per batch bucket, compiled when the
  first version loads (before serving) and reused by every later version, which only folds and
  moves its tensors. Once warm, the graph runs under ``fail_on_recompile``: a compile can never
  happen on the hot path (it raises instead).

``auto`` settings are resolved from the device (``resolve_plan``), by what measured fastest on
each kind of machine (docs/benchmarks.md, "Compiled inference").
"""

from __future__ import annotations

import abc
import contextlib
import logging
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch.func import functional_call

from azserve.backends.base import BackendConfig
from azserve.errors import ConfigError, WeightsError
from azserve.model.device import native_bf16, resolve_dtype
from azserve.model.fold import fold_batchnorm
from azserve.model.network import AlphaZeroNet, build_net
from azserve.model.spec import NetConfig
from azserve.model.weights import load_strict

log = logging.getLogger("azserve.backends.torch")

DEFAULT_BUCKETS = (1, 8, 16, 32, 64, 128, 256)
"""Buckets of a compiled path when ``backend.torch.batch_buckets`` is empty."""


@dataclass(frozen=True)
class Plan:
    """The resolved execution path of one backend."""

    compile: str
    """``none``, ``jit`` or ``inductor``."""
    dtype: torch.dtype
    """Compute dtype."""
    channels_last: bool
    """Memory format of activations (and weights)."""
    cuda_graphs: bool
    """CUDA graphs per bucket (inductor ``reduce-overhead``)."""
    buckets: tuple[int, ...]
    """Batch sizes batches are padded to (ascending; empty = exact sizes); a batch larger than
    the last bucket runs in chunks of it, so a compiled path never meets a new shape."""
    native_bf16: bool
    """What ``native_bf16`` said about the device."""

    def describe(self) -> dict[str, Any]:
        return {
            "compile": self.compile,
            "dtype": str(self.dtype).removeprefix("torch."),
            "channels_last": self.channels_last,
            "cuda_graphs": self.cuda_graphs,
            "buckets": list(self.buckets),
            "native_bf16": self.native_bf16,
        }


def resolve_plan(cfg: BackendConfig, device: torch.device) -> Plan:
    """The path ``cfg`` asks for, ``auto`` values resolved for ``device``:

    - dtype ``auto``: bfloat16 where the device has it natively (float32 for eager on a CPU),
      else float32;
    - compile ``auto``: inductor (the fastest path measured, fp32 on an AVX2 CPU as bf16 where
      the CPU has it; TorchScript, as fast in fp32, is deprecated by torch 2.13);
    - CUDA graphs: on CUDA with inductor unless ``cuda_graphs`` is false.
    """
    native = native_bf16(device)
    kind = "inductor" if cfg.torch.compile == "auto" else cfg.torch.compile
    if cfg.dtype == "auto" and kind == "none" and device.type == "cpu":
        dtype = torch.float32  # eager bf16 gains nothing on a CPU, even a native one
    else:
        dtype = resolve_dtype(cfg.dtype, device)
    if cfg.dtype == "bfloat16" and not native:
        log.warning(
            "backend.dtype=bfloat16 on %s without native bf16: emulated, slower than float32",
            device,
        )
    if dtype == torch.float16 and device.type == "cpu":
        raise ConfigError("backend.dtype='float16': not supported on CPU (use bfloat16 or float32)")
    if dtype != torch.float32 and kind == "none" and device.type == "cpu":
        raise ConfigError(
            f"backend.dtype={cfg.dtype!r} with backend.torch.compile='none' on CPU: eager reduced "
            "precision is slower than float32 there (use torch.compile='inductor' or dtype='float32')"
        )
    buckets = tuple(sorted(set(cfg.torch.batch_buckets)))
    if kind == "inductor" and not buckets:
        buckets = DEFAULT_BUCKETS
    graphs = device.type == "cuda" and kind == "inductor" and cfg.torch.cuda_graphs
    return Plan(kind, dtype, cfg.torch.channels_last, graphs, buckets, native)


@contextlib.contextmanager
def _torch_internal_deprecations() -> Iterator[None]:
    """torch 2.13 deprecates TorchScript, and warns (DeprecationWarning) even when inductor's
    passes import its own ``torch.utils.mkldnn``. ``jit`` stays an explicit choice (Triton's
    libtorch backend still takes TorchScript); the default path does not use it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.\w+` is deprecated", DeprecationWarning)
        yield


Weights = Any
"""One version's prepared weights: what ``Program.__call__`` takes (a module, a TorchScript
function or a dict of tensors)."""


class Program(abc.ABC):
    """``prepare(state) -> Weights`` per version; ``program(weights, x) -> (logits, value)``."""

    def __init__(self, net: NetConfig, plan: Plan, device: torch.device) -> None:
        self.net = net
        self.plan = plan
        self.device = device

    def module(self, state: dict[str, torch.Tensor]) -> AlphaZeroNet:
        """The network with ``state`` loaded (strictly), in eval mode, on the device, in the
        plan's dtype and memory format."""
        module = build_net(self.net, seed=None)
        load_strict(module, state)
        return self.place(module.eval())

    def place(self, module: AlphaZeroNet) -> AlphaZeroNet:
        module = module.to(self.device, self.plan.dtype)
        if self.plan.channels_last:
            module = module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        return module

    @abc.abstractmethod
    def prepare(self, state: dict[str, torch.Tensor]) -> Weights:
        """One version's weights, ready to run."""

    @abc.abstractmethod
    def __call__(self, weights: Weights, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x ``[B, C, H, W]`` (the plan's dtype, on the device) -> (logits ``[B, A]``, value ``[B]``)."""

    def expect_graphs(self, n: int) -> None:  # noqa: B027 - only a compiled path has graphs
        """``n`` graphs (buckets x thread counts) will be made during the warm-up."""

    def warmed(self) -> None:  # noqa: B027 - only a compiled path has anything to lock
        """Every bucket has run once: from now on nothing may compile."""


class EagerProgram(Program):
    def prepare(self, state: dict[str, torch.Tensor]) -> Weights:
        return self.module(state)

    def __call__(self, weights: Weights, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return weights(x)  # type: ignore[no-any-return]


class JitProgram(Program):
    def prepare(self, state: dict[str, torch.Tensor]) -> Weights:
        module = self.module(state)
        example = torch.zeros((1, *self.net.obs_shape), dtype=self.plan.dtype, device=self.device)
        if self.plan.channels_last:
            example = example.contiguous(memory_format=torch.channels_last)
        with torch.inference_mode(False), torch.no_grad(), _torch_internal_deprecations():
            traced = torch.jit.trace(module, example)
            return torch.jit.optimize_for_inference(torch.jit.freeze(traced))

    def __call__(self, weights: Weights, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return weights(x)  # type: ignore[no-any-return]


class _HotStance:
    """``fail_on_recompile`` for as long as any warm graph of this process runs.

    torch keeps one compile stance per *process*, and ``torch.compiler.set_stance`` as a context
    manager restores on exit what it saw on entry: two threads that interleave (a compute thread
    and a loader's check, two backends) leave ``fail_on_recompile`` set for good, and every later
    compile in the process (another backend's warm-up, a trainer's ``compile = true``) raises.
    Here the stance is set when the first warm call enters and put back when the last leaves.
    A compile that runs *while* another thread's warm graph computes still sees the stance and
    raises: compile before serving (as ``TorchBackend.start`` does), not beside it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._set: Any = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._inside == 0:  # set now; its exit puts back the stance it replaced
                self._set = torch.compiler.set_stance("fail_on_recompile")
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if self._inside == 0:
                    self._set.__exit__(None, None, None)


HOT_STANCE = _HotStance()
_EXPECT_LOCK = threading.Lock()


class InductorProgram(Program):
    """One compiled functional graph (per bucket shape) shared by every version."""

    def __init__(self, net: NetConfig, plan: Plan, device: torch.device) -> None:
        super().__init__(net, plan, device)
        # The template only lends its structure to ``functional_call``; its own tensors are
        # never used (every call passes a version's).
        self._template = self.place(fold_batchnorm(build_net(net, seed=0).eval()))
        template = self._template

        def forward(weights: dict[str, torch.Tensor], x: torch.Tensor) -> Any:
            return functional_call(template, weights, (x,))

        mode = "reduce-overhead" if plan.cuda_graphs else None
        with _torch_internal_deprecations():
            import torch._inductor.compile_fx  # noqa: F401 - imported here, quietly
        self._fn: Callable[..., Any] = torch.compile(forward, mode=mode, dynamic=False)
        self._warm = False

    def prepare(self, state: dict[str, torch.Tensor]) -> Weights:
        folded = self.place(fold_batchnorm(self.module_fp32(state)))
        weights = {k: v.detach() for k, v in folded.state_dict().items()}
        want = {k: (v.shape, v.dtype) for k, v in self._template.state_dict().items()}
        got = {k: (v.shape, v.dtype) for k, v in weights.items()}
        if got != want:  # load_strict has checked the keys: only a bug gets here
            raise WeightsError("folded weights do not match the compiled graph's inputs")
        return weights

    def module_fp32(self, state: dict[str, torch.Tensor]) -> AlphaZeroNet:
        """Loaded on the CPU in float32: folding is done before the cast to ``plan.dtype``."""
        module = build_net(self.net, seed=None)
        load_strict(module, state)
        return module.eval()

    def __call__(self, weights: Weights, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self._warm:  # compiling: before serving, on one thread
            return self._fn(weights, x)  # type: ignore[no-any-return]
        with HOT_STANCE.held():
            return self._fn(weights, x)  # type: ignore[no-any-return]

    _graphs_in_process: ClassVar[int] = 0
    """Graphs every InductorProgram of this process expects, together: their ``forward`` is
    one code object, whose graph cache (and its limit) they all share."""

    def expect_graphs(self, n: int) -> None:
        # torch.compile keeps a few graphs per function (8) and falls back to eager above
        # that; a graph per bucket and thread count must all stay, for every net this process
        # compiles (a ladder or a match holds several shapes: Go with and without features).
        import torch._dynamo.config as dynamo_config

        with _EXPECT_LOCK:
            InductorProgram._graphs_in_process += n
            total = InductorProgram._graphs_in_process
        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, total + 1)

    def warmed(self) -> None:
        self._warm = True


PROGRAMS: dict[str, type[Program]] = {
    "none": EagerProgram,
    "jit": JitProgram,
    "inductor": InductorProgram,
}


def make_program(net: NetConfig, plan: Plan, device: torch.device) -> Program:
    return PROGRAMS[plan.compile](net, plan, device)


def bucket_for(buckets: tuple[int, ...], n: int) -> int:
    """The smallest bucket >= ``n`` (``n`` itself without buckets); callers split batches
    above the largest bucket into chunks of it."""
    for b in buckets:
        if b >= n:
            return b
    return n


def chunks(buckets: tuple[int, ...], n: int) -> list[tuple[int, int, int]]:
    """``(start, stop, padded_size)`` pieces that cover ``n`` rows: one piece padded to its
    bucket, or, above the largest bucket, pieces of the largest bucket and a padded rest."""
    if not buckets or n <= buckets[-1]:
        return [(0, n, bucket_for(buckets, n))]
    top = buckets[-1]
    return [
        (s, min(n, s + top), bucket_for(buckets, min(n, s + top) - s)) for s in range(0, n, top)
    ]
