import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from torch import nn

from algorithms.a2c import A2C, A2CConfig
from algorithms.returns import gae, n_step_returns
from algorithms.rollout import RolloutCollector
from envs import SubprocVectorEnv
from envs.testing import CountingEnv
from tests.procs import kill_and_wait


class BitEnv(gym.Env):
    """Deterministic: the observation one-hot encodes which action pays 1.0."""

    observation_space = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.eye(2, dtype=np.float32)[self.t % 2]

    def step(self, action):
        reward = float(int(action) == self.t % 2)
        self.t += 1
        return self._obs(), reward, False, False, {}


def vec(make, n, mode=AutoresetMode.SAME_STEP):
    return SyncVectorEnv([make] * n, autoreset_mode=mode)


def make_bit():
    return gym.wrappers.TimeLimit(BitEnv(), max_episode_steps=8)


def make_agent(env, **config):
    return A2C(observation_space=env.single_observation_space, action_space=env.single_action_space,
               config=A2CConfig(**config), device="cpu")


@pytest.mark.timeout(60)
def test_a2c_learns_a_deterministic_task():
    torch.manual_seed(0)
    env = vec(make_bit, 4)
    agent = make_agent(env, optimizer="adam", lr=3e-3, gamma=0.5, entropy_coef=0.0)
    collector = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=4, seed=0)
    for _ in range(80):
        metrics = agent.update(collector.collect())
    assert agent.updates == 80
    assert {"policy_loss", "value_loss", "entropy", "grad_norm", "loss"} <= set(metrics)
    returns, lengths = collector.drain_episodes()
    assert set(lengths) == {8}  # truncated by the time limit
    assert np.mean(returns[-8:]) > 7.0
    obs = np.eye(2, dtype=np.float32)
    np.testing.assert_array_equal(agent.act(obs, explore=False), [0, 1])


def test_collector_stores_true_successors_under_both_autoreset_modes():
    def make():
        return CountingEnv(episode_length=3, truncate=True)

    fake = lambda obs: (np.zeros(len(obs), np.int64), np.zeros(len(obs), np.int64))  # noqa: E731
    same = RolloutCollector(env=vec(make, 1), sample_actions=fake, n_steps=5, seed=0).collect()
    np.testing.assert_array_equal(same["obs"][:, 0, 0], [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(same["next_obs"][:, 0, 0], [1, 2, 3, 1, 2])
    np.testing.assert_array_equal(same["truncated"][:, 0], [0, 0, 1, 0, 0])
    assert same["valid"].all()

    nxt = RolloutCollector(env=vec(make, 1, AutoresetMode.NEXT_STEP), sample_actions=fake,
                           n_steps=5, seed=0)
    roll = nxt.collect()
    np.testing.assert_array_equal(roll["obs"][:, 0, 0], [0, 1, 2, 3, 0])
    np.testing.assert_array_equal(roll["next_obs"][:, 0, 0], [1, 2, 3, 0, 1])
    np.testing.assert_array_equal(roll["valid"][:, 0], [1, 1, 1, 0, 1])  # the reset step
    assert nxt.env_steps == 4
    assert nxt.drain_episodes() == ([2.0], [3])  # action 0 pays on even counts 0 and 2


@pytest.mark.timeout(30)
def test_collector_drops_the_step_and_episode_a_restarted_env_worker_cut():
    venv = SubprocVectorEnv([CountingEnv] * 2, num_workers=2, step_in_parent=False, restart_on_crash=True,
                            autoreset_mode=AutoresetMode.SAME_STEP)
    calls = []

    def act(obs):
        calls.append(obs)
        if len(calls) == 3:  # env 1's worker is killed before the third step
            kill_and_wait(venv._workers.procs[1].pid)
        return (np.zeros(2, np.int64),) * 2

    try:
        collector = RolloutCollector(env=venv, sample_actions=act, n_steps=4, seed=0)
        roll = collector.collect()
    finally:
        venv.close()
    np.testing.assert_array_equal(roll["obs"][:, 1, 0], [0, 1, 2, 0])  # a fresh episode after
    np.testing.assert_array_equal(roll["valid"][:, 1], [1, 1, 0, 1])
    # Step 1 bootstraps from obs 2, the last state reached; step 2 never happened.
    np.testing.assert_array_equal(roll["truncated"][:, 1], [0, 1, 1, 0])
    assert roll["next_obs"][1, 1, 0] == 2
    assert roll["valid"][:, 0].all() and not roll["truncated"][:, 0].any()
    assert collector.env_steps == 7 and collector.drain_episodes() == ([], [])


class Linear1(nn.Module):
    """Deterministic value V(s) = 10 * s[0] to check bootstrapping by hand."""

    def forward(self, obs):
        return 10.0 * obs[:, 0]


def test_a2c_bootstraps_from_the_final_observation_on_truncation_only():
    def make(truncate):
        return lambda: CountingEnv(episode_length=2, truncate=truncate)

    for truncate in (True, False):
        env = vec(make(truncate), 1)
        agent = A2C(observation_space=env.single_observation_space,
                    action_space=env.single_action_space, actor=nn.Linear(1, 2), critic=Linear1(),
                    config=A2CConfig(gamma=0.5, advantage="nstep"), device="cpu")
        roll = RolloutCollector(env=env, sample_actions=lambda o: (np.zeros(1, np.int64),) * 2,
                                n_steps=3, seed=0).collect()
        data = agent.compute_advantages(agent.preprocess(roll))
        # obs 0, 1 (episode ends, final obs 2), 0; rewards 1, 0, 1; V(s) = 10 s.
        # Last step bootstraps from V(1) = 10 -> 1 + 5 = 6.
        end = 0.5 * 20.0 if truncate else 0.0
        torch.testing.assert_close(data["returns"][:, 0], torch.tensor([1 + 0.5 * end, end, 6.0]))


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP, "any-batch"])
def test_bootstrap_values_reuse_the_rollouts_forward_only_where_next_obs_is_the_next_obs(mode):
    # V(next_obs) is taken from the forward over obs where next_obs[t] == obs[t+1]:
    # the targets must equal a forward over every next_obs, whatever the layout.
    torch.manual_seed(0)
    env = vec(lambda: CountingEnv(episode_length=3, truncate=True), 4,
              AutoresetMode.SAME_STEP if mode == "any-batch" else mode)
    agent = make_agent(env, gamma=0.9, advantage="gae", gae_lambda=0.8)
    rng = np.random.default_rng(0)
    sample = lambda obs: (rng.integers(0, 2, len(obs)),) * 2  # noqa: E731
    roll = RolloutCollector(env=env, sample_actions=sample, n_steps=7, seed=0).collect()
    assert roll["truncated"][:-1].any()  # episodes end inside the rollout
    if mode == "any-batch":  # successors unrelated to the next row's obs
        roll["next_obs"] = rng.normal(size=roll["next_obs"].shape).astype(np.float32)
    data = agent.compute_advantages(agent.preprocess(roll))
    with torch.no_grad():
        next_values = agent.model.value(torch.as_tensor(roll["next_obs"]).flatten(0, 1)).view(7, 4)
    expected = gae(rewards=torch.as_tensor(roll["rewards"]), values=data["values"].detach(),
                   next_values=next_values, gamma=0.9, lam=0.8,
                   terminated=torch.as_tensor(roll["terminated"]), truncated=torch.as_tensor(roll["truncated"]))
    # Same values from forwards over different batch sizes: float32 rounding apart.
    torch.testing.assert_close(data["advantages"], expected, rtol=1e-5, atol=1e-6)


def test_compute_gradients_is_the_gradient_of_the_rollout_loss_and_applies_nothing():
    torch.manual_seed(1)
    env = vec(make_bit, 3)
    agent = make_agent(env, entropy_coef=0.01, value_coef=0.7, max_grad_norm=None, gamma=0.9)
    roll = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=5, seed=0).collect()
    before = {k: v.clone() for k, v in agent.model.state_dict().items()}
    grads, metrics = agent.compute_gradients(roll)
    for key, value in agent.model.state_dict().items():
        torch.testing.assert_close(value, before[key])

    obs = torch.as_tensor(roll["obs"]).flatten(0, 1)
    logits, values = agent.model(obs)
    with torch.no_grad():
        next_values = agent.model.value(torch.as_tensor(roll["next_obs"]).flatten(0, 1)).view(5, 3)
    returns = n_step_returns(rewards=torch.as_tensor(roll["rewards"]), next_values=next_values,
                             terminated=torch.as_tensor(roll["terminated"]),
                             truncated=torch.as_tensor(roll["truncated"]), gamma=0.9).flatten()
    dist = torch.distributions.Categorical(logits=logits)
    adv = (returns - values).detach()
    loss = (-(dist.log_prob(torch.as_tensor(roll["actions"]).flatten()) * adv).mean()
            + 0.7 * ((returns - values) ** 2).mean() - 0.01 * dist.entropy().mean())
    names, params = zip(*agent.model.named_parameters())
    expected = torch.autograd.grad(loss, params)
    assert set(grads) == set(names)
    for name, grad in zip(names, expected):
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6)
    assert metrics["loss"] == pytest.approx(loss.item(), rel=1e-4)


@pytest.mark.parametrize("state_dependent, transform, shared",
                         [(False, "clip", False), (True, "tanh", True)])
def test_gaussian_head_runs_on_pendulum(state_dependent, transform, shared):
    torch.manual_seed(0)
    env = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    agent = make_agent(env, state_dependent_std=state_dependent, action_transform=transform,
                       shared_network=shared, log_std_init=1.0, reward_scale=0.1)
    collector = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=8, seed=0)
    before = [p.detach().clone() for p in agent.model.parameters()]
    for _ in range(3):
        roll = collector.collect()
        metrics = agent.update(roll)
    assert roll["actions"].shape == (8, 2, 1) and roll["actions"].dtype == np.float32
    assert all(np.isfinite(v) for v in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.model.parameters()))
    obs = np.stack([env.single_observation_space.sample() for _ in range(64)])
    for explore in (True, False):
        actions = agent.act(obs, explore=explore)
        assert actions.shape == (64, 1) and np.all(np.abs(actions) <= 2.0)
    assert (agent.model.log_std is None) == state_dependent
    env.close()


def test_state_dict_round_trip():
    env = vec(make_bit, 2)
    a, b = make_agent(env), make_agent(env)
    a.update(RolloutCollector(env=env, sample_actions=a.sample_actions, n_steps=3).collect())
    b.load_state_dict(a.state_dict())
    assert b.updates == 1
    for x, y in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("field, value", [("gamma", 1.5), ("lr", 0.0), ("entropy_coef", -1.0),
                                          ("optimizer", "sgd"), ("max_grad_norm", 0.0),
                                          ("hidden", ()), ("advantage", "td")])
def test_invalid_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        A2CConfig(**{field: value})


def test_invalid_constructions():
    env = vec(make_bit, 1)
    spaces = {"observation_space": env.single_observation_space}
    with pytest.raises(TypeError, match="Discrete and Box"):
        A2C(action_space=gym.spaces.MultiBinary(3), **spaces)
    with pytest.raises(ValueError, match="either model or actor/critic"):
        A2C(action_space=env.single_action_space, model=nn.Linear(2, 2), actor=nn.Linear(2, 2), **spaces)
    with pytest.raises(ValueError, match="together"):
        A2C(action_space=env.single_action_space, actor=nn.Linear(2, 2), **spaces)
    with pytest.raises(TypeError, match="config must be an A2CConfig"):
        A2C(action_space=env.single_action_space, config={"lr": 1.0}, **spaces)
    agent = A2C(action_space=env.single_action_space, device="cpu", **spaces)
    with pytest.raises(KeyError, match="next_obs"):
        agent.update({"obs": np.zeros((1, 1, 2)), "actions": np.zeros((1, 1)),
                      "rewards": np.zeros((1, 1)), "terminated": np.zeros((1, 1), bool),
                      "truncated": np.zeros((1, 1), bool)})
    with pytest.raises(ValueError, match="n_steps"):
        RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=0)


def test_categorical_sampling_matches_the_probabilities():
    from algorithms.actor_critic import CategoricalHead

    torch.manual_seed(0)
    probs = torch.tensor([0.2, 0.5, 0.3])
    samples = CategoricalHead(n=3).sample(probs.log().expand(20_000, 3), None)
    freq = torch.bincount(samples, minlength=3).float() / samples.numel()
    torch.testing.assert_close(freq, probs, atol=0.02, rtol=0)


@pytest.mark.parametrize("name", ["adam", "rmsprop"])
def test_make_optimizer_builds_the_configured_eager_optimizer(name):
    # The optimizers' arithmetic is tested against torch.optim in test_optim.py.
    from algorithms.a2c import make_optimizer
    from algorithms.optim import EagerAdam, EagerRMSprop

    config = A2CConfig(optimizer=name, lr=1e-2)
    opt = make_optimizer(nn.Linear(3, 2).parameters(), config)
    assert isinstance(opt, EagerAdam if name == "adam" else EagerRMSprop)
    assert opt.param_groups[0]["lr"] == 1e-2
    assert opt.param_groups[0]["eps"] == config.optimizer_eps
