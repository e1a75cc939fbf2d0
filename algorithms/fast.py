"""Fast updates and acting on CPU: one option, ``fast``, that every algorithm takes.

What it does, each measured on the MinAtar nets on a 2-core Xeon (Sapphire Rapids, one
intra-op thread; ``python -m experiments.bench.minatar.learner``, numbers there):

- ``"eager"`` (what ``"auto"`` picks):

  * updates and acting run with denormals flushed to zero (:class:`flush_denormals`).
    Adam's moments of weights that get no gradient (inputs of dead ReLU units: 13-17%
    of the MinAtar dense layer within 1,000 updates) decay into subnormals and stay
    there: ``0.9 * k`` ulp rounds back to ``k`` for ``k <= 4``, ``0.999 * k`` for
    ``k < 500``. Every arithmetic op on a subnormal takes a microcode assist (~130
    cycles): the fused Adam step went from 0.12 ms to 1.0 ms with 13% of one layer's
    first moments subnormal and to 2.6 ms with all of both moments;
  * forwards run through :class:`FastForward`: the network's leaf modules are called
    directly (no ``nn.Module.__call__`` per layer, 10-20% of a batch-8 forward), small
    no-grad batches (acting) convolve by im2col + matmul instead of oneDNN (a batch-8
    MinAtar act 37% cheaper), small no-grad batches (up to ``SMALL_ROWS``) run a
    dueling head as one folded dense layer and a big dense layer against a cached
    contiguous transpose (together with the Ape-X actor's priorities from its acting
    Q values, :class:`algorithms.dqn.apex.ActingScores`: a MinAtar actor 45 -> 35 us an env
    step), and
    :class:`~algorithms.nets.ChannelsLast` feeds the convolution a contiguous NCHW
    tensor (no strided copies after it: 20% of a batch-128 no-grad forward, 7-13% of
    a forward and backward), except in nets with a
    :class:`~algorithms.nets.ChannelNorm`, which wants the channels innermost.

- ``"compile"``: the same, with ``torch.compile`` (inductor) forwards. It needs a C++
  compiler; without one (or if compiling fails) it falls back to ``"eager"`` with a
  warning. Not chosen by ``"auto"``: on this CPU the compiled DQN update was slower
  (7.0 against 5.7 ms at batch 128; inductor stores each ReLU's backward mask as bools
  at ~10 ns an element, 24x eager's ``le``) and compiling took 20-40 s per shape.
- ``"off"``: the plain eager path, as before this option existed.

Numerics: ``"eager"`` changes results only by float rounding (a convolution's sums in
another order) and subnormals read as zero.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from algorithms.nets import DuelingHead, contiguous_layout

FAST_MODES = ("auto", "off", "eager", "compile")


def check_fast(value: Any, name: str = "fast") -> str:
    """``value`` if it is one of :data:`FAST_MODES`, else ValueError naming them."""
    if value not in FAST_MODES:
        raise ValueError(f"{name} must be one of {list(FAST_MODES)}, got {value!r}")
    return value


def compiler_available() -> bool:
    """Whether inductor's C++ compiler (``$CXX``, else ``g++``, as inductor looks it
    up) is on the PATH; tests replace this to simulate a machine without one."""
    return shutil.which(os.environ.get("CXX") or "g++") is not None


_warned: set[str] = set()


def resolve_fast(mode: str) -> str:
    """The mode that runs: ``auto`` is ``eager`` (the fastest measured on CPU, see
    the module docstring); ``compile`` without a C++ compiler is ``eager``, with a
    warning (once per process)."""
    check_fast(mode)
    if mode == "auto":
        return "eager"
    if mode == "compile" and not compiler_available():
        _warn_once("no C++ compiler for torch.compile (inductor) on this machine: "
                   "fast='compile' runs as 'eager'")
        return "eager"
    return mode


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


# A subnormal float32: under flush-to-zero/denormals-are-zero its product is 0. numpy
# float32 arithmetic runs on the same SSE unit, whose control register (MXCSR, one per
# thread) torch.set_flush_denormal sets: a 1 us probe, where torch has no getter.
_SUBNORMAL = np.float32(1e-40)


def denormals_flushed() -> bool:
    """Whether this thread flushes subnormal floats to zero."""
    return bool(_SUBNORMAL * np.float32(1.0) == 0.0)


class flush_denormals:
    """Context manager: flush subnormals to zero in this thread (x86 with SSE3; a no-op
    elsewhere), as it was afterwards. The flag lives in the calling thread's
    control register, so the scope is exactly the code run inside, wherever it runs
    (a role's loop, a test, an RPC thread); ``enabled=False`` does nothing."""

    __slots__ = ("enabled", "_restore")

    def __init__(self, enabled: bool = True) -> None:
        self.enabled, self._restore = enabled, False

    def __enter__(self) -> flush_denormals:
        self._restore = self.enabled and not denormals_flushed()
        if self._restore:
            torch.set_flush_denormal(True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._restore:
            torch.set_flush_denormal(False)


class FastForward:
    """``module``'s forward as a fast mode runs it (``mode`` resolved: ``off``,
    ``eager`` or ``compile``). Parameters are the module's own, so optimizer steps,
    ``load_state_dict`` and in-place resets reach it; nothing is cached but the call
    plan (rebuilt when pickled or copied).

    ``eager``: containers (``nn.Sequential``) and leaf modules without hooks are run by
    calling ``forward`` directly; a module with hooks (checked at every call, a dict
    test each) goes through ``__call__``. ``compile``: ``torch.compile(module)``; if a
    call fails to compile, a warning and ``eager`` from then on."""

    def __init__(self, module: nn.Module, mode: str) -> None:
        if mode not in ("off", "eager", "compile"):
            raise ValueError(f"FastForward takes a resolved mode (off, eager, compile), got {mode!r}")
        self.module, self.mode = module, mode
        self._plan: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._compiled: Any = None
        if mode != "off":
            contiguous_layout(module)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "compile":
            if self._compiled is None:
                self._compiled = torch.compile(self.module)
            try:
                return self._compiled(x)
            except Exception as exc:  # noqa: BLE001 (any compiler failure: run eager)
                _warn_once(f"torch.compile failed ({type(exc).__name__}: {exc}); fast='compile' runs as 'eager'")
                self.mode, self._compiled = "eager", None
        if self.mode == "off" or _global_hooks():
            return self.module(x)
        if self._plan is None:
            self._plan = _plan(self.module)
        return self._plan(x)

    def __getstate__(self) -> dict[str, Any]:
        return {"module": self.module, "mode": self.mode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.module, self.mode = state["module"], state["mode"]
        self._plan = self._compiled = None


def _global_hooks() -> bool:
    from torch.nn.modules import module as m

    return bool(m._global_forward_hooks or m._global_forward_pre_hooks or m._global_backward_hooks
                or m._global_backward_pre_hooks or m._global_forward_hooks_always_called)


def _has_hooks(m: nn.Module) -> bool:
    return bool(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks)


def _plan(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """A callable equal to ``module(x)`` that skips ``__call__`` where no hook needs it."""
    if type(module) is nn.Sequential:
        steps = [_plan(child) for child in module]

        def run(x: torch.Tensor) -> torch.Tensor:
            if _has_hooks(module):
                return module(x)
            for step in steps:
                x = step(x)
            return x

        return run
    forward = module.forward
    if type(module) is nn.Conv2d and _plain_conv(module):
        forward = _small_batch_conv(module)
    elif type(module) is DuelingHead and _linear_streams(module):
        forward = _folded_dueling(module)
    elif type(module) is nn.Linear and module.in_features * module.out_features >= BIG_LINEAR:
        forward = _small_batch_linear(module)

    def leaf(x: torch.Tensor) -> torch.Tensor:
        return module(x) if _has_hooks(module) else forward(x)

    return leaf


# oneDNN's convolution costs ~45 us from batch 2 or so up (5 us at batch 1), the
# im2col + matmul one (thnn) ~2.3 us a sample per input channel-quartet: for an
# actor's batch of 8 MinAtar frames 19 against 44 us (4 channels), 41 against 50 (10).
# It wins while batch x input channels <= 80 (measured at 1-256 x 4 and 10 channels).
SMALL_CONV = 80
_thnn_conv2d = getattr(torch._C._nn, "thnn_conv2d", None)


def _plain_conv(conv: nn.Conv2d) -> bool:
    return (_thnn_conv2d is not None and conv.groups == 1 and conv.padding_mode == "zeros"
            and not isinstance(conv.padding, str) and tuple(conv.dilation) == (1, 1))


def _small_batch_conv(conv: nn.Conv2d) -> Callable[[torch.Tensor], torch.Tensor]:
    """``conv.forward`` that runs small no-grad batches on the im2col kernel (see
    SMALL_CONV); values equal up to float rounding."""
    forward = conv.forward

    def run(x: torch.Tensor) -> torch.Tensor:
        if (x.dim() == 4 and x.shape[0] * conv.in_channels <= SMALL_CONV and not torch.is_grad_enabled()
                and x.device.type == "cpu" and x.dtype == torch.float32):
            return _thnn_conv2d(x, conv.weight, conv.kernel_size, conv.bias, conv.stride, conv.padding)
        return forward(x)

    return run


# Acting batches (an actor's few env copies, an evaluation's): rows up to which the
# no-grad paths below run. Learner batches (32 and up) keep the plain kernels, whose
# results the plain path's match bit for bit or within a convolution's rounding:
# there a near tie of a target's argmax flipped by rounding would change a target.
SMALL_ROWS = 16
BIG_LINEAR = 1 << 15  # weights from which a cached contiguous transpose pays (MinAtar's 1024 x 128)


def _small_no_grad(x: torch.Tensor) -> bool:
    return (x.dim() == 2 and x.shape[0] <= SMALL_ROWS and not torch.is_grad_enabled()
            and x.device.type == "cpu" and x.dtype == torch.float32)


def _versions(params: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
    """What changes when a parameter is written in place or replaced."""
    return tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in params)


def _small_batch_linear(linear: nn.Linear) -> Callable[[torch.Tensor], torch.Tensor]:
    """``linear.forward`` that runs small no-grad batches against a contiguous copy of
    the weight's transpose, kept while the weight is unchanged: MKL's small-row matmul
    reads a transposed view ~30% slower (batch 8 x 1024 -> 128: 18.9 against 13.7 us)."""
    forward = linear.forward
    cache: dict[str, Any] = {"key": None}

    def run(x: torch.Tensor) -> torch.Tensor:
        if not _small_no_grad(x):
            return forward(x)
        weight, bias = linear._parameters["weight"], linear._parameters["bias"]
        key = _versions((weight,))
        if cache["key"] != key:
            cache["transposed"], cache["key"] = weight.t().contiguous(), key
        if bias is None:
            return torch.mm(x, cache["transposed"])
        return torch.addmm(bias, x, cache["transposed"])

    return run


def _linear_streams(head: DuelingHead) -> bool:
    # A distributional head (n_atoms > 1) centres per atom: no single dense layer.
    return head.n_atoms == 1 and all(type(m) is nn.Linear and m.bias is not None for m in (head.value, head.advantage))


def _folded_dueling(head: DuelingHead) -> Callable[[torch.Tensor], torch.Tensor]:
    """``head.forward`` that runs small no-grad batches as one dense layer. With linear
    streams ``V = W_v x + b_v`` and ``A = W_a x + b_a``, ``Q = V + A - mean_a A`` is
    ``(W_a - mean_rows W_a + W_v) x + (b_a - mean b_a + b_v)``: one matmul instead of
    two, a mean, an add and a subtract (the head was a fifth of a batch-8 MinAtar
    act). The folded weights are kept while the four parameters are unchanged, so an
    acting copy, which loads new parameters every few hundred steps, folds once per
    load. Values equal the streams' up to float rounding."""
    forward = head.forward
    streams = (head.value, head.advantage)
    cache: dict[str, Any] = {"key": None}

    def run(x: torch.Tensor) -> torch.Tensor:
        if not _small_no_grad(x) or any(_has_hooks(m) for m in streams):
            return forward(x)
        params = (head.advantage._parameters["weight"], head.advantage._parameters["bias"],
                  head.value._parameters["weight"], head.value._parameters["bias"])
        key = _versions(params)
        if cache["key"] != key:
            w_a, b_a, w_v, b_v = params
            cache["weight"] = (w_a - w_a.mean(0, keepdim=True) + w_v).t().contiguous()
            cache["bias"] = b_a - b_a.mean() + b_v
            cache["key"] = key
        return torch.addmm(cache["bias"], x, cache["weight"])

    return run
