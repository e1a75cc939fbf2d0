"""Dead units: the share of a network's ReLU units that output zero on every input
it saw while being watched.

A unit that is zero on every input gets no gradient and stays off, so a network can
lose most of its width for good while its loss looks fine: the dormant-neuron effect
(Sokar et al. 2023, "The Dormant Neuron Phenomenon in Deep Reinforcement Learning",
arXiv 2302.12902), here at threshold 0 ("dead"). Issue 17 found it as the reason
Ape-X learned nothing on MinAtar's Asterix and Seaquest at Adam lr 1e-3 (95-98% of
the dense layer dead), which the loss curves did not show.

    with DeadUnits(network) as dead:
        evaluate(...)              # any forwards through ``network``
    dead.fractions()               # {"torso.5": 0.97, ...}

Only ``nn.ReLU`` modules are watched (a functional ``relu`` has no module to hook),
and only forwards that run the modules themselves count: a TorchScript module or
parameters called through ``torch.func`` do not fire module hooks. One ``nn.ReLU``
applied after several layers of the same width is measured over them together (a
unit is live if it is live in any of them): give each layer its own ReLU to tell
them apart.
"""

from __future__ import annotations

import collections
import functools
from types import TracebackType
from typing import Any

import torch
from torch import nn


class DeadUnits:
    """Watches every ``nn.ReLU`` of ``network`` while entered. A dense unit is live if
    it is positive for any input row; a conv channel (an output with more than two
    dimensions: ``(batch, channels, ...)``) is live if it is positive at any position
    of any row."""

    def __init__(self, network: nn.Module) -> None:
        if not isinstance(network, nn.Module):
            raise TypeError(f"network must be an nn.Module, got {type(network).__name__}")
        self._relus = {name: module for name, module in network.named_modules() if isinstance(module, nn.ReLU)}
        self._peak: dict[tuple[str, int], torch.Tensor] = {}  # by (name, width)
        self._hooks: list[Any] = []

    @property
    def layers(self) -> list[str]:
        """The watched ReLUs' names in the network (empty: nothing to measure)."""
        return list(self._relus)

    def __enter__(self) -> DeadUnits:
        if self._hooks:
            raise RuntimeError("DeadUnits is already watching; it cannot be entered twice at once")
        self._hooks = [module.register_forward_hook(functools.partial(self._record, name))
                       for name, module in self._relus.items()]
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _record(self, name: str, _module: nn.Module, _inputs: Any, output: torch.Tensor) -> None:
        # Each unit's peak over the batch (and a channel's positions) in one reduction:
        # a unit is live if its peak is positive. Two ops per forward, not five.
        out = output.detach()
        peak = out if out.dim() == 1 else out.amax(dim=(0, *range(2, out.dim())))
        key = (name, peak.shape[0])
        seen = self._peak.get(key)
        self._peak[key] = peak.clone() if seen is None else torch.maximum(seen, peak, out=seen)

    def fractions(self) -> dict[str, float]:
        """Per watched ReLU that ran at least once, the share of its units never
        positive (rounded to 4 decimals); ReLUs that never ran are left out. A ReLU
        seen at several widths (shared by layers) gets one entry per width,
        ``"<name>[<width>]"``."""
        widths = collections.Counter(name for name, _ in self._peak)
        return {(name if widths[name] == 1 else f"{name}[{width}]"): round((peak <= 0).float().mean().item(), 4)
                for (name, width), peak in self._peak.items()}
