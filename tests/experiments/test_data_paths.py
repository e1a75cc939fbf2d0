"""The actor-learner program's data paths (experiments.roles.actor_learner.paths) and the typed
Setup each rank resolves once from the job context: which ranks host what, who keeps
a shard, what a resume's header says, and no role left holding the context."""

import pytest

from experiments.roles.actor_learner.paths import (
    ActorShards,
    LearnerReplay,
    ReplayRanks,
    UnrollQueue,
    data_path,
)
from experiments.roles.actor_learner.program import role_of
from experiments.runtime.data import QueueConfig, ReplayConfig
from experiments.runtime.parts import Parts
from tests.experiments.jobs import apex_config, impala_config

NAMES = [f"rank{r}" for r in range(6)]


def _roles(extra, learners=2):
    return [role_of(r, len(NAMES), extra, learners)[0] for r in range(len(NAMES))]


@pytest.mark.parametrize("placement, kind, extra, shards, keeps, rehosts", [
    ("learner", LearnerReplay, 0, [], False, False),
    ("actors", ActorShards, 0, ["rank2", "rank3", "rank4", "rank5"], True, True),
    ("replay-ranks", ReplayRanks, 2, ["rank2", "rank3"], False, False),
])
def test_each_placement_says_which_ranks_host_shards_and_who_keeps_them(placement, kind, extra, shards, keeps,
                                                                        rehosts):
    path = data_path("replay", ReplayConfig(replay_placement=placement, replay_ranks=2))
    assert type(path) is kind and path.placement == placement and path.extra_ranks == extra
    assert path.shard_members(NAMES, _roles(extra)) == shards
    # A first actor serves its shard until the last checkpoint; a replacement's is the learner's.
    assert path.actor_keeps_shard(restarted=False) is keeps and not path.actor_keeps_shard(restarted=True)
    # Its capacity in items is the setup's (replay_items: R2D2's sequences span `period` steps).
    assert path.rehosts_dead_shards is rehosts and path.kernels


def test_only_ranks_with_replay_load_its_kernels_early():
    learner = data_path("replay", ReplayConfig())
    assert [learner.hosts_data(r, learners=2) for r in (0, 1, 2, None)] == [True, True, False, False]
    assert data_path("replay", ReplayConfig(replay_placement="actors")).hosts_data(3, learners=2)
    queue = data_path("queue", QueueConfig())
    assert isinstance(queue, UnrollQueue) and not queue.hosts_data(0, learners=1)
    assert queue.shard_members(NAMES, _roles(0)) == [] and queue.extra_ranks == 0 and not queue.kernels


@pytest.mark.parametrize("make, path", [(apex_config, LearnerReplay), (impala_config, UnrollQueue)])
def test_a_setup_holds_typed_parts_not_the_job_context(make, path, tmp_path):
    from experiments import apex, impala
    from experiments.roles.actor_learner.program import Setup
    from experiments.runtime.job import JobContext
    from experiments.runtime.lead import LeadContext

    job = apex if make is apex_config else impala
    config = make()
    if hasattr(job, "env_defaults"):
        job.env_defaults(config, Parts())
    ctx = JobContext(job="job", config=config, parts=Parts(), run_dir=str(tmp_path), started=1.5, quiet=True)
    setup = Setup.of(job.PROGRAM, ctx)
    assert not any(value is ctx for value in vars(setup).values())
    assert setup.lead == LeadContext(job="job", config=config, run_dir=str(tmp_path), started=1.5, quiet=True)
    assert isinstance(setup.path, path) and setup.parts is ctx.parts
    assert setup.env_options["num_workers"] == config.env.env_workers


def test_the_gradients_path_has_its_server_made_by_the_learner():
    """A3C's: nothing hosted before the learner makes the server (its network and
    optimizer), no shards, nothing held; the loop steps when the learner says so."""
    import torch

    from algorithms.builder import Flow
    from experiments.a3c import ServerConfig
    from experiments.roles.actor_learner.paths import Gradients

    path = data_path("gradients", ServerConfig())
    assert isinstance(path, Gradients) and path.data == "gradients" and not path.kernels
    assert path.shard_members(NAMES, _roles(0)) == [] and not path.hosts_data(0, learners=1)

    class Setup:
        flow, learners = Flow(data="gradients", batch_size=1, push_every=1, pull_every=8, held_steps=4), 1

    data = path.learner_data(Setup, None, [])
    with pytest.raises(RuntimeError, match="made by the learner"):
        data.sink  # noqa: B018
    steps = [False, True]
    model = torch.nn.Linear(2, 1)
    server = data.source.host(model=model, optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.1),
                              ready=lambda: steps.pop(0), mode="async", max_staleness=1)
    assert data.sink is server and server.config.max_staleness == 1
    assert [data.ready(0), data.ready(0)] == [False, True] and data.held(reported=5) == 0
    with pytest.raises(ValueError, match="one learner"):
        path.learner_data(Setup, None, [], learner=1)
