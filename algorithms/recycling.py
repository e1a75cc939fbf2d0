"""Recycling dormant units (ReDo).

Sokar et al. 2023, "The Dormant Neuron Phenomenon in Deep Reinforcement Learning"
(ICML, arXiv 2302.12902): in value-based deep RL a growing share of a network's
ReLU units goes (nearly) silent and stays so, and the network learns on what is left.
ReDo scores each unit of a layer by its mean activation over a batch, relative to the
layer's mean,

    s_i = E_x |h_i(x)| / ( (1/H) sum_k E_x |h_k(x)| ),

calls it dormant when ``s_i <= tau`` and, every few thousand updates, re-initialises
the unit's incoming weights from the layer's own initialisation and zeroes its
outgoing weights (so the network's output is unchanged at the moment of recycling),
and resets the optimizer's moments of those weights. Issue 17 saw it on MinAtar: at
Adam lr 2.5e-4, 91% of Seaquest's dense layer was dead after 3.3M env steps.

Which layers can be recycled is read off the network's graph (``torch.fx``): a ReLU
module whose input comes straight from a ``Linear``/``ConvNd`` used nowhere else, and
whose output goes only into ``Linear``/``ConvNd`` layers, directly or through an
``nn.Flatten`` (a conv channel then owns a block of the dense layer's columns). A
ReLU whose output also feeds anything else (a residual sum, a functional op, the
network's output) is left alone: zeroing the known consumers would not keep the
function, so ReDo's premise would not hold. :attr:`DormantRecycler.skipped` says
why each ReLU was left out.

    recycler = DormantRecycler(network, tau=0.1)
    recycler.recycle(batch_obs, optimizer=optimizer)   # -> units recycled
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any

import torch
from torch import fx, nn

_WEIGHTED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclasses.dataclass(frozen=True)
class RecyclableLayer:
    """One ReLU with the layer feeding it and the layers it feeds. ``outgoing`` holds
    ``(module name, span)``: unit ``i`` owns input columns ``[i * span, (i + 1) * span)``
    of that layer (span > 1 for a conv channel flattened into a dense layer)."""

    activation: str
    incoming: str
    outgoing: tuple[tuple[str, int], ...]
    units: int
    axis: int  # of the activation holding the units: 1 for a conv's channels, -1 for a Linear's features


class _LeafTracer(fx.Tracer):
    # Every module without children is one node: the graph needs only which module
    # feeds which, and a leaf's own forward (a shape check, a cast) may not trace.
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return next(iter(m.children()), None) is None


def recyclable_layers(network: nn.Module) -> tuple[list[RecyclableLayer], dict[str, str]]:
    """The ReLUs of ``network`` that ReDo can recycle, and ``{relu name: reason}`` for
    those it cannot. Raises ``ValueError`` if ``torch.fx`` cannot trace the network."""
    if not isinstance(network, nn.Module):
        raise TypeError(f"network must be an nn.Module, got {type(network).__name__}")
    try:
        graph = _LeafTracer().trace(network)
    except Exception as error:  # fx raises many types (TraceError, TypeError, ...)
        raise ValueError(f"recycling dormant units needs a network torch.fx can trace (module graph "
                         f"without data-dependent control flow outside its leaf modules); tracing "
                         f"{type(network).__name__} failed: {type(error).__name__}: {error}") from error
    modules = dict(network.named_modules())
    calls: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1

    def module_of(node: Any) -> nn.Module | None:
        return modules[node.target] if isinstance(node, fx.Node) and node.op == "call_module" else None

    layers: list[RecyclableLayer] = []
    skipped: dict[str, str] = {}
    for node in graph.nodes:
        relu = module_of(node)
        if not isinstance(relu, nn.ReLU):
            continue
        name = node.target
        if calls[name] > 1:
            skipped[name] = "the ReLU module is applied in more than one place"
            continue
        source = node.args[0] if node.args else None
        incoming = module_of(source)
        if not isinstance(incoming, _WEIGHTED):
            skipped[name] = "its input is not the output of a Linear or Conv layer"
            continue
        if calls[source.target] > 1 or len(source.users) != 1:
            skipped[name] = f"its input layer {source.target!r} is used elsewhere too"
            continue
        units = incoming.out_features if isinstance(incoming, nn.Linear) else incoming.out_channels
        outgoing, reason = _consumers(node, incoming, units, module_of, calls)
        if reason is not None:
            skipped[name] = reason
            continue
        layers.append(RecyclableLayer(activation=name, incoming=source.target, outgoing=tuple(outgoing),
                                      units=units, axis=1 if isinstance(incoming, _CONV) else -1))
    return layers, skipped


def _consumers(node: fx.Node, incoming: nn.Module, units: int, module_of: Any,
               calls: dict[str, int]) -> tuple[list[tuple[str, int]], str | None]:
    out: list[tuple[str, int]] = []
    frontier = [(user, False) for user in node.users]
    while frontier:
        user, flattened = frontier.pop()
        module = module_of(user)
        if isinstance(module, nn.Flatten) and not flattened and module.start_dim == 1 and module.end_dim == -1:
            frontier += [(u, True) for u in user.users]
            continue
        if not isinstance(module, _WEIGHTED):
            return out, f"its output also feeds {user.format_node()!r}, which ReDo cannot zero"
        if calls[user.target] > 1:
            return out, f"its consumer {user.target!r} is applied in more than one place"
        if isinstance(module, _CONV):
            if flattened or not isinstance(incoming, _CONV) or module.in_channels != units or module.groups != 1:
                return out, f"its consumer {user.target!r} does not take its units as input channels"
            out.append((user.target, 1))
        else:
            if isinstance(incoming, _CONV) and not flattened:
                return out, f"its consumer {user.target!r} is a Linear on unflattened conv channels"
            # Flattening keeps a conv channel's positions together (channel-major);
            # a Linear's units are contiguous only when nothing else was flattened in.
            if module.in_features % units or (not isinstance(incoming, _CONV) and module.in_features != units):
                return out, (f"its consumer {user.target!r} has {module.in_features} inputs, which do not "
                             f"split into one block per unit of its {units}")
            out.append((user.target, module.in_features // units))
    if not out:
        return out, "nothing consumes its output"
    return out, None


class DormantRecycler:
    """Scores and recycles the dormant units of ``network`` (ReDo, Sokar et al. 2023).

    ``tau`` is the dormancy threshold on the relative score ``s_i`` (0: only units
    that never fire on the batch). Raises ``ValueError`` if no ReLU of the network can
    be recycled (``skipped`` in the message says why)."""

    def __init__(self, network: nn.Module, *, tau: float = 0.1) -> None:
        if not 0.0 <= tau < 1.0:
            raise ValueError(f"tau must be in [0, 1), got {tau}")
        self.network = network
        self.tau = float(tau)
        self.layers, self.skipped = recyclable_layers(network)
        if not self.layers:
            reasons = "; ".join(f"{name}: {why}" for name, why in self.skipped.items()) or "it has no nn.ReLU"
            raise ValueError(f"no layer of {type(network).__name__} can be recycled ({reasons})")
        self._modules = dict(network.named_modules())
        self.recycled = 0  # units recycled so far
        self.dormant_share = 0.0  # at the last scoring, over all recyclable units

    @torch.no_grad()
    def scores(self, obs: Any) -> dict[str, torch.Tensor]:
        """Each recyclable layer's relative unit scores ``s_i`` on one forward of ``obs``."""
        means: dict[str, torch.Tensor] = {}

        def record(layer: RecyclableLayer, _module: nn.Module, _inputs: Any, output: torch.Tensor) -> None:
            out = output.detach().abs().movedim(layer.axis, -1)
            means[layer.activation] = out.reshape(-1, out.shape[-1]).mean(dim=0)

        hooks = [self._modules[layer.activation].register_forward_hook(functools.partial(record, layer))
                 for layer in self.layers]
        try:
            self.network(obs)
        finally:
            for hook in hooks:
                hook.remove()
        return {name: mean / (mean.mean() + 1e-9) for name, mean in means.items()}

    @torch.no_grad()
    def recycle(self, obs: Any, *, optimizer: torch.optim.Optimizer | None = None) -> int:
        """Recycle the units dormant on ``obs`` (a batch the network takes); resets their
        weights' state in ``optimizer`` (every state tensor shaped like the weight:
        Adam's moments, RMSProp's averages, momentum). Returns the count recycled."""
        scores = self.scores(obs)
        total = dormant_total = 0
        for layer in self.layers:
            score = scores.get(layer.activation)
            if score is None:
                continue  # the ReLU did not run on this input
            dormant = torch.nonzero(score <= self.tau).flatten()
            total += layer.units
            dormant_total += dormant.numel()
            if dormant.numel():
                self._reinitialise(layer, dormant, optimizer)
        self.dormant_share = dormant_total / total if total else 0.0
        self.recycled += dormant_total
        return dormant_total

    def _reinitialise(self, layer: RecyclableLayer, units: torch.Tensor, optimizer: Any) -> None:
        incoming = self._modules[layer.incoming]
        fresh = copy.deepcopy(incoming)  # a Linear/ConvNd: its own init draws the new rows
        fresh.reset_parameters()
        for param, new in ((incoming.weight, fresh.weight), (incoming.bias, fresh.bias)):
            if param is not None:
                param[units] = new[units]
                _reset_state(optimizer, param, (units,))
        for name, span in layer.outgoing:
            weight = self._modules[name].weight
            columns = (units[:, None] * span + torch.arange(span, device=units.device)).flatten()
            weight[:, columns] = 0.0
            _reset_state(optimizer, weight, (slice(None), columns))


def _reset_state(optimizer: Any, param: torch.Tensor, index: tuple[Any, ...]) -> None:
    if optimizer is None:
        return
    for value in optimizer.state.get(param, {}).values():
        if isinstance(value, torch.Tensor) and value.shape == param.shape:
            value[index] = 0.0
