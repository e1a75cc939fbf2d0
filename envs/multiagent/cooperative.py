"""CooperativeEnv: a tiny built-in cooperative multi-agent task (no dependencies).

N agents on the plane [-1, 1]^2 must cover N landmarks (after MPE's simple_spread,
Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive
Environments"). Shared reward each step: minus the sum over landmarks of the distance
to the closest agent, so spreading out is the learnable optimum. Episodes are short
(``max_steps``, then truncation). Actions are 2-D velocities in [-1, 1] (continuous) or
one of {stay, left, right, down, up} (discrete).

``heterogeneous=True`` makes odd-numbered agents "rail" agents: they move along x only
(Box(1) or Discrete(3) actions) and do not observe the other agents, so obs and action
sizes differ per agent, the case MADDPG's per-agent critics must handle.

It follows the PettingZoo parallel API (possible_agents, agents, observation_space(a),
action_space(a), reset -> (obs, infos), step -> (obs, rewards, terms, truncs, infos)).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

_MOVES = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], dtype=np.float64)


class CooperativeEnv:
    metadata = {"name": "rlpar_cooperative_v0", "render_modes": [], "is_parallelizable": True}
    render_mode = None

    def __init__(
        self,
        *,
        n_agents: int = 2,
        max_steps: int = 25,
        continuous: bool = True,
        heterogeneous: bool = False,
        speed: float = 0.1,
    ) -> None:
        if n_agents < 1:
            raise ValueError(f"n_agents must be >= 1, got {n_agents}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.n_agents = n_agents
        self.max_steps = max_steps
        self.continuous = continuous
        self.heterogeneous = heterogeneous
        self.speed = speed
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        self._rail = [heterogeneous and i % 2 == 1 for i in range(n_agents)]
        self._obs_spaces = {}
        self._act_spaces = {}
        for i, agent in enumerate(self.possible_agents):
            size = 2 + 2 * n_agents + (0 if self._rail[i] else 2 * (n_agents - 1))
            self._obs_spaces[agent] = spaces.Box(-np.inf, np.inf, (size,), dtype=np.float32)
            dims = 1 if self._rail[i] else 2
            self._act_spaces[agent] = (
                spaces.Box(-1.0, 1.0, (dims,), dtype=np.float32)
                if continuous
                else spaces.Discrete(3 if self._rail[i] else 5)
            )
        self._rng = np.random.default_rng()
        self.pos = np.zeros((n_agents, 2))
        self.landmarks = np.zeros((n_agents, 2))
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_spaces[agent]

    def _observe(self) -> dict[str, np.ndarray]:
        out = {}
        for i, agent in enumerate(self.possible_agents):
            parts = [self.pos[i], (self.landmarks - self.pos[i]).ravel()]
            if not self._rail[i]:
                parts.append((np.delete(self.pos, i, axis=0) - self.pos[i]).ravel())
            out[agent] = np.concatenate(parts).astype(np.float32)
        return out

    def _reward(self) -> float:
        dists = np.linalg.norm(self.landmarks[:, None, :] - self.pos[None, :, :], axis=-1)
        return -float(dists.min(axis=1).sum())

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.pos = self._rng.uniform(-1, 1, (self.n_agents, 2))
        self.landmarks = self._rng.uniform(-1, 1, (self.n_agents, 2))
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step called after the episode ended; call reset")
        for i, agent in enumerate(self.possible_agents):
            if agent not in actions:
                raise ValueError(f"missing action for {agent}")
            a = actions[agent]
            if self.continuous:
                move = np.clip(np.asarray(a, dtype=np.float64).reshape(-1), -1.0, 1.0)
                if self._rail[i]:
                    move = np.array([move[0], 0.0])
            else:
                move = _MOVES[int(a)]
            self.pos[i] = np.clip(self.pos[i] + self.speed * move, -1.0, 1.0)
        self.t += 1
        reward = self._reward()
        done = self.t >= self.max_steps
        agents = self.possible_agents
        obs = self._observe()
        if done:
            self.agents = []
        return (
            obs,
            {a: reward for a in agents},
            {a: False for a in agents},
            {a: done for a in agents},
            {a: {} for a in agents},
        )

    def render(self) -> None:
        return None

    def close(self) -> None:
        pass
