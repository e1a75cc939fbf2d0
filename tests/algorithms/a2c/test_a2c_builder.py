"""A2C's builder of the synchronous program: the learner group's gradient average
reaches the optimizer step (``grad_hook``), so members stay identical."""

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from algorithms.a2c.builder import A2CBuilder
from algorithms.a2c.config import DEFAULTS_BY_FAMILY, A2CConfig
from algorithms.builder import EnvSpec


def _rollout(builder, algorithm, seed):
    env = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    runner = builder.make_runner(algorithm, env=env, seed=seed)
    rollout = runner.collect()
    env.close()
    return rollout


def test_members_on_different_rollouts_stay_identical_through_the_grad_hook():
    env = gym.make("CartPole-v1")
    spec = EnvSpec(env.observation_space, env.action_space)
    builder = A2CBuilder(learn=A2CConfig(**{**DEFAULTS_BY_FAMILY["vector"], "n_steps": 4}), spec=spec)
    plain = [builder.make_algorithm(device="cpu", seed=0, sample_seed=s) for s in (1, 2)]
    rollouts = [_rollout(builder, a, seed) for a, seed in zip(plain, (10, 20))]
    # The group's mean gradient of the two rollouts, as a learner group would all-reduce it.
    grads = [plain[i].compute_gradients(rollouts[i])[0] for i in (0, 1)]
    names = [n for n, _ in plain[0].model.named_parameters()]
    means = [(grads[0][n] + grads[1][n]) / 2 for n in names]

    def hook(tensors):
        for grad, mean in zip(tensors, means):
            grad.copy_(mean)

    members = [builder.make_algorithm(device="cpu", seed=0, sample_seed=s, grad_hook=hook) for s in (1, 2)]
    for member, rollout in zip(members, rollouts):
        member.update(rollout)
    for a, b in zip(members[0].model.parameters(), members[1].model.parameters()):
        assert torch.equal(a, b)
    # Without the hook each member steps on its own rollout's gradient and they part.
    for member, rollout in zip(plain, rollouts):
        member.update(rollout)
    assert not all(torch.equal(a, b) for a, b in zip(plain[0].model.parameters(), plain[1].model.parameters()))
