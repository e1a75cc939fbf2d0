"""Vector environments (in-process and subprocess), multi-agent adapters, test envs.

* ``SubprocVectorEnv(env_fns, *, num_workers=None, autoreset_mode=NEXT_STEP,
  restart_on_crash=False, max_restarts=None, step_timeout=None,
  restart_on_timeout=None, step_in_parent=None, copy=True, context="forkserver",
  spin_us=None, check_values=True)``: a
  ``gymnasium.vector.VectorEnv`` stepping W groups of K envs
  (W = CPU count by default; group 0 in this process when ``step_in_parent``) with the
  whole batch in one shared-memory block; hand-offs spin briefly before blocking when
  every stepping process has a core (``envs.spin``). ``step_async(actions, workers=None)`` /
  ``step_wait(timeout=None)`` step all envs or a subset of groups (ping-pong halves:
  use ``step_in_parent=False``); ``envs_of_worker(w)`` gives a group's env indices.
* ``InProcessVectorEnv(env_fns, *, autoreset_mode=NEXT_STEP, copy=True,
  check_values=True)``: the same stepping code in this process (identical trajectories
  for identical seeds).
* ``make_vector_env(env_id_or_fn, *, num_envs, num_workers=None, ...)``:
  ``num_workers=0`` gives an InProcessVectorEnv.
* ``make_atari(env_id, *, frame_skip=4, screen_size=84, stack=4, noop_max=30, ...)``
  (``envs.atari``, optional ``atari`` extra): gymnasium's AtariPreprocessing +
  FrameStackObservation with identical results, on direct ALE calls.
* ``envs.multiagent``: ``ParallelEnvAdapter``, ``MultiAgentVectorEnv``, ``CooperativeEnv``.
* ``envs.testing``: ``CountingEnv`` (obs = step count), ``CompositeEnv`` (Dict/Tuple obs),
  ``FaultyEnv`` (hangs or returns bad values on purpose).

Env faults are named (``envs.errors``, all ``rlpar.errors.ChildError``): an env that
raises becomes ``EnvError`` naming the env index with the env's traceback; a NaN/inf
observation or reward (``check_values``) or an observation of the wrong shape or dtype
becomes ``EnvValueError`` naming the env, the field and its step in the episode; a
worker that overruns ``step_timeout`` becomes ``EnvTimeout`` naming the env it was in,
the worker and its pid; a worker that dies becomes ``rlpar.errors.ChildDied`` at once
(or, with ``restart_on_crash``, a replaced worker whose rows are flagged in
``infos["env_restarted"]``). Workers, their forkserver and resource tracker never
outlive the process that owns the vector env, however it dies (``envs.lifeline``).
"""

from envs.atari import make_atari
from envs.errors import EnvError, EnvTimeout, EnvValueError
from envs.inprocess import InProcessVectorEnv
from envs.make import make_vector_env
from envs.subproc import SubprocVectorEnv

__all__ = [
    "EnvError",
    "EnvTimeout",
    "EnvValueError",
    "InProcessVectorEnv",
    "SubprocVectorEnv",
    "make_atari",
    "make_vector_env",
]
