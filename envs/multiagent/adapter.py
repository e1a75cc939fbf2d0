"""ParallelEnvAdapter: a PettingZoo ParallelEnv (fixed agent set) as arrays per agent.

Layout, decided once per env from its spaces:

* homogeneous agents (every agent has the same observation and action space, the
  usual case: MPE simple_spread): observations are one array shaped
  ``(n_agents, *obs_shape)``, actions one array ``(n_agents, *act_shape)`` (Discrete
  agents: int array ``(n_agents,)``).
* heterogeneous agents (or ``stack=False``): observations and actions are tuples with
  one array per agent, in ``possible_agents`` order.

Rewards, terminated and truncated are always arrays shaped ``(n_agents,)``. The
episode of the whole env ends when every agent is done (the fixed agent set
assumption), which is how MPE behaves. Per-agent infos are kept only when non-empty.

No PettingZoo import: any object with the parallel API (``possible_agents``,
``observation_space(agent)``, ``action_space(agent)``, ``reset``, ``step``) works.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


def _stacked_space(space: spaces.Space, n: int) -> spaces.Space:
    if isinstance(space, spaces.Box):
        return spaces.Box(
            np.broadcast_to(space.low, (n, *space.shape)),
            np.broadcast_to(space.high, (n, *space.shape)),
            dtype=space.dtype,
        )
    if isinstance(space, spaces.Discrete):
        if space.start != 0:
            raise TypeError(f"Discrete spaces with start={space.start} are not supported")
        return spaces.MultiDiscrete(np.full(n, space.n), dtype=space.dtype)
    if isinstance(space, spaces.MultiBinary):
        return spaces.MultiBinary((n, *np.atleast_1d(space.n)))
    if isinstance(space, spaces.MultiDiscrete):
        return spaces.MultiDiscrete(
            np.broadcast_to(space.nvec, (n, *space.shape)), dtype=space.dtype
        )
    raise TypeError(f"agent space {space!r} cannot be stacked; use stack=False")


class ParallelEnvAdapter:
    """Array view of a PettingZoo-style ParallelEnv with a fixed set of agents.

    Args:
        env: the parallel env (its ``possible_agents`` fix the agent order).
        stack: True stacks agents into one array (requires homogeneous agents), False
            gives per-agent tuples, None (default) stacks exactly when homogeneous.
        reward: how the env-level scalar reward (used by vector envs) is formed from
            the per-agent rewards: "mean" (default) or "sum".
    """

    def __init__(self, env: Any, *, stack: bool | None = None, reward: str = "mean") -> None:
        if reward not in ("mean", "sum"):
            raise ValueError(f"reward must be 'mean' or 'sum', got {reward!r}")
        self.env = env
        self.agents: list[str] = list(env.possible_agents)
        if not self.agents:
            raise ValueError("the parallel env has no possible_agents")
        self.n_agents = len(self.agents)
        self.agent_observation_spaces = [env.observation_space(a) for a in self.agents]
        self.agent_action_spaces = [env.action_space(a) for a in self.agents]
        homogeneous = all(
            o == self.agent_observation_spaces[0] and a == self.agent_action_spaces[0]
            for o, a in zip(self.agent_observation_spaces, self.agent_action_spaces)
        )
        if stack is None:
            stack = homogeneous
        elif stack and not homogeneous:
            raise ValueError("stack=True needs every agent to have the same spaces")
        self.homogeneous = homogeneous
        self.stacked = stack
        if stack:
            self.observation_space = _stacked_space(self.agent_observation_spaces[0], self.n_agents)
            self.action_space = _stacked_space(self.agent_action_spaces[0], self.n_agents)
        else:
            self.observation_space = spaces.Tuple(self.agent_observation_spaces)
            self.action_space = spaces.Tuple(self.agent_action_spaces)
        self.reward_mode = reward
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self._last_obs: dict[str, Any] = {}
        self._term = np.zeros(self.n_agents, dtype=np.bool_)
        self._trunc = np.zeros(self.n_agents, dtype=np.bool_)

    def _obs(self, obs: dict[str, Any]) -> Any:
        # Agents already done keep reporting their last observation.
        self._last_obs.update(obs)
        values = [self._last_obs[a] for a in self.agents]
        if self.stacked:
            return np.stack([np.asarray(v, dtype=self.observation_space.dtype) for v in values])
        return tuple(values)

    @staticmethod
    def _infos(infos: dict[str, Any]) -> dict[str, Any]:
        return {a: i for a, i in infos.items() if i}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, infos = self.env.reset(seed=seed, options=options)
        self._last_obs = {}
        self._term[:] = False
        self._trunc[:] = False
        missing = set(self.agents) - set(obs)
        if missing:
            raise RuntimeError(f"reset returned no observation for agents {sorted(missing)}")
        return self._obs(obs), self._infos(infos)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """``actions``: array ``(n_agents, ...)`` when stacked, else a per-agent sequence."""
        if len(actions) != self.n_agents:
            raise ValueError(f"expected actions for {self.n_agents} agents, got {len(actions)}")
        live = set(getattr(self.env, "agents", self.agents))
        act = {}
        for agent, space, value in zip(self.agents, self.agent_action_spaces, actions):
            if agent in live:
                act[agent] = (
                    int(value)
                    if isinstance(space, spaces.Discrete)
                    else np.asarray(value, dtype=space.dtype)
                )
        obs, rewards, terms, truncs, infos = self.env.step(act)
        rew = np.array([rewards.get(a, 0.0) for a in self.agents], dtype=np.float64)
        # Agents that left the env earlier keep their final done flags.
        for i, agent in enumerate(self.agents):
            if agent in terms:
                self._term[i] = terms[agent]
            if agent in truncs:
                self._trunc[i] = truncs[agent]
        return self._obs(obs), rew, self._term.copy(), self._trunc.copy(), self._infos(infos)

    def scalar_reward(self, rewards: np.ndarray) -> float:
        return float(rewards.mean() if self.reward_mode == "mean" else rewards.sum())

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()
