"""TensorPipe device maps: what lets RPC carry CUDA tensors GPU to GPU.

Without device maps TensorPipe refuses a CUDA tensor in an RPC message, so rlpar's
servers move CUDA tensors to CPU before they travel (``keep_device=False``). With
them (``World(device_maps=...)``, both directions, set when the World starts) a
tensor on this rank's device arrives on the peer's device, and the servers may keep
it there (``keep_device=True``). A map is keyed by the peer's *name* (a World names
rank r ``rank{r}``) and maps this rank's devices to the peer's; TensorPipe replies
with the inverse map. A rejoining rank cannot use device maps (its peers' maps were
fixed when the world started), so worlds with restartable ranks keep CPU transfers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def peer_device_maps(
    ranks: Iterable[int],
    rank: int,
    device_of: Callable[[int], Any],
    *,
    name_of: Callable[[int], str] = "rank{}".format,
) -> dict[str, dict[str, str]]:
    """Device maps from ``rank`` to each other rank in ``ranks``: this rank's device
    (``device_of(rank)``) to that peer's (``device_of(peer)``), keyed by the peer's
    name. Devices are given as ``"cuda:N"``, ``N`` or ``torch.device`` and returned
    as strings, which TensorPipe's options accept on any machine (an int needs CUDA
    to be parsed). E.g. one GPU per rank on one node:
    ``peer_device_maps(range(world_size), rank, lambda r: f"cuda:{r}")``."""
    mine = _device_name(device_of(rank))
    return {name_of(peer): {mine: _device_name(device_of(peer))} for peer in ranks if peer != rank}


def _device_name(device: Any) -> str:
    if isinstance(device, bool):
        raise TypeError(f"a device must be 'cuda:N', N or a torch.device, got {device!r}")
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"a CUDA device index must be >= 0, got {device}")
        return f"cuda:{device}"
    text = str(device)
    if not text.startswith("cuda:") or not text[5:].isdigit():
        raise ValueError(f"device maps map CUDA devices ('cuda:N'), got {device!r}")
    return text
