"""Stepping a contiguous slice of envs into shared batch arrays.

The same ``EnvRunner`` runs inside every subprocess worker, inside the parent (its
own share of envs) and inside ``InProcessVectorEnv``; sharing one implementation is
what makes trajectories identical between them for the same seeds.
"""

from __future__ import annotations

import traceback
from math import isfinite
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from envs.errors import EnvError, EnvValueError
from envs.layout import BlockSpec, assemble, flattener, leaves_of

# Per-env info records travel as (local_index, info, reset_info_or_None).
InfoRecord = tuple[int, dict[str, Any], "dict[str, Any] | None"]
add_reduce = np.add.reduce
NONFINITE = "a non-finite"  # how a failed finite check starts its problem text


def converts(src: np.dtype, dst: np.dtype) -> bool:
    """Whether values of dtype ``src`` may be written into an observation of dtype ``dst``.

    Looser than numpy's "same_kind" (an env returning int64 pixels for a uint8 space
    worked before these checks and still does); what is refused is what loses meaning:
    floats into an integer space (0.5 becomes 0), and anything not a number.
    """
    if src.kind not in "biuf":
        return False
    return not (src.kind == "f" and dst.kind in "biu")


class EnvFailure(Exception):
    """An env failed: it raised (``tb`` holds the formatted traceback) or returned a bad
    value (``problem`` says what, ``field`` where). ``local_index`` is the env's index
    within the runner; ``episode_step`` its steps since the last reset."""

    def __init__(
        self,
        local_index: int,
        tb: str = "",
        *,
        problem: str | None = None,
        field: str = "",
        episode_step: int | None = None,
    ) -> None:
        super().__init__(problem or f"env {local_index} raised")
        self.local_index = local_index
        self.tb = tb
        self.problem = problem
        self.field = field
        self.episode_step = episode_step

    def fields(self) -> tuple:
        """What crosses the pipe from a worker (rebuild with ``EnvFailure.from_fields``)."""
        return (self.local_index, self.tb, self.problem, self.field, self.episode_step)

    @classmethod
    def from_fields(cls, fields: tuple) -> EnvFailure:
        j, tb, problem, field, step = fields
        return cls(j, tb, problem=problem, field=field, episode_step=step)

    def to_error(self, *, lo: int, call: str, where: str, worker: int | None) -> EnvError:
        """The user-facing error: envs ``lo..`` of ``worker`` (None: this process), in ``call``."""
        index = lo + self.local_index
        if self.problem is None:
            return EnvError(
                f"env {index} raised in {call} ({where})",
                env_index=index,
                worker=worker,
                call=call,
                child_traceback=self.tb,
            )
        step = self.episode_step
        when = (
            ""
            if step is None
            else (" from a reset" if step == 0 else f" at step {step} of its episode")
        )
        hint = "; check_values=False skips this check" if NONFINITE in self.problem else ""
        return EnvValueError(
            f"env {index} returned {self.problem}{when}, during {call} ({where}){hint}",
            env_index=index,
            worker=worker,
            call=call,
            field=self.field,
            episode_step=step,
        )


class EnvRunner:
    """Steps envs ``lo..hi-1`` of a vector env, reading actions from and writing results to
    the batch arrays of ``spec`` on ``buffer``.

    What the envs return is checked before it reaches the batch: observations must have
    the space's shape and a dtype that converts (``converts``), and with ``check_values``
    float observations and rewards must be finite; a failed check raises
    :class:`EnvFailure` naming the env. The finite checks are one reduction per array
    (a NaN or inf makes the sum non-finite); only then are the envs looked at one by one.
    While an env is inside ``step``/``reset``, the group's slot of the ``progress`` array
    holds ``1 + j`` / ``-1 - j`` (0 outside env calls), so the parent can name the env a
    hung worker is stuck in.
    """

    def __init__(
        self,
        envs: list[Any],
        *,
        lo: int,
        spec: BlockSpec,
        buffer: Any,
        num_obs: int,
        num_act: int,
        obs_space: spaces.Space,
        act_space: spaces.Space,
        autoreset_mode: AutoresetMode,
        check_values: bool = True,
    ) -> None:
        for j, env in enumerate(envs):
            if env.observation_space != obs_space or env.action_space != act_space:
                raise ValueError(
                    f"env {lo + j} has observation/action spaces {env.observation_space} / "
                    f"{env.action_space}, different from env 0's {obs_space} / {act_space}"
                )
        self.envs = envs
        self.lo = lo
        hi = lo + len(envs)
        views = spec.views(buffer)
        self.obs = [views[f"obs{i}"][lo:hi] for i in range(num_obs)]
        self.act = [views[f"act{i}"][lo:hi] for i in range(num_act)]
        self.reward = views["reward"][lo:hi]
        self.terminated = views["terminated"][lo:hi]
        self.truncated = views["truncated"][lo:hi]
        # A memoryview item write costs a few tens of ns, cheap enough for every env call.
        self.progress = memoryview(views["progress"][lo : lo + 1])
        self.same_step = autoreset_mode == AutoresetMode.SAME_STEP
        self.next_step = autoreset_mode == AutoresetMode.NEXT_STEP
        self.autoreset = [False] * len(envs)
        self.check_values = check_values
        # Episode steps of env j = self.t - self.start[j] (one counter bump per step
        # instead of one per env); last_len[j]: length of the episode a SAME_STEP
        # autoreset just ended (its final reward belongs to that step).
        self.t = 0
        self.start = [0] * len(envs)
        self.last_len = [0] * len(envs)
        self._obs_space = obs_space
        self._obs_leaves = leaves_of(obs_space, "observation space")
        self._obs_names = [
            "observation" + "".join(f"[{p!r}]" for p in leaf.path) for leaf in self._obs_leaves
        ]
        self._float_obs = [
            i for i, leaf in enumerate(self._obs_leaves) if leaf.dtype.kind == "f"
        ]
        self._float_arrays = [self.obs[i] for i in self._float_obs]
        self._flatten_obs = flattener(obs_space)
        self._single_obs = len(self.obs) == 1 and not isinstance(
            obs_space, (spaces.Dict, spaces.Tuple)
        )
        self._batch_shape = (len(envs), *self._obs_leaves[0].shape)
        self._converts: dict[tuple[np.dtype, np.dtype], bool] = {}
        self._last_dtype: np.dtype | None = None
        self._act_space = act_space
        self._act_composite = isinstance(act_space, (spaces.Dict, spaces.Tuple))

    # -- actions ---------------------------------------------------------------------
    def _actions(self) -> list[Any]:
        if not self._act_composite:
            # One copy of the slice: the env may keep its action while the parent
            # overwrites shared memory for the next step. Discrete actions stay numpy
            # int64 scalars (as gymnasium hands them over): measured faster than
            # Python ints, because Discrete.contains builds an np.iinfo for an int.
            return list(self.act[0].copy())
        leaves = [a.copy() for a in self.act]
        return [
            assemble(self._act_space, [leaf[j] for leaf in leaves]) for j in range(len(self.envs))
        ]

    # -- checked writes --------------------------------------------------------------------
    def _bad(self, j: int, problem: str, field: str, *, final: bool = False) -> EnvFailure:
        step = self.t - self.start[j]
        if final and step == 0 and self.same_step:
            step = self.last_len[j]  # the reward of the step that ended the episode
        return EnvFailure(j, problem=problem, field=field, episode_step=step)

    def _dtype_ok(self, src: np.dtype, dst: np.dtype) -> bool:
        ok = self._converts.get((src, dst))
        if ok is None:
            ok = self._converts[(src, dst)] = converts(src, dst)
        return ok

    def _write_obs(self, j: int, obs: Any) -> None:
        if self._single_obs:
            values: list[Any] = [obs]
        else:
            try:
                values = self._flatten_obs(obs)
            except (KeyError, IndexError, TypeError) as exc:
                raise self._bad(
                    j,
                    f"an observation that does not match the observation space "
                    f"{self._obs_space} ({exc!r})",
                    "observation",
                ) from None
        for arr, leaf, name, value in zip(self.obs, self._obs_leaves, self._obs_names, values):
            try:
                v = np.asarray(value)
            except (ValueError, TypeError) as exc:  # e.g. a ragged list
                raise self._bad(j, f"an {name} numpy cannot read ({exc})", name) from None
            # Checked before the copy: numpy would broadcast a (1,) or scalar value
            # over the whole slot without a word.
            if v.shape != leaf.shape:
                raise self._bad(
                    j, f"an {name} of shape {v.shape}, expected {leaf.shape}", name
                )
            if not self._dtype_ok(v.dtype, leaf.dtype):
                raise self._bad(
                    j,
                    f"an {name} of dtype {v.dtype}, which does not convert to the "
                    f"observation space's {leaf.dtype} without loss",
                    name,
                )
            arr[j] = v

    def _write_all_obs(self, observations: list[Any]) -> None:
        if self._single_obs:
            try:
                # One numpy call for the whole slice beats K item assignments; the shape
                # of the stacked batch checks every env's shape at once.
                batch = np.asarray(observations)
            except (ValueError, TypeError):
                batch = None  # ragged or malformed: find the env below and name it
            if batch is not None and batch.shape == self._batch_shape:
                dtype = batch.dtype
                if dtype is self._last_dtype or self._dtype_ok(dtype, self.obs[0].dtype):
                    self._last_dtype = dtype  # an env's dtype rarely changes: skip the lookup
                    self.obs[0][:] = batch
                    return
        for j, obs in enumerate(observations):
            self._write_obs(j, obs)

    def _write_each_reward(self, rewards: list[Any]) -> None:
        """Write rewards one by one after the batched write failed, naming the bad one."""
        for j, r in enumerate(rewards):
            v = np.asarray(r) if not isinstance(r, (float, int)) else None
            if v is not None and (v.shape != () or v.dtype.kind not in "biuf"):
                raise self._bad(
                    j,
                    f"a reward of type {type(r).__name__}"
                    + (f" with shape {v.shape}" if v.shape else f" and dtype {v.dtype}")
                    + ", expected a number",
                    "reward",
                    final=True,
                )
            try:
                self.reward[j] = r
            except (ValueError, TypeError, OverflowError) as exc:
                raise self._bad(j, f"a reward {r!r} ({exc})", "reward", final=True) from None

    def _finite(self, rewards: list[Any] | None) -> bool:
        """Whether the float observations and ``rewards`` are all finite, or may be (one
        reduction per array: any NaN/inf makes its sum NaN/inf; a sum that overflows is
        a false alarm that ``_raise_non_finite`` clears)."""
        if rewards is not None and not isfinite(sum(rewards)):
            return False
        for arr in self._float_arrays:
            if not isfinite(add_reduce(arr, None)):
                return False
        return True

    def _raise_non_finite(self, rows: list[int] | None, rewards: bool) -> None:
        """Raise for the first env (of ``rows``; None: all) with a NaN/inf float observation
        or (with ``rewards``) reward; return if there is none after all."""
        if rewards:
            bad = np.flatnonzero(~np.isfinite(self.reward))
            if bad.size:
                j = int(bad[0])
                raise self._bad(
                    j, f"{NONFINITE} reward ({float(self.reward[j])})", "reward", final=True
                )
        for i in self._float_obs:
            arr = self.obs[i]
            finite = np.isfinite(arr.reshape(len(self.envs), -1)).all(axis=1)
            for j in np.flatnonzero(~finite).tolist():
                if rows is None or j in rows:
                    value = np.array2string(arr[j], threshold=8, precision=4)
                    name = self._obs_names[i]
                    raise self._bad(j, f"{NONFINITE} {name} ({value})", name)

    # -- stepping ----------------------------------------------------------------------
    def step(self) -> list[InfoRecord]:
        """Step every env once (autoresetting per mode); returns the non-empty infos."""
        actions = self._actions()
        envs = self.envs
        auto = self.autoreset
        start = self.start
        progress = self.progress
        self.t = t = self.t + 1
        rewards = [0.0] * len(envs)
        terms = [False] * len(envs)
        truncs = [False] * len(envs)
        observations: list[Any] = [None] * len(envs)
        infos: list[InfoRecord] = []
        j = 0
        try:
            for j, env in enumerate(envs):
                if auto[j]:
                    progress[0] = -1 - j
                    observations[j], info = env.reset()
                    start[j] = t
                else:
                    progress[0] = 1 + j
                    observations[j], rewards[j], terms[j], truncs[j], info = env.step(actions[j])
                    if self.same_step and (terms[j] or truncs[j]):
                        final = {"final_obs": observations[j], "final_info": info}
                        self.last_len[j] = t - start[j]
                        progress[0] = -1 - j
                        observations[j], reset_info = env.reset()
                        start[j] = t
                        infos.append((j, final, reset_info))
                        continue
                if info:
                    infos.append((j, info, None))
        except Exception as exc:  # reported to the parent with the env's index
            raise EnvFailure(j, traceback.format_exc()) from exc
        finally:
            progress[0] = 0
        self._write_all_obs(observations)
        # Batched writes: one numpy assignment per array instead of one per env.
        try:
            self.reward[:] = rewards
        except (ValueError, TypeError, OverflowError):
            self._write_each_reward(rewards)
        self.terminated[:] = terms
        self.truncated[:] = truncs
        if self.next_step:
            self.autoreset = [te or tr for te, tr in zip(terms, truncs)]
        if self.check_values and not self._finite(rewards):
            self._raise_non_finite(None, rewards=True)
        return infos

    def reset(
        self,
        seeds: list[int | None],
        options: dict[str, Any] | None,
        mask: list[bool] | None = None,
    ) -> list[InfoRecord]:
        infos: list[InfoRecord] = []
        rows = []
        j = 0
        try:
            for j, env in enumerate(self.envs):
                if mask is not None and not mask[j]:
                    continue
                self.progress[0] = -1 - j
                obs, info = env.reset(seed=seeds[j], options=options)
                self.start[j] = self.t
                rows.append(j)
                self._write_obs(j, obs)
                self.reward[j] = 0.0
                self.terminated[j] = False
                self.truncated[j] = False
                self.autoreset[j] = False
                if info:
                    infos.append((j, info, None))
        except EnvFailure:
            raise
        except Exception as exc:
            raise EnvFailure(j, traceback.format_exc()) from exc
        finally:
            self.progress[0] = 0
        if self.check_values and not self._finite(None):
            self._raise_non_finite(rows, rewards=False)
        return infos

    def mark_restarted(self) -> None:
        """After a crash restart: report the cut episode as truncated (obs = fresh reset obs)."""
        self.reward[:] = 0.0
        self.terminated[:] = False
        self.truncated[:] = True
        if self.next_step:
            self.autoreset = [True] * len(self.envs)

    # -- attribute access ----------------------------------------------------------------
    def _each(self, fn: Any) -> list[Any]:
        out = []
        for j, env in enumerate(self.envs):
            try:
                out.append(fn(j, env))
            except Exception as exc:
                raise EnvFailure(j, traceback.format_exc()) from exc
        return out

    def call(self, name: str, args: tuple, kwargs: dict) -> list[Any]:
        def one(j: int, env: Any) -> Any:
            attr = getattr(env, name)
            return attr(*args, **kwargs) if callable(attr) else attr

        return self._each(one)

    def get_attr(self, name: str) -> list[Any]:
        def one(j: int, env: Any) -> Any:
            if hasattr(env, "get_wrapper_attr"):
                return env.get_wrapper_attr(name)
            return getattr(env, name)

        return self._each(one)

    def set_attr(self, name: str, values: list[Any]) -> None:
        def one(j: int, env: Any) -> None:
            if hasattr(env, "set_wrapper_attr"):
                env.set_wrapper_attr(name, values[j])
            else:
                setattr(env, name, values[j])

        self._each(one)

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # closing must not fail half way; the env is gone anyway
                pass


def local_block(spec: BlockSpec) -> np.ndarray:
    """An in-process buffer for ``spec`` (no sharing needed)."""
    return np.zeros(spec.nbytes, dtype=np.uint8)
