"""Gymnasium API conformance shared by InProcessVectorEnv and SubprocVectorEnv."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from hypothesis import given, settings
from hypothesis import strategies as st

from envs import InProcessVectorEnv, SubprocVectorEnv, make_vector_env
from envs.testing import CompositeEnv, CountingEnv


def make(kind: str, fns, **kw):
    if kind == "inprocess":
        return InProcessVectorEnv(fns, **kw)
    return SubprocVectorEnv(fns, num_workers=2, **kw)


KINDS = ["inprocess", "subproc"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_spaces_dtypes_and_next_step_autoreset(kind):
    fn = partial(CountingEnv, episode_length=2)
    venv = make(kind, [fn] * 3)
    try:
        assert venv.num_envs == 3
        assert venv.single_observation_space == CountingEnv().observation_space
        assert venv.observation_space.shape == (3, 1)
        assert venv.action_space.shape == (3,)
        assert venv.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        obs, info = venv.reset(seed=0)
        assert obs.dtype == np.float32 and obs.shape == (3, 1)
        assert info == {}
        seen = []
        for _ in range(4):
            obs, rew, term, trunc, info = venv.step(np.array([0, 1, 0]))
            assert rew.dtype == np.float64 and term.dtype == np.bool_ and trunc.dtype == np.bool_
            assert venv.observation_space.contains(obs)
            seen.append((obs[:, 0].tolist(), rew.tolist(), term.tolist()))
        # step 1: count 0->1, step 2: terminates at 2, step 3: reset (obs 0, reward 0), step 4: 1
        assert seen[0] == ([1, 1, 1], [1.0, 0.0, 1.0], [False] * 3)
        assert seen[1] == ([2, 2, 2], [0.0, 1.0, 0.0], [True] * 3)
        assert seen[2] == ([0, 0, 0], [0.0] * 3, [False] * 3)
        assert seen[3][0] == [1, 1, 1]
    finally:
        venv.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_same_step_autoreset_puts_final_obs_in_infos(kind):
    fn = partial(CountingEnv, episode_length=2, truncate=True, with_info=True)
    venv = make(kind, [fn] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        venv.reset(seed=0)
        obs, _, _, trunc, info = venv.step(np.array([0, 0]))
        assert "final_obs" not in info and obs[:, 0].tolist() == [1, 1]
        obs, _, term, trunc, info = venv.step(np.array([0, 0]))
        assert trunc.tolist() == [True, True] and term.tolist() == [False, False]
        assert obs[:, 0].tolist() == [0, 0]  # already reset
        assert info["_final_obs"].tolist() == [True, True]
        assert [o[0] for o in info["final_obs"]] == [2, 2]
        assert info["final_info"]["count"].tolist() == [2, 2]
        assert info["reset_count"].tolist() == [2, 2]
        obs, *_ = venv.step(np.array([0, 0]))
        assert obs[:, 0].tolist() == [1, 1]
    finally:
        venv.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_seeding_and_reset_options(kind):
    fn = partial(CountingEnv, episode_length=5, random_start=True)
    venv = make(kind, [fn] * 4)
    try:
        a, _ = venv.reset(seed=123)
        b, _ = venv.reset(seed=[123, 124, 125, 126])
        np.testing.assert_array_equal(a, b)
        c, _ = venv.reset(seed=7, options={"start": 100})
        assert (c >= 100).all()
        mask = np.array([True, False, False, True])
        d, _ = venv.reset(options={"reset_mask": mask, "start": 50})
        assert (d[[0, 3]] >= 50).all() and (d[[0, 3]] < 100).all()
        np.testing.assert_array_equal(d[[1, 2]], c[[1, 2]])
        with pytest.raises(ValueError, match="seed list"):
            venv.reset(seed=[1, 2])
    finally:
        venv.close()


@pytest.mark.timeout(40)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_trajectories_identical_inprocess_subproc_and_gymnasium(mode):
    fns = [partial(gym.make, "CartPole-v1")] * 5
    envs = [
        InProcessVectorEnv(fns, autoreset_mode=mode),
        SubprocVectorEnv(fns, num_workers=2, autoreset_mode=mode),
        SubprocVectorEnv(fns, num_workers=2, autoreset_mode=mode, step_in_parent=False),
        gym.vector.SyncVectorEnv(fns, autoreset_mode=mode),
    ]
    try:
        rng = np.random.default_rng(0)
        results = [[venv.reset(seed=42)[0]] for venv in envs]
        ends = 0
        for _ in range(60):
            actions = rng.integers(0, 2, size=5)
            for venv, res in zip(envs, results):
                obs, rew, term, trunc, info = venv.step(actions)
                res += [obs, rew, term, trunc]
                if "final_obs" in info:
                    res.append(np.stack(list(info["final_obs"][info["_final_obs"]])))
            ends += int(term.any() or trunc.any())
        assert ends > 0  # episodes ended, so autoreset paths were compared too
        for res in results[1:]:
            assert len(res) == len(results[0])
            for x, y in zip(results[0], res):
                np.testing.assert_array_equal(x, y)
    finally:
        for venv in envs:
            venv.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_composite_observation_and_box_actions(kind):
    venv = make(kind, [partial(CompositeEnv, episode_length=3)] * 3)
    try:
        obs, _ = venv.reset(seed=0)
        assert venv.observation_space.contains(obs)
        obs, rew, *_ = venv.step(np.full((3, 2), 0.25, dtype=np.float32))
        assert venv.observation_space.contains(obs)
        assert obs["count"].shape == (3, 2) and obs["count"][:, 1].tolist() == [2.0] * 3
        assert obs["parity"].tolist() == [1, 1, 1]
        assert obs["pair"][1].dtype == np.int8 and obs["pair"][1][:, 0].tolist() == [1] * 3
        np.testing.assert_allclose(rew, 0.5)
        # float64 actions convert (same kind) to the float32 Box
        venv.step(np.zeros((3, 2)))
        with pytest.raises(ValueError, match="shape"):
            venv.step(np.zeros((3, 3), dtype=np.float32))
    finally:
        venv.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_bad_actions_rejected_before_sending(kind):
    venv = make(kind, [partial(CountingEnv, episode_length=3)] * 2)
    try:
        venv.reset(seed=0)
        with pytest.raises(ValueError, match=r"shape \(3,\)"):
            venv.step(np.zeros(3, dtype=np.int64))
        with pytest.raises(ValueError, match="dtype float64"):
            venv.step(np.zeros(2, dtype=np.float64))
        with pytest.raises(ValueError, match="dtype"):
            venv.step(np.array(["a", "b"]))
        obs, *_ = venv.step(np.zeros(2, dtype=np.int32))  # still in sync afterwards
        assert obs[:, 0].tolist() == [1, 1]
    finally:
        venv.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_call_get_set_attr_and_render(kind):
    fn = partial(CountingEnv, episode_length=3, render_mode="rgb_array")
    venv = make(kind, [fn] * 3)
    try:
        venv.reset(seed=0)
        assert venv.get_attr("episode_length") == (3, 3, 3)
        venv.set_attr("episode_length", [4, 5, 6])
        assert venv.get_attr("episode_length") == (4, 5, 6)
        venv.set_attr("episode_length", 7)
        assert venv.call("episode_length") == (7, 7, 7)
        venv.step(np.zeros(3, dtype=np.int64))
        frames = venv.render()
        assert len(frames) == 3 and frames[0].shape == (4, 4, 3) and frames[0][0, 0, 0] == 1
        assert venv.call("render")[1].shape == (4, 4, 3)
        with pytest.raises(ValueError, match="set_attr got 2 values"):
            venv.set_attr("episode_length", [1, 2])
    finally:
        venv.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_close_is_idempotent(kind):
    venv = make(kind, [partial(CountingEnv)] * 2)
    venv.close()
    venv.close()
    assert venv.closed
    with pytest.raises(RuntimeError, match="closed"):
        venv.step(np.zeros(2, dtype=np.int64))


@pytest.mark.timeout(30)
def test_make_vector_env_ids_factories_and_typos():
    venv = make_vector_env(
        "CartPole-v1", num_envs=2, num_workers=0, env_kwargs={"max_episode_steps": 5}
    )
    try:
        assert isinstance(venv, InProcessVectorEnv)
        venv.reset(seed=0)
        for _ in range(5):
            *_, trunc, _ = venv.step(np.zeros(2, dtype=np.int64))
        assert trunc.all()
    finally:
        venv.close()
    venv = make_vector_env(partial(CountingEnv), num_envs=3, num_workers=2, seed=3)
    try:
        assert isinstance(venv, SubprocVectorEnv) and venv.num_workers == 2
        assert venv.reset(seed=0)[0].shape == (3, 1)
    finally:
        venv.close()
    with pytest.raises(ValueError, match="env_kwargs"):
        make_vector_env(partial(CountingEnv), num_envs=2, env_kwargs={"x": 1})
    with pytest.raises(ValueError, match="num_envs"):
        make_vector_env("CartPole-v1", num_envs=0)
    with pytest.raises(ValueError, match="autoreset_mode"):
        make_vector_env("CartPole-v1", num_envs=1, num_workers=0, autoreset_mode="sometimes")


def test_inprocess_async_interface_matches_subproc():
    venv = InProcessVectorEnv([partial(CountingEnv)] * 2)
    try:
        venv.reset(seed=0)
        assert venv.num_workers == 1 and list(venv.envs_of_worker(0)) == [0, 1]
        venv.step_async(np.zeros(2, dtype=np.int64), workers=[0])
        with pytest.raises(RuntimeError, match="pending"):
            venv.step(np.zeros(2, dtype=np.int64))
        obs, *_ = venv.step_wait(timeout=1.0)
        assert obs[:, 0].tolist() == [1, 1]
        with pytest.raises(RuntimeError, match="without a pending"):
            venv.step_wait()
        with pytest.raises(ValueError, match="one worker"):
            venv.step_async(np.zeros(2, dtype=np.int64), workers=[1])
    finally:
        venv.close()


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    truncate=st.booleans(),
    same_step=st.booleans(),
    actions=st.lists(st.integers(0, 1), min_size=12, max_size=12),
)
def test_inprocess_matches_gymnasium_sync_for_any_episode_lengths(
    lengths, truncate, same_step, actions
):
    mode = AutoresetMode.SAME_STEP if same_step else AutoresetMode.NEXT_STEP
    fns = [
        partial(CountingEnv, episode_length=n, truncate=truncate, with_info=True) for n in lengths
    ]
    ours = InProcessVectorEnv(fns, autoreset_mode=mode)
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    try:
        a, ainfo = ours.reset(seed=0)
        b, binfo = ref.reset(seed=0)
        np.testing.assert_array_equal(a, b)
        for act in actions:
            batch = np.full(len(lengths), act, dtype=np.int64)
            for x, y in zip(ours.step(batch), ref.step(batch)):
                if isinstance(x, dict):
                    assert x.keys() == y.keys()
                    for key in x:
                        if key == "final_obs":
                            assert [None if o is None else o.tolist() for o in x[key]] == [
                                None if o is None else o.tolist() for o in y[key]
                            ]
                        elif key != "final_info":
                            np.testing.assert_array_equal(x[key], y[key])
                else:
                    np.testing.assert_array_equal(x, y)
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("spin_us", [0.0, 200.0, None])
def test_spinning_or_blocking_workers_give_identical_results(spin_us):
    fns = [partial(CountingEnv, episode_length=3, with_info=True)] * 4
    spin = SubprocVectorEnv(fns, num_workers=2, spin_us=spin_us)
    ref = InProcessVectorEnv(fns)
    try:
        for a, b in zip(spin.reset(seed=0), ref.reset(seed=0)):
            assert str(a) == str(b)
        for _ in range(5):
            actions = np.array([0, 1, 1, 0])
            for a, b in zip(spin.step(actions), ref.step(actions)):
                assert str(a) == str(b)
    finally:
        spin.close()
        ref.close()
    with pytest.raises(ValueError, match="spin_us"):
        SubprocVectorEnv(fns, spin_us=-1)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_copy_false_returns_views_of_the_batch_copy_true_does_not(kind):
    fns = [partial(CountingEnv, episode_length=50)] * 4
    views, copies = make(kind, fns, copy=False), make(kind, fns)
    try:
        for venv in (views, copies):
            venv.reset(seed=0)
        actions = np.zeros(4, dtype=np.int64)
        view, copied = views.step(actions)[0], copies.step(actions)[0]
        before_view, before_copy = view.copy(), copied.copy()
        views.step(actions)
        copies.step(actions)
        np.testing.assert_array_equal(view, before_view + 1)  # the batch moved on
        np.testing.assert_array_equal(copied, before_copy)  # a copy stays put
    finally:
        views.close()
        copies.close()
