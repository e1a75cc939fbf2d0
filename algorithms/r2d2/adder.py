"""The sequence adder: an actor's steps cut into R2D2's overlapping replay sequences.

Kapturowski et al. 2019 (sec. 2.3) replay sequences of fixed length ``L`` that start
every ``period`` steps of an episode (80 and 40: adjacent sequences share half their
steps), each with the recurrent state the actor had at its first step. Per sub-env of
a vector env, :class:`SequenceAdder` keeps the episode's recent steps and returns, in
the batch of :meth:`SequenceAdder.add`, every sequence completed by this step:

==========  =============  ==========================================================
key         shape          meaning
==========  =============  ==========================================================
obs         [n, L, *obs]   the observation step ``t`` acted on
action      [n, L, *act]   the action taken on it
reward      [n, L]         float32, the reward that followed
terminated  [n, L]         bool: the episode terminated at ``t`` (nothing to bootstrap)
mask        [n, L]         bool: step ``t`` holds an observation (else padding, zeros)
<state>     [n, *state]    each recurrent-state field, as before the first step
==========  =============  ==========================================================

Sequences never cross an episode boundary. When an episode ends, the adder appends
its last observation (the one after the final action: gymnasium's ``final_obs``) as
one more valid step with a zero action and reward, so a truncated episode's last
steps can bootstrap from it, pads every open sequence with zeros to ``L`` and returns
it; the next episode's first sequence starts at its first step with a zero state.
So a sequence's valid steps are a prefix, and the last of them is an observation to
bootstrap from, not a transition to learn (unless the episode goes on past it).

numpy only: no torch, no transport.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from algorithms.adders import Batch

STEP_KEYS = ("obs", "action", "reward", "terminated")


class SequenceAdder:
    """Cuts the steps of ``num_envs`` lock-stepped sub-envs into sequences of ``length``
    steps that start every ``period`` steps of an episode (``1 <= period <= length``).

    A sequence cut short by its episode's end is kept only if it has ``min_valid``
    valid steps (default 2: a step and the observation after it), or ``start_min_valid``
    (default ``min_valid``) if it starts the episode. A learner that trains on none of
    a sequence's steps gives it a near-zero priority, whose importance weight then
    shrinks every other sequence's (PER normalizes by the largest weight): R2D2 passes
    ``burn_in + 2`` (``R2D2Config.min_sequence_steps``), and 2 for an episode's first
    sequence where it trains that from its first step (``R2D2Config.min_start_steps``).

    Call :meth:`add` after every vector-env step; :meth:`flush` returns the partial
    sequences of episodes still running (at the end of a run). :attr:`held_steps`
    counts the env steps recorded that no returned sequence holds yet (what is lost
    if the actor dies now): a sequence ends at the step that completes it, so it
    covers every step before; an episode's end returns or drops what it held.
    """

    def __init__(self, *, num_envs: int, length: int, period: int, min_valid: int = 2,
                 start_min_valid: int | None = None) -> None:
        start_min_valid = min_valid if start_min_valid is None else start_min_valid
        for name, value in (("num_envs", num_envs), ("length", length), ("period", period),
                            ("min_valid", min_valid), ("start_min_valid", start_min_valid)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if period > length:
            raise ValueError(f"period ({period}) must be <= length ({length}): steps between "
                             "sequences would never be replayed")
        for name, value in (("min_valid", min_valid), ("start_min_valid", start_min_valid)):
            if not 2 <= value <= length:
                raise ValueError(f"{name} must be in [2, length={length}] (a step and the observation "
                                 f"after it, at least), got {value}")
        self.num_envs, self.length, self.period, self.min_valid = num_envs, length, period, min_valid
        self.start_min_valid = start_min_valid
        self.sequences = 0  # returned so far
        self._episode_step = np.zeros(num_envs, dtype=np.int64)
        self._held = np.zeros(num_envs, dtype=np.int64)  # per env: steps in no returned sequence yet
        # Per env: the episode's steps since the oldest open sequence's start, and the
        # open sequences as (their first step's index in that list, start state, whether
        # they start the episode).
        self._steps: list[list[dict[str, np.ndarray]]] = [[] for _ in range(num_envs)]
        self._open: list[list[tuple[int, dict[str, np.ndarray], bool]]] = [[] for _ in range(num_envs)]

    def add(
        self,
        *,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        state: Mapping[str, np.ndarray],
        final_obs: np.ndarray | None = None,
        cut: np.ndarray | None = None,
    ) -> Batch | None:
        """Record one vector-env step; the sequences it completed (None if none).

        ``obs`` is what the actor acted on, ``state`` its recurrent state *before* that
        step (each field with a leading ``num_envs`` axis). ``final_obs`` holds, in the
        rows of sub-envs whose episode ended, the observation after their last action
        (needed for truncated episodes; a terminated one without it gets zeros, which
        are never bootstrapped from). ``cut`` (None, or a bool per sub-env) marks
        sub-envs whose step never happened (their worker process was replaced): their
        row is not recorded, and their episode ends at the last observation reached,
        as if truncated there (its open sequences close; the next step starts anew)."""
        n = self.num_envs
        step = {"obs": np.asarray(obs), "action": np.asarray(action),
                "reward": np.asarray(reward, dtype=np.float32),
                "terminated": np.asarray(terminated, dtype=bool)}
        truncated = np.asarray(truncated, dtype=bool)
        taken = sorted(set(state) & {*STEP_KEYS, "mask"})
        if taken:
            raise ValueError(f"state fields {taken} would overwrite a step field or the mask: rename them")
        for key, value in (*step.items(), ("truncated", truncated), *state.items()):
            if np.ndim(value) == 0 or np.shape(value)[0] != n:
                raise ValueError(f"{key} must have a leading axis of num_envs={n}, got shape {np.shape(value)}")
        done = step["terminated"] | truncated
        if final_obs is None and (truncated & ~step["terminated"] & ~np.asarray(
                cut if cut is not None else False, dtype=bool)).any():
            raise ValueError("a sub-env was truncated but no final_obs was given: its last steps "
                             "bootstrap from the observation after its last action")
        cut = np.zeros(n, dtype=bool) if cut is None else np.asarray(cut, dtype=bool)
        out: list[Batch] = []
        for env in range(n):
            if cut[env]:
                out += self._close(env)
                continue
            row = {key: np.array(value[env]) for key, value in step.items()}  # copies: envs reuse buffers
            start = None
            first = bool(self._episode_step[env] == 0)
            if self._episode_step[env] % self.period == 0:
                start = {key: np.array(value[env]) for key, value in state.items()}
                if first:  # a new episode starts from a zero state
                    start = {key: np.zeros_like(value) for key, value in start.items()}
            self._held[env] += 1
            out += self._step(env, row, start, first=first)
            self._episode_step[env] += 1
            if done[env]:
                last = row["obs"] if final_obs is None else np.asarray(final_obs[env], dtype=row["obs"].dtype)
                if last.shape != row["obs"].shape:
                    raise ValueError(f"final_obs of sub-env {env} has shape {last.shape}, obs {row['obs'].shape}")
                if final_obs is None:
                    last = np.zeros_like(last)
                tail = {"obs": last, "action": np.zeros_like(row["action"]),
                        "reward": np.zeros((), np.float32), "terminated": np.zeros((), bool)}
                out += self._step(env, tail, None)
                out += self._close(env)
        return self._stack(out)

    @property
    def held_steps(self) -> int:
        """Env steps recorded (by :meth:`add`, cut rows not counted) that no returned
        sequence holds yet, over all sub-envs."""
        return int(self._held.sum())

    def flush(self) -> Batch | None:
        """The open sequences of every sub-env with at least ``min_valid`` valid steps,
        padded and masked, each with its start state (their episodes go on, so their
        last valid step is one to bootstrap from, not to learn); the adder starts
        afresh, as at an episode's start (for the end of a run: the next step's state
        is not zero)."""
        out = [seq for env in range(self.num_envs) for seq in self._close(env)]
        self._episode_step[:] = 0
        return self._stack(out)

    def _step(self, env: int, row: dict[str, np.ndarray], start: dict[str, np.ndarray] | None, *,
              first: bool = False) -> list[Batch]:
        steps, open_ = self._steps[env], self._open[env]
        if start is not None:
            open_.append((len(steps), start, first))
        steps.append(row)
        out = []
        while open_ and len(steps) - open_[0][0] == self.length:
            begin, state, _ = open_.pop(0)
            out.append(self._sequence(steps[begin:], state))
            self._held[env] = 0  # it ends at the newest step: every earlier one is in a sequence
        drop = open_[0][0] if open_ else len(steps)  # steps no open sequence needs
        if drop:
            del steps[:drop]
            self._open[env] = [(begin - drop, state, starts) for begin, state, starts in open_]
        return out

    def _close(self, env: int) -> list[Batch]:
        steps = self._steps[env]
        out = [self._sequence(steps[begin:], state) for begin, state, starts in self._open[env]
               if len(steps) - begin >= (self.start_min_valid if starts else self.min_valid)]
        self._steps[env], self._open[env] = [], []
        # Returned now, or too short ever to be: no longer held either way.
        self._episode_step[env] = self._held[env] = 0
        return out

    def _sequence(self, steps: list[dict[str, np.ndarray]], state: dict[str, np.ndarray]) -> Batch:
        pad = self.length - len(steps)
        seq = {key: np.stack([s[key] for s in steps]) for key in STEP_KEYS}
        if pad:
            seq = {key: np.concatenate([v, np.zeros((pad, *v.shape[1:]), v.dtype)]) for key, v in seq.items()}
        seq["mask"] = np.arange(self.length) < len(steps)
        seq.update(state)
        return seq

    def _stack(self, sequences: list[Batch]) -> Batch | None:
        if not sequences:
            return None
        self.sequences += len(sequences)
        return {key: np.stack([s[key] for s in sequences]) for key in sequences[0]}
