"""``grad_hook``: a data-parallel learner group's gradient averaging reaches DQN, DDPG/TD3
and IMPALA between backward and clipping, without any transport in the algorithm."""

import copy

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from algorithms.base import reduce_gradients
from algorithms.dqn import DQN, DQNConfig
from algorithms.impala import IMPALA, IMPALAConfig, UnrollAdder, collate_unrolls
from algorithms.td3 import TD3, TD3Config
from envs.testing import CountingEnv


class Recorder:
    """A hook that multiplies every gradient by ``scale`` and records what it got."""

    def __init__(self, scale):
        self.scale, self.calls = scale, []

    def __call__(self, params):
        self.calls.append([p for p in params])
        assert all(p.grad is not None for p in params)  # a fixed layout for the all-reduce
        for p in params:
            p.grad.mul_(self.scale)


def dqn(**hook):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return DQN(network=net, num_actions=2, config=DQNConfig(max_grad_norm=None), **hook)


def dqn_batch(n=16):
    rng = np.random.default_rng(0)
    return {"obs": rng.standard_normal((n, 3)).astype(np.float32), "action": rng.integers(2, size=n),
            "reward": rng.standard_normal(n), "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
            "terminated": np.zeros(n, np.float32)}


def test_dqn_calls_its_hook_before_clipping_with_every_parameter():
    plain, hooked = dqn(), dqn(grad_hook=Recorder(2.0))
    norm = plain.learn(dqn_batch()).metrics["grad_norm"]
    assert hooked.learn(dqn_batch()).metrics["grad_norm"] == pytest.approx(2 * norm)  # the averaged one
    (params,) = hooked.grad_hook.calls
    assert [id(p) for p in params] == [id(p) for p in hooked.network.parameters()]
    # A hook that zeroes every gradient (the mean of +g and -g): Adam leaves the network as it was.
    frozen = dqn(grad_hook=Recorder(0.0))
    before = copy.deepcopy(frozen.network.state_dict())
    frozen.learn(dqn_batch())
    assert all(torch.equal(before[k], v) for k, v in frozen.network.state_dict().items())


def test_recycling_refuses_a_hook():
    agent = DQN(network=torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)),
                num_actions=2, config=DQNConfig(recycle_every=1))
    agent.grad_hook = Recorder(1.0)
    with pytest.raises(RuntimeError, match="recycling with a grad_hook"):
        agent.learn(dqn_batch())


def test_td3_averages_its_critic_step_every_update_and_its_actor_step_when_due():
    agent = TD3(obs_dim=3, action_low=[-1], action_high=[1], grad_hook=Recorder(1.0),
                config=TD3Config(seed=0, hidden=(8,), policy_delay=2))
    batch = {"obs": np.ones((8, 3), np.float32), "action": np.zeros((8, 1), np.float32),
             "reward": np.ones(8, np.float32), "next_obs": np.ones((8, 3), np.float32),
             "terminated": np.zeros(8, np.float32)}
    for _ in range(3):
        agent.learn(batch)
    critics = {id(p) for p in agent.critic_parameters()}
    actor = {id(p) for p in agent.actor.parameters()}
    kinds = [{id(p) for p in call} for call in agent.grad_hook.calls]
    # updates 0, 1, 2: critic, actor (0 % 2 == 0), critic, critic, actor (2 % 2 == 0)
    assert kinds == [critics, actor, critics, critics, actor]


def test_impala_hook_gets_the_model_parameters_and_a_parameter_without_gradient_gets_zeros():
    agent = IMPALA(observation_space=CountingEnv().observation_space, action_space=CountingEnv().action_space,
                   config=IMPALAConfig(max_grad_norm=None), device="cpu", grad_hook=Recorder(1.0))
    env = SyncVectorEnv([CountingEnv, CountingEnv], autoreset_mode=AutoresetMode.SAME_STEP)
    adder, (obs, _) = UnrollAdder(unroll_length=4, num_envs=2), env.reset(seed=0)
    items = []
    while not items:
        action, log_prob = agent.sample_actions(obs)
        next_obs, reward, term, trunc, infos = env.step(agent.to_env(action))
        item = adder.add(obs=obs, action=action, reward=reward, terminated=term, truncated=trunc,
                         behaviour_log_prob=log_prob, next_obs=next_obs, infos=infos)
        items += [item] if item is not None else []
        obs = next_obs
    agent.update(collate_unrolls(items))
    (params,) = agent.grad_hook.calls
    assert {id(p) for p in params} == {id(p) for p in agent.model.parameters() if p.requires_grad}
    unreached = torch.nn.Parameter(torch.ones(2))
    reduce_gradients(lambda ps: None, [unreached])
    assert torch.equal(unreached.grad, torch.zeros(2))


@pytest.mark.parametrize("ensemble", [1, 2])
def test_maddpg_averages_its_critic_and_actor_steps_every_update(ensemble):
    """MADDPG's learners in step (``--learners K``): the critics' and the actors' steps
    each go through the hook, stacked leaves or every agent's own parameters; a hook
    that zeroes every gradient leaves the networks as they were."""
    from algorithms.maddpg import MADDPG, AgentSpec, MADDPGConfig

    spec = AgentSpec(obs_dim=4, action_dim=3, discrete=True)
    rng = np.random.default_rng(0)
    batch = {"obs": rng.standard_normal((16, 2, 4)).astype(np.float32),
             "next_obs": rng.standard_normal((16, 2, 4)).astype(np.float32),
             "action": rng.integers(0, 3, (16, 2)), "reward": rng.standard_normal((16, 2)).astype(np.float32),
             "terminated": np.zeros((16, 2), np.float32), "policy_index": rng.integers(0, ensemble, (16, 2))}
    algo = MADDPG(agents=[spec] * 2, config=MADDPGConfig(seed=0, ensemble_size=ensemble, grad_clip=None))
    algo.grad_hook = Recorder(0.0)
    before = copy.deepcopy(algo.state_dict())
    algo.update(batch)
    assert len(algo.grad_hook.calls) == 2  # the critics' step, then the actors'
    critics, actors = ({id(p) for p in params} for params in algo.grad_hook.calls)
    assert critics == {id(p) for p in (algo.critic_eval.stacked_leaves or
                                       [p for ps in algo.critic_params for p in ps])}
    assert actors <= {id(p) for p in (algo.actor_eval.stacked_leaves or
                                      [p for ps in algo.actor_params for p in ps])}
    for name in ("actors", "critics"):
        for saved, module in zip(before[name], getattr(algo, name)):
            assert all(torch.equal(saved[k], v) for k, v in module.state_dict().items())
