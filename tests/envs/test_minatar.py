"""The faster MinAtar engines play exactly MinAtar's games: the same states, rewards,
terminals and random draws, step for step, through episode ends and difficulty ramps."""

import gymnasium as gym
import numpy as np
import pytest
from minatar.environments import space_invaders
from minatar.gym import BaseEnv

from envs.minatar import ENGINES, MinAtarEnv, SpaceInvadersEngine
from envs.registry import make_env


def play_side_by_side(game: str, *, steps: int, seed: int, policy_seed: int, **kwargs) -> int:
    """Steps MinAtar's env and ours with the same actions; returns the episodes played."""
    ours, theirs = MinAtarEnv(game, **kwargs), BaseEnv(game, **kwargs)
    actions = np.random.default_rng(policy_seed)
    obs_a, _ = ours.reset(seed=seed)
    obs_b, _ = theirs.reset(seed=seed)
    episodes = 0
    for step in range(steps):
        np.testing.assert_array_equal(obs_a, obs_b, err_msg=f"step {step}")
        # Mostly fire and move, the way a learning agent clears waves and ramps the speed.
        action = int(actions.choice(ours.action_space.n))
        obs_a, r_a, term_a, trunc_a, _ = ours.step(action)
        obs_b, r_b, term_b, trunc_b, _ = theirs.step(action)
        assert (r_a, term_a, trunc_a) == (r_b, term_b, trunc_b), f"step {step}"
        assert type(r_a) is type(r_b) and obs_a.dtype == obs_b.dtype
        if term_a:
            episodes += 1
            obs_a, _ = ours.reset()
            obs_b, _ = theirs.reset()
    np.testing.assert_array_equal(ours.game.random.get_state()[1], theirs.game.random.get_state()[1])
    return episodes


@pytest.mark.parametrize("seed", [0, 1])
def test_space_invaders_engine_plays_minatars_game_exactly(seed):
    assert play_side_by_side("space_invaders", steps=6_000, seed=seed, policy_seed=seed) > 5


def test_a_cleared_wave_respawns_and_ramps_the_speed_identically():
    """The last alien shot: the wave respawns and the aliens' move interval ramps down,
    in both engines the same way, and the game goes on identically."""
    ours, theirs = SpaceInvadersEngine(), space_invaders.Env()
    for env in (ours, theirs):
        env.random = np.random.RandomState(3)
        env.alien_map[:] = 0
        env.alien_map[4, env.pos] = 1  # one alien left, right above the cannon
        env.alien_move_timer = 5  # and not about to move
    for env in (ours, theirs):
        env.act(5)  # fire
    for step in range(600):
        action = 5 if step % 3 else (1 if step % 2 else 3)
        assert ours.act(action) == theirs.act(action), f"step {step}"
        np.testing.assert_array_equal(ours.state(), theirs.state(), err_msg=f"step {step}")
        assert (ours.enemy_move_interval, ours.ramp_index) == (theirs.enemy_move_interval, theirs.ramp_index)
        if ours.terminal:
            break
    assert ours.ramp_index == 1 and ours.enemy_move_interval == space_invaders.enemy_move_interval - 1


def test_sticky_actions_and_no_ramping_carry_over():
    assert play_side_by_side("space_invaders", steps=2_000, seed=5, policy_seed=1,
                             sticky_action_prob=0.5, difficulty_ramping=False) > 0
    env = MinAtarEnv("space_invaders", difficulty_ramping=False)
    assert isinstance(env.game.env, SpaceInvadersEngine) and env.game.env.ramping is False
    env.reset(seed=2)
    assert env.game.env.random is env.game.random  # seeding reaches the engine


def test_registered_ids_use_the_engines_and_other_games_stay_minatars():
    env = make_env("MinAtar/SpaceInvaders-v0")
    assert isinstance(env.unwrapped.game.env, ENGINES["space_invaders"])
    assert type(make_env("MinAtar/Breakout-gymnax-v0").unwrapped.game.env).__module__ == \
        "minatar.environments.breakout"
    assert gym.spec("MinAtar/SpaceInvaders-v1").kwargs == {"game": "space_invaders",
                                                           "use_minimal_action_set": True}
