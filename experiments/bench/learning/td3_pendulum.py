"""Does TD3 learn Pendulum-v1 through the Ape-X data path? One process, by hand.

One gymnasium vector env of ``--num-envs`` Pendulum copies. An acting copy of
:class:`~algorithms.td3.TD3` (tied targets, the learner's policy state pulled every
``--pull-every`` env steps) explores with one Gaussian scale per env copy
(:func:`~algorithms.noise.exploration_scales`, this process playing actor 0 of
``--num-actors``), assembles n-step transitions (:class:`~rlpar.buffers.NStepAssembler`),
scores them with ``initial_priorities`` and adds them to a
:class:`~rlpar.buffers.PrioritizedReplayBuffer`. The learner samples, learns with the
importance weights and sends the priorities back, ``--replay-ratio`` updates per env
step once ``--learning-starts`` transitions are stored. Every ``--eval-every`` env
steps: the mean greedy return of 10 episodes; "solved" is the first one >= -200.

Prints one JSON line per evaluation and a summary line. Not a unit test (it runs for
a minute or more).

Recorded (issue 31; 2 shared CPU cores at load average ~4.4, 1 torch thread, eval every
1,000 env steps, defaults otherwise: 8 envs, scales 0.5 ** (1 + 3 j / 7), n = 3,
batch 256, learning starts at 2,000, TD3Config defaults), env steps / updates /
seconds to the first greedy mean >= -200, seeds 0, 1, 2:

- ``--replay-ratio 1``: 6,000 / 4,000 / 42-50 s for each seed (-178, -145, -133);
  seed 3 with ``--no-stop`` stayed between -116 and -180 up to 20,000 env steps;
- ``--replay-ratio 0.25``: 13,000-15,000 / 2,750-3,250 / 32-42 s;
- seed 0 alone: ``--replay-ratio 0.5`` 8,000 env steps; ``--n-step 1`` 8,000 (vs
  6,000); a fixed ``--sigma 0.1 --alpha 0`` 6,000 (Pendulum does not tell the
  schedules apart); 16 envs (seed 4) 6,000.

    python -m experiments.bench.learning.td3_pendulum --seed 0
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import gymnasium as gym
import numpy as np
import torch

from algorithms.noise import exploration_scales
from algorithms.rollout import evaluate
from algorithms.td3 import TD3, TD3Config
from experiments.bench.tools.emit import emit
from rlpar.buffers import NStepAssembler, PrioritizedReplayBuffer


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--seed", type=int, default=0)
    add("--num-envs", type=int, default=8)
    add("--num-actors", type=int, default=1, help="this process acts as actor 0 of these")
    add("--sigma", type=float, default=0.5, help="exploration_scales sigma")
    add("--alpha", type=float, default=3.0, help="exploration_scales alpha (0: every env sigma)")
    add("--n-step", type=int, default=3)
    add("--gamma", type=float, default=0.99)
    add("--batch-size", type=int, default=256)
    add("--replay-ratio", type=float, default=1.0, help="learner updates per env step")
    add("--learning-starts", type=int, default=2000)
    add("--capacity", type=int, default=100_000)
    add("--per-alpha", type=float, default=0.6)
    add("--per-beta", type=float, default=0.4)
    add("--lr", type=float, default=3e-4, help="actor and critic")
    add("--hidden", default="256,256")
    add("--pull-every", type=int, default=64, help="env steps between policy pulls")
    add("--add-every", type=int, default=4, help="vector steps buffered before one add")
    add("--eval-every", type=int, default=2000)
    add("--max-env-steps", type=int, default=60_000)
    add("--max-seconds", type=float, default=1800.0)
    add("--no-stop", action="store_true", help="go on after solving (does it stay solved?)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    torch.set_num_threads(1)
    env = gym.make_vec("Pendulum-v1", num_envs=args.num_envs, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    eval_env = gym.make_vec("Pendulum-v1", num_envs=10, vectorization_mode="sync")
    space = env.single_action_space
    config = TD3Config(gamma=args.gamma, actor_lr=args.lr, critic_lr=args.lr, seed=args.seed,
                       hidden=tuple(int(h) for h in args.hidden.split(",")))

    def make(seed: int) -> TD3:
        return TD3(obs_dim=env.single_observation_space.shape[0], action_low=space.low,
                   action_high=space.high, config=dataclasses.replace(config, seed=seed))

    learner, actor = make(args.seed), make(args.seed + 1000)
    actor.tie_target()
    actor.load_policy_state(learner.policy_state())
    actor.noise_scale = exploration_scales(0, args.num_actors, args.num_envs, sigma=args.sigma, alpha=args.alpha)
    buffer = PrioritizedReplayBuffer(capacity=args.capacity, alpha=args.per_alpha, beta=args.per_beta,
                                     beta_final=1.0, beta_anneal_steps=int(args.max_env_steps * args.replay_ratio),
                                     seed=args.seed)
    assembler = NStepAssembler(num_envs=args.num_envs, n=args.n_step, gamma=args.gamma)

    start = time.perf_counter()
    obs, _ = env.reset(seed=args.seed)
    env_steps, pending, since_pull, next_eval, solved = 0, [], 0, args.eval_every, None
    metrics: dict[str, float] = {}
    while env_steps < args.max_env_steps and time.perf_counter() - start < args.max_seconds:
        action = actor.act(obs)
        next_obs, reward, terminated, truncated, infos = env.step(action)
        true_next = next_obs
        if "_final_obs" in infos and infos["_final_obs"].any():  # SAME_STEP autoreset
            true_next = np.array(next_obs, copy=True)
            for i in np.flatnonzero(infos["_final_obs"]):
                true_next[i] = infos["final_obs"][i]
        done = np.logical_or(terminated, truncated)
        actor.reset_noise(done)
        pending.append(assembler.step(obs=obs, action=action, reward=reward, next_obs=true_next,
                                      terminated=terminated, truncated=truncated))
        obs = next_obs
        env_steps += args.num_envs
        since_pull += args.num_envs
        if len(pending) >= args.add_every:  # an Ape-X actor's add: initial priorities first
            batch = {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
            pending.clear()
            if len(batch["reward"]):
                buffer.add(batch, actor.initial_priorities(batch))
        if since_pull >= args.pull_every:
            actor.load_policy_state(learner.policy_state())
            since_pull = 0
        if len(buffer) >= max(args.learning_starts, args.batch_size):
            while learner.updates < (env_steps - args.learning_starts) * args.replay_ratio:
                sample = buffer.sample(args.batch_size)
                learned = learner.learn({**sample.batch, "weights": sample.weights})
                buffer.update_priorities(sample.indices, learned.priorities)
                metrics = learned.metrics
        if env_steps >= next_eval:
            next_eval += args.eval_every
            score = float(evaluate(lambda o: learner.act(o, explore=False), eval_env, episodes=10,
                                   seed=10_000 + env_steps).mean())
            record = {"env_steps": env_steps, "updates": learner.updates, "eval_return": round(score, 1),
                      "seconds": round(time.perf_counter() - start, 1), **metrics}
            emit(record)
            if score >= -200 and solved is None:
                solved = record
                if not args.no_stop:
                    break
    summary = {"bench": "td3_pendulum", "solved": solved is not None, **vars(args),
               "env_steps": env_steps, "seconds": round(time.perf_counter() - start, 1),
               "solved_at": solved}
    emit(summary)
    return summary


if __name__ == "__main__":
    main()
