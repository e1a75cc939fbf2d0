"""The lead of a synchronous data-parallel job: member 0 (rank 0, or the serial
process), which besides learning like every member keeps the run: the coordinator
(progress, budgets, stop, TensorBoard, status line), greedy evaluations on schedule
with its own network (identical to every member's), checkpoints and
``policy.pt``/``policy-best.pt`` (RunKeeper), the summary, and the algorithm state
that the other members start from (a resumed run's checkpoint lives on the lead's
node only).
"""

from __future__ import annotations

import functools
from typing import Any

from experiments.roles.sync.member import Member, SyncSetup, to_cpu
from experiments.runtime.lead import finish_lead, start_lead
from experiments.runtime.messages import Directive, Report

SYNC = "sync/"  # metrics of the program itself (not the algorithm's): logged under their own tags


class Lead:
    """Member 0's duties beyond learning (see the module docstring)."""

    def __init__(self, setup: SyncSetup, member: Member, *, members: int, backend: str | None) -> None:
        from experiments.runtime.checkpoints import RunKeeper
        from experiments.runtime.envs import target_return

        self.setup, self.member, self.members, self.backend = setup, member, members, backend
        ctx, key, algorithm = setup.ctx, setup.builder.state_key, member.algorithm
        self.coordinator = start_lead(ctx, num_sources=members,
                                      target=target_return(setup.run.target_return, setup.env_fn), evaluator=None)
        # The last whole update's state: a member lost in the middle of one leaves a
        # half-applied update behind (Member.whole_state).
        self.keeper = RunKeeper(ctx, self.coordinator, snapshot=lambda: {key: member.whole_state()},
                                policy=algorithm.policy_state, meta={"program": "sync"})
        self.keeper.restore(lambda state: algorithm.load_state_dict(state[key]), keys=(key,))
        # Built at the first evaluation, not here: a run that never evaluates (short, or
        # stopped early) pays nothing, and an Atari env costs a ROM load (0.3-0.6 s) each.
        self._evaluator: Any = None
        self._window: dict[str, float] = {}
        self._count = 0
        self.rollouts = self.preempted = 0

    @property
    def evaluator(self) -> Any:
        """The evaluation envs: one per episode, each env's first episode counts
        (``algorithms.rollout.evaluate``)."""
        if self._evaluator is None:
            from envs import make_vector_env
            from experiments.runtime.envs import learning_rewards

            self._evaluator = learning_rewards(make_vector_env(
                self.setup.env_fn, num_envs=self.setup.run.eval_episodes, num_workers=0,
                seed=self.setup.run.seed + 1), self.setup.env)
        return self._evaluator

    @property
    def start_step(self) -> int:
        return self.coordinator.env_steps

    def state(self) -> dict[str, Any]:
        """``sync/state``: what another member starts from (CPU tensors)."""
        return {"algorithm": to_cpu(self.member.algorithm.state_dict()), "env_steps": self.coordinator.env_steps}

    def report(self, report: Report) -> Directive:
        """``coord/report``: the program's own metrics are kept apart, the rest goes
        to the coordinator (on an RPC thread for the other members)."""
        ours = {k: report.metric_sums.pop(k) for k in list(report.metric_sums) if k.startswith(SYNC)}
        if ours:
            for k, v in ours.items():
                self._window[k] = self._window.get(k, 0.0) + v
            self._count += 1
            self.rollouts += 1
            self.preempted += int(ours.get(SYNC + "preempted", 0))
        return self.coordinator.report(report)

    def should_stop(self) -> bool:
        return self.coordinator.should_stop()

    def between_iterations(self) -> None:
        """With every member between two iterations (waiting for the next one's first
        collective): curves, an evaluation when due, best policy and checkpoints."""
        self.tick()
        if self.coordinator.eval_due():
            self.evaluate()
        self.keeper.poll()

    def tick(self, *, force: bool = False) -> None:
        means = {k: v / self._count for k, v in self._window.items()} if self._count else {}
        if self.coordinator.tick(updates=self.member.algorithm.updates, scalars=means, force=force,
                                 status={"members": self.members}):
            self._window, self._count = {}, 0

    def evaluate(self) -> None:
        from algorithms.rollout import evaluate as play
        from experiments.runtime.evaluation import evaluation

        builder, algorithm, run = self.setup.builder, self.member.algorithm, self.setup.run
        steps = self.coordinator.env_steps
        seed = run.seed + 7 + steps
        self.coordinator.eval_result(evaluation(
            builder.network_of(algorithm),
            functools.partial(play, builder.greedy(algorithm), self.evaluator, episodes=run.eval_episodes,
                              seed=seed),
            env_steps=steps, version=algorithm.updates, policy=algorithm.policy_state(), seed=seed))

    def save_last_whole(self) -> None:
        """A member was lost: keep what the last whole update made, with the progress
        counted so far (the restarted world resumes from it rather than from the last
        scheduled checkpoint)."""
        self.keeper.save()

    def finish(self, *, interrupted: bool, signalled: bool) -> dict[str, Any]:
        """After the agreed stop: the members' final reports, the last curves, the last
        checkpoint and ``policy.pt``, the summary."""
        from experiments.runtime.job import STOP_QUIET_S

        coordinator, member = self.coordinator, self.member
        coordinator.stop("finished")
        self.report(member.report(final=True))
        # Not for a member that stopped reporting; briefly after a signal (under
        # torchrun every rank got it and a rank may have died).
        coordinator.wait_for_sources(timeout=30.0, quiet=STOP_QUIET_S if signalled else None)
        if self._evaluator is not None:
            self._evaluator.close()
        self.tick(force=True)
        kept = self.keeper.finish(version=member.algorithm.updates)
        summary = coordinator.summary(
            algorithm=type(member.algorithm), updates=member.algorithm.updates, run_dir=self.setup.ctx.run_dir,
            interrupted=interrupted, members=self.members, backend=self.backend or "none",
            num_envs=self.setup.env.num_envs, n_steps=self.setup.builder.n_steps, rollouts=self.rollouts,
            preempted_rollouts=self.preempted, lead_comm_s=member.comm_s) | kept
        return finish_lead(self.setup.ctx, coordinator, summary)


def describe_members(summary: dict[str, Any]) -> list[str]:
    """A synchronous job's own summary lines."""
    rollouts = max(1, summary["rollouts"])
    return [
        f"members            {summary['members']} x {summary['num_envs']} envs x {summary['n_steps']} steps "
        f"(all-reduce: {summary['backend']})",
        f"preempted          {summary['preempted_rollouts']:,} of {summary['rollouts']:,} rollouts "
        f"({100 * summary['preempted_rollouts'] / rollouts:.0f}%)",
        f"lead in collectives {summary['lead_comm_s']:.1f} s (averaging and waiting for the others)",
    ]
