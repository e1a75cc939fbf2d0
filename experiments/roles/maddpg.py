"""The MADDPG job's one process, read top to bottom (:func:`serial_main`).

The env copies step in ``--env-workers`` subprocesses (``MultiAgentVectorEnv``);
this process acts for all of them at once, stores the live rows' transitions in
the replay (:class:`Replay`), runs the updates :class:`~algorithms.pacing.Pacing`
owes after each vector step, and reports every step's progress and finished
episodes (team return, per-agent returns) to the shared
:class:`~experiments.runtime.coordinator.Coordinator`, which keeps the budgets,
the evaluation schedule, TensorBoard (per agent and per team too) and the status
line. A greedy evaluation (:func:`~experiments.roles.maddpg_parts.evaluate`) runs
every ``--eval-every`` env steps. Ctrl-C ends the run like a budget, with the
summary.

The env workers are expendable: one that dies is replaced by the vector env (at most
``--max-restarts`` times per worker, then the job ends naming it and its signal);
the episodes it cut are dropped (their last step stores no transition and reports no
episode), and the coordinator counts the restart (``actor_restarts``,
``actors/restarts``; ``dropped_episodes``, ``actors/dropped_episodes``). Checkpoints
carry these counts, so a ``--resume``d run goes on counting from them.

MADDPG is one process, so a launcher's world must have one rank
(:func:`~experiments.roles.maddpg_parts.resolve` refuses more) and
:func:`rank_main` is the serial path.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from algorithms.pacing import Pacing
from experiments.roles.maddpg_parts import (
    MEASURES,
    build_maddpg,
    check,
    describe,
    env_factory,
    evaluate,
    resolve,
    target,
    teams_of,
)
from experiments.runtime.evaluation import frozen
from experiments.runtime.job import Job, JobContext
from experiments.runtime.lead import run_lead, start_lead
from experiments.runtime.messages import Episode, EvalResult, Rejoin, Report
from rlpar.state import StatePath, integer, mapping, sequence


def _rows(value: Any, rows: np.ndarray) -> Any:
    return [v[rows] for v in value] if isinstance(value, list | tuple) else value[rows]


def transitions(obs: Any, actions: Any, rewards: np.ndarray, next_obs: Any, terminated: np.ndarray,
                rows: np.ndarray, policy: np.ndarray | None) -> dict[str, np.ndarray]:
    """Replay rows: stacked fields for homogeneous agents, ``<field>_<i>`` otherwise
    (the batch layouts of ``algorithms.maddpg.spec``)."""
    batch: dict[str, np.ndarray] = {}
    for name, value in (("obs", obs), ("action", actions), ("next_obs", next_obs)):
        value = _rows(value, rows)
        if isinstance(value, list):
            batch |= {f"{name}_{i}": np.asarray(v) for i, v in enumerate(value)}
        else:
            batch[name] = np.asarray(value)
    batch["reward"] = rewards[rows].astype(np.float32)
    batch["terminated"] = terminated[rows].astype(np.float32)
    if policy is not None:
        batch["policy_index"] = policy[rows]
    return batch


class Replay:
    """One shared buffer, or one per (agent, sub-policy) for separate ensemble buffers."""

    def __init__(self, *, capacity: int, n_agents: int, ensemble_size: int, separate: bool, seed: int) -> None:
        from rlpar.buffers import ReplayBuffer

        self.separate = separate and ensemble_size > 1
        self.k = ensemble_size
        count = n_agents * ensemble_size if self.separate else 1
        self.buffers = [ReplayBuffer(capacity=capacity, seed=seed + j) for j in range(count)]

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers)

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

    def update(self, algo: Any, batch_size: int) -> dict[str, float]:
        if not self.separate:
            return algo.update(self.buffers[0].sample(batch_size).batch)
        k = algo.updates % self.k
        batches = [b.sample(batch_size).batch for b in self.buffers[k::self.k]]
        return algo.update(batches, sub_policies=[k] * algo.n_agents)


class Trainer:
    """The acting/learning loop and its bookkeeping: episodes in flight, the last
    100 episodes' per-agent returns, the window of update metrics."""

    def __init__(self, ctx: JobContext, *, venv: Any, algo: Any, coordinator: Any, env_fn: Any) -> None:
        config = ctx.config
        self.ctx, self.venv, self.algo, self.coordinator, self.env_fn = ctx, venv, algo, coordinator, env_fn
        self.batch_size = config.learn.batch_size
        self.replay = Replay(capacity=config.replay.replay_capacity, n_agents=algo.n_agents,
                             ensemble_size=config.learn.ensemble_size,
                             separate=config.replay.ensemble_buffers == "separate", seed=config.run.seed)
        # Learning cannot start before a batch is stored: counting owed updates from
        # there avoids a burst of them at the first full batch.
        self.pacing = Pacing(updates_per_step=config.learn.updates_per_step,
                             learning_starts=max(config.learn.learning_starts, self.batch_size))
        self.teams = teams_of(venv.agents)
        e, n = venv.num_envs, algo.n_agents
        self.obs, _ = venv.reset(seed=config.run.seed)
        self.skip = np.zeros(e, dtype=bool)  # NEXT_STEP autoreset: a row's first step after done is a reset
        self.ep_return, self.ep_length = np.zeros((e, n)), np.zeros(e, dtype=np.int64)
        self.recent: deque[np.ndarray] = deque(maxlen=100)
        self.restarts = 0  # env worker restarts told to the coordinator
        # Counted by the runs this one resumes (restore_counters): the vector env
        # counts only this process's own.
        self._earlier_dropped = 0
        self._earlier_worker_restarts: tuple[int, ...] = ()
        self.last_eval: dict[str, Any] = {}
        self._sums: dict[str, float] = {}
        self._n = 0
        self._next_tick = time.monotonic() + 1.0

    @property
    def dropped_episodes(self) -> int:
        """Episodes cut by restarted env workers, in this run and the runs it resumes."""
        return self._earlier_dropped + self.venv.dropped_episodes

    @property
    def env_worker_restarts(self) -> list[int]:
        """Restarts per env worker index, in this run and the runs it resumes."""
        return [now + before for now, before in itertools.zip_longest(
            self.venv.worker_restarts, self._earlier_worker_restarts, fillvalue=0)]

    def counters(self) -> dict[str, Any]:
        """The job-level counters a checkpoint carries (the coordinator saves its own)."""
        return {"dropped_episodes": self.dropped_episodes, "env_worker_restarts": self.env_worker_restarts}

    def restore_counters(self, saved: Mapping[str, Any]) -> None:
        """Go on from a checkpoint's :meth:`counters`; a checkpoint written before
        they were saved has none, which counts as 0."""
        where = StatePath.of(self, "restore_counters")
        saved = mapping(saved, where, optional=("dropped_episodes", "env_worker_restarts"))
        dropped = integer(saved.get("dropped_episodes", 0), where["dropped_episodes"])
        restarts = sequence(saved.get("env_worker_restarts", ()), where["env_worker_restarts"])
        restarts = tuple(integer(n, where["env_worker_restarts"][i]) for i, n in enumerate(restarts))
        self._earlier_dropped, self._earlier_worker_restarts = dropped, restarts

    def step(self) -> None:
        """One vector step of every env copy, its report, and the updates it makes due."""
        algo, venv = self.algo, self.venv
        actions = algo.act(self.obs)
        policy = None if algo.active_policies is None else algo.active_policies.copy()
        next_obs, rewards, term, trunc, infos = venv.step(actions)
        # Rows whose env worker died: the step was lost, next_obs is a fresh reset.
        cut = infos.get("env_restarted", np.zeros(venv.num_envs, dtype=bool))
        valid = ~self.skip & ~cut
        live = np.flatnonzero(valid)
        if live.size:
            self.replay.add(transitions(self.obs, actions, rewards, next_obs, term, live, policy))
        self.ep_return[live] += rewards[live]
        self.ep_length[live] += 1
        done = (term | trunc).all(axis=1) & valid
        episodes = []
        for row in np.flatnonzero(done):
            returns = self.ep_return[row].copy()
            self.recent.append(returns)
            episodes.append(Episode(ret=float(returns.sum()), length=int(self.ep_length[row]),
                                    agent_returns=tuple(float(r) for r in returns)))
        ended = done | cut  # a cut episode is dropped: no Episode reported for it
        self.ep_return[ended], self.ep_length[ended] = 0.0, 0
        if ended.any():
            algo.new_episodes(ended)
        # NEXT_STEP autoreset: the next step of an ended row (a cut one too) is its reset.
        self.skip, self.obs = ended, next_obs
        self.coordinator.report(Report(source=0, env_steps=int(live.size), transitions=int(live.size),
                                       episodes=episodes, version=algo.updates,
                                       env_worker_restarts=venv.restarts - self.restarts))
        while self.restarts < venv.restarts:
            self.restarts += 1
            self.coordinator.rejoin(Rejoin(source=0, restarts=self.restarts))
        self.learn()

    def learn(self) -> None:
        algo = self.algo
        for _ in range(self.pacing.updates_due(env_steps=self.coordinator.env_steps, updates=algo.updates,
                                               started_at=self.pacing.learning_starts)):
            if not self.replay.ready(self.batch_size, algo.updates % algo.ensemble_size):
                break
            for key, value in self.replay.update(algo, self.batch_size).items():
                if "/" not in key:  # per-agent losses stay out of the curves
                    self._sums[key] = self._sums.get(key, 0.0) + value
            self._n += 1

    def evaluate(self) -> None:
        config = self.ctx.config
        # The same episodes every time (fixed seeds), so the curve compares policies.
        seed, policy = config.run.seed + 10_000, frozen(actors_state(self.algo))
        result = evaluate(self.algo, self.env_fn, episodes=config.run.eval_episodes, seed=seed)
        self.last_eval = result
        steps = self.coordinator.env_steps
        self.coordinator.eval_result(EvalResult(env_steps=steps, version=self.algo.updates,
                                                returns=result["returns"], seed=seed, policy=policy))
        for key in MEASURES:
            if np.isfinite(result[key]):
                self.coordinator.logger.scalar(f"eval/{key}", result[key], steps)

    def team_returns(self) -> dict[str, float]:
        """Mean team return (sum over its members) over the last 100 episodes."""
        if not self.recent:
            return {team: float("nan") for team in self.teams}
        recent = np.asarray(self.recent)
        return {team: float(recent[:, members].sum(axis=1).mean()) for team, members in self.teams.items()}

    def tick(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next_tick:  # the coordinator ticks at most once a second
            return
        self._next_tick = now + 1.0
        means = {k: v / self._n for k, v in self._sums.items()} if self._n else {}
        status = {f"{team}100": round(v, 2) for team, v in self.team_returns().items()} \
            if len(self.teams) > 1 else {}
        scalars = {"replay/size": len(self.replay), "actors/dropped_episodes": self.dropped_episodes}
        if self.coordinator.tick(updates=self.algo.updates, learner_metrics=means, force=force,
                                 scalars=scalars, status=status):
            self._sums, self._n = {}, 0

    def summary(self, *, interrupted: bool) -> dict[str, Any]:
        algo, agents = self.algo, list(self.venv.agents)
        recent = np.asarray(self.recent) if self.recent else None
        return self.coordinator.summary(
            algorithm=type(algo), updates=algo.updates, run_dir=self.ctx.run_dir, interrupted=interrupted,
            agents=agents, teams={team: [agents[i] for i in m] for team, m in self.teams.items()},
            team_return_last100=self.team_returns(),
            agent_return_last100=recent.mean(axis=0).round(3).tolist() if recent is not None else None,
            critic_observes=self.ctx.config.learn.critic_observes,
            critic_inputs=[algo.critic_input_dim(i) for i in range(algo.n_agents)],
            mode=algo.mode, batch_size=self.batch_size, replay_size=len(self.replay),
            dropped_episodes=self.dropped_episodes, env_worker_restarts_by_worker=self.env_worker_restarts,
            **{key: self.last_eval.get(key, float("nan")) for key in MEASURES})


# --------------------------------------------------------------------- wiring


def serial_main(ctx: JobContext) -> dict[str, Any]:
    import torch

    from envs.multiagent import MultiAgentVectorEnv
    from experiments.runtime.config import resolve_device
    from experiments.runtime.envs import vector_env_options

    config = ctx.config
    torch.set_num_threads(config.run.torch_threads)
    env_fn = env_factory(config.env, ctx.parts.env)
    # Env workers are expendable: a dead one is restarted (bounded by --max-restarts);
    # one that hangs is named.
    venv = MultiAgentVectorEnv([env_fn] * config.env.num_envs, **vector_env_options(config))
    algo = coordinator = None
    try:
        algo = build_maddpg(ctx, agents=venv.agents, obs_spaces=venv.agent_observation_spaces,
                            act_spaces=venv.agent_action_spaces, device=resolve_device(config.run.device))
        coordinator = start_lead(ctx, num_sources=1, target=target(config), evaluator=None,
                                 agent_names=venv.agents, teams=teams_of(venv.agents))
        trainer = Trainer(ctx, venv=venv, algo=algo, coordinator=coordinator, env_fn=env_fn)
        keeper = run_keeper(ctx, coordinator, trainer)
        return run_lead(ctx, coordinator, keeper, _TrainerTurns(trainer))
    except BaseException:
        if coordinator is not None:
            coordinator.logger.close()
        raise
    finally:
        venv.close()
        if algo is not None:
            algo.close()


class _TrainerTurns:
    """MADDPG's one process in the runtime's loop (``experiments.runtime.lead.run_lead``):
    a vector step with the updates pacing owes, evaluations on schedule, the curves."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def turn(self) -> bool:
        if self.trainer.coordinator.should_stop():
            return False
        self.trainer.step()
        if self.trainer.coordinator.eval_due():
            self.trainer.evaluate()
        self.trainer.tick()
        return True

    def wind_down(self, signalled: bool) -> int:
        trainer = self.trainer
        trainer.coordinator.report(Report(source=0, env_steps=0, version=trainer.algo.updates, final=True))
        trainer.tick(force=True)
        return trainer.algo.updates

    def summary(self, interrupted: bool) -> dict[str, Any]:
        return self.trainer.summary(interrupted=interrupted)


def run_keeper(ctx: JobContext, coordinator: Any, trainer: Trainer):
    """Checkpoints hold every network and optimizer of the MADDPG, the replay, the
    job's counters (dropped episodes, env worker restarts) and the coordinator's
    progress; ``policy.pt`` holds the actors."""
    from experiments.runtime.checkpoints import RunKeeper

    algo, buffers = trainer.algo, trainer.replay.buffers

    def snapshot() -> dict[str, Any]:
        return {"maddpg": algo.state_dict(), "replay": [b.state_dict() for b in buffers],
                "counters": trainer.counters()}

    def restore(state: dict[str, Any]) -> None:
        algo.load_state_dict(state["maddpg"])
        replay = sequence(state["replay"], StatePath("maddpg checkpoint")["replay"], length=len(buffers))
        for buffer, saved in zip(buffers, replay, strict=True):
            buffer.load_state_dict(saved)
        trainer.restore_counters(state.get("counters", {}))

    keeper = RunKeeper(ctx, coordinator, snapshot=snapshot, policy=lambda: actors_state(algo),
                       meta={"agents": list(trainer.venv.agents), "buffers": len(buffers)})
    keeper.restore(restore, keys=("maddpg", "replay"))
    return keeper


def actors_state(algo: Any) -> dict[str, Any]:
    """The acting networks as one flat dict of tensors (``actor<i>.<param>``)."""
    return {f"actor{i}.{k}": v for i, actor in enumerate(algo.actors) for k, v in actor.state_dict().items()}


def load_policy(ctx: JobContext, state: dict[str, Any]):
    """A saved ``policy.pt`` as a MADDPG whose actors act (``experiments.evaluate``)."""
    from experiments.roles.maddpg_parts import env_factory

    env = env_factory(ctx.config.env, ctx.parts.env)()
    try:
        agents = list(env.possible_agents)
        obs_spaces = [env.observation_space(a) for a in agents]
        act_spaces = [env.action_space(a) for a in agents]
    finally:
        env.close()
    algo = build_maddpg(ctx, agents=agents, obs_spaces=obs_spaces, act_spaces=act_spaces, device="cpu")
    for i, actor in enumerate(algo.actors):
        prefix = f"actor{i}."
        actor.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    algo.refresh()
    return algo


def play(ctx: JobContext, policy: Any, *, episodes: int, seed: int) -> list[float]:
    """Team returns of ``episodes`` greedy episodes (``experiments.evaluate``)."""
    from experiments.roles.maddpg_parts import env_factory, evaluate

    return [float(r) for r in evaluate(policy, env_factory(ctx.config.env, ctx.parts.env),
                                       episodes=episodes, seed=seed)["returns"]]


def rank_main(ctx: JobContext) -> dict[str, Any]:
    """Under a launcher (a one-rank world, see ``resolve``): the same one process."""
    return serial_main(ctx)


JOB = Job(name="maddpg", rank_main=rank_main, serial_main=serial_main, resolve=resolve, check=check,
          describe=describe, load_policy=load_policy, play=play)
