"""On-policy rollouts from a gymnasium-style vector env.

A vector env resets a finished sub-env by itself, in one of two ways, and the
collector handles both so that every stored transition has its *true* successor
in ``next_obs`` (what truncation bootstrapping needs):

* same-step autoreset: the step that ends an episode already returns the reset
  observation; the final one is in ``info["final_obs"]``.
* next-step autoreset (gymnasium's default): the step that ends an episode
  returns the final observation, and the *next* step ignores its action and
  returns the reset observation with zero reward. That reset step is stored with
  ``valid = False`` so the loss ignores it.

A rollout may be cut short (DD-PPO's preemption of stragglers, Wijmans et al. 2020,
"DD-PPO: Learning Near-Perfect PointGoal Navigators from 2.5 Billion Frames", ICLR):
``collect(should_stop=...)`` asks after every step past a minimum whether to stop,
and returns the steps taken so far. Who decides (e.g. a counter of finished workers
in a job's store) is the caller's business, not the collector's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

# (actions, env_actions) or (actions, env_actions, extras): extras are per-env arrays
# (e.g. PPO's behaviour log-probs and values) stored under their keys as (T, N, ...).
Sampled = (tuple[np.ndarray, np.ndarray]
           | tuple[np.ndarray, np.ndarray, Mapping[str, np.ndarray]])
SampleFn = Callable[[np.ndarray], Sampled]
ROLLOUT_KEYS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated", "valid")
# Where a vector env that hands learning transformed rewards (a job's --reward-clip)
# keeps the game's own, one per env: episode returns are counted in them.
GAME_REWARD = "game_reward"


def game_rewards(reward: Any, info: Mapping[str, Any]) -> np.ndarray:
    """The game's rewards of a vector step: ``info[GAME_REWARD]`` where the env
    transformed ``reward`` for learning, else ``reward`` itself (float64)."""
    return np.asarray(info.get(GAME_REWARD, reward), dtype=np.float64)


class RolloutCollector:
    """Steps ``env`` for ``n_steps`` per :meth:`collect` with ``sample_actions(obs)
    -> (actions, env_actions)`` (e.g. :meth:`algorithms.a2c.A2C.sample_actions`), or
    ``-> (actions, env_actions, extras)`` whose per-env arrays are stored too
    (:meth:`algorithms.ppo.PPO.sample_actions`: ``log_probs`` and ``values``).

    Finished episodes' undiscounted returns (of the game's rewards,
    :func:`game_rewards`) and lengths accumulate in ``episode_returns`` /
    ``episode_lengths`` until :meth:`drain_episodes`.
    ``env_steps`` counts valid transitions (reset steps excluded).

    Envs flagged in ``info["env_restarted"]`` (their worker process died and was
    replaced) lost that step: it is stored with ``valid = False``, the step before it
    bootstraps from the last state reached, and the cut episode is not reported.
    """

    def __init__(self, *, env: Any, sample_actions: SampleFn, n_steps: int, seed: int | None = None) -> None:
        if not isinstance(n_steps, int) or isinstance(n_steps, bool) or n_steps < 1:
            raise ValueError(f"n_steps must be an int >= 1, got {n_steps!r}")
        if not callable(sample_actions):
            raise TypeError("sample_actions must be callable")
        self.env, self.sample_actions, self.n_steps = env, sample_actions, n_steps
        self.num_envs = int(env.num_envs)
        mode = getattr(env, "metadata", {}).get("autoreset_mode")
        mode = getattr(mode, "value", mode)
        if mode is not None and str(mode).lower() in ("disabled",):
            raise ValueError("the vector env's autoreset is disabled; RolloutCollector needs autoreset")
        # None: unknown, decided on the first finished episode from what info holds.
        self._same_step: bool | None = None if mode is None else str(mode).lower() in ("samestep", "same_step")
        obs, _ = env.reset(seed=seed)
        self._obs = np.asarray(obs)
        self._reset_next = np.zeros(self.num_envs, dtype=bool)
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []
        self.env_steps = 0
        self.dropped_episodes = 0  # episodes an env worker's death cut (never reported)

    def collect(self, *, should_stop: Callable[[int], bool] | None = None,
                min_steps: int | None = None) -> dict[str, np.ndarray]:
        """One rollout of ``(T, num_envs, ...)`` arrays (see :mod:`algorithms.a2c`),
        ``T = n_steps`` unless ``should_stop`` cuts it short: from ``min_steps`` steps
        on (default a quarter of ``n_steps``, DD-PPO's minimum) it is called with the
        number of steps taken before each further step, and True ends the rollout
        there. The next rollout goes on from where this one stopped."""
        if min_steps is None:
            min_steps = max(1, math.ceil(self.n_steps / 4))
        if not (isinstance(min_steps, int) and 1 <= min_steps <= self.n_steps):
            raise ValueError(f"min_steps must be an int in [1, n_steps={self.n_steps}], got {min_steps!r}")
        steps, n = self.n_steps, self.num_envs
        # uint8 frames stay bytes (a quarter of float32's memory) for networks that
        # scale them themselves; the algorithms' preprocess casts anything else by the
        # rule they act by (algorithms.actor_critic.model_observations).
        obs_dtype = np.uint8 if self._obs.dtype == np.uint8 else np.float32
        obs_buf = np.empty((steps, *self._obs.shape), dtype=obs_dtype)
        next_buf = np.empty_like(obs_buf)
        rewards = np.empty((steps, n), dtype=np.float32)
        terminated = np.empty((steps, n), dtype=bool)
        truncated = np.empty((steps, n), dtype=bool)
        valid = np.empty((steps, n), dtype=bool)
        actions = None
        extras: dict[str, np.ndarray] = {}
        taken = 0
        for t in range(steps):
            if should_stop is not None and t >= min_steps and should_stop(t):
                break
            obs = self._obs
            raw, env_actions, *rest = self.sample_actions(obs)
            if actions is None:
                actions = np.empty((steps, *raw.shape), dtype=raw.dtype)
            for key, value in (rest[0] if rest else {}).items():
                if key not in extras:
                    if key in ROLLOUT_KEYS:
                        raise ValueError(f"sample_actions returned extra {key!r}, a rollout key")
                    value = np.asarray(value)
                    extras[key] = np.empty((steps, *value.shape), dtype=value.dtype)
                extras[key][t] = value
            next_obs, reward, term, trunc, info = self.env.step(env_actions)
            next_obs = np.asarray(next_obs)
            term, trunc = np.asarray(term, dtype=bool), np.asarray(trunc, dtype=bool)
            done = term | trunc
            # Envs whose worker process died and was replaced: the step never happened.
            cut = np.asarray(info.get("env_restarted", np.zeros(n, dtype=bool)), dtype=bool)
            ok = ~self._reset_next & ~cut
            true_next = next_obs
            if (done & ~cut).any():
                if self._same_step is None:
                    self._same_step = "final_obs" in info
                if self._same_step:
                    true_next = _with_final_obs(next_obs, info, done & ~cut)
            obs_buf[t], next_buf[t], actions[t] = obs, true_next, raw
            rewards[t], terminated[t], truncated[t], valid[t] = reward, term, trunc, ok
            if cut.any() and t > 0:
                # The step before a cut one bootstraps from V(obs), the last state
                # reached (a rollout's last step already does).
                truncated[t - 1] |= cut
            self._track(game_rewards(reward, info), done, ok, cut)
            if not self._same_step:
                self._reset_next = (done & ok) | cut  # a restarted env's next step is its reset
            self._obs = next_obs
            taken = t + 1
        rollout = {"obs": obs_buf, "actions": actions, "rewards": rewards, "next_obs": next_buf,
                   "terminated": terminated, "truncated": truncated, "valid": valid, **extras}
        # A cut rollout: the first ``taken`` rows (views, contiguous: time is the leading axis).
        return rollout if taken == steps else {k: v[:taken] for k, v in rollout.items()}

    def _track(self, reward: np.ndarray, done: np.ndarray, ok: np.ndarray, cut: np.ndarray) -> None:
        self.env_steps += int(ok.sum())
        self._ep_return += np.where(ok, reward, 0.0)
        self._ep_length += ok
        for i in np.flatnonzero(done & ok):
            self.episode_returns.append(float(self._ep_return[i]))
            self.episode_lengths.append(int(self._ep_length[i]))
            self._ep_return[i], self._ep_length[i] = 0.0, 0
        self.dropped_episodes += int(np.count_nonzero(cut & (self._ep_length > 0)))
        self._ep_return[cut], self._ep_length[cut] = 0.0, 0  # a cut episode is dropped

    def drain_episodes(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of episodes finished since the last call."""
        out = self.episode_returns, self.episode_lengths
        self.episode_returns, self.episode_lengths = [], []
        return out


def _with_final_obs(next_obs: np.ndarray, info: dict, done: np.ndarray) -> np.ndarray:
    final = info.get("final_obs")
    if final is None:
        raise KeyError("same-step autoreset env finished an episode without info['final_obs']")
    out = next_obs.copy()
    for i in np.flatnonzero(done):
        out[i] = final[i]
    return out


def evaluate(act: Callable[[np.ndarray], np.ndarray], env: Any, *, episodes: int,
             seed: int | None = None) -> np.ndarray:
    """Undiscounted returns (of the game's rewards, :func:`game_rewards`) of
    ``episodes`` episodes, one per sub-env of ``env``
    (which must have ``episodes`` envs), counting each env's first episode only so
    that short episodes are not over-represented. ``act(obs)`` should be greedy. A
    policy with memory (R2D2's recurrent one) has ``act.episodes_started(mask)``,
    called after the reset (every row) and after each step with the envs whose
    episode ended (their next observation starts one), and may have
    ``act.rewarded(reward)``, called after each step before that with the rewards
    the env gives (those it learned from)."""
    if env.num_envs != episodes:
        raise ValueError(f"evaluate needs a vector env with {episodes} envs, got {env.num_envs}")
    started = getattr(act, "episodes_started", None)
    rewarded = getattr(act, "rewarded", None)
    obs, _ = env.reset(seed=seed)
    if started is not None:
        started(np.ones(episodes, dtype=bool))
    returns = np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    while running.any():
        obs, reward, terminated, truncated, info = env.step(act(obs))
        returns += game_rewards(reward, info) * running
        if rewarded is not None:
            rewarded(reward)
        done = np.logical_or(terminated, truncated)
        running &= ~done
        if started is not None and done.any():
            started(done)
    return returns
