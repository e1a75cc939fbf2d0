"""An actor's role in an actor-learner job: every rank after the learners (and the
replay ranks). Its builder makes its acting copy and its
:class:`~algorithms.actor_learner.Actor`; this shell owns the env, the transport
(the data path's handle, the parameter server's accessor) and the report it owes the
coordinator, and the last actor also evaluates when told to. Pacing holds a
replay's ratio; with a queue, a full queue holds the actor back.

A dead actor is restarted alone and rejoins (``rlpar.distributed.launch``): same
index, so the same exploration; a fresh env seed; it pulls the newest parameters.
"""

from __future__ import annotations

import time
from typing import Any

from experiments.roles.actor_learner.data import hold_shard_until_saved
from experiments.roles.actor_learner.learner import PARAMS
from experiments.roles.actor_learner.program import (
    Setup,
    actor_seed,
    eval_env,
    evaluate,
    pacing,
    report_every,
)
from experiments.runtime.job import last_call
from experiments.runtime.messages import Episode, Rejoin, Report
from experiments.runtime.parts import checked


class ActorShell:
    """One actor's env, :class:`~algorithms.actor_learner.Actor` and the report it owes."""

    def __init__(self, setup: Setup, *, index: int, sink: Any, params: Any, restarts: int = 0) -> None:
        from gymnasium.vector import AutoresetMode

        from algorithms.actor_learner import Actor
        from experiments.runtime.envs import learning_rewards

        # A restarted actor (``restarts``) plays new episodes, not its predecessor's.
        self.seed = actor_seed(setup.run.seed, index, restarts)
        self.index = index
        # A dead env worker is replaced inside the vector env; the actor drops what it cut.
        self.env = learning_rewards(setup.builder.make_vector_env(
            setup.env_fn, num_envs=setup.env.num_envs, autoreset_mode=AutoresetMode.SAME_STEP, seed=self.seed,
            **setup.env_options), setup.env)
        builder, parts = setup.builder, setup.parts
        acting = checked(builder.make_algorithm(device="cpu", seed=self.seed), builder.algorithm_base,
                         builder.make_algorithm, given=parts.algorithm, part="algorithm")
        self.actor = checked(builder.make_actor(acting, env=self.env, sink=sink, params=params, index=index,
                                                num_actors=setup.num_actors, seed=self.seed),
                             Actor, builder.make_actor, given=parts.actor, part="actor")
        self.actor.sync()
        self._steps = self._transitions = self._env_restarts = self._dropped = 0

    @property
    def acting(self) -> Any:
        return self.actor.acting

    def unreported_steps(self) -> int:
        return self.actor.env_steps - self._steps

    def report(self, *, final: bool = False) -> Report:
        actor = self.actor
        # (return, length), and a multi-agent actor's per-agent returns after them
        episodes = [Episode(*episode) for episode in actor.finished_episodes]
        actor.finished_episodes = []
        env_restarts = getattr(self.env, "crash_count", 0)
        # An actor that learns (A3C's) sums its metrics for the curves (losses/...).
        sums, count = actor.drain_metrics()
        report = Report(source=self.index, env_steps=actor.env_steps - self._steps,
                        transitions=actor.transitions_added - self._transitions, episodes=episodes,
                        version=actor.version, final=final, metric_sums=sums, metric_count=count,
                        env_worker_restarts=env_restarts - self._env_restarts,
                        dropped_episodes=actor.dropped_episodes - self._dropped,
                        held_steps=actor.held_steps())
        self._steps, self._transitions = actor.env_steps, actor.transitions_added
        self._env_restarts, self._dropped = env_restarts, actor.dropped_episodes
        return report

    def close(self) -> None:
        self.env.close()


def run_actor(setup: Setup, group: Any, *, index: int, shards: list[str], signals: Any) -> None:
    """Actor ``index`` until the learner's directive says stop, or a signal of its
    own does (under torchrun every rank gets the SIGTERM, and the learner may be gone)."""
    from rlpar.distributed import current_world
    from rlpar.servers import PushPullModelServer

    restarts = current_world().rank_restarts
    if restarts:  # before any add: with shards on the actors, the learner rehosts ours
        group.call("coord/rejoin", Rejoin(source=index, restarts=restarts))
    holds_shard = setup.path.actor_keeps_shard(restarted=bool(restarts))
    sink = setup.path.actor_sink(setup, group, shards, index=index, rehosted=bool(restarts))
    group.barrier()  # a restarted actor passes at once (or completes it for the one that died)
    # Same index, so the same exploration; the shell pulls the newest parameters.
    shell = ActorShell(setup, index=index, sink=sink, params=PushPullModelServer.connect(group, PARAMS),
                       restarts=restarts)
    evaluator = eval_env(setup, seed=shell.seed + 1) if index == setup.num_actors - 1 else None
    paced = pacing(setup.flow, num_actors=setup.num_actors, num_envs=setup.env.num_envs,
                   learners=setup.learners)
    directive = group.call("coord/report", shell.report())
    last_report, every = time.monotonic(), report_every(setup.num_actors)
    try:
        # The first directive too: a resumed run's or a restarted evaluator's first
        # report may find an evaluation due.
        _evaluate_if_told(setup, group, shell, evaluator, directive)
        while not directive.stop and not signals.stopped:
            if time.monotonic() - last_report >= every:
                directive, last_report = group.call("coord/report", shell.report()), time.monotonic()
                _evaluate_if_told(setup, group, shell, evaluator, directive)
            elif paced is None or paced.actor_may_step(env_steps=directive.env_steps + shell.unreported_steps(),
                                                       updates=directive.updates,
                                                       filling=index % setup.learners in directive.filling):
                shell.actor.step()
            else:
                # Sleep until the next report instead of asking again at once: each
                # report is an RPC whose handler takes the learner's GIL, so a
                # throttled actor that polls slows the very learner it waits for.
                time.sleep(max(0.0, last_report + every - time.monotonic()))
    finally:
        try:
            last_call(signals.stopped, lambda: _send_final(group, shell, sink, signals.stopped))
        finally:
            shell.close()
            if evaluator is not None:
                evaluator.close()
    if holds_shard:
        hold_shard_until_saved(setup, group, signals)


def _evaluate_if_told(setup: Setup, group: Any, shell: ActorShell, evaluator: Any, directive: Any) -> None:
    """The evaluation a directive asks for, its result sent before the next report
    (the coordinator asks again for one still owed then)."""
    if directive.evaluate and evaluator is not None:
        shell.actor.sync()
        # The result carries the parameters it played: the learner is many updates
        # past this version by the time the result reaches it.
        group.call("coord/eval", evaluate(setup, shell.acting, evaluator, env_steps=directive.env_steps,
                                          version=shell.actor.version))


def _send_final(group: Any, shell: ActorShell, sink: Any, signalled: bool) -> None:
    """What an ending actor owes the learner: its buffered data, then its final report."""
    from experiments.runtime.job import STOP_CALL_S

    shell.actor.finish()
    if hasattr(sink, "wait"):
        sink.wait()
    group.call("coord/report", shell.report(final=True), timeout=STOP_CALL_S if signalled else None)
