"""The faster MinAtar engines play exactly MinAtar's games: the same states, rewards,
terminals and random draws, step for step, through episode ends and difficulty ramps;
and a process making a MinAtar env leaves MinAtar's display libraries unimported."""

import os
import pathlib
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from minatar.environments import seaquest, space_invaders
from minatar.gym import BaseEnv

from envs.minatar import ENGINES, MinAtarEnv, SeaquestEngine, SpaceInvadersEngine
from envs.minatar_import import OnFirstUse
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
    assert isinstance(make_env("MinAtar/Seaquest-v1").unwrapped.game.env, SeaquestEngine)
    assert type(make_env("MinAtar/Breakout-gymnax-v0").unwrapped.game.env).__module__ == \
        "minatar.environments.breakout"
    assert gym.spec("MinAtar/SpaceInvaders-v1").kwargs == {"game": "space_invaders",
                                                           "use_minimal_action_set": True}


@pytest.mark.parametrize("seed", [0, 1])
def test_seaquest_engine_plays_minatars_game_exactly(seed):
    assert play_side_by_side("seaquest", steps=8_000, seed=seed, policy_seed=seed) > 100


def test_seaquest_sticky_actions_and_no_ramping_carry_over():
    assert play_side_by_side("seaquest", steps=3_000, seed=5, policy_seed=1,
                             sticky_action_prob=0.5, difficulty_ramping=False) > 20
    env = MinAtarEnv("seaquest", difficulty_ramping=False)
    assert isinstance(env.game.env, SeaquestEngine) and env.game.env.ramping is False


def _game_state(env) -> str:
    """Everything the game holds but its RandomState: lists, timers, counts, flags, as repr
    (so a True where upstream holds 1 would show)."""
    return repr(sorted((k, v) for k, v in vars(env).items() if k != "random"))


def seaquest_lockstep(setup, actions, *, seed: int = 0, ramping: bool = True) -> tuple[list[tuple], seaquest.Env]:
    """Upstream's Seaquest and ours from the state ``setup(env)`` makes, stepped with
    ``actions``, compared whole after every step; a terminal resets both and runs
    ``setup`` again. Returns upstream's (reward, terminal) per step, and upstream's game."""
    ours, theirs = SeaquestEngine(ramping=ramping), seaquest.Env(ramping=ramping)
    for env in (ours, theirs):
        env.random = np.random.RandomState(seed)
        setup(env)
    assert _game_state(ours) == _game_state(theirs)
    results = []
    for step, action in enumerate(actions):
        r_a, r_b = ours.act(action), theirs.act(action)
        assert r_a == r_b and type(r_a[0]) is type(r_b[0]), f"step {step}"
        state_a, state_b = ours.state(), theirs.state()
        assert state_a.dtype == state_b.dtype and state_a.shape == state_b.shape
        np.testing.assert_array_equal(state_a, state_b, err_msg=f"step {step}")
        assert _game_state(ours) == _game_state(theirs), f"step {step}"
        results.append(r_b)
        if r_b[1]:
            for env in (ours, theirs):
                env.reset()
                setup(env)
    np.testing.assert_array_equal(ours.random.get_state()[1], theirs.random.get_state()[1])
    assert ours.random.get_state()[2] == theirs.random.get_state()[2]
    return results, theirs


def _underwater(env, *, divers: int = 0, oxygen: int = seaquest.max_oxygen, y: int = 1) -> None:
    env.sub_y, env.surface, env.diver_count, env.oxygen = y, False, divers, oxygen


def test_seaquest_surfacing_with_six_divers_pays_the_oxygen_and_ramps():
    results, theirs = seaquest_lockstep(lambda env: _underwater(env, divers=6, oxygen=150), [2, 4, 2, 4, 2])
    assert results[0] == (150 * 10 // seaquest.max_oxygen, False)
    # Upstream leaves the count at -1 after a full surfacing, so the next ones do not end the game.
    assert not any(terminal for _, terminal in results) and theirs.diver_count == -3
    assert (theirs.ramp_index, theirs.move_speed, theirs.e_spawn_speed) == (3, 4, 17)


def test_seaquest_surfacing_without_divers_ends_the_game():
    assert seaquest_lockstep(lambda env: _underwater(env), [2])[0] == [(0, True)]
    ended = SeaquestEngine()
    _underwater(ended)
    assert ended.act(2) == (0, True) and ended.act(3) == (0, True) and ended.sub_x == 5  # it stays over


def test_seaquest_oxygen_runs_out():
    results, _ = seaquest_lockstep(lambda env: _underwater(env, divers=1, oxygen=3, y=4), [0] * 5)
    assert [terminal for _, terminal in results] == [False, False, False, True, False]


def test_seaquest_divers_are_picked_up_up_to_six():
    def setup(env):
        _underwater(env, divers=4, y=3)
        env.sub_x = 5
        # One on the sub, one moving onto it, one swimming away, one leaving the screen.
        env.divers = [[5, 3, True, 2], [4, 3, True, 0], [6, 3, True, 0], [9, 5, True, 0], [3, 3, True, 4]]
    _, theirs = seaquest_lockstep(setup, [0, 0, 1, 1, 0, 2, 2])
    # Two picked up on the first step; at six the sub moves onto the last one and it swims on.
    assert theirs.diver_count == 6 and theirs.divers == [[8, 3, True, 5], [4, 3, True, 3]]


def test_seaquest_late_game_spawns_shoots_and_collides_identically():
    """Difficulty ramped to its floor: an enemy spawns every step and moves every third,
    subs fire, bullets and fish collide with the player, the player's bullets hit."""
    def setup(env):
        _underwater(env, divers=3, y=4)
        env.e_spawn_speed, env.e_spawn_timer, env.move_speed, env.ramp_index = 1, 0, 2, 40
    actions = np.random.default_rng(2).choice(6, size=3_000, p=[0.1, 0.15, 0.1, 0.15, 0.1, 0.4]).tolist()
    results, _ = seaquest_lockstep(setup, actions, seed=4)
    assert sum(r for r, _ in results) > 100 and sum(t for _, t in results) > 50


def test_seaquest_equal_objects_are_removed_by_value_as_upstreams_lists_do():
    """Two bullets one cell apart in a row (a state no play reaches): the one behind hits a
    fish and ``list.remove`` drops the one ahead, equal to it by then, and the other stays;
    the list's order shows which went."""
    def setup(env):
        _underwater(env, divers=1, y=8)
        env.f_bullets = [[4, 3, True], [5, 6, False], [3, 3, True]]
        env.e_fish = [[4, 3, False, 3], [7, 5, True, 0], [7, 5, True, 0]]
        env.e_subs = [[2, 2, True, 0, 0], [1, 2, True, 1, 0]]
    results, theirs = seaquest_lockstep(setup, [0], ramping=False)
    assert results == [(1, False)] and theirs.f_bullets == [[4, 6, False], [5, 3, True]]
    seaquest_lockstep(setup, [0] * 12, ramping=False)


def test_seaquest_a_sub_shot_as_it_moves_still_fires():
    """Upstream's sub, hit by the player's bullet on its own move, fires on its way out."""
    def setup(env):
        _underwater(env, divers=1, y=8)
        env.f_bullets = [[5, 4, False]]
        env.e_subs = [[3, 4, True, 0, 0]]
    results, theirs = seaquest_lockstep(setup, [0], ramping=False)
    assert results == [(1, False)] and theirs.e_subs == [] and theirs.e_bullets == [[5, 4, True]]


FRESH_PROCESS = """
import sys
from envs.registry import make_env
env = make_env("MinAtar/Breakout-v0")
env.reset(seed=0)
env.step(1)
print(sorted(m for m in ("seaborn", "matplotlib.pyplot", "scipy.stats") if m in sys.modules))
"""


@pytest.mark.timeout(60)
def test_a_process_making_a_minatar_env_imports_no_display_library():
    # minatar imports them for its human display only: ~2 s of CPU in every actor,
    # env worker and bench process (envs.minatar_import). A fresh interpreter: this
    # one may have them for other reasons.
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", FRESH_PROCESS], cwd=root, env=env, capture_output=True,
                         text=True, timeout=50)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_a_display_stand_in_reads_the_real_module_once_out_of_sys_modules(monkeypatch):
    stand_in = OnFirstUse("colorsys")
    assert stand_in.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)  # what minatar's render would read
    monkeypatch.setitem(sys.modules, "colorsys", stand_in)
    with pytest.raises(AttributeError):  # while it stands in: no import of itself, no recursion
        stand_in.rgb_to_hsv  # noqa: B018
