import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from algorithms.a2c import A2C, A2CConfig
from algorithms.impala import IMPALA, IMPALAConfig, UnrollAdder, collate_unrolls
from envs.testing import CountingEnv

BOX2 = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
TWO = gym.spaces.Discrete(2)


def make(obs_space=BOX2, action_space=TWO, **config):
    return IMPALA(observation_space=obs_space, action_space=action_space,
                  config=IMPALAConfig(**config), device="cpu")


def counting_envs():
    """Env 0 is truncated every 3 steps, env 1 terminates every 4."""
    return SyncVectorEnv([lambda: CountingEnv(episode_length=3, truncate=True),
                          lambda: CountingEnv(episode_length=4)], autoreset_mode=AutoresetMode.SAME_STEP)


def collect(agent, env, adder, obs, count):
    """``count`` unrolls from ``env`` acting with ``agent``; returns them and the last obs."""
    items = []
    while len(items) < count:
        action, log_prob = agent.sample_actions(obs)
        next_obs, reward, term, trunc, infos = env.step(agent.to_env(action))
        item = adder.add(obs=obs, action=action, reward=reward, terminated=term, truncated=trunc,
                         behaviour_log_prob=log_prob, next_obs=next_obs, infos=infos)
        if item is not None:
            items.append(item)
        obs = next_obs
    return items, obs


def counting_batch(agent, *, seed=0, unroll_length=7, unrolls=2):
    env, adder = counting_envs(), UnrollAdder(unroll_length=unroll_length, num_envs=2)
    obs, _ = env.reset(seed=seed)
    items, _ = collect(agent, env, adder, obs, unrolls)
    return collate_unrolls(items)


def counting_agent(**config):
    space = CountingEnv().observation_space
    return make(obs_space=space, **config)


def test_on_policy_batch_gives_a2cs_n_step_targets():
    torch.manual_seed(0)
    agent = counting_agent(gamma=0.9)
    batch = counting_batch(agent)  # acted by this very policy: rho = 1
    assert batch["truncated"].any() and batch["terminated"].any() and len(batch["final_index"]) > 0
    data = agent.compute_targets(agent.preprocess(batch))
    # The same network as an A2C, fed the rollout with every true successor spelled out.
    a2c = A2C(observation_space=agent.observation_space, action_space=agent.action_space,
              config=A2CConfig(advantage="nstep", gamma=0.9), device="cpu")
    a2c.model.load_state_dict(agent.policy_state())
    next_obs = np.concatenate([batch["obs"][1:], batch["next_obs_last"][None]])
    flat = next_obs.reshape(-1, *next_obs.shape[2:])
    flat[batch["final_index"]] = batch["final_obs"]
    rollout = {key: batch[key] for key in ("obs", "terminated", "truncated")}
    rollout.update(actions=batch["action"], rewards=batch["reward"], next_obs=next_obs)
    expected = a2c.compute_advantages(a2c.preprocess(rollout))
    torch.testing.assert_close(data["rhos"], torch.ones_like(data["rhos"]), rtol=0, atol=1e-5)
    torch.testing.assert_close(data["vs"], expected["returns"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(data["values"].detach(), expected["values"].detach())
    torch.testing.assert_close(data["pg_advantages"], expected["advantages"], rtol=1e-5, atol=1e-5)


def test_update_moves_the_policy_toward_the_better_action():
    torch.manual_seed(0)
    agent = make(entropy_coef=0.0)
    steps, envs = 4, 8
    obs = np.tile(np.array([0.5, -0.5], np.float32), (steps, envs, 1))
    action = np.tile(np.arange(envs) % 2, (steps, 1))  # both actions, half each
    batch = {"obs": obs, "action": action, "reward": action.astype(np.float32),  # action 1 pays
             "terminated": np.ones((steps, envs), bool), "truncated": np.zeros((steps, envs), bool),
             "behaviour_log_prob": np.full((steps, envs), math.log(0.5), np.float32),
             "next_obs_last": obs[0]}

    def p_better():
        with torch.no_grad():
            return torch.softmax(agent.model.policy(torch.as_tensor(obs[0, :1])), -1)[0, 1].item()

    before = p_better()
    for _ in range(20):
        metrics = agent.update(batch)
    assert p_better() > before + 0.2
    assert agent.updates == 20
    expected = {"loss", "policy_loss", "value_loss", "entropy", "grad_norm", "rho_mean",
                "rho_clipped_fraction", "explained_variance", "pg_advantage_mean"}
    assert expected <= set(metrics) and all(isinstance(v, float) for v in metrics.values())
    assert metrics["rho_clipped_fraction"] > 0  # pi(1) > 0.5 = mu(1) by now


def test_state_round_trip_continues_identically(tmp_path):
    torch.manual_seed(0)
    agent = counting_agent(optimizer="rmsprop")
    batch = counting_batch(agent)
    for _ in range(3):
        agent.update(batch)
    path = tmp_path / "state.pt"
    torch.save(agent.state_dict(), path)
    other = counting_agent(optimizer="rmsprop")
    other.load_state_dict(torch.load(path, weights_only=True))
    assert other.updates == 3
    agent.update(batch), other.update(batch)
    for (name, a), b in zip(agent.model.state_dict().items(), other.model.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    fresh = counting_agent()
    fresh.load_policy_state(agent.policy_state())
    obs = batch["obs"][0]
    np.testing.assert_array_equal(fresh.act(obs, explore=False), agent.act(obs, explore=False))


def test_learning_rate_anneals_linearly_and_resumes_where_it_was(tmp_path):
    """The paper's schedule: lr * (1 - updates / lr_anneal_updates), floored at 0, set
    before each update from the update count a state keeps."""
    agent = counting_agent(lr=1e-3, lr_anneal_updates=4)
    batch = counting_batch(agent)
    lrs = [agent.update(batch)["lr"] for _ in range(3)]
    assert lrs == pytest.approx([1e-3, 7.5e-4, 5e-4])
    other = counting_agent(lr=1e-3, lr_anneal_updates=4)
    other.load_state_dict(agent.state_dict())
    assert other.update(batch)["lr"] == pytest.approx(2.5e-4)
    before = [p.detach().clone() for p in other.model.parameters()]
    assert other.update(batch)["lr"] == 0.0  # past the end: no step moves the model
    assert all(torch.equal(a, b) for a, b in zip(before, other.model.parameters()))
    constant = counting_agent(lr=1e-3)
    constant.optimizer.param_groups[0]["lr"] = 5e-4  # a user's own schedule is left alone
    assert "lr" not in constant.update(batch) and constant.optimizer.param_groups[0]["lr"] == 5e-4


def test_bad_states_are_named():
    agent = counting_agent()
    state = agent.state_dict()
    with pytest.raises(KeyError, match="expected"):
        agent.load_state_dict({"model": state["model"]})
    bad_model = dict(state["model"])
    name = next(iter(bad_model))
    bad_model[name] = torch.zeros(3, 3, 3)
    with pytest.raises(ValueError, match=f"model: '{name}' has shape"):
        agent.load_state_dict({**state, "model": bad_model})
    with pytest.raises(KeyError, match="unexpected \\['extra'\\]"):
        agent.load_policy_state({**state["model"], "extra": torch.zeros(1)})
    with pytest.raises(ValueError, match="updates must be an int"):
        agent.load_state_dict({**state, "updates": -1})
    other = make(obs_space=gym.spaces.Box(-1, 1, (5,), np.float32), hidden=(8,))
    with pytest.raises(ValueError, match="optimizer state does not match"):
        agent.load_state_dict({**state, "optimizer": other.state_dict()["optimizer"]})


@pytest.mark.parametrize("change, error, message", [
    (lambda b: b.pop("reward"), KeyError, "missing \\['reward'\\]"),
    (lambda b: b.update(rewards=b["reward"]), KeyError, "unknown keys \\['rewards'\\]"),
    (lambda b: b.pop("final_obs"), KeyError, "final_obs and final_index together"),
    (lambda b: b.update(obs=b["obs"][:, :, None]), ValueError, "obs has shape"),
    (lambda b: b.update(next_obs_last=b["next_obs_last"][:1]), ValueError, "next_obs_last has shape"),
    (lambda b: b.update(action=b["action"][:-1]), ValueError, "action has shape"),
    (lambda b: b.update(reward=b["reward"][0]), ValueError, "reward must be time-major"),
    (lambda b: b.update(action=b["action"] + 5), ValueError, "action must hold integers in"),
    (lambda b: b["reward"].__setitem__((0, 0), np.nan), ValueError, "reward holds NaN"),
    (lambda b: b.update(final_obs=b["final_obs"][:0], final_index=b["final_index"][:0]),
     ValueError, "was truncated but has no final_obs"),
    (lambda b: b.update(final_index=b["final_index"] * 0 + 1), ValueError, "did not end an episode|twice"),
])
def test_bad_batches_are_named(change, error, message):
    agent = counting_agent()
    batch = counting_batch(agent)
    change(batch)
    before = {k: v.clone() for k, v in agent.model.state_dict().items()}
    with pytest.raises(error, match=message):
        agent.update(batch)
    assert agent.updates == 0
    for name, value in agent.model.state_dict().items():
        torch.testing.assert_close(value, before[name])


def test_gaussian_actions_and_a_minatar_sized_image():
    torch.manual_seed(0)
    agent = make(action_space=gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32))
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 2)).astype(np.float32)
    actions, log_probs = agent.sample_actions(obs)
    assert actions.shape == (5, 3) and log_probs.shape == (5,) and log_probs.dtype == np.float32
    assert np.all(np.abs(agent.act(obs, explore=False)) <= 1.0)
    steps = 3
    batch = {"obs": np.stack([obs] * steps), "action": np.stack([actions] * steps),
             "reward": np.ones((steps, 5), np.float32), "terminated": np.zeros((steps, 5), bool),
             "truncated": np.zeros((steps, 5), bool), "behaviour_log_prob": np.stack([log_probs] * steps),
             "next_obs_last": obs}
    assert all(math.isfinite(v) for v in agent.update(batch).values())

    image = gym.spaces.Box(0, 1, shape=(10, 10, 4), dtype=bool)
    agent = make(obs_space=image, action_space=gym.spaces.Discrete(3))
    assert any(isinstance(m, torch.nn.Conv2d) for m in agent.model.modules())
    frames = np.random.default_rng(1).random((2, 3, 10, 10, 4)) < 0.2
    batch = {"obs": frames, "action": np.zeros((2, 3), np.int64), "reward": np.ones((2, 3), np.float32),
             "terminated": np.zeros((2, 3), bool), "truncated": np.zeros((2, 3), bool),
             "behaviour_log_prob": np.full((2, 3), -1.1, np.float32), "next_obs_last": frames[0]}
    assert math.isfinite(agent.update(batch)["loss"])


def test_hooks_can_be_overridden():
    class ClippedRewards(IMPALA):
        def preprocess(self, batch):
            data = super().preprocess(batch)
            data["reward"] = data["reward"] * 0.0
            return data

    agent = ClippedRewards(observation_space=CountingEnv().observation_space,
                           action_space=gym.spaces.Discrete(2), device="cpu")
    data = agent.vtrace(agent.forward(agent.preprocess(counting_batch(agent))))
    assert (data["reward"] == 0).all()


def test_config_is_validated():
    for bad, message in [({"rho_bar": 0.0}, "rho_bar must be > 0"), ({"lr": -1.0}, "lr must be"),
                         ({"max_grad_norm": 0.0}, "max_grad_norm must be"),
                         ({"optimizer": "sgd"}, "optimizer must be one of"),
                         ({"loss_reduction": "max"}, "loss_reduction must be one of"),
                         ({"hidden": ()}, "hidden must be"),
                         ({"lr_anneal_updates": 0}, "lr_anneal_updates must be an int >= 1"),
                         ({"lr_anneal_updates": 2.5}, "lr_anneal_updates must be an int >= 1")]:
        with pytest.raises(ValueError, match=message):
            IMPALAConfig(**bad)
    assert IMPALAConfig(optimizer="rmsprop").eps == 0.01
    assert IMPALAConfig(optimizer="rmsprop", optimizer_eps=1e-5).eps == 1e-5
    assert IMPALAConfig(max_grad_norm=None, reward_clip=1.0).reward_clip == 1.0
    with pytest.raises(TypeError, match="config must be an IMPALAConfig"):
        IMPALA(observation_space=BOX2, action_space=gym.spaces.Discrete(2), config=A2CConfig())


@pytest.mark.timeout(60)
def test_a_short_single_process_loop_runs():
    """Two actors' vector envs -> unroll adders -> collator -> learner, with the actor
    copy a few updates behind: the actor-learner program's data path, in one process."""
    torch.manual_seed(0)
    learner = counting_agent(loss_reduction="mean")
    actor = counting_agent()
    envs = [counting_envs() for _ in range(2)]
    adders = [UnrollAdder(unroll_length=5, num_envs=2) for _ in envs]
    observations = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    for _ in range(200):
        items = []
        for i, env in enumerate(envs):
            (item,), observations[i] = collect(actor, env, adders[i], observations[i], 1)
            items.append(item)
        metrics = learner.update(collate_unrolls(items))
        if learner.updates % 4 == 0:
            actor.load_policy_state(learner.policy_state())
    assert learner.updates == 200
    assert all(math.isfinite(v) for v in metrics.values())
