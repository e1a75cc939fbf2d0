"""experiments.a3c on the job runtime: roles, serial mode, a local world."""

import multiprocessing

import pytest
import torch
from jobs import a3c_config

from experiments.a3c import A3CJobConfig, format_summary, resolve, run


@pytest.mark.timeout(150)
def test_three_process_run_advances_versions_and_changes_parameters():
    # rank 0 is the learner (the gradient server); ranks 1 and 2 are actors: 2 envs x 4
    # steps = 8 env steps per gradient.
    summary = run(a3c_config(num_workers=2, max_env_steps=1200, eval_every=600, max_seconds=100.0), quiet=True)
    assert summary["stop_reason"] == "env step budget"
    assert summary["num_sources"] == 2
    # Every gradient pushed was applied (no staleness bound) and made a new version.
    assert summary["updates"] == summary["received"] == summary["version"] >= 125
    assert summary["dropped"] == 0
    assert summary["env_steps"] >= 1200 and summary["episodes"] > 0
    assert summary["param_change"] > 0
    assert summary["evaluations"] >= 1
    text = format_summary(summary)
    assert "A3C on CartPole-v1" in text and "env step budget" in text


def test_workers_are_the_actor_ranks_besides_the_learner():
    config = A3CJobConfig(num_workers=2)
    assert resolve(config, None) == 3 and config.num_actors == 2 and not config.run.serial
    one = A3CJobConfig(num_workers=1)
    assert resolve(one, None) == 2 and one.run.serial  # one actor: in this process, with the server
    assert resolve(config, 4) == 4 and config.num_workers == 3  # under torchrun
    with pytest.raises(ValueError, match="no actor"):
        resolve(config, 1)


@pytest.mark.timeout(60)
def test_one_worker_runs_in_process_without_spawning():
    threads = torch.get_num_threads()
    summary = run(a3c_config(num_workers=1), quiet=True)
    assert multiprocessing.active_children() == []
    assert torch.get_num_threads() == threads  # restored after the run
    assert summary["stop_reason"] == "env step budget" and summary["num_sources"] == 1
    assert summary["updates"] == summary["version"] >= 100 and summary["mean_staleness"] == 0.0
    assert summary["evaluations"] >= 2 and summary["param_change"] > 0


@pytest.mark.timeout(60)
def test_serial_workers_take_turns_repeat_for_a_seed_and_resume(tmp_path):
    runs = [run(a3c_config(str(tmp_path / str(i)), num_workers=2, serial=True), quiet=True) for i in range(2)]
    assert runs[0]["num_sources"] == 2
    for key in ("env_steps", "updates", "episodes", "train_return", "param_change"):
        assert runs[0][key] == runs[1][key], key
    # The checkpoint holds the server's network, optimizer and version: a resume goes on from them.
    config = A3CJobConfig()
    config.run.resume, config.run.max_env_steps = runs[0]["run_dir"], 1600
    more = run(config, quiet=True)
    assert more["resumed_from_step"] == runs[0]["env_steps"] and more["env_steps"] >= 1600
    assert more["version"] == more["updates"] > runs[0]["version"] and more["received"] > 0


@pytest.mark.timeout(60)
def test_a_gaussian_policy_runs_on_pendulum():
    summary = run(a3c_config(env_id="Pendulum-v1", n_steps=8, reward_scale=0.1, max_env_steps=400,
                             eval_every=10_000), quiet=True)
    assert summary["updates"] >= 20 and summary["param_change"] > 0
    assert summary["algorithm"].endswith("A2C")


def test_workers_learn_on_cpu_unless_a_device_is_given():
    """A3C's workers are a process per core: all of them on one GPU were 2.7x slower."""
    from experiments.a3c import A3CJobConfig
    from experiments.runtime.cli import parse_config

    assert parse_config(A3CJobConfig, []).run.device == "cpu"
    assert parse_config(A3CJobConfig, ["--device", "auto"]).run.device == "auto"


def test_a_config_saved_before_the_fold_still_loads():
    """Its retired fields are kept (experiments.evaluate plays such a run's policy);
    only as flags are they refused (test_runtime_errors)."""
    from experiments.runtime.cli import from_dict, validate

    config = from_dict(A3CJobConfig, {"server_acts": True, "server": {"report_every": 0.1, "round_timeout": 5.0}},
                       where="config.json")
    validate(config)
