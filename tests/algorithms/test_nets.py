"""algorithms.nets: the MinAtar conv torso, its layout rule, and the Q and actor-critic
networks built on it (the Nature CNN and MLP paths are covered in test_dqn.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from algorithms.a2c import A2C, A2CConfig
from algorithms.actor_critic import SharedBody, default_actor_critic
from algorithms.base import as_tensor
from algorithms.dqn import DQN, DQNConfig
from algorithms.nets import (
    ChannelsLast,
    DuelingHead,
    default_torso,
    frames_cnn,
    is_small_image,
    minatar_conv,
    nature_cnn,
    q_network,
    small_cnn,
)
from algorithms.rollout import RolloutCollector

GAMES = ["Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders"]


def masks(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape) < 0.3


def game_observations(game: str, steps: int = 8) -> tuple[gym.spaces.Space, gym.spaces.Discrete, np.ndarray]:
    """A game's spaces and a batch of observations from random play."""
    pytest.importorskip("minatar")
    from envs.registry import make_env

    env = make_env(f"MinAtar/{game}-v0")
    obs, _ = env.reset(seed=0)
    batch = [obs]
    for _ in range(steps - 1):
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        batch.append(env.reset()[0] if terminated or truncated else obs)
    env.close()
    return env.observation_space, env.action_space, np.stack(batch)


# ----------------------------------------------------------------- each game


@pytest.mark.parametrize("game", GAMES)
def test_q_network_on_each_game(game):
    space, actions, obs = game_observations(game)
    net = q_network(space.shape, int(actions.n))
    assert isinstance(net[0][0], ChannelsLast) and isinstance(net[1], DuelingHead)
    assert net(as_tensor(obs, torch.device("cpu"))).shape == (len(obs), 6)
    plain = q_network(space.shape, int(actions.n), dueling=False)
    assert isinstance(plain[1], nn.Linear) and plain(torch.from_numpy(obs)).shape == (len(obs), 6)


@pytest.mark.parametrize("game", GAMES)
def test_actor_critic_on_each_game(game):
    space, actions, obs = game_observations(game)
    model = default_actor_critic(space, policy_dim=int(actions.n), config=A2CConfig(), log_std=None)
    assert isinstance(model.shared, SharedBody) and isinstance(model.shared.body[0], ChannelsLast)
    logits, value = model(torch.from_numpy(obs))
    assert logits.shape == (len(obs), 6) and value.shape == (len(obs),)


# ----------------------------------------------------------------- dtypes, gradients


def test_bool_and_uint8_inputs_give_exactly_the_float_output():
    torch.manual_seed(0)
    net = q_network((10, 10, 7), 6)
    x = masks(5, 10, 10, 7)
    expected = net(torch.from_numpy(x.astype(np.float32)))
    # Same computation after the cast: equal bit for bit.
    assert torch.equal(net(torch.from_numpy(x)), expected)
    assert torch.equal(net(torch.from_numpy(x.astype(np.uint8))), expected)


def test_bool_batch_reaches_the_conv_as_floats_without_a_copy_before():
    obs = masks(32, 10, 10, 4)
    tensor = as_tensor(obs, torch.device("cpu"))
    assert tensor.dtype == torch.bool and tensor.data_ptr() == obs.ctypes.data  # zero copy
    net = minatar_conv(4)
    seen = []
    net[1].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    net(tensor)
    (conv_input,) = seen
    assert conv_input.dtype == torch.float32 and conv_input.shape == (32, 4, 10, 10)
    np.testing.assert_array_equal(conv_input.numpy(), obs.transpose(0, 3, 1, 2).astype(np.float32))


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    net = q_network((10, 10, 4), 6)
    net(torch.from_numpy(masks(16, 10, 10, 4))).pow(2).mean().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.count_nonzero(p.grad) > 0, name
    model = default_actor_critic(gym.spaces.Box(0, 1, (10, 10, 4), bool), policy_dim=3,
                                 config=A2CConfig(), log_std=None)
    logits, value = model(torch.from_numpy(masks(16, 10, 10, 4)))
    (logits.logsumexp(-1).mean() + value.pow(2).mean()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.count_nonzero(p.grad) > 0, name


def test_minatar_conv_has_the_paper_sizes():
    net = minatar_conv(6)
    conv, dense = net[1], net[4]
    assert (conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride) == (6, 16, (3, 3), (1, 1))
    assert (dense.in_features, dense.out_features) == (16 * 8 * 8, 128)
    assert minatar_conv(3, height=7, width=5)(torch.zeros(2, 7, 5, 3)).shape == (2, 128)


def test_wrong_input_shape_is_a_clear_error():
    net = minatar_conv(4)
    with pytest.raises(ValueError, match=r"\(10, 10, 4\).*\(2, 4, 10, 10\)"):
        net(torch.zeros(2, 4, 10, 10))  # channels first
    with pytest.raises(ValueError, match="got shape"):
        net(torch.zeros(10, 10, 4))  # no batch axis
    with pytest.raises(ValueError, match="3x3 or larger"):
        minatar_conv(4, height=2)


# ----------------------------------------------------------------- layout rule


@pytest.mark.parametrize(("shape", "small"), [
    ((10, 10, 4), True), ((10, 10, 10), True), ((7, 7, 3), True), ((32, 32, 16), True),
    ((4, 84, 84), False),   # Atari frames, channels first
    ((4, 10, 10), False),   # channels first: C > H
    ((33, 10, 3), False), ((10, 10, 17), False), ((2, 10, 1), False),
    ((10, 10), False), ((100,), False),
])
def test_small_image_rule(shape, small):
    assert is_small_image(shape) is small


def test_q_network_keeps_the_other_paths():
    assert isinstance(q_network((4, 84, 84), 6)[0][1], type(nature_cnn(4)[1]))  # Nature CNN
    assert q_network((4,), 2, hidden=(8,))(torch.zeros(3, 4)).shape == (3, 2)
    for shape in [(4, 10, 10), (4, 64, 64), (3, 40, 40, 1)]:
        with pytest.raises(ValueError, match="is_small_image"):
            q_network(shape, 2)


def test_small_cnn_is_the_2013_dqn_torso_at_a_third_of_the_work():
    net = small_cnn(4)
    convs = [m for m in net if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [
        (4, 16, 8, 4), (16, 32, 4, 2)]
    assert [(d.in_features, d.out_features) for d in net if isinstance(d, nn.Linear)] == [(2592, 256)]

    def multiply_adds(torso: nn.Sequential) -> int:
        total, x = 0, torch.zeros(1, 4, 84, 84)
        for layer in torso:
            y = layer(x)
            if isinstance(layer, nn.Conv2d):
                total += y[0].numel() * layer.in_channels * layer.kernel_size[0] * layer.kernel_size[1]
            elif isinstance(layer, nn.Linear):
                total += layer.in_features * layer.out_features
            x = y
        return total

    assert multiply_adds(net) == 2_965_504 and multiply_adds(nature_cnn(4)) == 9_342_976
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    assert torch.equal(net(frames), net(frames.float() / 255.0))  # bytes scaled inside, as the Nature CNN
    normed = small_cnn(4, layer_norm=True)
    assert sum(isinstance(m, nn.LayerNorm) for m in normed) == 3
    with pytest.raises(ValueError, match="small_cnn sizes must be positive"):
        small_cnn(0)


def test_the_frames_torso_goes_by_name_in_every_default_network():
    assert frames_cnn("small", 4)[1] == 256 and frames_cnn("nature", 4)[1] == 512
    for cnn, width in (("nature", 32), ("small", 16)):
        torso, features = default_torso((4, 84, 84), cnn=cnn)
        assert torso[1].out_channels == width
        net = q_network((4, 84, 84), 6, cnn=cnn)
        assert net(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 6)
        assert net[1].value.in_features == features  # the dueling head sits on the torso's features
    # Vector and MinAtar observations ignore it, but a bad name is refused everywhere.
    assert q_network((4,), 2, hidden=(8,), cnn="small")(torch.zeros(1, 4)).shape == (1, 2)
    for call in (lambda: frames_cnn("big", 4), lambda: q_network((4,), 2, cnn="Nature"),
                 lambda: default_torso((10, 10, 4), cnn="")):
        with pytest.raises(ValueError, match="cnn must be one of nature, small"):
            call()


def test_a_vector_q_network_takes_integer_observations_as_their_values():
    torch.manual_seed(0)
    net = q_network((4,), 2, hidden=(8,))
    values = torch.tensor([[0, 3, 255, 7], [1, 0, 0, 2]])
    expected = net(values.float())
    for dtype in (torch.uint8, torch.int64):
        assert torch.equal(net(values.to(dtype)), expected)
    # The same state dict as a plain nn.Flatten torso (saved policies keep loading).
    assert all(not k.startswith("0.0.") for k in net.state_dict())


def test_actor_critic_keeps_mlps_for_vectors():
    model = default_actor_critic(gym.spaces.Box(-1, 1, (4,), np.float32), policy_dim=2,
                                 config=A2CConfig(), log_std=None)
    assert model.shared is None and not any(isinstance(m, nn.Conv2d) for m in model.modules())


# ----------------------------------------------------------------- through the algorithms


def test_dqn_acts_and_learns_on_bool_observations():
    torch.manual_seed(0)
    dqn = DQN(network=q_network((10, 10, 4), 6), num_actions=6, config=DQNConfig(), device="cpu")
    obs, next_obs = masks(8, 10, 10, 4, seed=1), masks(8, 10, 10, 4, seed=2)
    assert dqn.act(obs, explore=False).shape == (8,)
    before = [p.detach().clone() for p in dqn.network.parameters()]
    metrics = dqn.update({"obs": obs, "action": np.arange(8) % 6, "reward": np.ones(8, np.float32),
                          "next_obs": next_obs, "terminated": np.zeros(8, bool)})
    assert np.isfinite(metrics["loss"])
    assert all(not torch.equal(a, b) for a, b in zip(before, dqn.network.parameters()))


@pytest.mark.timeout(180)
def test_a2c_updates_on_a_minatar_rollout():
    pytest.importorskip("minatar")
    from envs import make_vector_env
    from envs.registry import EnvFactory

    torch.manual_seed(0)
    env = make_vector_env(EnvFactory.from_id("MinAtar/Breakout-v1"), num_envs=2, num_workers=0)
    try:
        agent = A2C(observation_space=env.single_observation_space,
                    action_space=env.single_action_space, device="cpu")
        rollout = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=5,
                                   seed=0).collect()
        assert rollout["obs"].shape == (5, 2, 10, 10, 4)
        metrics = agent.update(rollout)
        assert all(np.isfinite(v) for v in metrics.values())
    finally:
        env.close()


@pytest.mark.parametrize("shape, family", [
    ((4, 84, 84), "frames"), ((10, 10, 4), "small_image"), ((10, 10, 10), "small_image"),
    ((8,), "vector"), ((4, 10, 10), "other"), ((3, 3), "other"), ((), "other")])
def test_observation_family_names_the_default_torso(shape, family):
    from algorithms.nets import observation_family

    assert observation_family(shape) == family
