"""Resuming a run goes on with the run's own config; re-running a config file never
resumes anything (issue 30: a re-run of a resumed run's config.json resumed it in
place and overwrote its results)."""

import json
import os
import shutil

import pytest
from jobs import apex_config

from experiments import a3c, apex, maddpg
from experiments.apex import ApexJobConfig
from experiments.runtime.cli import leaves, parse_config


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A small finished serial run (its final checkpoint included), with settings away
    from the defaults so that a resume that fell back to them would show."""
    root = tmp_path_factory.mktemp("first")
    summary = apex.run(apex_config(str(root), serial=True, max_env_steps=400, learning_starts=100,
                                   eval_every=100_000, eval_episodes=1, checkpoint_every=60.0,
                                   keep_checkpoints=2),
                       quiet=True)
    return summary["run_dir"]


def copy_run(run_dir, tmp_path):
    """A copy to resume, so the tests do not change each other's run."""
    return shutil.copytree(run_dir, tmp_path / "runs" / os.path.basename(run_dir))


def saved(run_dir):
    with open(os.path.join(run_dir, "config.json")) as f:
        return json.load(f)


def snapshot(run_dir):
    return {name: os.path.getmtime(os.path.join(run_dir, name)) for name in
            ("summary.json", "config.json")} | {"checkpoints": sorted(os.listdir(
                os.path.join(run_dir, "checkpoints")))}


@pytest.mark.timeout(120)
def test_a_rerun_of_a_resumed_runs_config_starts_a_new_run(finished_run, tmp_path):
    run_dir = copy_run(finished_run, tmp_path)
    # What a resumed run's config.json held before this was fixed: its own directory.
    config = saved(run_dir)
    config["run"]["resume"] = str(run_dir)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config, f)
    before = snapshot(run_dir)
    # It used to fail with --log-dir none ("--resume needs a run directory").
    quiet = parse_config(ApexJobConfig, ["--config", os.path.join(run_dir, "config.json"),
                                         "--log-dir", "none"])
    assert quiet.run.resume == "" and quiet.run.log_dir == "none"
    assert apex.main(["--config", os.path.join(run_dir, "config.json"), "--seed", "2",
                      "--max-env-steps", "300", "--log-dir", str(tmp_path / "runs")]) == 0
    assert snapshot(run_dir) == before  # untouched
    (new,) = set(os.listdir(tmp_path / "runs")) - {os.path.basename(run_dir)}
    again = saved(tmp_path / "runs" / new)
    assert again["run"]["seed"] == 2 and "resume" not in again["run"]
    assert again["learn"]["hidden"] == "32"  # the rest from the file


@pytest.mark.timeout(120)
def test_python_resume_goes_on_with_the_runs_saved_config(finished_run, tmp_path):
    run_dir = copy_run(finished_run, tmp_path)
    first = json.load(open(os.path.join(run_dir, "summary.json")))
    config = ApexJobConfig()  # the defaults, but for what this resume changes
    config.run.resume = str(run_dir)
    config.run.max_env_steps = 600
    more = apex.run(config, quiet=True)
    assert more["run_dir"] == str(run_dir) and more["resumed_from_step"] == first["env_steps"]
    assert more["env_steps"] >= 600
    now = saved(run_dir)
    assert now["run"]["max_env_steps"] == 600  # the change
    # The rest as the run was saved, not the defaults (300, runs, 3, 128,128).
    assert now["run"]["checkpoint_every"] == 60.0 and now["run"]["log_dir"] == saved(finished_run)[
        "run"]["log_dir"]
    assert now["run"]["keep_checkpoints"] == 2 and now["learn"]["hidden"] == "32"
    assert now["run"]["serial"] and now["num_actors"] == 2
    assert "resume" not in now["run"]  # a re-run of this file starts a new run


def test_a_resume_may_not_change_what_shapes_the_checkpoint(finished_run, tmp_path, capsys):
    run_dir = copy_run(finished_run, tmp_path)
    before = snapshot(run_dir)
    assert apex.main(["--resume", str(run_dir), "--hidden", "64"]) == 2  # before anything runs
    err = capsys.readouterr().err
    assert "--hidden cannot change when resuming" in err and "'32'" in err and str(run_dir) in err
    assert apex.main(["--resume", str(run_dir), "--critic-layer-norm"]) == 2  # the critics' shape
    assert "--critic-layer-norm cannot change when resuming" in capsys.readouterr().err
    config = ApexJobConfig()
    config.run.resume = str(run_dir)
    config.replay.replay_capacity = 5000
    with pytest.raises(ValueError, match="--replay-capacity cannot change when resuming"):
        apex.run(config, quiet=True)
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("argv, message", [
    (["--resume", "/no/such/run"], "--resume '/no/such/run': no such directory"),
    (["--resume", "{tmp}"], "is not a run directory (it has no config.json)"),
    (["--resume", "{run}", "--log-dir", "none"], "--log-dir none cannot go with it"),
    (["--resume", "{run}", "--config", "{run}/config.json"], "--config and --resume: give one"),
    (["--config", "{tmp}/bad.json"], "--config: '{tmp}/bad.json' is not JSON"),
    (["--config", "{tmp}/none.json"], "--config: cannot read '{tmp}/none.json'"),
])
def test_bad_resume_and_config_paths_name_their_flag(finished_run, tmp_path, capsys, argv, message):
    (tmp_path / "bad.json").write_text("{not json")
    run_dir = copy_run(finished_run, tmp_path)
    fill = {"tmp": str(tmp_path), "run": str(run_dir)}
    with pytest.raises(SystemExit) as exc:
        apex.main([arg.format(**fill) for arg in argv])
    assert exc.value.code == 2
    assert message.format(**fill) in capsys.readouterr().err


def test_python_resume_of_a_missing_directory_names_resume():
    config = ApexJobConfig()
    config.run.resume = "/no/such/run"
    with pytest.raises(ValueError, match="--resume '/no/such/run': no such directory"):
        apex.run(config, quiet=True)


@pytest.mark.parametrize("config_cls", [apex.ApexJobConfig, a3c.A3CJobConfig, maddpg.MADDPGJobConfig])
def test_every_field_fixed_on_resume_is_a_field_of_the_job(config_cls):
    names = {f.name for _, f, _ in leaves(config_cls())}
    assert config_cls.fixed_on_resume and set(config_cls.fixed_on_resume) <= names


def test_resuming_another_jobs_run_names_the_job_that_made_it(tmp_path):
    import json

    from experiments.runtime.cli import load_run_config

    (tmp_path / "config.json").write_text(json.dumps({"queue": {"capacity": 8}}))
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['queue'\]") as info:
        load_run_config(ApexJobConfig, str(tmp_path))  # no summary: no guess
    assert "made by" not in str(info.value)
    (tmp_path / "summary.json").write_text(json.dumps({"job": "impala"}))
    with pytest.raises(ValueError, match=f"made by experiments.impala: `python -m experiments.impala "
                                         f"--resume {tmp_path}` resumes it"):
        load_run_config(ApexJobConfig, str(tmp_path))
