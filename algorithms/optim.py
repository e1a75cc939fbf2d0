"""Optimizers that start in milliseconds, and gradient-norm clipping for small nets.

``torch.optim.Optimizer`` wraps ``add_param_group`` (run by every constructor),
``zero_grad``, ``state_dict``, ``load_state_dict`` and each built-in ``step`` in
``torch._disable_dynamo``, whose first call imports ``torch._dynamo``: 1.5-5 s of
CPU on a 2-core machine, more than an A3C or Ape-X CartPole run spends learning.
The optimizers here are ordinary ``Optimizer`` subclasses (LR schedulers,
``state_dict`` round trips and torch's state layout all work) that call the
undecorated methods and step with one fused kernel (Adam) or a few foreach ops
(RMSProp). Their arithmetic is torch's (tested against ``torch.optim``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from itertools import chain
from typing import Any

import torch
from torch.autograd.graph import increment_version
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

from rlpar.state import StatePath, optimizer_state


def _undecorated(name: str) -> Any:
    method = getattr(torch.optim.Optimizer, name)
    return getattr(method, "__wrapped__", method)


_ADD_PARAM_GROUP = _undecorated("add_param_group")
_ZERO_GRAD = _undecorated("zero_grad")
_STATE_DICT = _undecorated("state_dict")
_LOAD_STATE_DICT = _undecorated("load_state_dict")


def clip_grad_norm(grads: list[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """Scale ``grads`` in place so their global L2 norm is at most ``max_norm`` (None:
    no clipping); returns the norm before clipping as a 0-dim tensor. The rule of
    ``torch.nn.utils.clip_grad_norm_``, minus its per-call grouping of tensors by
    device and dtype (a net's grads share both), which costs more than the
    arithmetic on small nets."""
    if not grads:
        return torch.zeros(())
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if max_norm is not None:
        torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


def linear_schedule(step: float, *, start: float, end: float, steps: int) -> float:
    """``start`` at step 0, ``end`` from ``steps`` on, linear in between."""
    if steps <= 0 or step >= steps:
        return end
    return start + (end - start) * max(step, 0) / steps


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> float:
    """Set every param group of ``optimizer`` to ``lr``; returns it."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def linear_lr(optimizer: torch.optim.Optimizer, *, lr: float, step: int, anneal_steps: int | None) -> float:
    """Set ``optimizer`` to ``lr`` annealed linearly to 0 over ``anneal_steps`` (at
    ``step`` of them; None: ``lr`` constant) and return it: the schedule of PPO
    (Schulman et al. 2017), IMPALA (Espeholt et al. 2018) and PQN, set before each
    update so a resumed run continues where its step count says."""
    if anneal_steps is not None:
        lr = linear_schedule(step, start=lr, end=0.0, steps=anneal_steps)
    return set_lr(optimizer, lr)


def _hooked_step(step: Any) -> Any:
    """torch's step wrapper (pre/post hooks, profiler range) without opening a
    profiler range when no profiler runs: that range alone costs about as much as
    the fused Adam kernel on a small net."""

    @functools.wraps(step)
    def wrapper(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        if torch.autograd._profiler_enabled():
            name = f"Optimizer.step#{type(self).__name__}.step"
            with torch.autograd.profiler.record_function(name):
                return _run_hooked(self, step, args, kwargs)
        return _run_hooked(self, step, args, kwargs)

    wrapper.hooked = True  # type: ignore[attr-defined]  # torch's marker: do not wrap again
    return wrapper


def _run_hooked(self: torch.optim.Optimizer, step: Any, args: tuple, kwargs: dict) -> Any:
    for pre_hook in chain(_global_optimizer_pre_hooks.values(),
                          self._optimizer_step_pre_hooks.values()):
        result = pre_hook(self, (self, *args), kwargs)
        if result is not None:
            if not (isinstance(result, tuple) and len(result) == 2):
                raise RuntimeError(f"an optimizer step pre-hook must return None or "
                                   f"(args, kwargs), got {result!r}")
            (_, *args), kwargs = result
    out = step(self, *args, **kwargs)
    self._optimizer_step_code()
    for post_hook in chain(self._optimizer_step_post_hooks.values(),
                           _global_optimizer_post_hooks.values()):
        post_hook(self, (self, *args), kwargs)
    return out


class _EagerOptimizer(torch.optim.Optimizer):
    """Subclasses implement ``_update_group(group, params, grads)`` for the parameters
    of ``group`` that received gradients."""

    @torch.no_grad()
    def _step(self, closure: Any = None) -> Any:
        loss = None if closure is None else _closure(closure)
        for group in self.param_groups:
            params, grads = self._with_grads(group)
            if params:
                self._update_group(group, params, grads)
                # The fused kernels write the parameters without counting a new version,
                # which caches keyed on versions (algorithms.fast's acting forwards) read
                # as unchanged: a model that acts as it learns kept acting on stale weights.
                increment_version(params)
        return loss

    step = _hooked_step(_step)

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor],
                      grads: list[torch.Tensor]) -> None:
        raise NotImplementedError

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _ADD_PARAM_GROUP(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        # torch's opens a profiler range even when no profiler runs: as much as the loop.
        if not set_to_none or torch.autograd._profiler_enabled():
            _ZERO_GRAD(self, set_to_none)
            return
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def state_dict(self) -> dict[str, Any]:
        return _STATE_DICT(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # From a checkpoint: its layout and hyper-parameters are checked before torch
        # replaces anything (StateError names what does not fit).
        optimizer_state(state_dict, StatePath.of(self), self)
        _LOAD_STATE_DICT(self, state_dict)

    def check_param_group(self, group: Mapping[str, Any]) -> None:
        """Raise ValueError (or KeyError) for hyper-parameters this optimizer cannot
        use; the constructor's arguments and a loaded state's groups alike."""

    # The per-parameter tensors shaped like the parameter (besides the step count).
    STATE_BUFFERS: tuple[str, ...] = ()

    def check_param_state(self, entry: Mapping[str, Any], param: torch.Tensor) -> None:
        """Raise ValueError for a loaded per-parameter state this optimizer cannot step
        with: a step count (a one-element float tensor, >= 0) and STATE_BUFFERS."""
        missing = [k for k in ("step", *self.STATE_BUFFERS) if k not in entry]
        if missing:
            raise ValueError(f"has no {missing}")
        step = entry["step"]
        if not (isinstance(step, torch.Tensor) and step.numel() == 1 and step.is_floating_point()
                and bool(step >= 0)):
            raise ValueError(f"['step'] must be a one-element float tensor >= 0, got {step!r}")
        for name in self.STATE_BUFFERS:
            buffer = entry[name]
            if not (isinstance(buffer, torch.Tensor) and buffer.is_floating_point()
                    and buffer.shape == param.shape):
                got = tuple(buffer.shape) if isinstance(buffer, torch.Tensor) else type(buffer).__name__
                raise ValueError(f"[{name!r}] must be a float tensor of its parameter's shape "
                                 f"{tuple(param.shape)}, got {got}")

    def _state_of(self, p: torch.Tensor, buffers: tuple[str, ...], *,
                  step_device: torch.device | None = None) -> dict[str, Any]:
        """``p``'s state, created on first use: a float32 ``step`` (torch's layout, so
        state dicts load either way) and zero ``buffers`` shaped like ``p``."""
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=step_device)
            for name in buffers:
                state[name] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _with_grads(self, group: dict[str, Any]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        # Parameters the loss did not reach keep their value and state, as in torch.optim.
        params = [p for p in group["params"] if p.grad is not None]
        for p in params:
            if p.grad.is_sparse:
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
        return params, [p.grad for p in params]


def _check(name: str, value: float, low: float, high: float = float("inf")) -> None:
    if not low <= value < high:
        raise ValueError(f"{name} must be in [{low}, {high}), got {value}")


class EagerRMSprop(_EagerOptimizer):
    """RMSProp as in torch (non-centred, no momentum): ``v = alpha v + (1 - alpha) g^2``,
    ``p -= lr g / (sqrt(v) + eps)``. Tieleman & Hinton 2012; the A3C paper's choice."""

    STATE_BUFFERS = ("square_avg",)

    def __init__(self, params: Any, *, lr: float, alpha: float = 0.99, eps: float = 1e-8) -> None:
        defaults = {"lr": lr, "alpha": alpha, "eps": eps}
        self.check_param_group(defaults)
        super().__init__(params, defaults)

    def check_param_group(self, group: Mapping[str, Any]) -> None:
        _check("lr", group["lr"], 0.0)
        _check("alpha", group["alpha"], 0.0, 1.0)
        _check("eps", group["eps"], 0.0)

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor],
                      grads: list[torch.Tensor]) -> None:
        squares = []
        for p in params:
            state = self._state_of(p, self.STATE_BUFFERS)
            state["step"] += 1
            squares.append(state["square_avg"])
        alpha = group["alpha"]
        torch._foreach_mul_(squares, alpha)
        torch._foreach_addcmul_(squares, grads, grads, value=1 - alpha)
        denom = torch._foreach_sqrt(squares)
        torch._foreach_add_(denom, group["eps"])
        torch._foreach_addcdiv_(params, grads, denom, value=-group["lr"])


class EagerAdam(_EagerOptimizer):
    """Adam as in torch (no weight decay, no amsgrad; Kingma & Ba 2015, ICLR), one
    call of the kernel ``torch.optim.Adam(fused=True)`` runs per parameter group:
    on a small net torch.optim's per-step Python (grouping by device, hooks) costs
    several times that kernel."""

    STATE_BUFFERS = ("exp_avg", "exp_avg_sq")

    def __init__(self, params: Any, *, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.check_param_group({"lr": lr, "betas": betas, "eps": eps})
        super().__init__(params, {"lr": lr, "betas": (float(betas[0]), float(betas[1])),
                                  "eps": eps})

    def check_param_group(self, group: Mapping[str, Any]) -> None:
        _check("lr", group["lr"], 0.0)
        _check("eps", group["eps"], 0.0)
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be two numbers, got {betas!r}")
        for i, beta in enumerate(betas):
            _check(f"betas[{i}]", beta, 0.0, 1.0)

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor],
                      grads: list[torch.Tensor]) -> None:
        # The kernel takes tensors of one device and dtype; a net normally has one.
        batches: dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]] = {}
        for p, g in zip(params, grads, strict=True):
            # The fused kernel wants the step on the parameter's device.
            state = self._state_of(p, self.STATE_BUFFERS, step_device=p.device)
            if state["step"].device != p.device:  # loaded from a CPU state dict
                state["step"] = state["step"].to(device=p.device, dtype=torch.float32)
            lists = batches.setdefault((p.device, p.dtype), [[], [], [], [], []])
            for into, t in zip(lists, (p, g, state["exp_avg"], state["exp_avg_sq"],
                                       state["step"]), strict=True):
                into.append(t)
        beta1, beta2 = group["betas"]
        for ps, gs, means, squares, steps in batches.values():
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(ps, gs, means, squares, [], steps, lr=group["lr"],
                               beta1=beta1, beta2=beta2, weight_decay=0.0,
                               eps=group["eps"], amsgrad=False, maximize=False)


class EagerRAdam(EagerAdam):
    """RAdam as in torch (no weight decay; Liu et al. 2020, "On the Variance of the
    Adaptive Learning Rate and Beyond", ICLR), PQN's optimizer. Once the variance
    estimate is usable (``rho_t > 5``, from the sixth step on with torch's default
    betas) a step is Adam's with the learning rate scaled by the rectification
    term, which the fused Adam kernel takes with ``eps / sqrt(1 - beta2^t)`` (torch
    adds ``eps`` before the bias correction, the kernel after it). Before that a
    step is a bias-corrected momentum step. Five times cheaper per step than
    ``torch.optim.RAdam`` on a small net."""

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor],
                      grads: list[torch.Tensor]) -> None:
        # Parameters that missed a step have other step counts: one batch per count.
        batches: dict[tuple[torch.device, torch.dtype, float], list[list[torch.Tensor]]] = {}
        for p, g in zip(params, grads, strict=True):
            state = self._state_of(p, self.STATE_BUFFERS, step_device=p.device)
            if state["step"].device != p.device:
                state["step"] = state["step"].to(device=p.device, dtype=torch.float32)
            key = (p.device, p.dtype, float(state["step"]) + 1.0)
            lists = batches.setdefault(key, [[], [], [], [], []])
            for into, t in zip(lists, (p, g, state["exp_avg"], state["exp_avg_sq"],
                                       state["step"]), strict=True):
                into.append(t)
        beta1, beta2 = group["betas"]
        rho_inf = 2.0 / (1.0 - beta2) - 1.0
        for (_, _, step), (ps, gs, means, squares, steps) in batches.items():
            torch._foreach_add_(steps, 1)
            correction1, correction2 = 1.0 - beta1 ** step, 1.0 - beta2 ** step
            rho = rho_inf - 2.0 * step * beta2 ** step / correction2
            if rho > 5.0:
                rect = ((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho)) ** 0.5
                torch._fused_adam_(ps, gs, means, squares, [], steps, lr=group["lr"] * rect,
                                   beta1=beta1, beta2=beta2, weight_decay=0.0,
                                   eps=group["eps"] / correction2 ** 0.5, amsgrad=False,
                                   maximize=False)
                continue
            torch._foreach_lerp_(means, gs, 1.0 - beta1)
            torch._foreach_mul_(squares, beta2)
            torch._foreach_addcmul_(squares, gs, gs, value=1.0 - beta2)
            torch._foreach_add_(ps, means, alpha=-group["lr"] / correction1)


def _closure(closure: Any) -> Any:
    with torch.enable_grad():
        return closure()
