"""MADDPG on MPE simple_spread (or the built-in cooperative env): ``python -m experiments.maddpg``.

Several env copies step in subprocesses through ``MultiAgentVectorEnv``; one
process acts for all copies at once (one batched forward per agent group) and
learns every ``train_every`` env steps from a local replay buffer, as in the
paper's reference code (batch 1024, update every 100 steps, 25-step episodes).

TensorBoard (``--log-dir``): ``return/agent_<i>``, ``return/team`` (sum over
agents of the episode return), ``loss/*``, ``rate/updates_per_s``,
``rate/env_steps_per_s``. A status line prints every ``--status-every`` seconds;
Ctrl-C or the budget (``--total-steps`` / ``--max-seconds``) stops the run with a
one-line JSON summary.

Policy ensembles with ``--ensemble-buffers separate`` keep one replay sub-buffer
per (agent, sub-policy); each update trains sub-policy ``updates % K`` of every
agent on batches from those sub-buffers. ``shared`` keeps one buffer and trains
all sub-policies each update.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

import numpy as np
import torch

from algorithms.maddpg import MADDPG
from algorithms.maddpg_spec import AgentSpec, MADDPGConfig
from experiments.cli import config_dict, parse_config
from rlpar.buffers import ReplayBuffer
from rlpar.logging import MetricLogger, Progress, RateMeter


@dataclasses.dataclass
class RunConfig:
    """MADDPG (Lowe et al. 2017) on a cooperative multi-agent env."""

    env: Literal["auto", "simple_spread", "cooperative", "cooperative_hetero"] = dataclasses.field(
        default="auto", metadata={"help": "auto: simple_spread when mpe2 is installed, else cooperative"})
    n_agents: int = 3
    episode_steps: int = 25
    continuous: bool = dataclasses.field(default=False, metadata={"help": "continuous actions (Box) if True"})
    num_envs: int = 8
    num_workers: int = dataclasses.field(default=2, metadata={"help": "env subprocesses (0: in-process)"})
    total_steps: int = dataclasses.field(default=1_000_000, metadata={"help": "env steps over all copies"})
    max_seconds: float | None = None
    buffer_size: int = 1_000_000
    batch_size: int = 1024
    learning_starts: int = dataclasses.field(default=25_600, metadata={"help": "env steps before learning"})
    # The paper's 100 for its 1.5M-step runs. In a 30k-step budget on simple_spread one
    # update per vector step (8) scores -59.3 (seed 0) and 2 per step (4) -63.2, also
    # with lower actor lr (-60.0 at 1e-3, -63.5 at 3e-3): more updates did not help
    # (experiments/bench/maddpg_spread.py docstring has the commands).
    train_every: int = dataclasses.field(default=100, metadata={
        "help": "env steps per update (below --num-envs: several updates per vector step)"})
    gamma: float = 0.95
    tau: float = 0.01
    lr: float = 1e-2
    actor_lr: float | None = dataclasses.field(default=None, metadata={"help": "actor lr (default: --lr)"})
    critic_lr: float | None = dataclasses.field(default=None, metadata={"help": "critic lr (default: --lr)"})
    hidden: int = 64
    grad_clip: float | None = 0.5
    grad_clip_scope: Literal["network", "role"] = dataclasses.field(default="network", metadata={
        "help": "network: clip each agent's network alone; role: one norm over all actors (critics)"})
    noise_scale: float = 0.1
    actor_reg: float = dataclasses.field(default=1e-3, metadata={"help": "penalty on the actors' raw outputs"})
    gumbel_temperature: float = 1.0
    ensemble_size: int = 1
    ensemble_buffers: Literal["shared", "separate"] = "shared"
    actor_objective: Literal["own", "team"] = dataclasses.field(default="own", metadata={
        "help": "own: the paper's (actor i ascends Q_i, others' actions from replay); "
                "team: every actor ascends the sum of all critics on current actions"})
    mode: Literal["auto", "jit_fork", "threads", "batched", "loop"] = "auto"
    device: str = dataclasses.field(default="auto", metadata={"help": "auto: cuda when available"})
    torch_threads: int = 1
    seed: int = 0
    log_dir: str | None = None
    status_every: float = 10.0

    def validate(self) -> None:
        for name in ("n_agents", "episode_steps", "num_envs", "total_steps", "buffer_size", "batch_size",
                     "train_every", "hidden", "torch_threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.num_workers < 0:
            raise ValueError(f"--num-workers must be >= 0, got {self.num_workers}")
        if self.learning_starts < 0:
            raise ValueError(f"--learning-starts must be >= 0, got {self.learning_starts}")
        if self.batch_size > self.buffer_size:
            raise ValueError(f"--batch-size {self.batch_size} exceeds --buffer-size {self.buffer_size}")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ValueError(f"--max-seconds must be > 0, got {self.max_seconds}")
        self.algo_config().validate()

    def algo_config(self) -> MADDPGConfig:
        return MADDPGConfig(gamma=self.gamma, tau=self.tau,
                            actor_lr=self.lr if self.actor_lr is None else self.actor_lr,
                            critic_lr=self.lr if self.critic_lr is None else self.critic_lr,
                            hidden=(self.hidden, self.hidden), grad_clip=self.grad_clip,
                            grad_clip_scope=self.grad_clip_scope,
                            actor_reg=self.actor_reg, gumbel_temperature=self.gumbel_temperature,
                            noise_scale=self.noise_scale, ensemble_size=self.ensemble_size,
                            ensemble_buffers=self.ensemble_buffers, actor_objective=self.actor_objective,
                            mode=self.mode, seed=self.seed)


def resolve_env(config: RunConfig) -> tuple[str, Callable[[], Any]]:
    """The env name actually used and a picklable factory for it."""
    name = config.env
    if name in ("auto", "simple_spread"):
        try:
            from mpe2 import simple_spread_v3
        except ImportError:
            if name == "simple_spread":
                raise
            name = "cooperative"
        else:
            return "simple_spread", partial(simple_spread_v3.parallel_env, N=config.n_agents,
                                            max_cycles=config.episode_steps,
                                            continuous_actions=config.continuous)
    from envs.multiagent import CooperativeEnv

    return name, partial(CooperativeEnv, n_agents=config.n_agents, max_steps=config.episode_steps,
                         continuous=config.continuous, heterogeneous=name == "cooperative_hetero")


def _rows(value: Any, rows: np.ndarray) -> Any:
    return [v[rows] for v in value] if isinstance(value, list | tuple) else value[rows]


def transitions(obs: Any, actions: Any, rewards: np.ndarray, next_obs: Any, terminated: np.ndarray,
                rows: np.ndarray, policy: np.ndarray | None) -> dict[str, np.ndarray]:
    """Replay rows: stacked fields for homogeneous agents, ``<field>_<i>`` otherwise."""
    batch: dict[str, np.ndarray] = {}
    for field, value in (("obs", obs), ("action", actions), ("next_obs", next_obs)):
        value = _rows(value, rows)
        if isinstance(value, list):
            batch |= {f"{field}_{i}": np.asarray(v) for i, v in enumerate(value)}
        else:
            batch[field] = np.asarray(value)
    batch["reward"] = rewards[rows].astype(np.float32)
    batch["terminated"] = terminated[rows].astype(np.float32)
    if policy is not None:
        batch["policy_index"] = policy[rows]
    return batch


class Replay:
    """One shared buffer, or one per (agent, sub-policy) for separate ensemble buffers."""

    def __init__(self, *, capacity: int, n_agents: int, ensemble_size: int, separate: bool, seed: int) -> None:
        self.separate = separate and ensemble_size > 1
        self.k = ensemble_size
        count = n_agents * ensemble_size if self.separate else 1
        self.buffers = [ReplayBuffer(capacity=capacity, seed=seed + j) for j in range(count)]

    def add(self, batch: dict[str, np.ndarray]) -> None:
        if not self.separate:
            self.buffers[0].add(batch)
            return
        policy = batch["policy_index"]
        for i in range(policy.shape[1]):
            for k in range(self.k):
                rows = np.flatnonzero(policy[:, i] == k)
                if rows.size:
                    self.buffers[i * self.k + k].add({key: v[rows] for key, v in batch.items()})

    def ready(self, batch_size: int, sub_policy: int) -> bool:
        if not self.separate:
            return len(self.buffers[0]) >= batch_size
        return all(len(b) >= batch_size for b in self.buffers[sub_policy::self.k])

    def update(self, algo: MADDPG, batch_size: int) -> dict[str, float]:
        if not self.separate:
            return algo.update(self.buffers[0].sample(batch_size).batch)
        k = algo.updates % self.k
        batches = [b.sample(batch_size).batch for b in self.buffers[k::self.k]]
        return algo.update(batches, sub_policies=[k] * algo.n_agents)


def train(config: RunConfig, *, stream: Any = None) -> dict[str, Any]:
    """Run one training job; returns the summary (also printed as JSON)."""
    config.validate()
    stream = stream if stream is not None else sys.stdout
    from envs.multiagent import MultiAgentVectorEnv

    env_name, env_fn = resolve_env(config)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if config.device == "auto" else config.device
    venv = MultiAgentVectorEnv([env_fn] * config.num_envs, num_workers=config.num_workers)
    logger = MetricLogger(log_dir=config.log_dir)
    algo = None
    try:
        agents = [AgentSpec.from_spaces(o, a, name=name) for name, o, a in
                  zip(venv.agents, venv.agent_observation_spaces, venv.agent_action_spaces)]
        algo = MADDPG(agents=agents, config=config.algo_config(), device=device)
        logger.config(config_dict(config) | {"env_resolved": env_name, "eval_mode": algo.mode})
        return _loop(config, venv, algo, logger, stream, env_name)
    finally:
        venv.close()
        logger.close()
        if algo is not None:
            algo.close()


def _loop(config: RunConfig, venv: Any, algo: MADDPG, logger: MetricLogger, stream: Any,
          env_name: str) -> dict[str, Any]:
    n, e = algo.n_agents, config.num_envs
    replay = Replay(capacity=config.buffer_size, n_agents=n, ensemble_size=config.ensemble_size,
                    separate=config.ensemble_buffers == "separate", seed=config.seed)
    progress = Progress(every=config.status_every, stream=stream, prefix=f"[maddpg {env_name}] ")
    step_rate, update_rate = RateMeter(), RateMeter()
    obs, _ = venv.reset(seed=config.seed)
    skip = np.zeros(e, dtype=bool)  # NEXT_STEP autoreset: a row's first step after done is a reset
    ep_return = np.zeros((e, n))
    finished: list[np.ndarray] = []
    steps = since_update = 0
    metrics: dict[str, float] = {}
    start = time.monotonic()
    interrupted = False
    try:
        while steps < config.total_steps:
            if config.max_seconds is not None and time.monotonic() - start > config.max_seconds:
                break
            actions = algo.act(obs)
            policy = None if algo.active_policies is None else algo.active_policies.copy()
            next_obs, rewards, term, trunc, _ = venv.step(actions)
            live = np.flatnonzero(~skip)
            if live.size:
                replay.add(transitions(obs, actions, rewards, next_obs, term, live, policy))
            ep_return[live] += rewards[live]
            done = (term | trunc).all(axis=1) & ~skip
            for row in np.flatnonzero(done):
                finished.append(ep_return[row].copy())
                logger.scalars({f"return/agent_{i}": v for i, v in enumerate(ep_return[row])}, steps)
                logger.scalar("return/team", ep_return[row].sum(), steps)
            ep_return[done] = 0.0
            if done.any():
                algo.new_episodes(done)
            skip = done
            obs = next_obs
            steps += int(live.size)
            # Count toward the next update only once learning has started: otherwise
            # the first update would be a burst of learning_starts / train_every steps.
            since_update += int(live.size) if steps >= config.learning_starts else 0
            step_rate.add(int(live.size))
            while steps >= config.learning_starts and since_update >= config.train_every:
                since_update -= config.train_every
                if not replay.ready(config.batch_size, algo.updates % config.ensemble_size):
                    break
                metrics = replay.update(algo, config.batch_size)
                update_rate.add()
                if algo.updates % 20 == 0:
                    logger.scalars({k: v for k, v in metrics.items() if "/" not in k}, steps, prefix="loss/")
            if progress.update(_status(steps, algo, finished, step_rate, update_rate, metrics)):
                logger.scalar("rate/env_steps_per_s", step_rate.rate(), steps)
                logger.scalar("rate/updates_per_s", update_rate.rate(), steps)
    except KeyboardInterrupt:
        interrupted = True
    wall = time.monotonic() - start
    recent = np.array(finished[-100:]) if finished else np.zeros((0, n))
    summary = {"experiment": "maddpg", "env": env_name, "agents": n, "steps": steps,
               "updates": algo.updates, "episodes": len(finished), "wall_s": round(wall, 2),
               "env_steps_per_s": round(steps / max(wall, 1e-9), 1), "mode": algo.mode,
               "team_return_last100": float(recent.sum(1).mean()) if len(recent) else None,
               "agent_return_last100": recent.mean(0).round(3).tolist() if len(recent) else None,
               "interrupted": interrupted}
    progress.update(_status(steps, algo, finished, step_rate, update_rate, metrics), force=True)
    print(json.dumps(summary), file=stream, flush=True)
    summary["algo"] = algo
    return summary


def _positions(env: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Agent and landmark positions (and agent radii, for collisions) of one env."""
    world = getattr(getattr(env, "unwrapped", env), "world", None)
    if world is not None:  # MPE
        agents = np.array([a.state.p_pos for a in world.agents])
        landmarks = np.array([lm.state.p_pos for lm in world.landmarks])
        return agents, landmarks, np.array([a.size for a in world.agents])
    return np.asarray(env.pos), np.asarray(env.landmarks), None


@torch.no_grad()
def evaluate(algo: MADDPG, env_fn: Callable[[], Any], *, episodes: int = 10, seed: int = 10_000,
             explore: bool = False, random_policy: bool = False) -> dict[str, float]:
    """Run ``episodes`` whole episodes side by side; report the mean team return (sum
    over agents), the mean per-step sum over landmarks of the distance to the closest
    agent, and colliding agent pairs per episode (MPE only; NaN otherwise).
    ``random_policy`` samples uniform actions instead (the baseline)."""
    from envs.multiagent import ParallelEnvAdapter

    envs = [ParallelEnvAdapter(env_fn()) for _ in range(episodes)]
    obs = [env.reset(seed=seed + j)[0] for j, env in enumerate(envs)]
    for j, env in enumerate(envs):
        env.action_space.seed(seed + j)
    team = np.zeros(episodes)
    dist, collisions, steps = 0.0, 0.0, 0
    alive = np.ones(episodes, dtype=bool)
    while alive.any():
        stacked = envs[0].stacked
        joint = np.stack(obs) if stacked else [np.stack([o[i] for o in obs]) for i in range(algo.n_agents)]
        actions = None if random_policy else algo.act(joint, explore=explore)
        for j, env in enumerate(envs):
            if not alive[j]:
                continue
            if random_policy:
                act = env.action_space.sample()
            else:
                act = actions[j] if stacked else [a[j] for a in actions]
            obs[j], rew, term, trunc, _ = env.step(act)
            team[j] += rew.sum()
            agents, landmarks, sizes = _positions(env.env)
            d = np.linalg.norm(landmarks[:, None] - agents[None], axis=-1)
            dist += d.min(axis=1).sum()
            steps += 1
            if sizes is not None:
                gap = np.linalg.norm(agents[:, None] - agents[None], axis=-1)
                touching = gap < sizes[:, None] + sizes[None]
                collisions += np.triu(touching, 1).sum()
            alive[j] = not (term | trunc).all()
    for env in envs:
        env.close()
    return {"team_return": float(team.mean()), "landmark_distance": dist / max(steps, 1),
            "collisions_per_episode": collisions / episodes if sizes is not None else float("nan")}


def _status(steps: int, algo: MADDPG, finished: Sequence[np.ndarray], step_rate: RateMeter,
            update_rate: RateMeter, metrics: dict[str, float]) -> dict[str, Any]:
    recent = finished[-20:]
    return {"steps": steps, "episodes": len(finished), "updates": algo.updates,
            "team_return": float(np.mean([r.sum() for r in recent])) if recent else float("nan"),
            "steps/s": step_rate.rate(), "updates/s": update_rate.rate(),
            "critic_loss": metrics.get("critic_loss", float("nan"))}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    config = parse_config(RunConfig, argv)
    torch.set_num_threads(config.torch_threads)
    summary = train(config)
    summary.pop("algo", None)
    return summary


if __name__ == "__main__":
    main()
