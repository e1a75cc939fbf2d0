"""The coordinator every job uses: progress, budgets, evaluation schedule, stop,
TensorBoard, status line and summary.

It lives in the lead process (Ape-X learner, A3C gradient-server rank, MADDPG's
one process). Actors (workers) send it :class:`~experiments.runtime.messages.Report`
over RPC (or a local call in serial mode) and get a
:class:`~experiments.runtime.messages.Directive` back: stop, the learner's progress
for pacing, and whether to evaluate now. Its RPC entry points run on RPC threads,
so all state is guarded by one lock.

TensorBoard tags, the same for every job (CleanRL's scheme):
``charts/episodic_return``, ``charts/episodic_length``, ``charts/SPS`` (env steps
per second), ``charts/updates_per_s``, ``losses/<metric>``, ``eval/return``,
``eval/return_std``; per-actor figures aggregated as ``actors/sps_min``,
``actors/sps_max``, ``actors/version_lag_max``; multi-agent jobs add
``agents/<agent>/episodic_return`` and ``teams/<team>/episodic_return``.
An evaluation is written (and flushed) when it arrives, so the one that decides a
stop is on the curve before the job ends. Each is kept as a row (seconds, env steps,
mean, std, version: checkpointed, in the summary's ``evals``), and this process's
newest and best as the :class:`~experiments.runtime.messages.EvalResult` itself, with
the network it evaluated, which the lead's RunKeeper saves as ``policy-best.pt``.

Sources are expendable (a dead actor is restarted alone and rejoins, see
``rlpar.distributed.launch``): a source with no report for ``silent_after`` seconds
is named silent (status line, ``actors/silent``) until it reports again, and one that
rejoins says so (:class:`~experiments.runtime.messages.Rejoin`). ``actors/restarts``
counts the rejoins and ``actors/lost_transitions`` estimates what the dead processes
took with them: for each, the env steps it said it held at its last report
(``Report.held_steps``: reported steps whose data was still in its n-step window,
unroll, open sequence or add batch; steps after that report were never counted, so
the budget does not include them either), plus what a replay shard it hosted held
(in the replay's items: transitions, or R2D2's sequences). Env worker processes a source's vector env
replaced (killed from outside, e.g. by the OOM killer) are counted as reported
(``env_worker_restarts``, ``actors/env_worker_restarts``).
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from experiments.runtime.messages import Directive, EvalResult, Rejoin, Report
from rlpar.logging import MetricLogger, Progress, RateMeter
from rlpar.state import StatePath, integer, mapping, number, sequence


class Coordinator:
    """See the module docstring. ``evaluator``: the source index that evaluates when
    due (it is told so in its directive, and sends its result, ``coord/eval``, before
    its next report), or None when the lead evaluates itself (:meth:`eval_due`).
    ``silent_after``: seconds without a report after which a source is named silent."""

    def __init__(self, *, job: str, run: Any, env_id: str, num_sources: int, target: float,
                 started: float, logger: MetricLogger, evaluator: int | None = None,
                 quiet: bool = False, agent_names: Sequence[str] = (),
                 teams: Mapping[str, Sequence[int]] | None = None, silent_after: float = 10.0) -> None:
        if not silent_after > 0:
            raise ValueError(f"silent_after must be > 0 seconds, got {silent_after!r}")
        self.job, self.run, self.env_id = job, run, env_id
        self.num_sources, self.target, self.started = num_sources, target, started
        self.logger, self.evaluator = logger, evaluator
        self.agent_names, self.teams = list(agent_names), dict(teams or {})
        self.env_steps = 0  # read without the lock by pacing loops (an int)
        # Set by the learner after every update: actors pace themselves on it, so a
        # stale value (once a second) would throttle them and starve the learner.
        self.updates = 0
        # Set by a lead with several learners (:class:`~experiments.runtime.messages.Directive`'s
        # ``filling``); one tuple, replaced whole, so read without the lock.
        self.filling: tuple[int, ...] = ()
        self._ticked_updates = 0
        self.transitions = 0
        self.episodes = 0
        self.reports = 0
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._first_step: float | None = None
        # Where this session's rates count from: after the first report of each source
        # (its steps were made during start-up, and two members' first rollouts arrive
        # within a millisecond), as (time, env steps then, updates then: the learner's
        # last tick, at most a second old); and how many reports with steps that base
        # has seen.
        self._rate_base: tuple[float, int, int] | None = None
        self._base_reports = 0
        # This session's start and the counts it began with (a resumed run's rates and
        # start-up are this session's, not the whole run's over this session's time).
        self._session = (started, 0, 0)
        self._versions = [-1] * num_sources
        # Liveness: when each source last reported (None: not yet), the env steps it
        # held at that report (what its death would lose), who is silent.
        self.silent_after = float(silent_after)
        self._seen: list[float | None] = [None] * num_sources
        self._unadded = [0] * num_sources
        # Per source, the transitions it reported adding since it (re)started: at least
        # what a replay shard it hosted held when it died (see added_by).
        self._added = [0] * num_sources
        self._silent: set[int] = set()
        self.source_restarts = 0
        self.lost_transitions = 0
        # Of those, transitions that were added (and reported) before they were lost with
        # a dead process's replay shard: the replay no longer holds them (held_transitions).
        self.added_lost = 0
        self.env_worker_restarts = 0
        self.dropped_episodes = 0  # episodes cut by env worker restarts (never reported)
        self._meters = [RateMeter(window=5.0) for _ in range(num_sources)]
        self._steps_rate, self._updates_rate = RateMeter(window=5.0), RateMeter(window=5.0)
        self._window: list[Any] = []  # episodes since the last tick
        self._recent: deque[float] = deque(maxlen=100)
        self._recent_agents: deque[tuple[float, ...]] = deque(maxlen=100)  # multi-agent jobs' per-agent returns
        self._metric_sums: dict[str, float] = {}
        self._metric_count = 0
        self._finished: set[int] = set()
        self._next_eval = run.eval_every
        # The env-step point of the evaluation claimed (told to the evaluator, or taken by
        # the lead's eval_due) whose result has not come back; None when none is out.
        self._owed: int | None = None
        # (seconds, env steps, mean, std, version): one row per evaluation, checkpointed.
        self.evals: list[tuple[float, int, float, float, int]] = []
        # This process's evaluations with the networks they evaluated (EvalResult.policy):
        # the newest, and the best, i.e. one that beat every earlier evaluation, those of
        # the run it resumes included. RunKeeper saves these networks, not its own.
        self.last_result: EvalResult | None = None
        self.best_result: EvalResult | None = None
        self.solved: tuple[float, int, float] | None = None  # (seconds, env steps, mean)
        every = run.status_every if run.status_every > 0 and not quiet else math.inf
        self._progress = Progress(every=every, prefix=f"[{job}] ")
        self._status: dict[str, Any] = {}
        self._last_eval: float = float("nan")
        self._last_tick = time.monotonic()

    def _count_rate_base(self, steps: int) -> None:
        if steps and self._base_reports < max(1, self.num_sources):
            self._rate_base = (time.time(), self.env_steps, self.updates)
            self._base_reports += 1

    def _rate_span(self) -> tuple[float, int, int]:
        """Where this session's rates count from, ``(time, env steps then, updates
        then)``: after its first round of reports; a session with nothing after it,
        its start."""
        if self._rate_base is not None and self.env_steps > self._rate_base[1]:
            return self._rate_base
        return self._session

    # ------------------------------------------------------------ from sources

    def report(self, report: Report) -> Directive:
        with self._lock:
            self.reports += 1
            if self._first_step is None and report.env_steps:
                self._first_step = time.time()
            self.env_steps += report.env_steps
            self._count_rate_base(report.env_steps)
            self.transitions += report.transitions
            self.episodes += len(report.episodes)
            self._steps_rate.add(report.env_steps)
            if 0 <= report.source < self.num_sources:
                self._meters[report.source].add(report.env_steps)
                self._versions[report.source] = report.version
                self._seen[report.source] = time.monotonic()
                self._unadded[report.source] = report.held_steps
                self._added[report.source] += report.transitions
                if report.source in self._silent:
                    self._silent.discard(report.source)
                    self._say(f"actor {report.source} reports again")
            self.env_worker_restarts += report.env_worker_restarts
            self.dropped_episodes += report.dropped_episodes
            self._window.extend(report.episodes)
            self._recent.extend(e.ret for e in report.episodes)
            self._recent_agents.extend(e.agent_returns for e in report.episodes if e.agent_returns)
            for key, value in report.metric_sums.items():
                self._metric_sums[key] = self._metric_sums.get(key, 0.0) + value
            self._metric_count += report.metric_count
            if report.final:
                self._finished.add(report.source)
            self._check_budgets()
            # Not on a final report: its source leaves without acting on the directive.
            evaluate = report.source == self.evaluator and not report.final and self._claim_eval()
            directive = Directive(stop=self._stop_reason is not None, env_steps=self.env_steps,
                                  updates=self.updates, evaluate=evaluate, filling=self.filling)
        if report.env_worker_restarts:
            self._say(f"actor {report.source}: {report.env_worker_restarts} env worker(s) died and "
                      f"were replaced ({self.env_worker_restarts} in all)")
        return directive

    def rejoin(self, rejoin: Rejoin) -> None:
        """A source that died was restarted and rejoined (before its first report)."""
        source = rejoin.source
        if not 0 <= source < self.num_sources:
            raise ValueError(f"rejoin from source {source}: sources are 0..{self.num_sources - 1}")
        with self._lock:
            lost = max(0, self._unadded[source])
            self.source_restarts += 1
            self.lost_transitions += lost
            self._unadded[source] = 0
            self._added[source] = 0
            self._seen[source] = time.monotonic()
            self._silent.discard(source)
            # An evaluation the dead evaluator owed stays owed: its replacement is asked
            # for it on its first report (_claim_eval).
        self._say(f"actor {source} rejoined (its restart {rejoin.restarts}; "
                  f"about {lost} transitions lost)")

    def quiet_for(self, source: int) -> float | None:
        """Seconds since ``source`` last reported (or rejoined); None if it never has."""
        with self._lock:
            seen = self._seen[source]
        return None if seen is None else time.monotonic() - seen

    def say(self, line: str) -> None:
        """A notice on stderr, as the coordinator's own (none with --status-every 0 or quiet)."""
        self._say(line)

    def added_by(self, source: int) -> int:
        """Transitions ``source`` reported adding since it started or last rejoined."""
        with self._lock:
            return self._added[source]

    def count_lost(self, transitions: int) -> None:
        """Transitions lost after they were added and reported (the replay shard a
        dead source held): counted in ``lost_transitions``, and no longer in
        :meth:`held_transitions`."""
        with self._lock:
            self.lost_transitions += max(0, int(transitions))
            self.added_lost += max(0, int(transitions))

    def held_transitions(self) -> int:
        """Transitions reported added and not lost since (before a capacity bound)."""
        with self._lock:
            return max(0, self.transitions - self.added_lost)

    def _say(self, line: str) -> None:
        if math.isfinite(self._progress.every):
            print(f"[{self.job}] {line}", file=sys.stderr, flush=True)

    def _check_silent(self) -> list[int]:
        """Sources that stopped reporting: named once, counted until they report."""
        now, newly = time.monotonic(), []
        with self._lock:
            for source, seen in enumerate(self._seen):
                if (seen is not None and source not in self._silent and source not in self._finished
                        and now - seen > self.silent_after):
                    self._silent.add(source)
                    newly.append(source)
        for source in newly:
            self._say(f"actor {source} has not reported for {self.silent_after:g} s")
        return sorted(self._silent)

    def eval_result(self, result: EvalResult) -> None:
        mean = float(np.mean(result.returns))
        std = float(np.std(result.returns))
        with self._lock:
            elapsed = time.time() - self.started
            self._owed = None
            if mean > max((e[2] for e in self.evals), default=-math.inf):
                self.best_result = result
            self.last_result = result
            self.evals.append((elapsed, result.env_steps, mean, std, result.version))
            if mean >= self.target and self.solved is None:
                self.solved = (elapsed, result.env_steps, mean)
                self._stop_reason = self._stop_reason or "solved"
            self.logger.scalar("eval/return", mean, result.env_steps)
            self.logger.scalar("eval/return_std", std, result.env_steps)
            for layer, share in result.dead_units.items():
                self.logger.scalar(f"network/dead_units/{layer}", share, result.env_steps)
            for name, value in result.measures.items():
                self.logger.scalar(f"eval/{name}", value, result.env_steps)
            self.logger.flush()
        self._last_eval = round(mean, 1)

    # --------------------------------------------------------------- the lead

    def _claim_eval(self) -> bool:
        """Whether the claimant (the evaluator, in a report's directive; the lead, in
        eval_due) evaluates now. A claimant evaluates before it asks again: the actor
        sends its result before its next report, the lead before its next eval_due.
        So an evaluation still owed when it asks again was never made (a directive
        not acted on, such as the first one a resumed or restarted evaluator got; an
        evaluator killed before its result came back) and is asked for again, instead
        of blocking every later evaluation for good."""
        if self._stop_reason is not None:
            return False
        if self._owed is None:
            if self.env_steps < self._next_eval:
                return False
            self._owed = self._next_eval
        # The evaluation made now also stands for those due since (one, not several in a row).
        while self._next_eval <= self.env_steps:
            self._next_eval += self.run.eval_every
        return True

    def eval_due(self) -> bool:
        """For a lead that evaluates itself: True once per ``eval_every`` env steps."""
        with self._lock:
            return self._claim_eval()

    def _check_budgets(self) -> None:
        if self._stop_reason is not None:
            return
        if self.env_steps >= self.run.max_env_steps:
            self._stop_reason = "env step budget"
        elif time.time() - self.started >= self.run.max_seconds:
            self._stop_reason = "time budget"

    def should_stop(self) -> bool:
        if self._stop_reason is None:
            with self._lock:
                self._check_budgets()
        return self._stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def stop(self, reason: str) -> None:
        # No lock: this runs inside Ctrl-C/SIGTERM handlers, which interrupt the main
        # thread wherever it is, possibly while it holds ``_lock`` (a report, a tick):
        # taking it here hung the job forever. One attribute store is atomic, and two
        # reasons racing to be first may land in either order.
        if self._stop_reason is None:
            self._stop_reason = reason

    def wait_for_sources(self, *, timeout: float, expected: int | None = None,
                         quiet: float | None = None) -> bool:
        """Wait until every source sent its final report (or ``timeout`` passed);
        True if all did. A source with no report for ``quiet`` seconds (default
        ``silent_after``; counted from the wait's start for one that never reported)
        is not waited for: a live one reports several times a second, so it is dead,
        hung or cut off, and the end must not wait on it. Those are named silent."""
        want = self.num_sources if expected is None else expected
        quiet = self.silent_after if quiet is None else float(quiet)
        start = time.monotonic()
        deadline = start + timeout
        while len(self._finished) < want and time.monotonic() < deadline:
            now = time.monotonic()
            with self._lock:
                missing = [s for s in range(self.num_sources) if s not in self._finished]
                seen = [start if self._seen[s] is None else self._seen[s] for s in missing]
                if all(now - t > quiet for t in seen):
                    newly = sorted(set(missing) - self._silent)
                    self._silent.update(missing)
                    break
            time.sleep(0.01)
        else:
            newly = []
        if newly:
            self._say(f"not waiting for actor(s) {newly}: no report for {quiet:g} s")
        return len(self._finished) >= want

    def tick(self, *, updates: int, learner_metrics: Mapping[str, float] | None = None,
             scalars: Mapping[str, float] | None = None, status: Mapping[str, Any] | None = None,
             force: bool = False) -> bool:
        """At most once a second (or when ``force``): write the window's curves and
        the status line. ``learner_metrics`` are window means written as
        ``losses/<key>``; ``scalars`` are written under their own tags; ``status``
        entries join the status line (one set to None leaves it)."""
        now = time.monotonic()
        if not force and now - self._last_tick < 1.0:
            return False
        self._last_tick = now
        self._updates_rate.add(max(0, updates - self._ticked_updates))
        self._ticked_updates = self.updates = updates
        with self._lock:
            step = self.env_steps
            window, self._window = self._window, []
            sums, count = self._metric_sums, self._metric_count
            self._metric_sums, self._metric_count = {}, 0
            rates = [m.rate() for m in self._meters]
            versions = list(self._versions)
            sps = self._steps_rate.rate()
            recent = float(np.mean(self._recent)) if self._recent else float("nan")
        log = self.logger
        if window:
            log.scalar("charts/episodic_return", float(np.mean([e.ret for e in window])), step)
            log.scalar("charts/episodic_length", float(np.mean([e.length for e in window])), step)
            self._log_agents(window, step)
        log.scalar("charts/SPS", sps, step)
        log.scalar("charts/updates_per_s", self._updates_rate.rate(), step)
        log.scalar("charts/updates", updates, step)
        metrics = dict(learner_metrics or {})
        if count:
            metrics.update({k: v / count for k, v in sums.items()})
        log.scalars(metrics, step, prefix="losses/")
        log.scalars(dict(scalars or {}), step)
        if self.num_sources > 1:
            log.scalar("actors/sps_min", min(rates), step)
            log.scalar("actors/sps_max", max(rates), step)
        silent = self._check_silent()
        log.scalar("actors/silent", len(silent), step)
        log.scalar("actors/restarts", self.source_restarts, step)
        log.scalar("actors/lost_transitions", self.lost_transitions, step)
        log.scalar("actors/env_worker_restarts", self.env_worker_restarts, step)
        log.scalar("actors/dropped_episodes", self.dropped_episodes, step)
        live = [v for v in versions if v >= 0]
        lag = updates - min(live) if live else 0
        if live:
            log.scalar("actors/version_lag_max", lag, step)
        self._status.update({"t": round(time.time() - self.started, 1), "env_steps": step,
                             "sps": round(sps), "updates": updates,
                             "ups": round(self._updates_rate.rate()), "return100": recent})
        if silent or self.source_restarts:
            self._status.update({"silent": len(silent), "restarts": self.source_restarts})
        if len(self.teams) > 1:  # several teams (competitive envs): each team's last-100 mean
            with self._lock:
                teams = self._agents_summary()["team_return_last100"]
            self._status.update({f"{team}100": round(value, 2) for team, value in teams.items()})
        for key, value in (status or {}).items():  # None: the entry is gone
            if value is None:
                self._status.pop(key, None)
            else:
                self._status[key] = value
        self._status["eval"] = self._last_eval
        if math.isfinite(self._progress.every):  # --status-every 0 (or quiet): no line at all
            self._progress.update(self._status, force=force)
        return True

    def _log_agents(self, window: list[Any], step: int) -> None:
        per_agent = [e.agent_returns for e in window if e.agent_returns]
        if not per_agent:
            return
        mean = np.mean(np.asarray(per_agent, dtype=np.float64), axis=0)
        for name, value in zip(self.agent_names, mean):
            self.logger.scalar(f"agents/{name}/episodic_return", float(value), step)
        for team, members in self.teams.items():
            self.logger.scalar(f"teams/{team}/episodic_return", float(mean[list(members)].sum()), step)

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Progress to resume from: counters, evaluations, schedule, elapsed time."""
        with self._lock:
            return {"env_steps": self.env_steps, "transitions": self.transitions,
                    "episodes": self.episodes, "updates": self.updates,
                    "recent": list(self._recent), "evals": [list(e) for e in self.evals],
                    # An evaluation still owed is due again on resume: its result, if it
                    # comes after this checkpoint, is not in it.
                    "next_eval": self._next_eval if self._owed is None else self._owed,
                    "solved": list(self.solved) if self.solved else [],
                    "elapsed_s": time.time() - self.started,
                    "source_restarts": self.source_restarts, "lost_transitions": self.lost_transitions,
                    "added_lost": self.added_lost, "env_worker_restarts": self.env_worker_restarts,
                    "dropped_episodes": self.dropped_episodes}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a checkpoint: the time budget counts the earlier run's time.
        StateError (nothing changed) for a state that does not fit."""
        loaded = _checked_progress(state, StatePath.of(self))
        with self._lock:
            self.env_steps, self.transitions = loaded["env_steps"], loaded["transitions"]
            self.episodes, self.updates = loaded["episodes"], loaded["updates"]
            self._ticked_updates = self.updates
            self._recent.extend(loaded["recent"])
            self.evals, self.solved = loaded["evals"], loaded["solved"]
            self._next_eval = loaded["next_eval"]
            self._session = (self.started, self.env_steps, self.updates)
            self.started = time.time() - loaded["elapsed_s"]
            self.source_restarts, self.lost_transitions = loaded["source_restarts"], loaded["lost_transitions"]
            self.env_worker_restarts, self.added_lost = loaded["env_worker_restarts"], loaded["added_lost"]
            self.dropped_episodes = loaded["dropped_episodes"]
        if loaded["elapsed_s"] >= self.run.max_seconds:
            self._say(f"the run has already spent its time budget ({loaded['elapsed_s']:.0f} s of "
                      f"--max-seconds {self.run.max_seconds:g}): it stops at once; give a larger "
                      "--max-seconds to train on")

    # ---------------------------------------------------------------- the end

    def summary(self, *, algorithm: type, updates: int, run_dir: str | None,
                interrupted: bool = False, **extra: Any) -> dict[str, Any]:
        """The job's final summary (every job the same keys, plus ``extra``)."""
        with self._lock:
            now = time.time()
            began = self._session[0]
            since, steps_then, updates_then = self._rate_span()
            span = now - since
            solved = self.solved
            best = max((e[2] for e in self.evals), default=float("nan"))
            return {
                "job": self.job, "env_id": self.env_id,
                "algorithm": f"{algorithm.__module__}.{algorithm.__qualname__}",
                "solved": solved is not None, "stop_reason": self._stop_reason,
                "interrupted": interrupted, "target_return": self.target,
                "eval_return": solved[2] if solved else float("nan"),
                "time_to_solve_s": solved[0] if solved else float("nan"),
                "env_steps_at_solve": solved[1] if solved else None,
                "best_eval_return": best,
                "last_eval_return": self.evals[-1][2] if self.evals else float("nan"),
                "evaluations": len(self.evals),
                "evals": [list(e) for e in self.evals],
                "wall_s": now - self.started,
                "startup_s": (self._first_step or now) - began,
                "env_steps": self.env_steps,
                "env_steps_per_s": (self.env_steps - steps_then) / span if span > 0 else 0.0,
                "updates": updates,
                "updates_per_s": (updates - updates_then) / span if span > 0 else 0.0,
                "episodes": self.episodes,
                "train_return": float(np.mean(self._recent)) if self._recent else float("nan"),
                "num_sources": self.num_sources, "actor_reports": self.reports,
                "actor_restarts": self.source_restarts, "lost_transitions": self.lost_transitions,
                "env_worker_restarts": self.env_worker_restarts, "dropped_episodes": self.dropped_episodes,
                "silent_sources": sorted(self._silent),
                "run_dir": run_dir, **self._agents_summary(), **extra,
            }

    def _agents_summary(self) -> dict[str, Any]:
        """A multi-agent job's agents and teams (names), and their mean returns over the
        last 100 episodes (a team's: the sum over its members; NaN before any)."""
        if not self.agent_names:
            return {}
        names = self.agent_names
        recent = np.asarray(self._recent_agents, dtype=np.float64) if self._recent_agents else None
        team_returns = {team: float(recent[:, list(members)].sum(axis=1).mean()) if recent is not None
                        else float("nan") for team, members in self.teams.items()}
        return {"agents": names, "teams": {team: [names[i] for i in m] for team, m in self.teams.items()},
                "team_return_last100": team_returns,
                "agent_return_last100": recent.mean(axis=0).round(3).tolist() if recent is not None else None}


_COUNTS = ("env_steps", "transitions", "episodes", "updates", "next_eval")
# Checkpoints from before sources could rejoin have neither; from before env workers
# were restarted, no count of those; from before the replay's size left out lost shards,
# no added_lost; from before cut episodes were counted, no dropped_episodes.
_REJOIN_COUNTS = ("source_restarts", "lost_transitions", "env_worker_restarts", "added_lost", "dropped_episodes")


def _checked_progress(state: Any, where: StatePath) -> dict[str, Any]:
    """:meth:`Coordinator.state_dict`'s values, checked: counts are ints >= 0, every
    evaluation is (seconds, env steps, mean, std), ``solved`` is [] or (seconds, env
    steps, mean), returns are numbers."""
    state = mapping(state, where, required=(*_COUNTS, "recent", "evals", "solved", "elapsed_s"),
                    optional=_REJOIN_COUNTS)
    out: dict[str, Any] = {k: integer(state[k], where[k]) for k in _COUNTS}
    out.update({k: integer(state.get(k, 0), where[k]) for k in _REJOIN_COUNTS})
    out["elapsed_s"] = number(state["elapsed_s"], where["elapsed_s"])
    out["recent"] = [_value(r, where["recent"][i])
                     for i, r in enumerate(sequence(state["recent"], where["recent"]))]
    out["evals"] = [_eval_row(e, where["evals"][i])
                    for i, e in enumerate(sequence(state["evals"], where["evals"]))]
    solved = sequence(state["solved"], where["solved"])
    out["solved"] = _record(solved, where["solved"], 3) if solved else None
    return out


def _eval_row(value: Any, where: StatePath) -> tuple[float, int, float, float, int]:
    """(seconds, env steps, mean, std, version) of an evaluation. Checkpoints from before
    evaluations kept their version have 4 fields: their version is unknown, -1 (no
    saved policy claims it)."""
    row = sequence(value, where)
    if len(row) not in (4, 5):
        raise where.error(f"must hold 4 or 5 items (seconds, env steps, mean, std[, version]), got {len(row)}")
    version = integer(row[4], where[4], low=-1) if len(row) == 5 else -1
    return (*_record(row[:4], where, 4), version)


def _record(value: Any, where: StatePath, size: int) -> tuple[Any, ...]:
    """(seconds, env steps, mean[, std]) of an evaluation (or of the solve)."""
    value = sequence(value, where, length=size)
    return (number(value[0], where[0]), integer(value[1], where[1]),
            *(_value(v, where[i]) for i, v in enumerate(value[2:], 2)))


def _value(value: Any, where: StatePath) -> float:
    """A return or its spread: a number, NaN included (the mean of no episodes)."""
    if isinstance(value, float) and math.isnan(value):
        return value
    return number(value, where)
