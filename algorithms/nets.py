"""Default networks. Every algorithm also accepts any ``nn.Module`` in their place.

- :func:`mlp` for vector observations,
- :func:`nature_cnn` the convolutional torso of Mnih et al. 2015 ("Human-level
  control through deep reinforcement learning", Nature 518) for stacked frames,
  and :func:`small_cnn`, the one of Mnih et al. 2013 ("Playing Atari with Deep
  Reinforcement Learning", arXiv 1312.5602): a third of the Nature CNN's work per
  frame (:func:`frames_cnn` picks one by name, a config's ``cnn`` field),
- :func:`minatar_conv` the torso of Young & Tian 2019 ("MinAtar: An Atari-Inspired
  Testbed for Thorough and Reproducible Reinforcement Learning Experiments", arXiv
  1903.03176) for small channels-last images such as MinAtar's 10x10xC booleans,
- :class:`DuelingHead` the value/advantage head of Wang et al. 2016 ("Dueling
  network architectures for deep reinforcement learning", ICML),
- :func:`q_network` which picks a torso by observation shape and adds a head.

Every default torso takes ``layer_norm=True`` to normalise each hidden layer before
its activation (Ba et al. 2016, "Layer Normalization", arXiv 1607.06450): PQN
(:mod:`algorithms.pqn`) relies on it to learn stably without a target network.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import nn

from algorithms.params import check_cnn


def mlp(
    in_dim: int,
    out_dim: int,
    *,
    hidden: Sequence[int] = (64, 64),
    activation: type[nn.Module] = nn.ReLU,
    layer_norm: bool = False,
) -> nn.Sequential:
    """A multilayer perceptron ``in_dim -> hidden... -> out_dim`` (no output activation;
    with ``layer_norm``, a LayerNorm between each hidden layer and its activation)."""
    if in_dim <= 0 or out_dim <= 0 or any(h <= 0 for h in hidden):
        raise ValueError(f"mlp sizes must be positive, got in={in_dim} hidden={tuple(hidden)} out={out_dim}")
    layers: list[nn.Module] = []
    sizes = [in_dim, *hidden]
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), *([nn.LayerNorm(b)] if layer_norm else []), activation()]
    layers.append(nn.Linear(sizes[-1], out_dim))
    return nn.Sequential(*layers)


def scale_bytes(x: torch.Tensor) -> torch.Tensor:
    """uint8 pixels -> floats in [0, 1]; other tensors as float32, taken as scaled."""
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()


class ScaleBytes(nn.Module):
    """uint8 pixels -> floats in [0, 1] (:func:`scale_bytes`); replay stores bytes (4x
    smaller than floats)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale_bytes(x)


class FlattenFloat(nn.Flatten):
    """``nn.Flatten`` that also casts to float32: a vector Box of integers (uint8,
    int64) reaches the MLP as its values, unscaled, instead of failing in the first
    matmul. Parameter-free, so state dicts are those of ``nn.Flatten``'s networks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).float()


class ChannelNorm(nn.LayerNorm):
    """LayerNorm over the channels of a ``(B, C, H, W)`` feature map, at each position
    on its own: what a LayerNorm after a convolution computes in channels-last
    frameworks (PQN's networks, written in flax). Normalising each position rather than
    the whole map keeps a spatial layer's features comparable across positions."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.movedim(1, -1)).movedim(-1, 1)


def _norm(kind: str, size: int, layer_norm: bool) -> list[nn.Module]:
    if not layer_norm:
        return []
    return [ChannelNorm(size) if kind == "conv" else nn.LayerNorm(size)]


# The frames torsos' conv layers, (filters, kernel, stride) each, and dense width.
NATURE_CONVS, NATURE_FEATURES = ((32, 8, 4), (64, 4, 2), (64, 3, 1)), 512
SMALL_CONVS, SMALL_FEATURES = ((16, 8, 4), (32, 4, 2)), 256


def _frames_torso(name: str, in_channels: int, convs: Sequence[tuple[int, int, int]], out_features: int,
                  layer_norm: bool) -> nn.Sequential:
    """Bytes scaled, ``convs`` on 84x84 frames, one dense layer; each followed by a
    norm where ``layer_norm`` and a ReLU."""
    if in_channels <= 0 or out_features <= 0:
        raise ValueError(f"{name} sizes must be positive, got in_channels={in_channels} "
                         f"out_features={out_features}")
    layers: list[nn.Module] = [ScaleBytes()]
    channels, side = in_channels, 84
    for filters, kernel, stride in convs:
        layers += [nn.Conv2d(channels, filters, kernel_size=kernel, stride=stride),
                   *_norm("conv", filters, layer_norm), nn.ReLU()]
        channels, side = filters, (side - kernel) // stride + 1
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(channels * side * side, out_features),
                         *_norm("dense", out_features, layer_norm), nn.ReLU())


def nature_cnn(in_channels: int = 4, *, out_features: int = NATURE_FEATURES, layer_norm: bool = False) -> nn.Sequential:
    """The Nature DQN torso for 84x84 frames: 3 conv layers (32 8x8 filters at stride
    4, 64 4x4 at stride 2, 64 3x3 at stride 1) and one dense layer (``layer_norm``:
    each followed by a :class:`ChannelNorm` or LayerNorm).

    Accepts uint8 or float input of shape ``(batch, in_channels, 84, 84)``.
    """
    return _frames_torso("nature_cnn", in_channels, NATURE_CONVS, out_features, layer_norm)


def small_cnn(in_channels: int = 4, *, out_features: int = SMALL_FEATURES, layer_norm: bool = False) -> nn.Sequential:
    """The torso of the first DQN (Mnih et al. 2013) for 84x84 frames: two conv layers
    (16 8x8 filters at stride 4, 32 4x4 at stride 2) and one dense layer of 256.
    About 3M multiply-adds a frame against the Nature CNN's 9M: on a CPU, where
    training the network is what bounds an Atari run, it trains about 3x the frames
    per second. Input and ``layer_norm`` as :func:`nature_cnn`'s."""
    return _frames_torso("small_cnn", in_channels, SMALL_CONVS, out_features, layer_norm)


# The frames torsos by the name a config's ``cnn`` field gives (algorithms.params.CNNS), and their features.
FRAMES_CNNS: dict[str, tuple[Callable[..., nn.Sequential], int]] = {"nature": (nature_cnn, NATURE_FEATURES),
                                                                     "small": (small_cnn, SMALL_FEATURES)}


def frames_cnn(cnn: str, in_channels: int, *, layer_norm: bool = False) -> tuple[nn.Sequential, int]:
    """The frames torso named ``cnn`` (see :data:`FRAMES_CNNS`) and its number of features."""
    check_cnn(cnn)
    make, features = FRAMES_CNNS[cnn]
    return make(in_channels, out_features=features, layer_norm=layer_norm), features


class ChannelsLast(nn.Module):
    """``(B, H, W, C)`` observations of any dtype -> ``(B, C, H, W)`` float32.

    One strided view and one cast kernel on the whole batch: bool and uint8 masks
    reach the convolution without a copy in between. Values are used as they are (no
    /255): observations this small are masks or small integer codes, not pixels.

    ``contiguous`` (set by :class:`algorithms.fast.FastForward`): the cast writes a
    contiguous NCHW tensor instead, in the same one kernel. The convolution's output is
    then contiguous too: flattening it for the dense layer copies nothing, and the
    ReLU's backward meets a gradient of its own layout (a channels-last output made it
    take a strided path, 0.2 ms at batch 128). The MinAtar torso's forward and
    backward at batch 128: 7-13% less CPU; a no-grad forward 20% less.
    """

    contiguous = False

    def __init__(self, height: int, width: int, channels: int) -> None:
        super().__init__()
        self.shape = (int(height), int(width), int(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or tuple(x.shape[1:]) != self.shape:
            raise ValueError(f"expected a batch of (H, W, C) = {self.shape} observations, "
                             f"got shape {tuple(x.shape)}")
        if self.contiguous:
            return x.permute(0, 3, 1, 2).to(torch.float32, memory_format=torch.contiguous_format)
        return x.permute(0, 3, 1, 2).float()


def contiguous_layout(module: nn.Module) -> None:
    """Have ``module``'s :class:`ChannelsLast` inputs write contiguous NCHW (see its
    ``contiguous``), unless a :class:`ChannelNorm` in it wants the channels innermost:
    PQN's nets with it took 21% longer per update in NCHW. The parameters and what the
    module computes are unchanged; only the activations' memory layout is."""
    modules = list(module.modules())
    if any(isinstance(m, ChannelNorm) for m in modules):
        return
    for m in modules:
        if isinstance(m, ChannelsLast):
            m.contiguous = True


MINATAR_FEATURES = 128  # the dense layer of the MinAtar torso


def minatar_conv(
    in_channels: int, *, height: int = 10, width: int = 10, filters: int = 16,
    out_features: int = MINATAR_FEATURES, layer_norm: bool = False,
) -> nn.Sequential:
    """The MinAtar torso (Young & Tian 2019, section 4): one convolution of ``filters``
    3x3 kernels with stride 1 and no padding, then a dense layer of ``out_features``
    units, both with ReLU (``layer_norm``: a :class:`ChannelNorm` or LayerNorm before
    each ReLU, PQN's MinAtar network).

    Takes channels-last ``(batch, height, width, in_channels)`` input, bool, uint8 or
    float, as MinAtar's envs emit it; the permute and the cast happen inside.
    """
    if min(in_channels, filters, out_features) <= 0 or min(height, width) < 3:
        raise ValueError(f"minatar_conv needs positive sizes and a 3x3 or larger image, got "
                         f"height={height} width={width} in_channels={in_channels} "
                         f"filters={filters} out_features={out_features}")
    return nn.Sequential(
        ChannelsLast(height, width, in_channels),
        nn.Conv2d(in_channels, filters, kernel_size=3, stride=1), *_norm("conv", filters, layer_norm),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(filters * (height - 2) * (width - 2), out_features),
        *_norm("dense", out_features, layer_norm), nn.ReLU(),
    )


SMALL_IMAGE_MAX_SIDE = 32
SMALL_IMAGE_MAX_CHANNELS = 16


def is_small_image(obs_shape: Sequence[int]) -> bool:
    """Whether ``obs_shape`` is read as a small channels-last image ``(H, W, C)``: three
    dimensions with ``3 <= H, W <= 32`` and ``1 <= C <= min(16, H, W)``.

    The layout is decided by the shape alone (the dtype, bool, uint8 or float, only
    changes the cast): MinAtar's ``(10, 10, 4..10)`` qualifies, Atari's channels-first
    ``(4, 84, 84)`` does not, and neither does a channels-first ``(C, H, W)`` with more
    rows or columns than channels, e.g. ``(4, 10, 10)`` (C > H), which would otherwise
    be convolved along the wrong axes.
    """
    if len(obs_shape) != 3:
        return False
    height, width, channels = (int(d) for d in obs_shape)
    return (3 <= height <= SMALL_IMAGE_MAX_SIDE and 3 <= width <= SMALL_IMAGE_MAX_SIDE
            and 1 <= channels <= min(SMALL_IMAGE_MAX_CHANNELS, height, width))


ObservationFamily = Literal["frames", "small_image", "vector", "other"]


def observation_family(obs_shape: Sequence[int]) -> ObservationFamily:
    """Which default torso :func:`q_network` builds for ``obs_shape``: ``frames``
    (``(C, 84, 84)`` stacked frames, the Nature CNN), ``small_image`` (see
    :func:`is_small_image`, the MinAtar conv), ``vector`` (``(D,)``, an MLP), else
    ``other`` (no default network). Jobs also pick per-family hyperparameter
    defaults by it."""
    obs_shape = tuple(int(d) for d in obs_shape)
    if len(obs_shape) == 3 and obs_shape[1:] == (84, 84):
        return "frames"
    if is_small_image(obs_shape):
        return "small_image"
    if len(obs_shape) == 1:
        return "vector"
    return "other"


Linear = Callable[[int, int], nn.Module]  # (in_features, out_features) -> a linear layer


class DuelingHead(nn.Module):
    """``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')`` (Wang et al. 2016, eq. 9).

    Subtracting the mean advantage makes V and A identifiable; each stream has an
    optional hidden layer of ``hidden`` units, as in the paper. With ``n_atoms`` > 1
    the same sum is taken per atom on logits of shape ``(B, num_actions, n_atoms)``
    (a distributional head, as Rainbow combines them; Hessel et al. 2018, eq. in
    sec. 3). ``linear`` makes the streams' layers (e.g. noisy ones).
    """

    def __init__(self, in_features: int, num_actions: int, *, hidden: int = 0, n_atoms: int = 1,
                 linear: Linear = nn.Linear) -> None:
        super().__init__()
        if in_features <= 0 or num_actions <= 0 or hidden < 0 or n_atoms < 1:
            raise ValueError(f"DuelingHead sizes must be positive, got in_features={in_features} "
                             f"num_actions={num_actions} hidden={hidden} n_atoms={n_atoms}")
        self.num_actions, self.n_atoms = num_actions, n_atoms
        self.value = _stream(in_features, n_atoms, hidden, linear)
        self.advantage = _stream(in_features, num_actions * n_atoms, hidden, linear)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        advantage, value = self.advantage(features), self.value(features)
        if self.n_atoms > 1:
            advantage = advantage.unflatten(-1, (self.num_actions, self.n_atoms))
            value = value.unsqueeze(-2)
            return value + advantage - advantage.mean(dim=-2, keepdim=True)
        return value + advantage - advantage.mean(dim=-1, keepdim=True)


def _stream(in_features: int, out_features: int, hidden: int, linear: Linear = nn.Linear) -> nn.Module:
    if hidden == 0:
        return linear(in_features, out_features)
    return nn.Sequential(linear(in_features, hidden), nn.ReLU(), linear(hidden, out_features))


def q_head(features: int, num_actions: int, *, dueling: bool = True, n_atoms: int = 1, noisy: bool = False,
           noisy_sigma0: float = 0.5) -> nn.Module:
    """The head on a torso of ``features`` units: Q values ``(B, num_actions)``, or
    with ``n_atoms`` > 1 logits ``(B, num_actions, n_atoms)`` of a categorical return
    distribution (C51); dueling or one linear layer; ``noisy``: its linear layers are
    :class:`algorithms.noisy.NoisyLinear` (factorized, ``noisy_sigma0``)."""
    linear: Linear = nn.Linear
    if noisy:
        from algorithms.noisy import NoisyLinear

        linear = functools.partial(NoisyLinear, sigma0=noisy_sigma0)
    if dueling:
        return DuelingHead(features, num_actions, n_atoms=n_atoms, linear=linear)
    if n_atoms > 1:
        return nn.Sequential(linear(features, num_actions * n_atoms), nn.Unflatten(-1, (num_actions, n_atoms)))
    return linear(features, num_actions)


def q_network(
    obs_shape: Sequence[int],
    num_actions: int,
    *,
    hidden: Sequence[int] = (64, 64),
    dueling: bool = True,
    layer_norm: bool = False,
    n_atoms: int = 1,
    noisy: bool = False,
    noisy_sigma0: float = 0.5,
    cnn: str = "nature",
) -> nn.Sequential:
    """A Q network for ``obs_shape`` with a dueling head or a plain linear head on top of
    a torso picked by shape:

    * ``(C, 84, 84)`` stacked frames (channels first, as the Atari paths make them):
      the CNN ``cnn`` names (:data:`FRAMES_CNNS`: the Nature CNN by default);
    * a small channels-last image ``(H, W, C)`` by :func:`is_small_image` (MinAtar's
      ``10x10xC`` booleans): the MinAtar conv torso (128 features);
    * ``(D,)`` vectors: an MLP of ``hidden`` units.

    ``hidden`` applies to the MLP only; the conv torsos have their papers' sizes.
    ``layer_norm`` puts a LayerNorm before every hidden activation of the torso.
    ``n_atoms``, ``noisy``, ``noisy_sigma0``: the head's, see :func:`q_head`.
    """
    torso, features = default_torso(obs_shape, hidden=hidden, layer_norm=layer_norm, cnn=cnn)
    return nn.Sequential(torso, q_head(features, num_actions, dueling=dueling, n_atoms=n_atoms, noisy=noisy,
                                       noisy_sigma0=noisy_sigma0))


def default_torso(
    obs_shape: Sequence[int], *, hidden: Sequence[int] = (64, 64), layer_norm: bool = False, cnn: str = "nature"
) -> tuple[nn.Module, int]:
    """The torso :func:`q_network` puts under its head for ``obs_shape``, and its number
    of output features (recurrent networks put their core between the two)."""
    obs_shape = tuple(int(d) for d in obs_shape)
    family = observation_family(obs_shape)
    check_cnn(cnn)  # also where frames are not the input: a typo is refused everywhere
    torso: nn.Module
    if family == "frames":
        torso, features = frames_cnn(cnn, obs_shape[0], layer_norm=layer_norm)
    elif family == "small_image":
        height, width, channels = obs_shape
        torso = minatar_conv(channels, height=height, width=width, layer_norm=layer_norm)
        features = MINATAR_FEATURES
    elif family == "vector":
        if not hidden:
            raise ValueError("the default networks need at least one hidden layer for vector observations")
        torso = nn.Sequential(FlattenFloat(), mlp(obs_shape[0], hidden[-1], hidden=hidden[:-1], layer_norm=layer_norm),
                              *_norm("dense", hidden[-1], layer_norm), nn.ReLU())
        features = hidden[-1]
    else:
        raise ValueError(f"the default networks support (C, 84, 84) frames, small (H, W, C) images "
                         f"(see is_small_image) and (D,) vectors, got shape {obs_shape}; "
                         "pass a network of your own for other observations")
    return torso, features
