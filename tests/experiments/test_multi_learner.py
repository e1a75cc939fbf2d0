"""Several learners in the actor-learner program (``--learners K``): roles, flags, and
short local runs of Ape-X DQN and IMPALA with two learners that learn in step (the
same updates, bitwise-identical parameters), each from its own data, while an actor
dies and rejoins; the run resumes every learner from its checkpoint."""

import os
import signal

import pytest
from jobs import apex_config, impala_config

from algorithms.dqn import DQN, DQNBuilder
from experiments import apex, impala
from experiments.roles.actor_learner.program import pacing, role_names, role_of
from experiments.runtime import Parts


def test_role_rule_pacing_and_restartable_ranks_with_two_learners():
    assert [role_of(r, 5, 0, 2) for r in range(5)] == [
        ("learner", 0), ("learner", 1), ("actor", 0), ("actor", 1), ("actor", 2)]
    assert [role_of(r, 5, 1, 2)[0] for r in range(5)] == ["learner", "learner", "replay", "actor", "actor"]
    assert role_names(0, 4, 2) == ["learner 0", "learner 1", "actor 0", "actor 1"]
    assert role_names(0, 3) == ["learner", "actor 0", "actor 1"]  # one learner: as it always was
    config = apex_config(learners=2, num_actors=3)
    assert apex.job().restartable(config, 5) == [2, 3, 4]  # the actors only
    # --updates-per-step counts batches: two learners update together half as often.
    apex.fill_learn(config.learn, algorithm="dqn", family="vector")
    flow = DQNBuilder.flow_of(config.learn)
    one, two = (pacing(flow, num_actors=3, num_envs=2, learners=k) for k in (1, 2))
    assert two.updates_per_step == one.updates_per_step / 2 == 0.125


class _DiesOnAverage:
    """A learner group whose ``fail_at``-th gradient average raises PeerUnavailable (a
    member died then)."""

    device, size, rank = "cpu", 2, 0

    def __init__(self, fail_at):
        self.fail_at, self.calls = fail_at, 0

    def average_gradients(self, params):
        from rlpar.errors import PeerUnavailable

        self.calls += 1
        if self.calls == self.fail_at:
            raise PeerUnavailable("learner group 'learners': a member died")


class _Turns:
    """Learner 0's turns in run_lead: an update whose ``fail_at``-th gradient average
    (TD3: critic, then actor) meets a dead learner."""

    def __init__(self, lockstep):
        self.lockstep = lockstep

    def turn(self):
        import torch

        with self.lockstep.update():
            for _ in range(2):
                self.lockstep.average_gradients([torch.zeros(1, requires_grad=True)])
        return True

    def wind_down(self, signalled):
        return 7

    def summary(self, interrupted):
        return {}


@pytest.mark.parametrize("fail_at, saved", [(1, True), (2, False)], ids=["before-any-step", "half-applied"])
def test_learner_0_keeps_no_half_applied_update_after_a_learners_death(fail_at, saved):
    """A death at an update's first gradient average leaves whole updates (the last one
    is saved); at its second, one optimizer step was taken (TD3's critic) and not the
    other: learner 0 writes no last checkpoint nor policy.pt of that."""
    from types import SimpleNamespace

    from experiments.roles.actor_learner.learners import Lockstep
    from experiments.runtime.lead import run_lead
    from rlpar.errors import PeerUnavailable

    lockstep = Lockstep(_DiesOnAverage(fail_at))
    lockstep.poll = lambda ahead: (True, False)
    finished = []
    keeper = SimpleNamespace(poll=lambda: None, finish=lambda version: finished.append(version) or {})
    coordinator = SimpleNamespace(stop=lambda reason: None)
    with pytest.raises(PeerUnavailable):
        run_lead(SimpleNamespace(run_dir=None), coordinator, keeper, _Turns(lockstep), whole=lambda: lockstep.whole)
    assert lockstep.whole is saved and finished == ([7] if saved else [])


class _OneMember:
    """A learner group of one: an all-reduce leaves the flags as they are."""

    device, size, rank = "cpu", 1, 0

    def all_reduce(self, tensor, op):
        pass


def test_learners_that_wait_long_for_data_ask_less_often():
    """A late actor keeps the learners waiting for seconds: asking every millisecond
    there (an all-reduce each) once burned most of a core. Pacing's short waits
    between updates keep the short wait."""
    from experiments.roles.actor_learner.learners import (
        LONG_WAIT_AFTER,
        LONG_WAIT_S,
        WAIT_S,
        Lockstep,
    )

    ready = [False]
    lockstep = Lockstep(_OneMember(), poll=lambda ahead: (ready[0], False))
    waits = []
    for _ in range(LONG_WAIT_AFTER + 1):
        assert lockstep.agree() == (False, False)
        waits.append(lockstep.wait_s)
    assert set(waits[:-1]) == {WAIT_S} and waits[-1] == LONG_WAIT_S > WAIT_S
    ready[0] = True
    assert lockstep.agree() == (True, False) and lockstep.wait_s == WAIT_S
    ready[0] = False
    assert lockstep.agree() == (False, False) and lockstep.wait_s == WAIT_S


def test_bad_learner_flags_are_named():
    with pytest.raises(ValueError, match="--learners must be >= 1, got 0"):
        apex.run(apex_config(learners=0))
    with pytest.raises(ValueError, match="--learners must be >= 1, got 0"):
        impala.run(impala_config(learners=0))
    with pytest.raises(ValueError, match="--serial runs one learner"):
        apex.run(apex_config(learners=2, serial=True))
    with pytest.raises(ValueError, match="--recycle-every needs --learners 1"):
        apex.run(apex_config(learners=2, recycle_every=100))
    with pytest.raises(ValueError, match=r"--batch-size 32 exceeds a learner's replay shard: "
                                         r"--replay-capacity 40 / --learners 2 = 20"):
        apex.run(apex_config(learners=2, replay_capacity=40))
    with pytest.raises(ValueError, match="--learners 3 needs at least 3 actors, got 2"):
        apex.run(apex_config(learners=3, num_actors=2))
    # A torchrun world too small for K learners and an actor.
    with pytest.raises(ValueError, match="a world of 2 ranks leaves no actor with --learners 2"):
        apex.resolve(apex_config(learners=2), 2)
    with pytest.raises(ValueError, match="a world of 3 ranks leaves no actor with --learners 3"):
        impala.resolve(impala_config(learners=3), 3)
    with pytest.raises(ValueError, match="--learners 2 needs at least 2 actors, got 1"):
        impala.resolve(impala_config(learners=2), 3)


class DiesOnceDQN(DQN):
    """SIGKILLs its own process once per test, in the rank $DIE_RANK, after $DIE_AFTER
    exploring ``act`` calls; its replacement lives on."""

    calls = 0

    def act(self, obs, *, explore=True):
        if explore and os.environ.get("RANK") == os.environ["DIE_RANK"]:
            DiesOnceDQN.calls += 1
            marker = os.environ["DIE_MARKER"]
            if DiesOnceDQN.calls >= int(os.environ["DIE_AFTER"]) and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        return super().act(obs, explore=explore)


def in_step(summary, learners=2):
    """Every learner made the same updates and ends with the same parameters."""
    assert summary["learners"] == learners and summary["learners_identical"], summary["learner_digests"]
    assert summary["learner_updates"] == [summary["updates"]] * learners and summary["updates"] > 0


@pytest.mark.timeout(150)
def test_two_apex_learners_learn_in_step_while_an_actor_rejoins_and_resume_together(tmp_path, monkeypatch):
    from rlpar.checkpoint import latest_checkpoint, load_part

    monkeypatch.setenv("DIE_MARKER", str(tmp_path / "killed"))
    monkeypatch.setenv("DIE_RANK", "3")  # actor 1 (ranks 0 and 1 are the learners), feeding learner 1
    monkeypatch.setenv("DIE_AFTER", "200")  # 400 of its env steps: after learning started
    config = apex_config(str(tmp_path / "runs"), learners=2, max_env_steps=1600, eval_every=100_000)
    summary = apex.run(config, parts=Parts(algorithm=DiesOnceDQN), quiet=True)
    assert (tmp_path / "killed").exists()
    assert summary["stop_reason"] == "env step budget" and summary["restarts"] == 0
    assert summary["actor_restarts"] == 1 and summary["silent_sources"] == []
    in_step(summary)
    # Each learner sampled its own shard of the replay and sent its new priorities there.
    assert all(n == summary["updates"] * 32 for n in summary["learner_priorities_sent"])
    # Each learner's shard is its own part of the checkpoint, filled by its actor.
    run_dir = summary["run_dir"]
    path = latest_checkpoint(os.path.join(run_dir, "checkpoints"), parts=["shard-0-of-2", "shard-1-of-2"])
    for part in ("shard-0-of-2", "shard-1-of-2"):
        state, header = load_part(path, part, kind="apex")
        assert header["meta"]["replay_placement"] == "learner" and int(state["storage"]["next_serial"]) > 0

    resumed = apex.run(apex_config(str(tmp_path / "runs"), resume=run_dir, max_env_steps=2000), quiet=True)
    assert resumed["resumed_from_step"] == summary["env_steps"] and resumed["restarts"] == 0
    in_step(resumed)
    assert resumed["updates"] > summary["updates"]
    with pytest.raises(ValueError, match="--learners cannot change when resuming"):
        apex.run(apex_config(str(tmp_path / "runs"), resume=run_dir, learners=3, max_env_steps=4000))


@pytest.mark.timeout(120)
def test_two_impala_learners_each_learn_from_their_own_queue_in_step():
    summary = impala.run(impala_config(learners=2, max_env_steps=800, eval_every=400), quiet=True)
    assert summary["stop_reason"] == "env step budget" and summary["evaluations"] >= 1
    in_step(summary)
    assert "learners           2 in step" in impala.format_summary(summary)
    # Every update took a batch of 2 unrolls (5 steps x 2 envs) on each learner.
    assert summary["env_steps"] >= summary["updates"] * 2 * 2 * 5 * 2


def test_the_actors_of_a_learner_whose_data_lacks_a_batch_step_past_pacing():
    from algorithms.pacing import Pacing

    paced = Pacing(updates_per_step=0.125, learning_starts=200, slack_steps=1000)
    assert not paced.actor_may_step(env_steps=1200, updates=0)  # the shared allowance is spent
    assert paced.actor_may_step(env_steps=1200, updates=0, filling=True)  # its learner's shard is short


class _OneOfTwo:
    """Learner 1 of a group of 2 whose other member contributes zeros: a max leaves
    this member's flags, a mean halves them."""

    rank, size, device = 1, 2, "cpu"

    def all_reduce(self, tensor, op):
        assert op == "max"

    def average_gradients(self, params):
        for p in params:
            if p.grad is not None:
                p.grad /= 2


def test_lockstep_carries_what_each_learner_lacks_in_both_of_its_reductions():
    import torch

    from experiments.roles.actor_learner.learners import Lockstep

    lockstep = Lockstep(_OneOfTwo())
    lockstep.poll, lockstep.lacking_of = (lambda ahead: (False, False)), (lambda: 37)
    assert lockstep.agree() == (False, False) and lockstep.lacking == [0, 37]  # waiting: a max
    lockstep.poll, lockstep.lacking_of = (lambda ahead: (True, True)), (lambda: 3)
    lockstep.average_gradients([torch.zeros(3, requires_grad=True)])  # learning: a mean
    assert lockstep.agree() == (True, True) and lockstep.lacking == [0, 3]


@pytest.mark.timeout(150)
def test_two_apex_learners_start_when_the_actor_of_one_starts_late(monkeypatch):
    # Actor 1 (rank 3) feeds learner 1's replay shard alone and starts 5 s late: actor 0
    # spends the whole pacing allowance meanwhile. Learner 1's shard must still fill.
    # 5 s: actor 0 spends the allowance (learning_starts + slack, 1200 env steps) in
    # about a second of its stepping (a loaded 2-core run showed "filling=learner1:0/100"
    # for 4 s of the 5), so the stall this guards against is reached with seconds to spare.
    monkeypatch.setenv("SLOW_RANK", "3")
    monkeypatch.setenv("SLOW_START_S", "5")
    config = apex_config(env_id="user_envs:SlowStartCounting-v0", learners=2, max_env_steps=1600,
                         eval_every=100_000, max_seconds=60.0)
    summary = apex.run(config, quiet=True)
    assert summary["stop_reason"] == "env step budget"
    in_step(summary)
    assert all(n == summary["updates"] * 32 for n in summary["learner_priorities_sent"])


@pytest.mark.timeout(120)
def test_two_impala_learners_wait_for_a_late_actor_longer_than_the_rpc_timeout(monkeypatch, capfd):
    # Actor 1 (rank 3) feeds learner 1's queue alone and starts 8 s late, twice the RPC
    # timeout. The learners update in step, so learner 0 takes nothing meanwhile and
    # actor 0's puts wait at its full queue: a healthy wait, not a dead learner.
    monkeypatch.setenv("SLOW_RANK", "3")
    monkeypatch.setenv("SLOW_START_S", "8")
    config = impala_config(env_id="user_envs:SlowStartCounting-v0", learners=2, max_env_steps=1500,
                           eval_every=100_000, rpc_timeout=4.0, max_seconds=60.0, status_every=0.5)
    summary = impala.run(config)
    assert summary["stop_reason"] == "env step budget" and summary["restarts"] == 0
    assert summary["actor_restarts"] == 0
    in_step(summary)
    assert "filling=learner1:0/2" in capfd.readouterr().out  # the waiting learner, named
