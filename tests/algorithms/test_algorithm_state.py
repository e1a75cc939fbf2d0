"""Loaded algorithm states are checked (issue 30.4): a missing key, a wrong type, a
network or optimizer of another layout raises StateError naming the key path, and
the algorithm keeps its state (no half-loaded network)."""

import copy
import functools

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from algorithms.a2c import A2C, A3C, A2CConfig, make_optimizer
from algorithms.dqn import DQN, DQNConfig
from algorithms.maddpg import MADDPG, AgentSpec, MADDPGConfig
from algorithms.optim import EagerAdam, EagerRMSprop
from algorithms.rollout import RolloutCollector
from algorithms.td3 import DDPG, DDPGConfig
from envs.testing import CountingEnv
from rlpar.errors import StateError
from rlpar.servers import GradServer
from tests.corrupt import corruptions, paths, replaced


def assert_same(a, b, where="state"):
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def refused(algo, state, match):
    """``algo.load_state_dict(state)`` raises StateError matching ``match``; nothing changed."""
    before = copy.deepcopy(algo.state_dict())
    with pytest.raises(StateError, match=match):
        algo.load_state_dict(state)
    assert_same(copy.deepcopy(algo.state_dict()), before)


def without(state, key):
    return {k: v for k, v in state.items() if k != key}


# ---------------------------------------------------------------------- DQN


def dqn(inputs=3, seed=0, **config):
    torch.manual_seed(seed)
    algo = DQN(network=nn.Linear(inputs, 2), num_actions=2, config=DQNConfig(**config))
    obs = np.eye(inputs, dtype=np.float32)[[0, 1]]
    algo.update({"obs": obs, "action": np.array([1, 0]), "reward": np.array([1.0, 2.0], np.float32),
                 "next_obs": obs[::-1].copy(), "terminated": np.zeros(2, np.float32)})
    return algo


def test_dqn_names_a_missing_key_a_wrong_type_and_an_unknown_key():
    state = dqn(seed=1).state_dict()
    refused(dqn(), without(state, "optimizer"), r"DQN.load_state_dict: state is missing key\(s\) \['optimizer'\]")
    refused(dqn(), {**state, "updates": "1"}, r"state\['updates'\] must be an int, got str '1'")
    refused(dqn(), {**state, "typo": 1}, r"state has unexpected key\(s\) \['typo'\]")
    refused(dqn(), {**state, "epsilon": 1.5}, r"state\['epsilon'\] must be a finite number in \[0.0, 1.0\]")
    refused(dqn(), {**state, "epsilon": [0.1, None]}, r"state\['epsilon'\]\[1\] must be a number")


def test_dqn_refuses_another_networks_state_without_loading_half_of_it():
    other = dqn(inputs=4, seed=1).state_dict()
    state = dqn(seed=1).state_dict()
    # torch alone would copy the bias (it fits) before raising for the weight.
    refused(dqn(), {**state, "network": other["network"]},
            r"state\['network'\]\['weight'\] has shape \(2, 4\), the module's is \(2, 3\)")
    refused(dqn(), {**state, "target_network": without(state["target_network"], "bias")},
            r"state\['target_network'\] is missing key\(s\) \['bias'\]")
    refused(dqn(), {**state, "optimizer": other["optimizer"]},
            r"state\['optimizer'\]\['state'\]\[0\]\['exp_avg'\] has shape \(2, 4\), its parameter's is \(2, 3\)")


def test_dqn_refuses_out_of_range_optimizer_hyper_parameters():
    state = dqn(seed=1).state_dict()
    bad = copy.deepcopy(state["optimizer"])
    bad["param_groups"][0]["lr"] = -1.0
    refused(dqn(), {**state, "optimizer": bad},
            r"state\['optimizer'\]\['param_groups'\]\[0\] does not fit EagerAdam: lr must be in")
    bad["param_groups"] = []
    refused(dqn(), {**state, "optimizer": bad}, r"\['param_groups'\] must hold 1 items, got 0")


def test_dqn_state_from_before_recycling_still_loads():
    source = dqn(seed=1)
    state = without(source.state_dict(), "recycled_units")
    target = dqn()
    target.load_state_dict(state)
    assert target.updates == source.updates == 1


# ---------------------------------------------------------------- A2C, A3C


CONFIG = A2CConfig(optimizer="adam", lr=1e-2, max_grad_norm=None, hidden=(16,))


def a2c(seed=0, hidden=(16,)):
    env = SyncVectorEnv([lambda: CountingEnv(episode_length=5, truncate=True)] * 2,
                        autoreset_mode=AutoresetMode.SAME_STEP)
    torch.manual_seed(seed)
    agent = A2C(observation_space=env.single_observation_space, action_space=env.single_action_space,
                config=A2CConfig(optimizer="adam", lr=1e-2, max_grad_norm=None, hidden=hidden),
                device="cpu")
    agent.update(RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=2).collect())
    env.close()
    return agent


def test_a2c_names_a_missing_key_and_a_model_of_another_width():
    state = a2c(seed=1).state_dict()
    refused(a2c(), without(state, "model"), r"A2C.load_state_dict: state is missing key\(s\) \['model'\]")
    refused(a2c(), {**state, "updates": None}, r"state\['updates'\] must be an int, got NoneType")
    wide = a2c(hidden=(8,)).state_dict()
    refused(a2c(), {**state, "model": wide["model"]}, r"state\['model'\]\[.*\] has shape")


def test_a2c_load_policy_state_checks_every_shape_before_copying():
    agent = a2c()
    before = copy.deepcopy(agent.model.state_dict())
    params = copy.deepcopy(a2c(seed=1).model.state_dict())
    last = list(params)[-1]
    params[last] = torch.zeros(7)
    with pytest.raises(ValueError, match=f"parameter '{last}' has shape"):
        agent.load_policy_state(params)
    assert_same(agent.model.state_dict(), before)
    with pytest.raises(StateError, match=r"A2C.load_policy_state: state is missing key"):
        agent.load_policy_state(without(params, last))
    assert_same(agent.model.state_dict(), before)


def test_a3c_checks_its_counters_before_loading_its_agent():
    agent = a2c()
    server = GradServer(model=copy.deepcopy(agent.model),
                        optimizer_factory=lambda params: make_optimizer(params, CONFIG))
    worker = A3C(agent=agent, sink=server)
    state = A3C(agent=a2c(seed=1), sink=server).state_dict()
    refused(worker, {**state, "version": -2}, r"A3C.load_state_dict: state\['version'\] must be an int >= -1")
    refused(worker, {**state, "pushed": -1}, r"state\['pushed'\] must be an int >= 0")
    refused(worker, without(state, "agent"), r"state is missing key\(s\) \['agent'\]")
    refused(worker, {**state, "agent": without(state["agent"], "updates")},
            r"A2C.load_state_dict: state is missing key\(s\) \['updates'\]")


# --------------------------------------------------------------- DDPG, MADDPG


def ddpg(seed=0, obs_dim=3):
    algo = DDPG(obs_dim=obs_dim, action_low=[-2], action_high=[2], config=DDPGConfig(seed=seed))
    rng = np.random.default_rng(seed)
    algo.update({"obs": rng.standard_normal((8, obs_dim)), "action": rng.uniform(-2, 2, (8, 1)),
                 "reward": rng.standard_normal(8), "next_obs": rng.standard_normal((8, obs_dim)),
                 "terminated": np.zeros(8, np.float32)})
    return algo


def test_ddpg_names_a_missing_network_and_a_foreign_optimizer():
    state = ddpg(seed=1).state_dict()
    refused(ddpg(), without(state, "target_critic"), r"DDPG.load_state_dict: state is missing key\(s\) \['target_critic'\]")
    refused(ddpg(), {**state, "critic_opt": ddpg(obs_dim=4).state_dict()["critic_opt"]},
            r"state\['critic_opt'\]\['state'\]\[0\]\['exp_avg'\] has shape")
    refused(ddpg(), {**state, "updates": 1.0}, r"state\['updates'\] must be an int, got float")


def maddpg(n=3):
    return MADDPG(agents=[AgentSpec(obs_dim=4, action_dim=3, discrete=True)] * n,
                  config=MADDPGConfig(seed=0))


def test_maddpg_names_a_list_of_the_wrong_length_and_a_wrong_agent():
    state = maddpg().state_dict()
    refused(maddpg(), {**state, "critics": state["critics"][:2]}, r"MADDPG.load_state_dict: state\['critics'\] must hold 3 items, got 2")
    other = maddpg(n=2).state_dict()
    refused(maddpg(), {**state, "target_critics": [*state["target_critics"][:2], other["critics"][0]]},
            r"state\['target_critics'\]\[2\]\[.*\] has shape")
    refused(maddpg(), {**state, "actors": None}, r"state\['actors'\] must be a list, got NoneType")


# --------------------------------------------------------------- optimizers


@pytest.mark.parametrize("cls", [EagerAdam, EagerRMSprop])
def test_eager_optimizers_check_a_loaded_state(cls):
    net = nn.Linear(3, 2)
    opt = cls(net.parameters(), lr=0.1)
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    state = copy.deepcopy(opt.state_dict())
    bad = copy.deepcopy(state)
    bad["param_groups"][0]["eps"] = float("nan")
    with pytest.raises(StateError, match=rf"{cls.__name__}.load_state_dict: state\['param_groups'\]\[0\] does not fit"):
        opt.load_state_dict(bad)
    with pytest.raises(StateError, match=r"state is missing key\(s\) \['state'\]"):
        opt.load_state_dict({"param_groups": state["param_groups"]})
    bad = copy.deepcopy(state)
    bad["state"][7] = bad["state"][0]
    with pytest.raises(StateError, match=r"state\['state'\]\[7\] is the state of a parameter that no"):
        opt.load_state_dict(bad)
    assert_same(opt.state_dict(), state)
    opt.load_state_dict(copy.deepcopy(state))


def test_eager_adam_betas_are_checked_in_a_loaded_state():
    opt = EagerAdam(nn.Linear(3, 2).parameters(), lr=0.1)
    state = copy.deepcopy(opt.state_dict())
    state["param_groups"][0]["betas"] = (1.5, 0.9)
    with pytest.raises(StateError, match=r"betas\[0\] must be in \[0.0, 1.0\)"):
        opt.load_state_dict(state)


@settings(max_examples=150)
@given(data=st.data())
def test_a_randomly_corrupted_dqn_state_loads_cleanly_or_raises_state_error(data):
    """Never a bare KeyError/TypeError/RuntimeError, never a half-loaded DQN, and a
    state that loads acts and learns."""
    source, fresh = dqn_pair()
    state = source.state_dict()
    path, value = data.draw(st.sampled_from(list(paths(state))[1:]), label="path")
    bad = replaced(state, path, data.draw(st.sampled_from(corruptions(value)), label="new"))
    target = copy.deepcopy(fresh)
    before = copy.deepcopy(target.state_dict())
    try:
        target.load_state_dict(bad)
    except StateError:
        assert_same(target.state_dict(), before)
        return
    target.act(np.eye(3, dtype=np.float32))
    obs = np.eye(3, dtype=np.float32)[[0, 1]]
    target.update({"obs": obs, "action": np.array([1, 0]), "reward": np.ones(2, np.float32),
                   "next_obs": obs, "terminated": np.zeros(2, np.float32)})



@functools.cache
def dqn_pair():
    """A trained DQN's state to corrupt, and a DQN to load it into (copied per example)."""
    return dqn(seed=1), dqn()
