"""The actor-critic algorithms (IMPALA, PPO, A2C/A3C) on Atari-style ``(C, 84, 84)``
uint8 frames: the default network is the Nature CNN, bytes are scaled inside it on
every path (acting, fast acting, updates), and vector/MinAtar networks are as before."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from torch import nn

from algorithms.a2c import A2C, A2CConfig
from algorithms.actor_critic import SharedBody, _orthogonal, default_actor_critic
from algorithms.impala import IMPALA, IMPALAConfig, UnrollAdder, collate_unrolls
from algorithms.nets import ScaleBytes, minatar_conv, mlp
from algorithms.ppo import PPO, PPOConfig
from algorithms.rollout import RolloutCollector

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
SIX = gym.spaces.Discrete(6)
# Nature CNN (conv 4->32 8x8, 32->64 4x4, 64->64 3x3, dense 3136->512) + 6 logits + 1 value.
NATURE_AC_PARAMS = (4 * 32 * 64 + 32) + (32 * 64 * 16 + 64) + (64 * 64 * 9 + 64) + (3136 * 512 + 512) + 513 * 6 + 513


def frames(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 4, 84, 84), dtype=np.uint8)


class FrameEnv(gym.Env):
    """Random uint8 frames; truncated every 3 steps (IMPALA's final_obs path)."""

    observation_space, action_space = FRAMES, SIX

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.integers(0, 256, FRAMES.shape, dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        obs = self.np_random.integers(0, 256, FRAMES.shape, dtype=np.uint8)
        return obs, float(action == 1), False, self.t % 3 == 0, {}


def frame_envs() -> SyncVectorEnv:
    return SyncVectorEnv([FrameEnv, FrameEnv], autoreset_mode=AutoresetMode.SAME_STEP)


ALGORITHMS = {
    "impala": lambda **kw: IMPALA(observation_space=FRAMES, action_space=SIX, config=IMPALAConfig(**kw),
                                  device="cpu"),
    "ppo": lambda **kw: PPO(observation_space=FRAMES, action_space=SIX, config=PPOConfig(**kw), device="cpu",
                            seed=0, sample_seed=1),
    "a2c": lambda **kw: A2C(observation_space=FRAMES, action_space=SIX, config=A2CConfig(**kw), device="cpu"),
}


# ----------------------------------------------------------------- the network


def test_frames_get_the_nature_cnn_shared_by_policy_and_value():
    torch.manual_seed(0)
    model = default_actor_critic(FRAMES, policy_dim=6, config=A2CConfig(), log_std=None)
    assert isinstance(model.shared, SharedBody) and model.byte_observations
    assert isinstance(model.shared.body[0], ScaleBytes)  # nets.nature_cnn, Ape-X's and PQN's
    convs = [m for m in model.shared.body if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [
        (4, 32, 8, 4), (32, 64, 4, 2), (64, 64, 3, 1)]
    dense = [m for m in model.shared.body if isinstance(m, nn.Linear)]
    assert [(d.in_features, d.out_features) for d in dense] == [(3136, 512)]
    assert sum(p.numel() for p in model.parameters()) == NATURE_AC_PARAMS == 1_687_719
    # CleanRL's ppo_atari init: orthogonal, gain sqrt(2) in the torso, 0.01 policy, 1 value.
    for layer, gain in [(model.shared.policy_layer, 0.01), (model.shared.value_layer, 1.0)]:
        w = layer.weight.detach()
        torch.testing.assert_close(w @ w.T, gain ** 2 * torch.eye(w.shape[0]), rtol=0, atol=1e-6)
        assert not layer.bias.any()
    logits, value = model(torch.from_numpy(frames(3)))
    assert logits.shape == (3, 6) and value.shape == (3,)


def test_uint8_frames_equal_the_same_pixels_as_scaled_floats():
    torch.manual_seed(0)
    model = default_actor_critic(FRAMES, policy_dim=6, config=A2CConfig(), log_std=None)
    x = torch.from_numpy(frames(4))
    logits, value = model(x)
    # Bytes are divided by 255 inside; float input is taken as already in [0, 1].
    scaled_logits, scaled_value = model(x.float() / 255.0)
    assert torch.equal(logits, scaled_logits) and torch.equal(value, scaled_value)


@pytest.mark.parametrize(("name", "fast"), [("impala", "off"), ("impala", "eager"), ("ppo", "off"),
                                            ("ppo", "eager"), ("a2c", None)])
def test_acting_feeds_the_network_bytes_and_matches_the_scaled_forward(name, fast):
    """Acting, through algorithms.fast's forwards too, and evaluation (act) see the
    pixels the network is trained on: bytes, scaled inside."""
    torch.manual_seed(0)
    agent = ALGORITHMS[name](**({} if fast is None else {"fast": fast}))
    assert isinstance(agent.model.shared, SharedBody)
    obs = frames(3, seed=1)
    tensor = agent._obs_tensor(obs)
    assert tensor.dtype == torch.uint8
    expected = agent.model(torch.from_numpy(obs).float() / 255.0)[0]
    seen = []
    agent.model.shared.body[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    if name == "impala":
        got = agent.policy_out(tensor)
    elif name == "ppo":
        got = agent._acting(tensor)[0]
    else:
        got = agent.model.policy(tensor)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert seen and set(seen) == {torch.uint8}
    assert agent.act(obs, explore=False).shape == (3,)


# ----------------------------------------------------------------- one update each


def _counting_bytes(agent) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    agent.model.shared.body.register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    return seen


@pytest.mark.parametrize("name", ["ppo", "a2c"])
def test_ppo_and_a2c_update_on_a_rollout_of_frames(name):
    torch.manual_seed(0)
    agent = ALGORITHMS[name](**({"epochs": 1, "minibatches": 2} if name == "ppo" else {}))
    env = frame_envs()
    rollout = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=4, seed=0).collect()
    env.close()
    assert rollout["obs"].dtype == np.uint8 and rollout["next_obs"].dtype == np.uint8
    assert rollout["obs"].shape == (4, 2, 4, 84, 84)
    data = agent.preprocess(rollout)
    assert data["obs"].dtype == torch.uint8 and data["next_obs"].dtype == torch.uint8
    seen = _counting_bytes(agent)
    before = [p.detach().clone() for p in agent.model.parameters()]
    metrics = agent.update(rollout)
    assert seen and set(seen) == {torch.uint8}
    assert all(math.isfinite(v) for v in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.model.parameters()))


def test_impala_updates_on_an_unroll_of_frames():
    torch.manual_seed(0)
    agent = ALGORITHMS["impala"]()
    env, adder = frame_envs(), UnrollAdder(unroll_length=4, num_envs=2)
    obs, _ = env.reset(seed=0)
    item = None
    while item is None:
        action, log_prob = agent.sample_actions(obs)
        next_obs, reward, term, trunc, infos = env.step(agent.to_env(action))
        item = adder.add(obs=obs, action=action, reward=reward, terminated=term, truncated=trunc,
                         behaviour_log_prob=log_prob, next_obs=next_obs, infos=infos)
        obs = next_obs
    env.close()
    batch = collate_unrolls([item])
    assert batch["obs"].dtype == np.uint8 and len(batch["final_index"]) > 0
    data = agent.preprocess(batch)
    assert {data[k].dtype for k in ("obs", "next_obs_last", "final_obs")} == {torch.uint8}
    seen = _counting_bytes(agent)
    metrics = agent.update(batch)
    assert seen == [torch.uint8] and all(math.isfinite(v) for v in metrics.values())
    # On-policy: the learner's log-probabilities are the actor's (same pixels, same scaling).
    assert abs(metrics["rho_mean"] - 1.0) < 1e-4


@pytest.mark.parametrize("name", ["impala", "ppo", "a2c"])
def test_the_small_cnn_is_every_actor_critics_frames_torso_when_asked(name):
    torch.manual_seed(0)
    agent = ALGORITHMS[name](cnn="small")
    convs = [m for m in agent.model.shared.body if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [16, 32]
    assert agent.model.shared.policy_layer.in_features == 256 and agent.model.byte_observations
    logits, value = agent.model(torch.from_numpy(frames(2)))
    assert logits.shape == (2, 6) and value.shape == (2,)
    with pytest.raises(ValueError, match="cnn must be one of nature, small, got 'nips'"):
        ALGORITHMS[name](cnn="nips")


# ----------------------------------------------------------------- other observations unchanged


def test_vector_and_minatar_networks_are_built_as_before():
    """The same construction, seed for seed, as before frames had their own branch:
    state-dict keys and every number equal."""
    cfg = A2CConfig()
    vector = gym.spaces.Box(-1, 1, (5,), np.float32)

    def old_vector():
        actor, critic = mlp(5, 3, hidden=(64, 64), activation=nn.Tanh), mlp(5, 1, hidden=(64, 64), activation=nn.Tanh)
        _orthogonal(actor), _orthogonal(actor[-1], 0.01)
        _orthogonal(critic), _orthogonal(critic[-1], 1.0)
        return nn.ModuleDict({"actor": nn.Sequential(nn.Identity(), actor),
                              "critic": nn.Sequential(nn.Identity(), critic)})

    def old_minatar():
        net = SharedBody(body=minatar_conv(4, height=10, width=10), features=128, policy_dim=3)
        _orthogonal(net.body), _orthogonal(net.policy_layer, 0.01), _orthogonal(net.value_layer, 1.0)
        return nn.ModuleDict({"shared": net})

    minatar = gym.spaces.Box(0, 1, (10, 10, 4), bool)
    for space, old, obs in [(vector, old_vector, torch.randn(4, 5)),
                            (minatar, old_minatar, torch.rand(4, 10, 10, 4) < 0.3)]:
        torch.manual_seed(0)
        new = default_actor_critic(space, policy_dim=3, config=cfg, log_std=None)
        torch.manual_seed(0)
        reference = old()
        assert not new.byte_observations
        assert list(new.state_dict()) == list(reference.state_dict())
        for (key, a), b in zip(new.state_dict().items(), reference.state_dict().values()):
            assert torch.equal(a, b), key
        logits, value = new(obs)
        if "shared" in reference:
            ref_logits, ref_value = reference["shared"](obs)
        else:
            ref_logits, ref_value = reference["actor"](obs.float()), reference["critic"](obs.float())
        assert torch.equal(logits, ref_logits) and torch.equal(value, ref_value.squeeze(-1))


def test_non_frame_observations_still_reach_the_network_as_float32():
    agent = A2C(observation_space=gym.spaces.Box(0, 255, (5,), np.uint8), action_space=SIX, device="cpu")
    assert agent._obs_tensor(np.ones((2, 5), np.uint8)).dtype == torch.float32
    rollout = {"obs": np.ones((2, 1, 5), np.uint8), "next_obs": np.ones((2, 1, 5), np.uint8),
               "actions": np.zeros((2, 1), np.int64), "rewards": np.ones((2, 1), np.float32),
               "terminated": np.zeros((2, 1), bool), "truncated": np.zeros((2, 1), bool)}
    assert agent.preprocess(rollout)["obs"].dtype == torch.float32
    assert np.isfinite(agent.update(rollout)["loss"])


def test_pqn_learns_from_the_bytes_it_acts_on():
    """The collector kept uint8 frames as float32 values 0..255, which the Nature CNN's
    byte scaling passes through unscaled: PQN acted on scaled pixels and learned on
    raw ones. Now both are bytes, scaled inside."""
    from algorithms.pqn import PQN, PQNConfig
    from algorithms.pqn.runner import PQNRunner

    torch.manual_seed(0)
    pqn = PQN(num_actions=6, observation_shape=FRAMES.shape, config=PQNConfig(epochs=1, minibatches=2))
    env = frame_envs()
    runner = PQNRunner(pqn=pqn, env=env, n_steps=2, seed=0)
    seen: list[torch.dtype] = []
    pqn.network[0][0].register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    metrics = runner.step()
    env.close()
    assert seen and set(seen) == {torch.uint8} and math.isfinite(metrics["loss"])


@pytest.mark.parametrize("name", ["ppo", "a2c"])
def test_acting_after_updates_sees_the_updated_weights(name):
    """A model that acts as it learns (the sync program's members) acts on its newest
    weights: the acting forwards' cached weights (algorithms.fast, batches of up to 16
    rows) follow each optimizer step. Frames' dense layers are large enough to be cached."""
    torch.manual_seed(0)
    agent = ALGORITHMS[name](**({"epochs": 1, "minibatches": 2} if name == "ppo" else {}))
    env = frame_envs()
    collector = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=4, seed=0)
    obs = frames(3, seed=1)
    for _ in range(2):
        agent.update(collector.collect())
        with torch.no_grad():
            expected = agent.model(torch.from_numpy(obs))
        got = agent._acting(agent._obs_tensor(obs)) if name == "ppo" else agent.model.policy(agent._obs_tensor(obs))
        torch.testing.assert_close(got[0] if name == "ppo" else got, expected[0], rtol=1e-5, atol=1e-6)
    env.close()
