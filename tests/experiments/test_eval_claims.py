"""An evaluation the coordinator asked for is not lost when nothing acts on it (issue
46): a resumed run's or a restarted evaluator's first directive, an evaluator killed
mid-evaluation. The coordinator asks again for an evaluation still owed, and the
actor acts on its first directive too; before, the claim stayed out for good and the
run never evaluated again (so it could neither stop as solved nor improve
``policy-best.pt``)."""

import os
import signal
import time

import pytest
from jobs import apex_config, impala_config, scalars

from algorithms.dqn import DQN, ApexActor
from experiments import apex, impala
from experiments.runtime import Parts
from experiments.runtime.config import RunConfig
from experiments.runtime.coordinator import Coordinator
from experiments.runtime.messages import EvalResult, Rejoin, Report
from rlpar.logging import MetricLogger


def coordinator(*, evaluator=1, eval_every=10):
    run = RunConfig(status_every=0.0, eval_every=eval_every, max_env_steps=10**6, max_seconds=600.0)
    return Coordinator(job="t", run=run, env_id="x", num_sources=2, target=1e9, started=time.time(),
                       logger=MetricLogger(log_dir=None), evaluator=evaluator, quiet=True)


def result(env_steps):
    import torch

    return EvalResult(env_steps=env_steps, version=0, returns=[1.0], seed=0, policy={"w": torch.zeros(1)})


def resumed_with_an_evaluation_due():
    """A coordinator resumed from a checkpoint taken at 25 env steps, its evaluation at 10 not made."""
    first = coordinator()
    first.report(Report(source=0, env_steps=25))
    state = first.state_dict()
    assert state["next_eval"] == 10 <= state["env_steps"]
    coord = coordinator()
    coord.load_state_dict(state)
    return coord


def test_an_evaluation_asked_for_by_a_directive_never_acted_on_is_asked_for_again():
    coord = resumed_with_an_evaluation_due()
    # The resumed evaluator's first report is told to evaluate and (an actor from before
    # the fix) does not: its next report is told again, not left without evaluations.
    assert coord.report(Report(source=1, env_steps=1)).evaluate
    assert not coord.report(Report(source=0, env_steps=1)).evaluate  # only the evaluator is told
    assert coord.report(Report(source=1, env_steps=1)).evaluate
    coord.eval_result(result(28))
    assert not coord.report(Report(source=1, env_steps=1)).evaluate  # 29 steps: the next is at 30
    coord.report(Report(source=0, env_steps=5))
    assert coord.report(Report(source=1, env_steps=1)).evaluate  # 35: the later evaluation comes
    coord.eval_result(result(35))
    assert [row[1] for row in coord.evals] == [28, 35]


def test_the_evaluation_a_killed_evaluator_owed_is_asked_of_its_replacement():
    coord = coordinator()
    assert coord.report(Report(source=1, env_steps=12)).evaluate
    coord.rejoin(Rejoin(source=1, restarts=1))  # killed before its result came back
    # Not due by the schedule any more (the next is at 20), but still owed.
    assert coord.report(Report(source=1, env_steps=0)).evaluate
    coord.rejoin(Rejoin(source=1, restarts=2))  # killed again
    coord.report(Report(source=0, env_steps=10))
    assert coord.report(Report(source=1, env_steps=0)).evaluate
    coord.eval_result(result(22))
    # Made at 22, it also stood for the one due at 20: not two in a row.
    assert not coord.report(Report(source=1, env_steps=0)).evaluate
    assert [row[1] for row in coord.evals] == [22]
    # Killed while idle: its replacement is told only what is due.
    coord.rejoin(Rejoin(source=1, restarts=3))
    assert not coord.report(Report(source=1, env_steps=0)).evaluate
    assert coord.report(Report(source=1, env_steps=8)).evaluate  # 30 steps


def test_a_checkpoint_taken_while_an_evaluation_is_out_has_it_due_on_resume():
    coord = coordinator()
    assert coord.report(Report(source=1, env_steps=12)).evaluate
    assert coord.state_dict()["next_eval"] == 10  # its result is not in this checkpoint
    coord.eval_result(result(12))
    assert coord.state_dict()["next_eval"] == 20


def test_final_reports_and_a_stopped_run_are_not_asked_to_evaluate():
    coord = resumed_with_an_evaluation_due()
    assert not coord.report(Report(source=1, env_steps=1, final=True)).evaluate  # it leaves
    assert coord.report(Report(source=1, env_steps=1)).evaluate
    coord.stop("finished")
    assert not coord.report(Report(source=1, env_steps=1)).evaluate


def test_a_lead_that_evaluates_itself_is_asked_again_for_an_evaluation_it_did_not_make():
    coord = coordinator(evaluator=None)
    coord.report(Report(source=0, env_steps=12))
    assert coord.eval_due() and coord.eval_due()  # the first evaluation raised, say
    coord.eval_result(result(12))
    assert not coord.eval_due()
    coord.report(Report(source=0, env_steps=8))
    assert coord.eval_due()


def eval_steps(summary):
    """Env steps of every evaluation of the run (its earlier sessions' included), from
    the summary and, as a check, the TensorBoard curve."""
    steps = [row[1] for row in summary["evals"]]
    curve = sorted(step for step, _ in scalars(summary["run_dir"]).get("eval/return", []))
    assert sorted(steps) == curve
    return steps


@pytest.mark.timeout(180)
@pytest.mark.parametrize("job, config", [(apex, apex_config), (impala, impala_config)], ids=["apex", "impala"])
def test_a_run_resumed_with_an_evaluation_due_goes_on_evaluating(tmp_path, job, config):
    # One actor, the evaluator (the issue is its directive, not who else steps), in short
    # sessions: each session's world start is most of its cost.
    small = {"num_actors": 1, "eval_every": 200, "eval_episodes": 2}
    # The first session stops at its budget (400 steps) with the evaluation at 400 due
    # and not made: a report that ends the run asks for none.
    first = job.run(config(str(tmp_path), max_env_steps=400, **small), quiet=True)
    assert first["stop_reason"] == "env step budget" and first["evaluations"] >= 1
    assert max(eval_steps(first)) < 400 <= first["env_steps"]
    resumed = job.run(config(str(tmp_path), resume=first["run_dir"], max_env_steps=1040, **small), quiet=True)
    assert resumed["resumed_from_step"] == first["env_steps"] and resumed["stop_reason"] == "env step budget"
    # Due after the resume: at 400 (at once), 600, 800 and 1000. Two evaluations due
    # close together may be made as one, never none.
    later = [step for step in eval_steps(resumed) if step >= 400]
    assert len(later) >= 2 and max(later) >= 800, (later, resumed["evals"])


EVAL_EVERY = 300


def _steps_file():
    return os.environ["STEPS_OF_ACTOR_0"]


def _actor_0_steps():
    try:
        with open(_steps_file()) as f:
            return int(f.read() or 0)
    except FileNotFoundError:
        return 0


class KilledMidEvaluationDQN(DQN):
    """SIGKILLs the evaluator's first process (rank $DIE_RANK) at its first greedy act,
    i.e. in its first evaluation, recording how far actor 0 had stepped then."""

    def act(self, obs, *, explore=True):
        if not explore and os.environ.get("RANK") == os.environ["DIE_RANK"] and not os.environ.get(
                "RLPAR_RANK_RESTARTS"):
            with open(os.environ["DIE_MARKER"], "w") as f:
                f.write(str(_actor_0_steps()))
            os.kill(os.getpid(), signal.SIGKILL)
        return super().act(obs, explore=explore)


class WaitingActor(ApexActor):
    """Actor 0 writes its env steps to $STEPS_OF_ACTOR_0; the evaluator's replacement
    sends its first report only once actor 0 has stepped past the next scheduled
    evaluation, so that report finds one due (the moment the old coordinator lost them all)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._written = 0
        if self.index == 1 and os.environ.get("RLPAR_RANK_RESTARTS"):
            with open(os.environ["DIE_MARKER"]) as f:
                goal = int(f.read()) + 3 * EVAL_EVERY
            deadline = time.monotonic() + 60.0
            while _actor_0_steps() < goal and time.monotonic() < deadline:
                time.sleep(0.05)

    def step(self):
        n = super().step()
        if self.index == 0 and self.env_steps - self._written >= 32:
            self._written = self.env_steps
            with open(_steps_file() + ".tmp", "w") as f:
                f.write(str(self.env_steps))
            os.replace(_steps_file() + ".tmp", _steps_file())
        return n


@pytest.mark.timeout(180)
def test_an_evaluator_killed_mid_evaluation_is_asked_for_it_again_and_later_ones_come(tmp_path, monkeypatch):
    monkeypatch.setenv("DIE_MARKER", str(tmp_path / "killed"))
    monkeypatch.setenv("DIE_RANK", "2")  # actor 1, the evaluator
    monkeypatch.setenv("STEPS_OF_ACTOR_0", str(tmp_path / "steps"))
    # Learning on: its pacing keeps actor 0 from running to the budget while the
    # replacement evaluates (the later evaluations must come).
    summary = apex.run(apex_config(str(tmp_path / "runs"), eval_every=EVAL_EVERY, max_env_steps=2000),
                       parts=Parts(algorithm=KilledMidEvaluationDQN, actor=WaitingActor), quiet=True)
    assert (tmp_path / "killed").exists()
    assert summary["actor_restarts"] == 1 and summary["stop_reason"] == "env step budget"
    steps = eval_steps(summary)
    # The first evaluation died with its process; its replacement made it (late), then
    # the later ones, to the end of the run.
    assert len(steps) >= 2 and max(steps) >= 2000 - 3 * EVAL_EVERY, (steps, summary["env_steps"])
