"""An Ape-X actor killed mid-run (kill -9) is restarted alone and rejoins: the learner
keeps training, the job finishes its budget, and the summary counts the restart."""

import os
import signal

import pytest
from jobs import apex_config, scalars

from algorithms.dqn import DQN, ApexActor, ApexConfig
from experiments import apex
from experiments.runtime import Parts


class DiesOnceDQN(DQN):
    """SIGKILLs its own process once per test, in the rank whose RANK is $DIE_RANK,
    after $DIE_AFTER exploring ``act`` calls; its replacement lives on."""

    calls = 0

    def act(self, obs, *, explore=True):
        if explore and os.environ.get("RANK") == os.environ["DIE_RANK"]:
            DiesOnceDQN.calls += 1
            marker = os.environ["DIE_MARKER"]
            if DiesOnceDQN.calls >= int(os.environ["DIE_AFTER"]) and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        return super().act(obs, explore=explore)


class VersionsAfterRestart(ApexActor):
    """Appends each parameter version a restarted actor process acts with to $VERSIONS."""

    def sync(self):
        loaded = super().sync()
        if loaded and os.environ.get("RLPAR_RANK_RESTARTS"):
            with open(os.environ["VERSIONS"], "a") as f:
                f.write(f"{self.index} {self.version}\n")
        return loaded


@pytest.mark.timeout(120)
def test_a_killed_actor_rejoins_while_the_learner_keeps_training(tmp_path, monkeypatch):
    monkeypatch.setenv("DIE_MARKER", str(tmp_path / "killed"))
    monkeypatch.setenv("DIE_RANK", "2")  # actor 1, the evaluator
    # 600 of its env steps (about 1200 in all, learning_starts 200): well after the first updates.
    monkeypatch.setenv("DIE_AFTER", "300")
    monkeypatch.setenv("VERSIONS", str(tmp_path / "versions"))
    summary = apex.run(apex_config(str(tmp_path / "runs"), max_env_steps=2800, max_seconds=90.0),
                       parts=Parts(algorithm=DiesOnceDQN, actor=VersionsAfterRestart), quiet=True)
    assert (tmp_path / "killed").exists()
    assert summary["stop_reason"] == "env step budget" and summary["env_steps"] >= 2800
    # The actor alone was restarted: the world was not (no resume from a checkpoint).
    assert summary["restarts"] == 0 and summary["resumed_from_step"] is None
    assert summary["actor_restarts"] == 1 and summary["silent_sources"] == []
    # What it had stepped but not yet added when it last reported: at most its add
    # batch and n-step window.
    defaults = ApexConfig()
    assert 0 <= summary["lost_transitions"] <= (defaults.add_every + defaults.n_step) * 2
    # Its replacement kept its index and pulled newer parameters as the learner went on.
    rows = [line.split() for line in (tmp_path / "versions").read_text().splitlines()]
    assert {index for index, _ in rows} == {"1"}
    versions = [int(v) for _, v in rows]
    assert len(versions) >= 2 and versions == sorted(versions) and versions[-1] > versions[0]
    # One learner process all along: its update count never went back.
    curves = scalars(summary["run_dir"])
    updates = [value for _, value in sorted(curves["charts/updates"])]
    assert updates == sorted(updates) and updates[-1] == summary["updates"] > 0
    assert max(value for _, value in curves["actors/restarts"]) == 1


def test_the_coordinator_names_silent_sources_and_counts_rejoins():
    import time

    from experiments.runtime.config import RunConfig
    from experiments.runtime.coordinator import Coordinator
    from experiments.runtime.messages import Rejoin, Report
    from rlpar.logging import MetricLogger

    run = RunConfig(status_every=0.0, eval_every=10, max_env_steps=10**6, max_seconds=600.0)
    coord = Coordinator(job="t", run=run, env_id="x", num_sources=2, target=1e9, started=time.time(),
                        logger=MetricLogger(log_dir=None), evaluator=1, quiet=True, silent_after=0.05)
    coord.report(Report(source=0, env_steps=10, transitions=6, held_steps=4))  # 4 steps not yet in replay
    assert coord.report(Report(source=1, env_steps=10, transitions=10)).evaluate
    assert (coord.added_by(0), coord.added_by(1)) == (6, 10)  # what a shard of each holds at least
    time.sleep(0.2)
    # Its result never came, so the directive was not acted on: asked again (issue 46).
    assert coord.report(Report(source=1, env_steps=4, transitions=4)).evaluate
    coord.tick(updates=0, force=True)
    summary = coord.summary(algorithm=DQN, updates=0, run_dir=None)
    assert summary["silent_sources"] == [0] and summary["actor_restarts"] == 0
    # Source 0 died with its 4 unadded transitions; its replacement rejoins and reports.
    coord.rejoin(Rejoin(source=0, restarts=1))
    assert coord.added_by(0) == 0  # counted afresh for the replacement (its shard is new)
    coord.report(Report(source=0, env_steps=2, transitions=0))
    # The evaluator died mid-evaluation: its replacement is asked again.
    coord.rejoin(Rejoin(source=1, restarts=1))
    assert coord.report(Report(source=1, env_steps=10, transitions=10)).evaluate
    summary = coord.summary(algorithm=DQN, updates=0, run_dir=None)
    assert (summary["actor_restarts"], summary["lost_transitions"], summary["silent_sources"]) == (2, 4, [])
    # A dead source's replay shard: added and reported, then lost; the replay's size
    # no longer counts it.
    assert coord.held_transitions() == coord.transitions == 30
    coord.count_lost(6)
    assert (coord.lost_transitions, coord.held_transitions()) == (10, 24)
    # Counted across a checkpoint (a world restarted from it goes on counting).
    again = Coordinator(job="t", run=run, env_id="x", num_sources=2, target=1e9, started=time.time(),
                        logger=MetricLogger(log_dir=None), quiet=True)
    again.load_state_dict(coord.state_dict())
    assert (again.source_restarts, again.lost_transitions, again.held_transitions()) == (2, 10, 24)
    older = coord.state_dict()
    del older["added_lost"]  # a checkpoint from before the count
    again.load_state_dict(older)
    assert again.held_transitions() == 30
    with pytest.raises(ValueError, match="source 2"):
        coord.rejoin(Rejoin(source=2, restarts=1))
    with pytest.raises(ValueError, match="silent_after"):
        Coordinator(job="t", run=run, env_id="x", num_sources=1, target=1e9, started=time.time(),
                    logger=MetricLogger(log_dir=None), silent_after=0)


class AlwaysDiesDQN(DQN):
    """Every process of rank $DIE_RANK SIGKILLs itself after $DIE_AFTER exploring acts."""

    calls = 0

    def act(self, obs, *, explore=True):
        if explore and os.environ.get("RANK") == os.environ["DIE_RANK"]:
            AlwaysDiesDQN.calls += 1
            if AlwaysDiesDQN.calls >= int(os.environ["DIE_AFTER"]):
                os.kill(os.getpid(), signal.SIGKILL)
        return super().act(obs, explore=explore)


@pytest.mark.timeout(120)
def test_an_actor_that_keeps_dying_ends_the_job_with_its_cause(tmp_path, monkeypatch):
    from rlpar.errors import RankKeepsDying

    monkeypatch.setenv("DIE_RANK", "1")
    monkeypatch.setenv("DIE_AFTER", "100")
    with pytest.raises(RankKeepsDying, match="rank 1 was killed by signal SIGKILL after 1 restart"):
        apex.run(apex_config(str(tmp_path / "runs"), max_env_steps=10**6, max_restarts=1),
                 parts=Parts(algorithm=AlwaysDiesDQN), quiet=True)


class SeedRecordingActor(ApexActor):
    """Appends ``index restarts seed`` of every actor process to $SEEDS."""

    def __init__(self, *, dqn, env, buffer, params, index, num_actors, config, seed):
        with open(os.environ["SEEDS"], "a") as f:
            f.write(f"{index} {os.environ.get('RLPAR_RANK_RESTARTS', '0')} {seed}\n")
        super().__init__(dqn=dqn, env=env, buffer=buffer, params=params, index=index,
                         num_actors=num_actors, config=config, seed=seed)


@pytest.mark.timeout(150)
def test_a_killed_actor_holding_a_replay_shard_rejoins_and_its_shard_is_sampled_again(tmp_path,
                                                                                       monkeypatch):
    from experiments.roles.actor_learner.program import actor_seed

    monkeypatch.setenv("DIE_MARKER", str(tmp_path / "killed"))
    monkeypatch.setenv("DIE_RANK", "1")  # actor 0, holding shard 0
    monkeypatch.setenv("DIE_AFTER", "350")  # 700 of its env steps, most of them in its shard
    monkeypatch.setenv("SEEDS", str(tmp_path / "seeds"))
    summary = apex.run(apex_config(str(tmp_path / "runs"), replay_placement="actors", max_env_steps=2800,
                                   max_seconds=120.0, checkpoint_every=0.5),
                       parts=Parts(algorithm=DiesOnceDQN, actor=SeedRecordingActor), quiet=True)
    assert (tmp_path / "killed").exists()
    assert summary["stop_reason"] == "env step budget" and summary["env_steps"] >= 2800
    # The actor alone was restarted, not the world.
    assert summary["restarts"] == 0 and summary["resumed_from_step"] is None
    assert summary["actor_restarts"] == 1 and summary["silent_sources"] == []
    # Its shard died with it: what it held (about 700 transitions) is counted lost.
    assert summary["lost_transitions"] >= 500
    # Its replacement got a fresh seed (not its predecessor's episodes again).
    rows = sorted(tuple(int(v) for v in line.split())
                  for line in (tmp_path / "seeds").read_text().splitlines())
    assert rows == [(0, 0, actor_seed(0, 0)), (0, 1, actor_seed(0, 0, 1)), (1, 0, actor_seed(0, 1))]
    assert len({seed for _, _, seed in rows}) == 3
    # The shard the learner hosts for it was filled again and is in the last checkpoint.
    from rlpar.checkpoint import latest_checkpoint, load_part

    names = ["shard-0-of-2", "shard-1-of-2"]
    newest = latest_checkpoint(os.path.join(summary["run_dir"], "checkpoints"), parts=names)
    sizes = [len(load_part(newest, name, kind="apex")[0]["leaves"]) for name in names]
    # The replay's size left out what the dead shard took with it.
    assert sizes[0] > 0 and sum(sizes) >= summary["replay_size"] > 0
    curves = scalars(summary["run_dir"])
    updates = [value for _, value in sorted(curves["charts/updates"])]
    assert updates == sorted(updates) and updates[-1] == summary["updates"] > 0


def test_a_restarted_actor_seed_is_fresh_and_derived_from_the_run():
    from experiments.roles.actor_learner.program import actor_seed

    assert actor_seed(5, 0) == 5 + 10_000  # the first process keeps the historical seed
    seeds = {actor_seed(5, i, r) for i in range(4) for r in range(4)}
    assert len(seeds) == 16  # every (actor, restart) its own
    assert actor_seed(5, 1, 2) == actor_seed(5, 1, 2) != actor_seed(6, 1, 2)
    with pytest.raises(ValueError, match="restarts"):
        actor_seed(5, 0, -1)


def test_a_dead_r2d2_actor_is_estimated_to_lose_the_env_steps_no_sequence_holds_yet():
    """An R2D2 item is a sequence of many (overlapping) steps: the report's count of
    what the actor holds comes from its sequence adder, not from steps minus items."""
    import time

    from gymnasium.vector import AutoresetMode

    from algorithms.builder import EnvSpec
    from algorithms.r2d2 import R2D2Builder, R2D2Config
    from envs import make_vector_env
    from envs.testing import CountingEnv
    from experiments.roles.actor_learner.actor import ActorShell
    from experiments.runtime.config import RunConfig
    from experiments.runtime.coordinator import Coordinator
    from experiments.runtime.messages import Rejoin
    from rlpar.buffers import PrioritizedReplayBuffer
    from rlpar.logging import MetricLogger
    from rlpar.servers.model import ModelStore

    env = make_vector_env(lambda: CountingEnv(episode_length=6), num_envs=2, num_workers=0,
                          autoreset_mode=AutoresetMode.SAME_STEP, seed=0)
    learn = ApexConfig(lr=1e-3, n_step=1, batch_size=4, hidden=(8,), learning_starts=20, updates_per_step=0.1)
    # Sequences of 5 steps (burn-in 1, unroll 3, n-step 1) every 2 steps of an episode.
    builder = R2D2Builder(learn=learn, r2d2=R2D2Config(burn_in=1, unroll=3, period=2, lstm_size=8),
                          spec=EnvSpec(env.single_observation_space, env.single_action_space))
    buffer, params = PrioritizedReplayBuffer(capacity=100, seed=0), ModelStore()
    builder.make_learner(builder.make_algorithm(device="cpu", seed=0), source=buffer, params=params)
    actor = builder.make_actor(builder.make_algorithm(device="cpu", seed=1), env=env, sink=buffer, params=params,
                               index=0, num_actors=1, seed=0)
    # The shell's report without its setup (env and actor made above).
    shell = object.__new__(ActorShell)
    shell.index, shell.env, shell.actor = 0, env, actor
    shell._steps = shell._transitions = shell._env_restarts = shell._dropped = 0
    run = RunConfig(status_every=0.0, eval_every=10**6, max_env_steps=10**6, max_seconds=600.0)
    coord = Coordinator(job="t", run=run, env_id="x", num_sources=1, target=1e9, started=time.time(),
                        logger=MetricLogger(log_dir=None), quiet=True)
    try:
        # Per env, steps 0-4 make a sequence (added), steps 0-5 an episode (whose open
        # sequences from steps 2 and 4 go out at its end): none held after step 4 or 5,
        # then steps 0-3 of the next episode are in no sequence yet.
        held = []
        for _ in range(6 + 4):
            actor.step()
            coord.report(shell.report())
            held.append(actor.held_steps())
    finally:
        env.close()
    assert held == [2, 4, 6, 8, 0, 0, 2, 4, 6, 8]
    assert (coord.env_steps, coord.transitions) == (20, len(buffer)) == (20, 2 * 3)  # 3 sequences per env
    coord.rejoin(Rejoin(source=0, restarts=1))
    assert coord.lost_transitions == 8  # not 20 env steps - 6 sequences
