"""Random shifts (DrQ) against a reference: each image is one of its (2 pad + 1)^2
shifted copies with the edges repeated, every offset is drawn, bytes come back scaled."""

import numpy as np
import pytest
import torch

from algorithms.augment import check_shift, random_shift


def shifted(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``image`` (C, H, W) moved so that output pixel (r, c) is input (r + dy, c + dx), clamped."""
    _, h, w = image.shape
    rows = np.clip(np.arange(h) + dy, 0, h - 1)
    cols = np.clip(np.arange(w) + dx, 0, w - 1)
    return image[:, rows][:, :, cols]


def test_each_image_is_one_of_its_shifted_copies_and_every_offset_occurs():
    pad = 2
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (300, 2, 9, 11), dtype=np.uint8)
    out = random_shift(torch.from_numpy(images), pad=pad, generator=torch.Generator().manual_seed(0))
    assert out.dtype == torch.float32 and out.shape == images.shape
    assert 0.0 <= out.min() and out.max() <= 1.0
    seen = set()
    for image, got in zip(images, out.numpy()):
        pixels = np.rint(got * 255.0)
        matches = [(dy, dx) for dy in range(-pad, pad + 1) for dx in range(-pad, pad + 1)
                   if np.array_equal(pixels, shifted(image, dy, dx))]
        assert matches, "an output that is no shift of its image"
        seen.add(matches[0])
    assert len(seen) == (2 * pad + 1) ** 2


def test_floats_are_shifted_as_they_are_and_the_draws_repeat_by_seed():
    images = torch.rand(16, 3, 12, 12)
    a = random_shift(images, pad=3, generator=torch.Generator().manual_seed(7))
    b = random_shift(images, pad=3, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    assert a.min() >= images.min() and a.max() <= images.max()  # repeated pixels, not scaled
    assert not torch.equal(a, images)


@pytest.mark.parametrize(("shape", "pad", "match"), [
    ((4,), 4, r"shape \(C, H, W\), got observations of shape \(4,\)"),
    ((10, 10), 1, "shape"),
    ((1, 8, 84), 4, "larger than 8 pixels a side, got 8x84"),
    ((4, 84, 84), 0, "shift_pad must be an int >= 1, got 0"),
    ((4, 84, 84), True, "shift_pad"),
])
def test_bad_shapes_and_pads_are_named(shape, pad, match):
    with pytest.raises(ValueError, match=match):
        check_shift(shape, pad)


def test_a_batch_without_its_batch_axis_is_refused():
    with pytest.raises(ValueError, match=r"a batch \(B, C, H, W\), got shape \(4, 84, 84\)"):
        random_shift(torch.zeros(4, 84, 84, dtype=torch.uint8), pad=4)


def test_the_accelerators_gather_crops_as_the_cpu_loop():
    """``crop`` runs one gather off the CPU (no GPU in CI: the gather itself, on CPU tensors)."""
    from algorithms.augment import crop, crop_gather

    padded = torch.rand(6, 3, 14, 15)
    starts = torch.tensor([[0, 0], [4, 5], [2, 1], [4, 0], [0, 5], [3, 3]])
    loop = crop(padded, starts, height=10, width=10)
    assert torch.equal(crop_gather(padded, starts, height=10, width=10), loop)
    assert torch.equal(loop[1], padded[1, :, 4:14, 5:15])
