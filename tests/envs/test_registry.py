"""envs.registry: env ids of every form, in this process and in fresh ones."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import subprocess
import sys
import warnings

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest

from envs import make_vector_env
from envs.minatar_import import import_minatar
from envs.registry import (
    EnvFactory,
    ensure_registered,
    env_spec,
    flatten_observations,
    make_env,
    minatar_id,
)
from envs.testing import CountingEnv, DictCountingEnv

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
MINATAR_SHAPES = {"Breakout": (10, 10, 4), "Asterix": (10, 10, 4), "Freeway": (10, 10, 7),
                  "Seaquest": (10, 10, 10), "SpaceInvaders": (10, 10, 6)}

def _needs_minatar():
    """Skip where MinAtar is not installed. Imported as envs imports it, not by
    ``pytest.importorskip``: a plain ``import minatar`` loads its display libraries
    (seaborn, scipy.stats, matplotlib: about 1.5 s of CPU) that no test here uses."""
    try:
        import_minatar()
    except ImportError as exc:
        pytest.skip(f"minatar is not installed: {exc}")


# Loads a cloudpickled EnvFactory from argv[1] in a fresh interpreter, builds the env
# and prints what it saw as one JSON line.
CHILD = """
import json, sys
import cloudpickle, gymnasium as gym, numpy as np
with open(sys.argv[1], "rb") as f:
    factory = cloudpickle.load(f)
registered = factory.spec.id in gym.registry
env = factory()
obs, _ = env.reset(seed=0)
next_obs, reward, terminated, _, _ = env.step(1)
env.close()
print(json.dumps({"registered_before": registered, "obs": np.asarray(obs).tolist(),
                  "next_obs": np.asarray(next_obs).tolist(), "reward": float(reward),
                  "terminated": bool(terminated)}))
"""

# A user's script: the env class lives in __main__ and is registered only there.
MAIN_SCRIPT = """
import sys
import cloudpickle, gymnasium as gym, numpy as np
from envs.registry import EnvFactory

class MainOnlyEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = 0
        return np.array([7.0], np.float32), {}

    def step(self, action):
        self.n += 1
        return np.array([7.0 + self.n], np.float32), 2.0, self.n >= 1, False, {}

gym.register(id="MainOnly-v0", entry_point=MainOnlyEnv)
with open(sys.argv[1], "wb") as f:
    cloudpickle.dump(EnvFactory.from_id("MainOnly-v0"), f)
"""


def run_python(code: str, *args: str, pythonpath: list[pathlib.Path] = ()) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in pythonpath] + [str(ROOT)])
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def run_child(factory: EnvFactory, tmp_path: pathlib.Path, **kwargs) -> dict:
    path = tmp_path / "factory.pkl"
    path.write_bytes(cloudpickle.dumps(factory))
    return json.loads(run_python(CHILD, str(path), **kwargs).strip().splitlines()[-1])


@pytest.fixture
def registered(request):
    """Register ids for one test and remove them afterwards."""
    ids = []

    def register(env_id: str, entry_point, **kwargs) -> str:
        gym.register(id=env_id, entry_point=entry_point, **kwargs)
        ids.append(env_id)
        return env_id

    yield register
    for env_id in ids:
        gym.registry.pop(env_id, None)


# ----------------------------------------------------------------- ids in this process


def test_plain_and_module_ids_return_the_bare_id():
    assert ensure_registered("CartPole-v1") == "CartPole-v1"
    assert ensure_registered("user_env_module:UserEnv-v0") == "UserEnv-v0"
    assert ensure_registered("user_env_module:UserEnv-v0") == "UserEnv-v0"  # idempotent
    spec = env_spec("user_env_module:UserEnv-v0")
    assert spec.id == "UserEnv-v0" and spec.kwargs == {"offset": 0.5}
    obs, _ = make_env("user_env_module:UserEnv-v0", offset=2.0).reset(seed=0)
    np.testing.assert_array_equal(obs, [0.0, 2.0])


@pytest.mark.parametrize("env_id", ["", "   ", None, 3])
def test_bad_ids_are_value_errors(env_id):
    with pytest.raises(ValueError, match="non-empty string"):
        ensure_registered(env_id)


@pytest.mark.parametrize("env_id", [":Env-v0", "module:"])
def test_module_form_needs_both_parts(env_id):
    with pytest.raises(ValueError, match="needs both parts"):
        ensure_registered(env_id)


def test_unimportable_module_names_module_and_id():
    with pytest.raises(ValueError, match=r"'no_such_module_xyz:Env-v0'.*'no_such_module_xyz'"):
        ensure_registered("no_such_module_xyz:Env-v0")


def test_unknown_id_carries_gymnasium_suggestion():
    with pytest.raises(ValueError, match=r"unknown env id 'CartPol-v1'.*Did you mean: `CartPole`"):
        env_spec("CartPol-v1")
    with pytest.raises(ValueError, match=r"CartPole.*versioned environments"):
        make_env("CartPole-v9")


def test_make_env_passes_kwargs_to_gym_make():
    env = make_env("CartPole-v1", max_episode_steps=3)
    env.reset(seed=0)
    flags = [env.step(0)[3] for _ in range(3)]
    assert flags == [False, False, True]
    with pytest.raises(TypeError):
        make_env("user_env_module:UserEnv-v0", ofset=1.0)  # the env's constructor rejects typos


@pytest.mark.parametrize(("env_id", "module", "extra"), [
    ("ALE/Pong-v5", "ale_py", "atari"),
    ("PongNoFrameskip-v4", "ale_py", "atari"),
    ("MinAtar/Breakout-v0", "minatar", "minatar"),
])
def test_missing_extra_names_the_install_command(monkeypatch, env_id, module, extra):
    monkeypatch.setattr(gym, "registry", {})  # as in a process that never registered them
    monkeypatch.setitem(sys.modules, module, None)  # importing it raises ImportError
    monkeypatch.setitem(sys.modules, f"{module}.gym", None)
    with pytest.raises(ValueError, match=rf"{env_id}.*pip install 'rlpar\[{extra}\]'"):
        ensure_registered(env_id)


def test_ale_ids_register_when_installed():
    pytest.importorskip("ale_py")
    assert env_spec("ALE/Pong-v5").entry_point == "ale_py.env:AtariEnv"


@pytest.mark.parametrize("game", sorted(MINATAR_SHAPES))
def test_minatar_ids_have_bool_channels_last_observations(game):
    _needs_minatar()
    full, minimal = make_env(f"MinAtar/{game}-v0"), make_env(f"MinAtar/{game}-v1")
    assert full.action_space == gym.spaces.Discrete(6)  # the paper's protocol
    assert minimal.action_space.n <= 6
    obs, _ = full.reset(seed=0)
    assert full.observation_space.shape == obs.shape == MINATAR_SHAPES[game]
    assert full.observation_space.dtype == obs.dtype == np.bool_


def test_minatar_registration_runs_once_without_warnings():
    _needs_minatar()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert ensure_registered("MinAtar/Freeway-v1") == "MinAtar/Freeway-v1"
        make_env("MinAtar/Freeway-v0").close()  # v0 is the protocol, not "out of date"
    assert not [w for w in caught if "MinAtar" in str(w.message)], [str(w.message) for w in caught]


# gymnax's MinAtar (gymnax.environments.minatar): its action sets, and its episode caps.
GYMNAX_ACTIONS = {"Asterix": [0, 1, 2, 3, 4], "Breakout": [0, 1, 3], "Freeway": [0, 2, 4],
                  "Seaquest": [0, 1, 2, 3, 4, 5], "SpaceInvaders": [0, 1, 3, 5]}


@pytest.mark.parametrize("game", sorted(MINATAR_SHAPES))
def test_minatar_gymnax_ids_are_what_they_say(game):
    _needs_minatar()
    assert minatar_id(game) == f"MinAtar/{game}-v0"
    env_id = minatar_id(game, "gymnax")
    assert env_id == f"MinAtar/{game}-gymnax-v0"
    spec = env_spec(env_id)
    assert spec.max_episode_steps == (2500 if game == "Freeway" else 1000)
    env = make_env(env_id)
    try:
        assert env.unwrapped.action_set == GYMNAX_ACTIONS[game]  # the minimal set, in gymnax's order
        assert env.action_space == gym.spaces.Discrete(len(GYMNAX_ACTIONS[game]))
        assert env.unwrapped.game.sticky_action_prob == 0.0
        assert env.observation_space.shape == MINATAR_SHAPES[game]
    finally:
        env.close()
    paper = make_env(minatar_id(game))
    assert paper.unwrapped.game.sticky_action_prob == 0.1 and paper.spec.max_episode_steps is None
    paper.close()


def test_minatar_gymnax_episodes_are_cut_at_the_cap():
    _needs_minatar()
    env = make_env("MinAtar/Freeway-gymnax-v0")  # a chicken that never moves never dies
    env.reset(seed=0)
    for step in range(1, 2501):
        _, _, terminated, truncated, _ = env.step(0)
        assert not terminated and truncated == (step == 2500)
    env.close()
    with pytest.raises(ValueError, match="unknown MinAtar variant"):
        minatar_id("Breakout", "atari")
    with pytest.raises(ValueError, match="unknown MinAtar game"):
        minatar_id("Pong")


# ----------------------------------------------------------------- EnvFactory


def test_factory_pickles_and_builds_with_kwargs(registered):
    env_id = registered("RegistryCounting-v0", CountingEnv, kwargs={"episode_length": 2})
    factory = EnvFactory.from_id(env_id, env_kwargs={"truncate": True})
    assert pickle.loads(pickle.dumps(factory)) == factory
    env = factory()
    env.reset(seed=0)
    env.step(0)
    assert env.step(0)[2:4] == (False, True)  # kwargs from the spec and from env_kwargs


def test_factory_validates_its_fields():
    spec = env_spec("CartPole-v1")
    with pytest.raises(ValueError, match="does not name spec"):
        EnvFactory(env_id="Pendulum-v1", spec=spec)
    with pytest.raises(TypeError, match="EnvSpec"):
        EnvFactory(env_id="CartPole-v1", spec="CartPole-v1")
    with pytest.raises(TypeError, match="flatten"):
        EnvFactory(env_id="CartPole-v1", spec=spec, flatten=1)
    with pytest.raises(TypeError, match="env_kwargs"):
        EnvFactory(env_id="CartPole-v1", spec=spec, env_kwargs=[("a", 1)])
    with pytest.raises(TypeError):
        EnvFactory("CartPole-v1", spec)  # keyword-only


def test_fresh_process_builds_env_registered_only_here(registered, tmp_path):
    env_id = registered("RegistryParentOnly-v0", CountingEnv, kwargs={"episode_length": 1})
    seen = run_child(EnvFactory.from_id(env_id), tmp_path)
    assert seen == {"registered_before": False, "obs": [0.0], "next_obs": [1.0],
                    "reward": 0.0, "terminated": True}


def test_fresh_process_builds_env_of_a_module_id(tmp_path):
    factory = EnvFactory.from_id("user_env_module:UserEnv-v0", env_kwargs={"offset": 3.0})
    seen = run_child(factory, tmp_path, pythonpath=[HERE])
    assert seen == {"registered_before": False, "obs": [0.0, 3.0], "next_obs": [1.0, 3.0],
                    "reward": 1.0, "terminated": False}


def test_env_class_defined_in_users_main_travels_by_value(tmp_path):
    path = tmp_path / "factory.pkl"
    run_python(MAIN_SCRIPT, str(path))  # the user's script, then a fresh process
    seen = json.loads(run_python(CHILD, str(path)).strip().splitlines()[-1])
    assert seen == {"registered_before": False, "obs": [7.0], "next_obs": [8.0],
                    "reward": 2.0, "terminated": True}


# ----------------------------------------------------------------- flattening


def test_flatten_dict_observations(registered):
    env_id = registered("RegistryDict-v0", DictCountingEnv)
    env = EnvFactory.from_id(env_id, flatten=True)()
    # gymnasium's flat form: the one-hot parity makes it float64 (the nets cast to float32)
    assert env.observation_space == gym.spaces.Box(0, np.array([np.inf, 1, 1]), (3,), np.float64)
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, [0.0, 1.0, 0.0])  # count, one-hot parity
    obs, reward, *_ = env.step(0)
    np.testing.assert_array_equal(obs, [1.0, 0.0, 1.0])
    assert reward == 1.0
    assert not isinstance(EnvFactory.from_id(env_id)().observation_space, gym.spaces.Box)


def test_flatten_leaves_box_observations_alone():
    env = make_env("CartPole-v1")
    assert flatten_observations(env) is env


def test_flatten_rejects_spaces_without_a_flat_form():
    class SequenceEnv(CountingEnv):
        def __init__(self) -> None:
            super().__init__()
            self.observation_space = gym.spaces.Sequence(gym.spaces.Discrete(2))

    with pytest.raises(ValueError, match="no fixed-size flat form"):
        flatten_observations(SequenceEnv())


def test_flattened_dict_env_through_a_vector_env(registered):
    env_id = registered("RegistryDictVec-v0", DictCountingEnv)
    venv = make_vector_env(EnvFactory.from_id(env_id, flatten=True), num_envs=2, num_workers=0)
    try:
        obs, _ = venv.reset(seed=0)
        assert obs.shape == (2, 3)
        obs, reward, *_ = venv.step(np.array([0, 1]))
        np.testing.assert_array_equal(reward, [1.0, 0.0])
    finally:
        venv.close()


# ----------------------------------------------------------------- MinAtar in workers


@pytest.mark.timeout(180)
def test_minatar_through_subprocess_vector_env():
    _needs_minatar()
    factory = EnvFactory.from_id("MinAtar/Breakout-v0")
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 6, size=(300, 2))
    trajectories = []
    for workers in (1, 0):  # a worker process, then in-process: the same trajectory
        venv = make_vector_env(factory, num_envs=2, num_workers=workers)
        try:
            obs, _ = venv.reset(seed=[3, 4])
            assert obs.shape == (2, 10, 10, 4) and obs.dtype == np.bool_
            seen, ends = [obs], 0
            for a in actions:
                obs, reward, terminated, truncated, _ = venv.step(a)
                assert obs.dtype == np.bool_ and np.all(np.isfinite(reward))
                seen.append(obs)
                ends += int(terminated.sum())
            assert ends > 0  # random play loses balls: autoreset with bool obs ran too
            trajectories.append(np.stack(seen))
        finally:
            venv.close()
    np.testing.assert_array_equal(trajectories[0], trajectories[1])
