"""Image augmentation of a learner's batch.

Random shifts (Kostrikov, Yarats & Fergus 2021, "Image Augmentation Is All You Need:
Regularizing Deep Reinforcement Learning from Pixels", ICLR; DrQ): each image of the
batch moves by up to ``pad`` pixels in each direction, its border pixels repeated into
the gap, as padding by replication and cropping back to the original size do. DrQ
shifts a Q-learner's observations and next observations independently, which
regularizes the value of a state towards that of its slightly moved copies; on Atari
100K it made DQN about twice as data-efficient.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F

from algorithms.nets import scale_bytes

# What DQNConfig.augment (--augment) names: no augmentation, or random shifts.
Augment = Literal["none", "shift"]
AUGMENTATIONS: tuple[str, ...] = get_args(Augment)


def check_pad(pad: int) -> None:
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 1:
        raise ValueError(f"shift_pad must be an int >= 1, got {pad!r}")


def check_shift(shape: tuple[int, ...], pad: int) -> None:
    """ValueError unless images of ``shape`` (per sample: ``(C, H, W)``) can be shifted
    by ``pad`` pixels."""
    check_pad(pad)
    if len(shape) != 3:
        raise ValueError(f"random shifts need images of shape (C, H, W), got observations of shape {shape}")
    if min(shape[1:]) <= 2 * pad:
        raise ValueError(f"random shifts of {pad} pixels need images larger than {2 * pad} pixels a side, "
                         f"got {shape[1]}x{shape[2]}")


def random_shift(images: torch.Tensor, *, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``images`` ``(B, C, H, W)`` as float32, each moved by its own random whole-pixel
    offset in ``[-pad, pad]`` along both axes, the edge rows and columns repeated into
    the gap. uint8 pixels come back scaled to [0, 1] (:func:`algorithms.nets.scale_bytes`,
    the frames networks' rule, which takes floats as scaled)."""
    if images.dim() != 4:
        raise ValueError(f"random_shift takes a batch (B, C, H, W), got shape {tuple(images.shape)}")
    check_shift(tuple(images.shape[1:]), pad)
    batch, _, height, width = images.shape
    # Replicate-padding is a float kernel; scaling first also spares the network's forwards it.
    padded = F.pad(scale_bytes(images), (pad, pad, pad, pad), mode="replicate")
    starts = torch.randint(0, 2 * pad + 1, (batch, 2), generator=generator)
    return crop(padded, starts, height=height, width=width)


def crop(padded: torch.Tensor, starts: torch.Tensor, *, height: int, width: int) -> torch.Tensor:
    """Image ``i`` of ``padded`` cut to ``height x width`` from row ``starts[i, 0]``,
    column ``starts[i, 1]``. On the CPU one slice copy per image (a quarter of a
    gather of every pixel's cost at 32 x 4 x 84 x 84); elsewhere one gather, since a
    kernel launch per image would cost more than the copy."""
    if padded.device.type == "cpu":
        out = padded.new_empty((padded.shape[0], padded.shape[1], height, width))
        for i, (top, left) in enumerate(starts.tolist()):
            out[i] = padded[i, :, top:top + height, left:left + width]
        return out
    return crop_gather(padded, starts.to(padded.device), height=height, width=width)


def crop_gather(padded: torch.Tensor, starts: torch.Tensor, *, height: int, width: int) -> torch.Tensor:
    """:func:`crop` as one advanced-indexing gather (the accelerators' path)."""
    batch, channels = padded.shape[:2]
    device = padded.device
    rows = starts[:, :1] + torch.arange(height, device=device)  # (B, H)
    cols = starts[:, 1:] + torch.arange(width, device=device)  # (B, W)
    return padded[torch.arange(batch, device=device)[:, None, None, None],
                  torch.arange(channels, device=device)[None, :, None, None],
                  rows[:, None, :, None], cols[:, None, None, :]]
