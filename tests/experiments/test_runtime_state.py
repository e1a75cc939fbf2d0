"""The job runtime checks what it resumes from (issue 30.4): the coordinator's
progress and the checkpoint's top-level keys raise StateError naming the key path,
and a failed load leaves the coordinator's progress as it was."""

import copy
import time
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.runtime.checkpoints import RunKeeper
from experiments.runtime.config import RunConfig
from experiments.runtime.coordinator import Coordinator
from experiments.runtime.messages import EvalResult, Report
from rlpar.checkpoint import save_checkpoint
from rlpar.errors import StateError
from rlpar.logging import MetricLogger
from tests.corrupt import corruptions, paths, replaced

RUN = RunConfig(status_every=0.0, eval_every=10, max_env_steps=10**6, max_seconds=600.0)


def coordinator(run=RUN, *, num_sources=1):
    return Coordinator(job="t", run=run, env_id="x", num_sources=num_sources, target=1e9, started=time.time(),
                       logger=MetricLogger(log_dir=None), quiet=True)


def progressed():
    coord = coordinator()
    coord.report(Report(source=0, env_steps=12, transitions=12))
    coord.eval_result(EvalResult(env_steps=12, version=1, returns=[1.0, 3.0], seed=19,
                                 policy={"w": torch.zeros(2)}))
    return coord


def progress(coord):
    return (coord.env_steps, coord.transitions, coord.episodes, coord.updates, list(coord._recent),
            list(coord.evals), coord.solved, coord._next_eval, coord.source_restarts,
            coord.lost_transitions)


def test_a_coordinator_state_round_trips_and_an_older_one_without_rejoin_counts_loads():
    state = progressed().state_dict()
    again = coordinator()
    again.load_state_dict(state)
    assert again.env_steps == 12 and again.evals[0][1:] == (12, 2.0, 1.0, 1)
    older = {k: v for k, v in state.items() if k not in ("source_restarts", "lost_transitions")}
    coordinator().load_state_dict(older)


@pytest.mark.parametrize(("change", "match"), [
    ({"evals": None}, r"state\['evals'\] must be a list, got NoneType"),
    ({"evals": [[1.0, 12, 2.0]]}, r"state\['evals'\]\[0\] must hold 4 or 5 items .*, got 3"),
    ({"evals": [[1.0, 12, 2.0, 1.0, -2]]}, r"state\['evals'\]\[0\]\[4\] must be an int >= -1, got -2"),
    ({"evals": [[1.0, "12", 2.0, 1.0]]}, r"state\['evals'\]\[0\]\[1\] must be an int, got str"),
    ({"env_steps": -5}, r"state\['env_steps'\] must be an int >= 0, got -5"),
    ({"elapsed_s": "3"}, r"state\['elapsed_s'\] must be a number, got str"),
    ({"solved": [1.0, 2]}, r"state\['solved'\] must hold 3 items, got 2"),
    ({"recent": [1.0, None]}, r"state\['recent'\]\[1\] must be a number, got NoneType"),
    ({"source_restarts": 1.5}, r"state\['source_restarts'\] must be an int, got float"),
    ({"typo": 0}, r"state has unexpected key\(s\) \['typo'\]"),
])
def test_a_bad_coordinator_state_is_named_and_changes_nothing(change, match):
    state = {**progressed().state_dict(), **change}
    coord = progressed()
    before = copy.deepcopy(progress(coord))
    with pytest.raises(StateError, match=f"Coordinator.load_state_dict: {match}"):
        coord.load_state_dict(state)
    assert progress(coord) == before


def test_a_missing_coordinator_key_is_named():
    state = {k: v for k, v in progressed().state_dict().items() if k != "next_eval"}
    with pytest.raises(StateError, match=r"state is missing key\(s\) \['next_eval'\]"):
        coordinator().load_state_dict(state)


def test_the_run_keeper_names_a_key_the_job_reads_before_loading_anything(tmp_path):
    save_checkpoint(tmp_path / "checkpoints", {"coordinator": progressed().state_dict()}, kind="t", step=12)
    run = RunConfig(status_every=0.0, eval_every=10, resume=str(tmp_path), checkpoint_every=0.0)
    ctx = SimpleNamespace(config=SimpleNamespace(run=run), run_dir=None, job="t")
    coord = coordinator(run)
    keeper = RunKeeper(ctx, coord, snapshot=dict, policy=dict)
    loaded = []
    with pytest.raises(StateError, match=r"t checkpoint .*ckpt-000000000012.pt: state is missing key\(s\) \['dqn'\]"):
        keeper.restore(loaded.append, keys=("dqn",))
    assert coord.env_steps == 0 and not loaded
    assert keeper.restore(loaded.append)  # a job that reads no other key
    assert coord.env_steps == 12 and len(loaded) == 1


@settings(max_examples=100)
@given(data=st.data())
def test_a_randomly_corrupted_coordinator_state_loads_cleanly_or_raises_state_error(data):
    state = progressed().state_dict()
    path, value = data.draw(st.sampled_from(list(paths(state))[1:]), label="path")
    bad = replaced(state, path, data.draw(st.sampled_from(corruptions(value)), label="new"))
    coord = progressed()
    before = copy.deepcopy(progress(coord))
    try:
        coord.load_state_dict(bad)
    except StateError:
        assert progress(coord) == before
        return
    coord.report(Report(source=0, env_steps=3, transitions=3))  # and it goes on
    coord.summary(algorithm=Coordinator, updates=0, run_dir=None)


def test_a_resumed_runs_rates_and_start_up_are_this_sessions():
    """wall_s counts the whole run (the time budget does), but env steps/s, updates/s
    and start-up are this session's: the earlier steps were not made in its time."""
    first = coordinator()
    first.report(Report(source=0, env_steps=100_000, transitions=100_000))
    first.updates = 5_000
    state = first.state_dict()
    state["elapsed_s"] = 100.0  # the first session ran 100 s
    resumed = coordinator()
    resumed.load_state_dict(state)
    time.sleep(0.05)
    resumed.report(Report(source=0, env_steps=50, transitions=50))
    time.sleep(0.1)
    summary = resumed.summary(algorithm=torch.nn.Module, updates=5_010, run_dir=None)
    assert summary["wall_s"] >= 100.0 and summary["env_steps"] == 100_050
    assert 0.04 <= summary["startup_s"] < 5.0  # not the first session's 100 s
    assert summary["env_steps_per_s"] <= 50 / 0.1 + 1  # not 100,050 steps over ~0.1 s
    assert summary["updates_per_s"] <= 10 / 0.1 + 1


def test_env_steps_per_s_counts_after_every_sources_first_report():
    """Two members' first rollouts arrive within a millisecond, after a start-up that
    made them: the rate is not their 8,192 steps over that millisecond."""
    coord = coordinator(num_sources=2)
    time.sleep(0.1)  # start-up: envs made, the first rollouts stepped
    for source in (0, 1):
        coord.report(Report(source=source, env_steps=4096, transitions=4096))
    one_round = coord.summary(algorithm=torch.nn.Module, updates=1, run_dir=None)
    assert 0 < one_round["env_steps_per_s"] <= 8192 / 0.1  # over the session, start-up included
    assert 0 < one_round["updates_per_s"] <= 1 / 0.1  # the one update, over the same time
    time.sleep(0.2)
    for source in (0, 1):
        coord.report(Report(source=source, env_steps=4096, transitions=4096))
    two_rounds = coord.summary(algorithm=torch.nn.Module, updates=2, run_dir=None)
    assert 8192 / 60 <= two_rounds["env_steps_per_s"] <= 8192 / 0.2  # the second round's, over its time


def test_updates_per_s_counts_the_updates_after_the_same_base():
    """A learner that updated on the first source's data before the second reported:
    those updates were made before the span the rate counts over."""
    coord = coordinator(num_sources=2)
    coord.report(Report(source=0, env_steps=4096, transitions=4096))
    coord.tick(updates=3, force=True)
    coord.report(Report(source=1, env_steps=4096, transitions=4096))  # the base: 8,192 steps, 3 updates
    time.sleep(0.2)
    for source in (0, 1):
        coord.report(Report(source=source, env_steps=4096, transitions=4096))
    summary = coord.summary(algorithm=torch.nn.Module, updates=4, run_dir=None)
    assert 0 < summary["updates_per_s"] <= 1 / 0.2  # one update over the span, not four


def test_a_resume_whose_time_budget_is_spent_says_so(capsys):
    state = coordinator().state_dict()
    state["elapsed_s"] = RUN.max_seconds + 1.0
    run = RunConfig(status_every=5.0, eval_every=10, max_env_steps=10**6, max_seconds=600.0)
    Coordinator(job="t", run=run, env_id="x", num_sources=1, target=1e9, started=time.time(),
                logger=MetricLogger(log_dir=None)).load_state_dict(state)
    assert "already spent its time budget (601 s of --max-seconds 600)" in capsys.readouterr().err
