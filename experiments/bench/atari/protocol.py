"""The one Atari protocol of ``experiments.bench.atari``, for ours and every peer.

Machado et al. 2018 ("Revisiting the Arcade Learning Environment", JAIR) as ALE v5
ids define it, with the DQN-era preprocessing: sticky actions 0.25 (per emulator
frame, inside the ALE), the minimal action set, episodes capped at 108K frames
(27K agent steps), up to 30 noops on reset, frame skip 4 with the last two frames
max-pooled, 84x84 grayscale (INTER_AREA), a stack of 4 frames, no termination on a
lost life, no FIRE on reset, rewards clipped to their sign for training only
(evaluation scores are the game's). :class:`envs.atari.AtariEnv` with its defaults
is exactly this (``tests/envs/test_atari.py`` checks it against gymnasium's wrapper
chain); every JSON line states it (:data:`PROTOCOL`).

Evaluation: ``--eval-episodes`` (10) episodes of the protocol env, unclipped;
value methods (Ape-X, PQN, SB3 DQN) act epsilon-greedily at epsilon 0.05, policy
methods (IMPALA, PPO, the PPO peers) sample their policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

PROTOCOL: dict[str, Any] = {
    "ale": "v5", "repeat_action_probability": 0.25, "full_action_space": False,
    "max_num_frames_per_episode": 108_000, "noop_max": 30, "frame_skip": 4, "max_pool": "last 2 frames",
    "screen": "84x84 grayscale, INTER_AREA", "stack": 4, "terminal_on_life_loss": False, "fire_reset": False,
    "reward_clip": "sign, training only (evaluation unclipped)",
}
# What envs.atari.AtariEnv is built with for PROTOCOL (its defaults, spelled out so a
# change of a default shows here and in the test that compares the two).
ENV_OPTIONS: dict[str, Any] = {
    "frame_skip": 4, "screen_size": 84, "stack": 4, "noop_max": 30, "terminal_on_life_loss": False,
    "repeat_action_probability": 0.25, "max_num_frames_per_episode": 108_000, "full_action_space": False,
}
EPSILON = 0.05  # value methods' evaluation epsilon
VALUE, POLICY = "epsilon-greedy 0.05", "sampled"  # how an implementation acts in evaluation


def make_env(env_id: str, *, clip_rewards: bool = False, **options: Any):
    """One protocol env (rewards clipped to their sign with ``clip_rewards``, for a
    peer's training; ours clip, or not, by their own settings)."""
    from envs.atari import make_atari
    from envs.registry import ensure_registered

    ensure_registered(env_id)
    env = make_atari(env_id, **{**ENV_OPTIONS, **options})
    if clip_rewards:
        from gymnasium.wrappers import TransformReward

        env = TransformReward(env, lambda r: float(np.sign(r)))
    return env


def check_env_id(env_id: str) -> str | None:
    """Why ``env_id`` is not an ALE v5 id this machine can build, or None."""
    if not (env_id.startswith("ALE/") and env_id.endswith("-v5")):
        return f"--env-id takes an ALE v5 id such as ALE/Pong-v5 (the protocol is v5's), got {env_id!r}"
    try:
        from envs.atari import rom_id

        rom_id(env_id)
    except ImportError:
        return "ale-py is not installed: pip install 'rlpar[atari]'"
    except ValueError as exc:
        return str(exc)
    return None


def game(env_id: str) -> str:
    """``"ALE/Pong-v5"`` -> ``"Pong"``: the name under which runs and the PNG go."""
    return env_id.split("/")[-1].rsplit("-v", 1)[0]


def eval_env(env_id: str, *, episodes: int, max_steps: int | None = None):
    """``episodes`` protocol envs, unclipped; ``max_steps`` cuts an episode (a smoke
    test's; the protocol's own cap is 27K agent steps)."""
    import gymnasium as gym
    from gymnasium.wrappers import TimeLimit

    def one():
        env = make_env(env_id)
        return TimeLimit(env, max_episode_steps=max_steps) if max_steps else env

    return gym.vector.SyncVectorEnv([one] * episodes)


def play(scores: Callable[[Any], Any], env: Any, *, acting: str, seed: int) -> tuple[np.ndarray, int]:
    """Returns of each env's first episode and how many were cut by a time limit:
    ``scores(obs)`` gives Q values (``acting`` :data:`VALUE`: epsilon-greedy) or
    logits (:data:`POLICY`: sampled), ``(batch, actions)``."""
    import torch

    if acting not in (VALUE, POLICY):
        raise ValueError(f"acting must be {VALUE!r} or {POLICY!r}, got {acting!r}")
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    n, actions = env.num_envs, int(env.single_action_space.n)
    obs, _ = env.reset(seed=seed)
    returns, running = np.zeros(n), np.ones(n, dtype=bool)
    cut = 0
    while running.any():
        with torch.no_grad():
            out = scores(obs).float().cpu()
            if acting == VALUE:
                action = np.where(rng.random(n) < EPSILON, rng.integers(actions, size=n),
                                  np.asarray(out.argmax(-1)))
            else:
                action = np.asarray(torch.multinomial(torch.softmax(out, -1), 1, generator=generator)[:, 0])
        obs, reward, terminated, truncated, _ = env.step(action)
        returns += np.asarray(reward, dtype=np.float64) * running
        cut += int(np.sum(truncated & ~terminated & running))
        running &= ~(terminated | truncated)
    return returns, cut
