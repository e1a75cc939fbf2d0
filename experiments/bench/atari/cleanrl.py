"""CleanRL's ``ppo_atari_envpool.py`` as a peer of ``experiments.bench.atari``, run from a
path (``--cleanrl-script``) without editing it.

The script's code runs as ``__main__`` in a namespace this module keeps
(:func:`run_script`), with its arguments (``--env-id``, ``--seed``,
``--total-timesteps``; ``--num-envs`` etc. shrunk for a smoke test) in
``sys.argv``, CUDA hidden unless ``--device cuda``, and ``envpool.make`` replaced
by :func:`protocol_make`, which:

- builds the envs with the bench's protocol in place of the script's choice:
  ``episodic_life=False`` (the script asks True), ``use_fire_reset=False``,
  ``repeat_action_probability=0.25`` (EnvPool's default is 0), ``noop_max=30``,
  ``frame_skip=4``, 84x84 grayscale, ``stack_num=4``, ``max_episode_steps=27000``
  (108K frames), the minimal action set, and ``reward_clip=True`` (training only;
  the script asks it too);
- presents them with the gym API the script was written for (EnvPool 0.6-0.8 under
  gym 0.2x: ``reset`` gives the observations, ``step`` four values with ``done =
  terminated or truncated``, gym's spaces) where EnvPool is newer
  (:class:`OldGymApi`: the pinned 1.2.5 returns gymnasium's five values), so the
  script runs unedited; ``gym`` itself comes with the ``bench`` extra;
- wraps their ``step`` so that every ``eval_every`` env steps the script's global
  ``agent`` is written as a snapshot, and the run stops (an exception the script
  does not catch) at the wall-clock budget or the env-step cap; the final
  snapshot is the agent then.

The evaluator rebuilds the script's ``Agent`` class from the same file (its code run
under another name: the definitions only) and plays the protocol's envs, whose
``(4, 84, 84)`` uint8 stacks, oldest frame first, are EnvPool's layout too; scores
are the actor head's logits on ``network(obs / 255)``, as ``get_action_and_value``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from types import ModuleType, SimpleNamespace
from typing import Any

# EnvPool's Atari options for the protocol (experiments.bench.atari.protocol.PROTOCOL).
ENVPOOL_PROTOCOL: dict[str, Any] = {
    "episodic_life": False, "reward_clip": True, "repeat_action_probability": 0.25, "noop_max": 30,
    "frame_skip": 4, "img_height": 84, "img_width": 84, "gray_scale": True, "stack_num": 4,
    "max_episode_steps": 27_000, "use_fire_reset": False, "full_action_space": False,
}
QUICK_ARGS = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1"]


class BudgetReached(Exception):
    """Raised from the envs' step to end the script's training loop."""


def missing(script: str) -> str | None:
    if not script:
        return "no --cleanrl-script given (CleanRL's cleanrl/ppo_atari_envpool.py, run unedited)"
    if not os.path.isfile(script):
        return f"--cleanrl-script {script!r} does not exist"
    if importlib.util.find_spec("envpool") is None:
        return "envpool is not installed (make bench-deps)"
    return None


def envpool_id(env_id: str) -> str:
    """``"ALE/Pong-v5"`` -> EnvPool's ``"Pong-v5"``."""
    return env_id.split("/")[-1]


class OldGymApi:
    """A newer EnvPool's gym-type envs (``reset -> (obs, info)``, ``step -> (obs, reward,
    terminated, truncated, info)``, gymnasium's spaces) with the API of EnvPool 0.8 under
    gym 0.2x, which CleanRL's script calls: ``reset -> obs``, ``step -> (obs, reward, done,
    info)`` with ``done = terminated | truncated`` (the script reads ``info["terminated"]``
    for the true ends, which EnvPool's info keeps), and gym's ``Discrete``/``Box`` spaces
    (the script asserts ``isinstance(..., gym.spaces.Discrete)``). Anything else is the
    env's own."""

    def __init__(self, env: Any) -> None:
        import gym
        import numpy as np

        self.env = env
        self.action_space = gym.spaces.Discrete(int(env.action_space.n))
        box = env.observation_space
        self.observation_space = gym.spaces.Box(low=np.asarray(box.low), high=np.asarray(box.high),
                                                shape=box.shape, dtype=box.dtype)

    def reset(self, **kwargs: Any) -> Any:
        obs, _ = self.env.reset(**kwargs)
        return obs

    def step(self, action: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated | truncated, info

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def protocol_make(make: Any, *, seed: int, on_step: Any):
    """``envpool.make`` with the protocol's options over the caller's (see the module
    docstring), the old gym API where EnvPool is newer, and ``on_step(num_envs)``
    after every step."""
    def make_with_protocol(task_id: str, **kwargs: Any):
        env = make(task_id, **{**kwargs, **ENVPOOL_PROTOCOL, "seed": seed})
        if kwargs.get("env_type") == "gym" and _new_api(env):
            env = OldGymApi(env)
        step = env.step
        num_envs = kwargs.get("num_envs", 1)

        def counted_step(*args: Any, **kw: Any):
            out = step(*args, **kw)
            on_step(num_envs)
            return out

        env.step = counted_step
        return env

    return make_with_protocol


def _new_api(env: Any) -> bool:
    """Whether EnvPool's gym-type ``env`` speaks gymnasium's API (EnvPool >= 0.9: its
    spaces are gymnasium's)."""
    return type(getattr(env, "action_space", None)).__module__.startswith("gymnasium")


def run_script(script: str, namespace: dict[str, Any], argv: list[str]) -> None:
    """Run ``script`` as ``__main__`` in ``namespace`` with ``argv``; its globals stay
    in ``namespace`` whatever it raises."""
    with open(script) as f:
        code = compile(f.read(), script, "exec")
    saved = sys.argv
    sys.argv = [script, *argv]
    namespace.update({"__name__": "__main__", "__file__": script, "__builtins__": __builtins__})
    try:
        exec(code, namespace)  # noqa: S102 (the user's CleanRL script, run as `python script` would)
    finally:
        sys.argv = saved


def train(script: str, env_id: str, *, run_dir: str, seed: int, started: float, budget_s: float,
          max_env_steps: int, eval_every: int, quick: bool = False, device: str = "cpu") -> dict[str, Any]:
    import envpool
    import torch

    from experiments.bench.tools.wallclock import Every, write_snapshot

    if device != "cuda":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the script picks cuda whenever it sees one
    torch.set_num_threads(1)
    namespace: dict[str, Any] = {}
    clock = Every(eval_every)
    counted = {"steps": 0, "began": 0.0}

    def updates() -> int:
        done = namespace.get("iteration", namespace.get("update", 1))
        return max(0, int(done) - 1)

    def on_step(num_envs: int) -> None:
        agent = namespace.get("agent")
        if agent is None:  # the script's wrapper steps once before the agent exists
            return
        if not counted["began"]:
            counted["began"] = time.time()
        counted["steps"] += num_envs
        if clock.passed(counted["steps"]):
            write_snapshot(run_dir, agent.state_dict(), env_steps=counted["steps"], wall_s=time.time() - started,
                           updates=updates())
        if time.time() - started >= budget_s or counted["steps"] >= max_env_steps:
            raise BudgetReached

    make = envpool.make
    envpool.make = protocol_make(make, seed=seed, on_step=on_step)
    argv = ["--env-id", envpool_id(env_id), "--seed", str(seed), "--total-timesteps", str(max_env_steps),
            *(QUICK_ARGS if quick else [])]
    cwd = os.getcwd()
    os.chdir(run_dir)  # the script's runs/ (TensorBoard) goes there
    try:
        run_script(script, namespace, argv)
    except BudgetReached:
        pass
    finally:
        envpool.make = make
        os.chdir(cwd)
    if namespace.get("agent") is None:
        raise RuntimeError(f"{script} never built its agent (no global named 'agent')")
    active = time.time() - counted["began"] if counted["began"] else 0.0
    write_snapshot(run_dir, namespace["agent"].state_dict(), env_steps=counted["steps"],
                   wall_s=time.time() - started, updates=updates(), final=True)
    return {"env_steps": counted["steps"], "updates": updates(),
            "env_steps_per_s": counted["steps"] / active if active > 0 else 0.0,
            "updates_per_s": updates() / active if active > 0 else 0.0,
            "startup_s": counted["began"] - started if counted["began"] else None, "wait_fraction": None,
            "settings": {"script": os.path.abspath(script), "argv": argv, "envpool": ENVPOOL_PROTOCOL}}


def policy(script: str, env_id: str):
    """``(load(state), scores(obs))``: the script's ``Agent``, logits of its actor head."""
    import numpy as np
    import torch

    from experiments.bench.atari.protocol import make_env

    # A module of its own while it runs: its dataclasses (the script's Args) look their
    # module up in sys.modules.
    module = ModuleType("cleanrl_script")
    module.__file__ = script
    with open(script) as f:
        code = compile(f.read(), script, "exec")
    sys.modules[module.__name__] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 (definitions only: not __main__)
    finally:
        del sys.modules[module.__name__]
    namespace = module.__dict__
    env = make_env(env_id)
    n = int(env.action_space.n)
    env.close()
    space = SimpleNamespace(n=n, shape=())
    agent = namespace["Agent"](SimpleNamespace(single_action_space=space, action_space=space))

    def scores(obs: Any):
        return agent.actor(agent.network(torch.as_tensor(np.asarray(obs)).float() / 255.0))

    return agent.load_state_dict, scores
