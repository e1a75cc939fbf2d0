"""MADDPG (Lowe et al. 2017, arXiv:1706.02275) as an actor-learner builder.

Actors step a :class:`~envs.multiagent.MultiAgentVectorEnv` (the builder's
:meth:`MADDPGBuilder.make_vector_env`) and send joint transitions to the program's
replay: homogeneous agents' fields stacked (``obs`` ``(B, n_agents, ...)``),
heterogeneous agents' as ``<field>_<i>`` (the batch layouts of
:mod:`algorithms.maddpg.spec`), with ``policy_index`` under policy ensembles. MADDPG
samples uniformly (the paper's replay), which is the prioritized replay with
priority exponent 0 and every initial priority 1: the job's default
``--priority-alpha 0``. The learner's ``update`` is MADDPG's; the agent-parallel
modes (``--mode``: jit_fork, threads, batched, loop) run inside it as before.

Each actor explores with its own draws (Gaussian or OU noise for Box actions,
Gumbel-softmax samples for Discrete ones) seeded by its index; an episode that ends
restarts its noise and, with ``--ensemble-size K``, draws its sub-policies anew.
Every finished episode reports its team return (the sum over agents) and each
agent's, which the coordinator writes per agent and per team.

``--ensemble-buffers separate`` (the paper's sub-buffers D_i^(k)): each update
trains sub-policy ``k = updates % K`` of every agent on transitions that agent
played with sub-policy ``k``: the learner samples ``K`` times the batch from the
shared replay and takes, per agent, ``batch_size`` rows of those it played with
``k`` (drawn again from them where fewer): uniform draws from D_i^(k) as the paper's
sub-buffers give, which here share one capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from algorithms.actor_learner import Actor, Learner
from algorithms.base import Learned
from algorithms.builder import Builder, EnvSpec, Flow
from algorithms.maddpg.maddpg import MADDPG
from algorithms.maddpg.spec import AgentSpec, MADDPGConfig

Batch = dict[str, np.ndarray]


def _rows(value: Any, rows: np.ndarray) -> Any:
    return [v[rows] for v in value] if isinstance(value, list | tuple) else value[rows]


def transitions(obs: Any, actions: Any, rewards: np.ndarray, next_obs: Any, terminated: np.ndarray,
                rows: np.ndarray, policy: np.ndarray | None) -> Batch:
    """Replay rows ``rows`` of one vector step: stacked fields for homogeneous agents,
    ``<field>_<i>`` otherwise (the batch layouts of ``algorithms.maddpg.spec``)."""
    batch: Batch = {}
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


def _final(reset_obs: Any, infos: Mapping[str, Any], done: np.ndarray) -> Any:
    """The true successors of a same-step autoreset step: the final observations of
    the rows that ended (``infos['final_obs']``, per agent), the others' as returned."""
    if not done.any() or "final_obs" not in infos:
        return reset_obs
    rows = np.flatnonzero(infos["_final_obs"])
    if isinstance(reset_obs, list | tuple):
        out = [np.array(v, copy=True) for v in reset_obs]
        for row in rows:
            for i, value in enumerate(infos["final_obs"][row]):
                out[i][row] = value
        return out
    out = np.array(reset_obs, copy=True)
    for row in rows:
        out[row] = infos["final_obs"][row]
    return out


class MADDPGActor(Actor):
    """One actor on a multi-agent vector env in same-step autoreset mode: rewards and
    flags are ``(num_envs, n_agents)``, an env's episode ends when every agent is done.
    Rows whose env worker was replaced (``infos['env_restarted']``) lost their step:
    no transition, their cut episode dropped. Finished episodes are ``(team return,
    length, per-agent returns)``."""

    def __init__(self, *, maddpg: MADDPG, env: Any, sink: Any, params: Any, add_every: int, pull_every: int,
                 seed: int | None = None) -> None:
        super().__init__(acting=maddpg, behave=self._behave, adder=None, env=env, sink=sink, params=params,
                         add_every=add_every, pull_every=pull_every, prioritized=True, seed=seed)
        self._returns = np.zeros((env.num_envs, maddpg.n_agents))

    def _behave(self, obs: Any) -> tuple[Any, dict[str, np.ndarray]]:
        return self.acting.act(obs), {}

    def step(self) -> int:
        maddpg, obs = self.acting, self._obs
        actions, _ = self.behave(obs)
        policy = None if maddpg.active_policies is None else maddpg.active_policies.copy()
        reset_obs, reward, terminated, truncated, infos = self.env.step(actions)
        cut = infos.get("env_restarted")
        cut = np.zeros(self.env.num_envs, dtype=bool) if cut is None else np.asarray(cut, dtype=bool)
        done = (terminated | truncated).all(axis=1)
        live = np.flatnonzero(~cut)
        if live.size:
            next_obs = _final(reset_obs, infos, done & ~cut)
            self._pending.append(transitions(obs, actions, reward, next_obs, terminated, live, policy))
        self.dropped_episodes += int(np.count_nonzero(cut & (self._lengths > 0)))
        self._returns[live] += reward[live]
        self._lengths[live] += 1
        for row in np.flatnonzero(done & ~cut):
            returns = self._returns[row]
            self.finished_episodes.append((float(returns.sum()), int(self._lengths[row]),
                                           tuple(float(r) for r in returns)))
        started = done | cut  # a cut episode is dropped: its return was never made
        self._returns[started], self._lengths[started] = 0.0, 0
        if started.any():
            self.episodes_started(started)
        self._obs = reset_obs
        self.env_steps += int(live.size)
        self._steps_since_pull += int(live.size)
        if len(self._pending) >= self.add_every:
            self.flush()
        if self._steps_since_pull >= self.pull_every:
            self.sync()
        return int(live.size)

    def episodes_started(self, mask: np.ndarray) -> None:
        """New sub-policies and restarted noise for the envs whose episode starts."""
        self.acting.new_episodes(mask)


class MADDPGLearner(Learner):
    """MADDPG's updates on replay batches; per-agent losses stay out of the curves.
    With ``separate`` ensemble buffers, each update's per-agent batches are the rows
    each agent played with the sub-policy trained (the module docstring)."""

    def __init__(self, *, algorithm: MADDPG, source: Any, params: Any, batch_size: int, push_every: int,
                 separate: bool, seed: int = 0) -> None:
        self.separate = separate and algorithm.ensemble_size > 1
        self.agent_batch = batch_size
        sampled = batch_size * algorithm.ensemble_size if self.separate else batch_size
        super().__init__(algorithm=algorithm, source=source, params=params, batch_size=sampled,
                         push_every=push_every, weighted=False)
        self.rng = np.random.default_rng(seed)

    def learn(self, batch: Batch) -> Learned:
        maddpg = self.algorithm
        if not self.separate:
            metrics = maddpg.update(batch)
        else:
            k = maddpg.updates % maddpg.ensemble_size
            played = np.asarray(batch["policy_index"])
            batches = []
            for i in range(maddpg.n_agents):
                rows = np.flatnonzero(played[:, i] == k)
                if rows.size == 0:  # none in this sample: any of agent i's rows stand in
                    rows = np.arange(len(played))
                rows = rows[:self.agent_batch] if rows.size >= self.agent_batch else \
                    self.rng.choice(rows, self.agent_batch)
                batches.append({key: value[rows] for key, value in batch.items()})
            metrics = maddpg.update(batches, sub_policies=[k] * maddpg.n_agents)
        return Learned({key: value for key, value in metrics.items() if "/" not in key})


class _Greedy:
    """MADDPG's evaluation policy: no exploration; with ensembles, sub-policies drawn
    for the evaluation's envs, the acting copy's training draws left as they were."""

    def __init__(self, maddpg: MADDPG) -> None:
        self.maddpg = maddpg

    def __call__(self, obs: Any) -> Any:
        maddpg = self.maddpg
        saved, maddpg.active_policies = maddpg.active_policies, None
        try:
            return maddpg.act(obs, explore=False)
        finally:
            maddpg.active_policies = saved


class MADDPGBuilder(Builder):
    """MADDPG for ``agents`` (names) with their observation and action spaces.
    ``network(observation_space, action_space) -> nn.Module`` builds one agent's actor
    (one per sub-policy); ``critic_sees``: each critic's agents (None: all).
    ``num_envs``: each actor's env copies (it pulls once per vector step).
    options. ``measures(maddpg) -> dict``: the job's measures of a trained MADDPG
    (e.g. a greedy evaluation's landmark distance), added to the summary;
    ``evaluator(maddpg, episodes=, seed=) -> dict``: the job's greedy evaluation, its
    ``returns`` and measures (NaN where one does not fit the env), made at every
    evaluation instead of :meth:`play` so the measures are curves too."""

    algorithm_base, actor_base, learner_base = MADDPG, MADDPGActor, MADDPGLearner
    state_key = "maddpg"

    def __init__(self, *, config: MADDPGConfig, agents: Sequence[str], observation_spaces: Sequence[Any],
                 action_spaces: Sequence[Any], spec: EnvSpec, critic_sees: Sequence[Sequence[int]] | None = None,
                 teams: Mapping[str, Sequence[int]] | None = None, num_envs: int = 1,
                 measures: Callable[[MADDPG], Mapping[str, float]] | None = None,
                 evaluator: Callable[..., Mapping[str, Any]] | None = None,
                 network: Callable[[Any, Any], Any] | None = None, algorithm: type | None = None,
                 actor: type | None = None, learner: type | None = None) -> None:
        super().__init__(spec=spec, network=network, algorithm=algorithm, actor=actor, learner=learner)
        config.validate()
        self.config, self.agents = config, list(agents)
        self.observation_spaces, self.action_spaces = list(observation_spaces), list(action_spaces)
        self.specs = [AgentSpec.from_spaces(o, a, name=name)
                      for name, o, a in zip(self.agents, self.observation_spaces, self.action_spaces)]
        self.critic_sees, self.teams, self.num_envs = critic_sees, dict(teams or {}), num_envs
        self.measures, self.evaluator = measures, evaluator

    @property
    def flow(self) -> Flow:
        c = self.config
        separate = c.ensemble_buffers == "separate" and c.ensemble_size > 1
        batch = c.batch_size * (c.ensemble_size if separate else 1)
        # Learning cannot start before a batch is stored: counting owed updates from
        # there avoids a burst of them at the first full batch.
        return Flow(data="replay", batch_size=batch, push_every=1, pull_every=self.num_envs, held_steps=1,
                    learning_starts=max(c.learning_starts, batch), updates_per_step=c.updates_per_step)

    def make_algorithm(self, *, device: Any, seed: int) -> MADDPG:
        import dataclasses

        import torch

        config = dataclasses.replace(self.config, seed=seed)
        actors = None
        if self.network is not None:
            torch.manual_seed(seed)
            actors = [self.network(o, a) for o, a in zip(self.observation_spaces, self.action_spaces)
                      for _ in range(config.ensemble_size)]
        return self.algorithm_cls(agents=self.specs, config=config, critic_sees=self.critic_sees, actors=actors,
                                  device=device)

    def make_actor(self, algorithm: MADDPG, *, env: Any, sink: Any, params: Any, index: int, num_actors: int,
                   seed: int) -> MADDPGActor:
        # The acting copy was made with this actor's seed: its own noise and Gumbel draws.
        return self.actor_cls(maddpg=algorithm, env=env, sink=sink, params=params, add_every=1,
                              pull_every=self.flow.pull_every, seed=seed)

    def make_learner(self, algorithm: MADDPG, *, source: Any, params: Any) -> MADDPGLearner:
        c = self.config
        return self.learner_cls(algorithm=algorithm, source=source, params=params, batch_size=c.batch_size,
                                push_every=self.flow.push_every, separate=c.ensemble_buffers == "separate",
                                seed=0 if c.seed is None else c.seed)

    def greedy(self, algorithm: MADDPG) -> Callable[[Any], Any]:
        return _Greedy(algorithm)

    def network_of(self, algorithm: MADDPG) -> Any:
        return algorithm.actors[0]

    def make_vector_env(self, env_fn: Callable[[], Any], **options: Any) -> Any:
        """The copies of the PettingZoo env as a :class:`~envs.multiagent.MultiAgentVectorEnv`
        (its action spaces take no seed: the actor's draws are the algorithm's)."""
        from envs.multiagent import MultiAgentVectorEnv

        num_envs = options.pop("num_envs")
        options.pop("seed", None)
        return MultiAgentVectorEnv([env_fn] * num_envs, **options)

    def play(self, act: Callable[[Any], Any], envs: Any, *, episodes: int, seed: int) -> np.ndarray:
        """Team returns (the sum over agents) of each env's first episode."""
        if envs.num_envs != episodes:
            raise ValueError(f"play needs a vector env with {episodes} envs, got {envs.num_envs}")
        obs, _ = envs.reset(seed=seed)
        returns, running = np.zeros(episodes), np.ones(episodes, dtype=bool)
        while running.any():
            obs, reward, terminated, truncated, _ = envs.step(act(obs))
            returns += np.asarray(reward, dtype=np.float64).sum(axis=1) * running
            running &= ~(terminated | truncated).all(axis=1)
        return returns

    def evaluation_episodes(self, algorithm: MADDPG, envs: Any, *, episodes: int,
                            seed: int) -> np.ndarray | tuple[np.ndarray, dict[str, float]]:
        if self.evaluator is None:
            return super().evaluation_episodes(algorithm, envs, episodes=episodes, seed=seed)
        played = self.evaluator(algorithm, episodes=episodes, seed=seed)
        measures = {name: float(value) for name, value in played.items()
                    if name not in ("returns", "team_return") and np.isfinite(value)}
        return np.asarray(played["returns"], dtype=np.float64), measures

    def episode_layout(self) -> dict[str, Any]:
        return {"agent_names": self.agents, "teams": self.teams}

    def summary(self, algorithm: MADDPG) -> dict[str, Any]:
        return {"critic_observes": "all" if self.critic_sees is None else "team",
                "critic_inputs": [algorithm.critic_input_dim(i) for i in range(algorithm.n_agents)],
                "mode": algorithm.mode, **(self.measures(algorithm) if self.measures is not None else {})}
