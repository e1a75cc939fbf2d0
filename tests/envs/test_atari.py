"""envs.atari: the lean Atari env gives exactly what gymnasium's wrapper chain gives."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")
pytest.importorskip("cv2")

from envs import InProcessVectorEnv  # noqa: E402
from envs.atari import AtariEnv, make_atari, rom_id  # noqa: E402

gym.register_envs(ale_py)


def wrapper_chain(
    env_id: str,
    *,
    frame_skip: int = 4,
    screen_size: int | tuple[int, int] = 84,
    stack: int = 4,
    noop_max: int = 30,
    terminal_on_life_loss: bool = False,
    repeat_action_probability: float,
    max_num_frames_per_episode: int = 108_000,
) -> gym.Env:
    env = gym.make(
        env_id,
        frameskip=1,
        repeat_action_probability=repeat_action_probability,
        max_num_frames_per_episode=max_num_frames_per_episode,
    )
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        terminal_on_life_loss=terminal_on_life_loss,
    )
    return gym.wrappers.FrameStackObservation(env, stack_size=stack)


def assert_same_trajectories(env_id: str, steps: int, seed: int, **kwargs) -> dict[str, int]:
    """Steps both envs with the same random actions, resetting both (unseeded, so their
    RNG streams must stay in step too) at every episode end; every result must match."""
    kwargs.setdefault("repeat_action_probability", 0.0)
    ref = wrapper_chain(env_id, **kwargs)
    lean = make_atari(env_id, step_info=True, **kwargs)
    assert lean.observation_space == ref.observation_space
    assert lean.action_space == ref.action_space
    obs_ref, info_ref = ref.reset(seed=seed)
    obs, info = lean.reset(seed=seed)
    np.testing.assert_array_equal(obs, obs_ref)
    assert info == info_ref
    rng = np.random.default_rng(seed)
    counts = {"terminated": 0, "truncated": 0, "nonzero_reward": 0}
    for t in range(steps):
        action = rng.integers(ref.action_space.n)
        obs_ref, reward_ref, term_ref, trunc_ref, info_ref = ref.step(action)
        obs, reward, term, trunc, info = lean.step(action)
        assert obs.dtype == np.uint8 and obs.shape == obs_ref.shape
        np.testing.assert_array_equal(obs, obs_ref, err_msg=f"step {t}")
        assert (reward, term, trunc, info) == (reward_ref, term_ref, trunc_ref, info_ref), t
        assert type(reward) is float
        counts["terminated"] += term
        counts["truncated"] += trunc
        counts["nonzero_reward"] += reward != 0.0
        if term or trunc:
            obs_ref, info_ref = ref.reset()
            obs, info = lean.reset()
            np.testing.assert_array_equal(obs, obs_ref, err_msg=f"reset after step {t}")
            assert info == info_ref
    return counts


@pytest.mark.timeout(60)
def test_pong_matches_wrappers_through_truncations():
    # 401 frames (noops included) can end an episode mid frame-skip, where the wrapper keeps
    # the previous step's frame buffers: the lean env must reproduce that too.
    # 300 steps: the third truncation (all the assertion needs) comes at step 288.
    counts = assert_same_trajectories(
        "ALE/Pong-v5", steps=300, seed=3, max_num_frames_per_episode=401
    )
    assert counts["truncated"] >= 3


@pytest.mark.timeout(60)
def test_breakout_game_over_and_life_loss_match_wrappers():
    # With these seeds: the game is over at step 132, the first points come at 201;
    # on life loss, lives end at steps 25, 53, 128, 156 and the game at 187.
    counts = assert_same_trajectories("ALE/Breakout-v5", steps=250, seed=1)
    assert counts["terminated"] >= 1 and counts["nonzero_reward"] >= 1
    counts = assert_same_trajectories(
        "ALE/Breakout-v5", steps=200, seed=2, terminal_on_life_loss=True
    )
    assert counts["terminated"] >= 3


@pytest.mark.timeout(60)
def test_other_settings_and_sticky_actions_match_wrappers():
    assert_same_trajectories(
        "ALE/Pong-v5",
        steps=150,
        seed=5,
        frame_skip=1,
        screen_size=(64, 48),
        stack=2,
        noop_max=0,
        repeat_action_probability=0.25,
        max_num_frames_per_episode=120,
    )
    assert_same_trajectories(
        "ALE/Pong-v5", steps=100, seed=6, frame_skip=3, stack=1, repeat_action_probability=0.25
    )


def test_same_seed_same_start_and_info_off_by_default():
    env = make_atari("ALE/Pong-v5", repeat_action_probability=0.0)
    first, info = env.reset(seed=11)
    assert info == {}
    assert env.observation_space.contains(first)
    for _ in range(3):
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        assert info == {} and not (term or trunc)
        # Oldest first: the newest frame enters at the end, the rest move down one.
        np.testing.assert_array_equal(obs[:-1], first[1:])
        first = obs
    again, _ = env.reset(seed=11)
    np.testing.assert_array_equal(again, env.reset(seed=11)[0])
    assert all((again[i] == again[-1]).all() for i in range(3))  # padded with the reset frame


def test_cv2_threads_is_set_only_when_asked():
    import cv2

    before = cv2.getNumThreads()
    try:
        make_atari("Pong")
        assert cv2.getNumThreads() == 1
        cv2.setNumThreads(2)
        make_atari("Pong", cv2_threads=None)
        assert cv2.getNumThreads() == 2
    finally:
        cv2.setNumThreads(before)


def test_copy_obs_false_returns_the_internal_stack():
    env = make_atari("Pong", copy_obs=False)
    obs, _ = env.reset(seed=0)
    before = obs.copy()
    obs2 = env.step(0)[0]
    assert obs2 is obs
    np.testing.assert_array_equal(obs2[:-1], before[1:])
    copied = make_atari("Pong")
    a, _ = copied.reset(seed=0)
    b = copied.step(0)[0]
    assert not np.shares_memory(a, b)


def test_in_a_vector_env():
    venv = InProcessVectorEnv([lambda: make_atari("Pong", copy_obs=False)] * 2)
    try:
        obs, _ = venv.reset(seed=[0, 1])
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        for _ in range(3):
            obs, reward, term, trunc, _ = venv.step(np.array([0, 2]))
        assert obs.shape == (2, 4, 84, 84) and reward.shape == (2,)
    finally:
        venv.close()


def test_rom_names_and_render():
    assert rom_id("ALE/SpaceInvaders-v5") == "space_invaders"
    assert rom_id("PongNoFrameskip-v4") == "pong"
    assert rom_id("space_invaders") == "space_invaders"
    env = make_atari("Pong", render_mode="rgb_array")
    env.reset(seed=0)
    assert env.render().shape == (210, 160, 3)
    assert env.get_action_meanings()[0] == "NOOP"
    assert isinstance(env, AtariEnv)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"frame_skip": 0}, ValueError, "frame_skip"),
        ({"frame_skip": 2.0}, TypeError, "frame_skip"),
        ({"stack": 0}, ValueError, "stack"),
        ({"noop_max": -1}, ValueError, "noop_max"),
        ({"screen_size": 0}, ValueError, "screen_size"),
        ({"screen_size": (84,)}, TypeError, "screen_size"),
        ({"screen_size": (84, -1)}, ValueError, "screen_size"),
        ({"repeat_action_probability": 1.5}, ValueError, "repeat_action_probability"),
        ({"max_num_frames_per_episode": 0}, ValueError, "max_num_frames_per_episode"),
        ({"render_mode": "human"}, ValueError, "render_mode"),
        ({"cv2_threads": -1}, ValueError, "cv2_threads"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_atari("Pong", **kwargs)


def test_bad_env_id_and_actions():
    with pytest.raises(ValueError, match="NoSuchGame"):
        make_atari("ALE/NoSuchGame-v5")
    with pytest.raises(TypeError, match="env_id"):
        make_atari(3)  # type: ignore[arg-type]
    env = make_atari("Pong")
    env.reset(seed=0)
    for bad in (-1, 6, 1.5, "up"):
        with pytest.raises(ValueError, match="action"):
            env.step(bad)


def test_make_atari_rejects_an_unknown_option():
    with pytest.raises(TypeError, match="frameskip"):
        make_atari("Pong", frameskip=4)  # the option is frame_skip
