"""Place models on devices: little cross-device traffic, no device over its memory.

Machin's ModelAssigner optimizes a relaxed placement by gradient descent; this one
solves the same problem with a greedy start and local search, which never leaves
a feasible placement and never produces NaN. The objective is

    cost = cross_traffic / total_traffic + balance * sum_d (load_d / capacity_d) ** 2

where ``cross_traffic`` sums the connection weights of model pairs placed on
different devices and the second term spreads memory over devices. Equal-cost
choices go to the device listed first (list GPUs first to prefer them); the seed
only decides the order in which equally sized models and moves are tried, so a
fixed seed gives a fixed placement. The balance term compares relative memory use,
so with a large CPU listed next to GPUs it favours the CPU: pass ``balance=0`` to
fill devices in the order listed instead.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping

import torch
from torch import nn

from rlpar.errors import RlparError


class AssignmentError(RlparError, ValueError):
    """The models cannot be placed within the devices' memory."""


def module_bytes(module: nn.Module) -> int:
    """Bytes held by a module's parameters and buffers."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def default_devices(memory_fraction: float = 0.9) -> dict[torch.device, int]:
    """Every visible GPU (usable memory), or the CPU (physical memory) without one."""
    if torch.cuda.is_available():
        return {
            torch.device("cuda", i): int(
                torch.cuda.get_device_properties(i).total_memory * memory_fraction
            )
            for i in range(torch.cuda.device_count())
        }
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {torch.device("cpu"): int(physical * memory_fraction)}


class ModelAssigner:
    """Assign named models to devices.

    ``models`` maps a name to an ``nn.Module`` (size measured) or a size in bytes;
    ``devices`` maps a device to its capacity in bytes (default: :func:`default_devices`);
    ``connections`` maps a pair of model names to how much they talk (any
    non-negative unit, symmetric). The result is in ``placement``; ``move``
    puts modules on their devices.
    """

    def __init__(
        self,
        *,
        models: Mapping[str, nn.Module | int],
        devices: Mapping[torch.device | str, int] | None = None,
        connections: Mapping[tuple[str, str], float] | None = None,
        balance: float = 0.5,
        seed: int = 0,
        max_rounds: int = 100,
    ) -> None:
        if not isinstance(balance, (int, float)) or not math.isfinite(balance) or balance < 0:
            raise ValueError(f"balance must be a finite number >= 0, got {balance!r}")
        if not isinstance(max_rounds, int) or max_rounds < 0:
            raise ValueError(f"max_rounds must be an int >= 0, got {max_rounds!r}")
        self.sizes = _sizes(models)
        self.devices, self.capacities = _devices(default_devices() if devices is None else devices)
        self.edges = _edges(connections or {}, self.sizes)
        self.balance = float(balance)
        self._total_traffic = sum(self.edges.values())
        self._rng = random.Random(seed)
        assignment = self._greedy()
        self._improve(assignment, max_rounds)
        self._assignment = assignment
        self.cost = self._cost(assignment)
        self.placement: dict[str, torch.device] = {
            name: self.devices[d] for name, d in sorted(assignment.items())
        }

    def move(self, modules: Mapping[str, nn.Module]) -> dict[str, nn.Module]:
        """Move each module to its assigned device (in place, as ``Module.to``)."""
        unknown = sorted(set(modules) - set(self.placement))
        if unknown:
            raise KeyError(f"no placement for models {unknown}")
        return {name: module.to(self.placement[name]) for name, module in modules.items()}

    def loads(self) -> dict[torch.device, int]:
        """Bytes placed on each device."""
        load = dict.fromkeys(self.devices, 0)
        for name, d in self._assignment.items():
            load[self.devices[d]] += self.sizes[name]
        return load

    # -- search ---------------------------------------------------------------

    def _cost(self, assignment: Mapping[str, int]) -> float:
        # Models not placed yet (during the greedy pass) add no traffic.
        cross = sum(
            w
            for (a, b), w in self.edges.items()
            if a in assignment and b in assignment and assignment[a] != assignment[b]
        )
        traffic = cross / self._total_traffic if self._total_traffic > 0 else 0.0
        load = [0] * len(self.devices)
        for name, d in assignment.items():
            load[d] += self.sizes[name]
        spread = sum((load[d] / self.capacities[d]) ** 2 for d in range(len(self.devices)))
        return traffic + self.balance * spread

    def _free(self, assignment: Mapping[str, int]) -> list[int]:
        free = list(self.capacities)
        for name, d in assignment.items():
            free[d] -= self.sizes[name]
        return free

    def _greedy(self) -> dict[str, int]:
        names = list(self.sizes)
        self._rng.shuffle(names)  # seeded tie order among equal sizes
        names.sort(key=lambda n: -self.sizes[n])
        biggest = max(self.capacities)
        assignment: dict[str, int] = {}
        for name in names:
            size = self.sizes[name]
            if size > biggest:
                raise AssignmentError(
                    f"model {name!r} needs {size} bytes but the largest device has {biggest}"
                )
            free = self._free(assignment)
            best, best_cost = None, math.inf
            for d in range(len(self.devices)):
                if free[d] < size:
                    continue
                cost = self._cost({**assignment, name: d})
                if cost < best_cost - 1e-12:
                    best, best_cost = d, cost
            if best is None:
                raise AssignmentError(
                    f"cannot fit model {name!r} ({size} bytes): free memory per device is "
                    f"{dict(zip(map(str, self.devices), free))}"
                )
            assignment[name] = best
        return assignment

    def _improve(self, assignment: dict[str, int], max_rounds: int) -> None:
        """Best single move or pairwise swap per round, while the cost drops."""
        names = sorted(self.sizes)
        for _ in range(max_rounds):
            self._rng.shuffle(names)
            current = self._cost(assignment)
            free = self._free(assignment)
            best_gain, best_change = 1e-12, None
            for i, a in enumerate(names):
                for d in range(len(self.devices)):
                    if d != assignment[a] and free[d] >= self.sizes[a]:
                        gain = current - self._cost({**assignment, a: d})
                        if gain > best_gain:
                            best_gain, best_change = gain, {a: d}
                for b in names[i + 1 :]:
                    da, db = assignment[a], assignment[b]
                    delta = self.sizes[a] - self.sizes[b]
                    if da == db or free[db] < delta or free[da] < -delta:
                        continue
                    gain = current - self._cost({**assignment, a: db, b: da})
                    if gain > best_gain:
                        best_gain, best_change = gain, {a: db, b: da}
            if best_change is None:
                return
            assignment.update(best_change)


def _sizes(models: Mapping[str, nn.Module | int]) -> dict[str, int]:
    if not isinstance(models, Mapping) or not models:
        raise ValueError("models must be a non-empty mapping of name to nn.Module or size in bytes")
    sizes = {}
    for name, model in models.items():
        if isinstance(model, nn.Module):
            sizes[name] = module_bytes(model)
        elif isinstance(model, int) and not isinstance(model, bool) and model >= 0:
            sizes[name] = model
        else:
            raise ValueError(
                f"model {name!r} must be an nn.Module or a size in bytes >= 0, got {model!r}"
            )
    return sizes


def _devices(devices: Mapping[torch.device | str, int]) -> tuple[list[torch.device], list[int]]:
    if not isinstance(devices, Mapping) or not devices:
        raise ValueError("devices must be a non-empty mapping of device to capacity in bytes")
    out, caps = [], []
    for device, capacity in devices.items():
        device = torch.device(device)
        if device in out:
            raise ValueError(f"device {device} listed twice")
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0:
            raise ValueError(f"capacity of {device} must be an int > 0 bytes, got {capacity!r}")
        out.append(device)
        caps.append(capacity)
    return out, caps


def _edges(
    connections: Mapping[tuple[str, str], float], sizes: Mapping[str, int]
) -> dict[tuple[str, str], float]:
    edges: dict[tuple[str, str], float] = {}
    for pair, weight in connections.items():
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ValueError(f"connection keys must be (model, model) pairs, got {pair!r}")
        a, b = pair
        for name in pair:
            if name not in sizes:
                raise ValueError(f"connection {pair!r} names unknown model {name!r}")
        if a == b:
            raise ValueError(f"connection {pair!r} connects a model to itself")
        if not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise ValueError(
                f"connection {pair!r} weight must be a finite number >= 0, got {weight!r}"
            )
        key = (a, b) if a < b else (b, a)
        edges[key] = edges.get(key, 0.0) + float(weight)
    return edges


__all__ = ["AssignmentError", "ModelAssigner", "default_devices", "module_bytes"]
