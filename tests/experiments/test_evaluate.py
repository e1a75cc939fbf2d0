"""experiments.evaluate plays any job's saved policy from its run directory."""

import json
import os
import shutil

import pytest
from jobs import a3c_config, apex_config
from torch import nn

from experiments import a3c, apex, maddpg
from experiments.evaluate import evaluate_run, main
from experiments.runtime import Parts


def _maddpg_run(argv):
    from experiments.runtime.cli import parse_config

    return maddpg.run(parse_config(maddpg.MADDPGJobConfig, argv), quiet=True)["run_dir"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    # Serial: what is played is a run directory, whichever way it was written.
    return {
        "apex": apex.run(apex_config(str(root), serial=True, max_env_steps=1000, eval_every=400),
                         quiet=True)["run_dir"],
        "a3c": a3c.run(a3c_config(str(root), serial=True), quiet=True)["run_dir"],
        "maddpg": _maddpg_run(["--env-id", "cooperative", "--max-env-steps", "400", "--num-envs", "2",
                                   "--env-workers", "0", "--learning-starts", "100", "--batch-size", "32",
                                   "--eval-every", "200", "--eval-episodes", "2", "--status-every", "0",
                                   "--serial", "--log-dir", str(root)]),
    }


@pytest.mark.parametrize("job", ["apex", "a3c", "maddpg"])
def test_a_runs_policy_is_played_greedily(runs, job, capsys):
    run_dir = runs[job]
    assert os.path.isfile(os.path.join(run_dir, "policy.pt"))
    result = evaluate_run(run_dir, episodes=4)
    assert result["job"] == job and result["episodes"] == 4
    assert result["min_return"] <= result["mean_return"] <= result["max_return"]
    if job != "maddpg":  # CartPole
        assert 1 <= result["min_return"] and result["max_return"] <= 500
    assert main([run_dir, "--episodes", "3", "--policy", "best"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(line)["policy"] == "best"


def test_the_best_policy_is_played_by_default_and_which_is_said(runs, tmp_path, capsys):
    run_dir = runs["apex"]
    assert main([run_dir, "--episodes", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1])["policy"] == "best" and "(the best evaluation's network, policy-best.pt" in lines[0]
    assert evaluate_run(run_dir, episodes=2)["returns"] == evaluate_run(run_dir, episodes=2, which="best")["returns"]
    assert main([run_dir, "--episodes", "2", "--policy", "final"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1])["policy"] == "final" and "(the final network, policy.pt" in lines[0]
    # No evaluation ran, no policy-best.pt: the final network, said so.
    shutil.copytree(run_dir, tmp_path / "run")
    os.remove(tmp_path / "run" / "policy-best.pt")
    assert evaluate_run(str(tmp_path / "run"), episodes=2)["policy"] == "final"


def test_the_same_seed_gives_the_same_returns(runs):
    assert evaluate_run(runs["apex"], episodes=3, seed=5) == evaluate_run(runs["apex"], episodes=3, seed=5)


def test_video_records_mp4_files(runs, tmp_path):
    pytest.importorskip("moviepy")
    result = evaluate_run(runs["a3c"], episodes=2, video=str(tmp_path / "video"), video_episodes=2)
    assert len(result["videos"]) == 2 and all(os.path.getsize(v) > 0 for v in result["videos"])


def test_a_directory_without_a_policy_is_an_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path)])
    assert exc.value.code == 2 and "has no policy.pt" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "nope")])
    assert exc.value.code == 2 and "nope': no such directory" in capsys.readouterr().err


class Linear(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.layer = nn.Linear(n_in, n_out)

    def forward(self, obs):
        return self.layer(obs.float())


def test_a_run_with_a_network_factory_is_evaluated_through_the_python_api(tmp_path):
    parts = Parts(network=lambda o, a: Linear(o.shape[0], a.n))
    run_dir = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=800, eval_every=10_000),
                       parts=parts, quiet=True)["run_dir"]
    with pytest.raises(ValueError, match=r"was run with Parts\(network=test_evaluate\..*<lambda>\); to evaluate "
                                         r"it, give the same parts: experiments.evaluate.evaluate_run"):
        evaluate_run(run_dir, episodes=2)
    assert evaluate_run(run_dir, episodes=2, parts=parts)["episodes"] == 2


def make_pendulum():
    import gymnasium as gym

    return gym.make("Pendulum-v1")


def test_a_run_on_a_users_env_is_evaluated_and_resumed_only_with_that_env(tmp_path, capsys):
    """The run's config.json holds --env-id's default, never played: from the command
    line the run is refused, naming the env it was made with, instead of failing on
    CartPole's action space."""
    parts = Parts(env=make_pendulum)
    run_dir = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=600, learning_starts=200,
                                   eval_every=10_000), parts=parts, quiet=True)["run_dir"]
    assert json.load(open(os.path.join(run_dir, "parts.json"))) == {"env": "test_evaluate.make_pendulum"}
    with pytest.raises(SystemExit) as exc:
        main([run_dir, "--episodes", "1"])
    assert exc.value.code == 2 and "was run with Parts(env=test_evaluate.make_pendulum)" in capsys.readouterr().err
    assert apex.main(["--resume", run_dir]) == 2
    assert "to resume it, give the same parts: experiments.apex.run(config" in capsys.readouterr().err
    assert evaluate_run(run_dir, episodes=1, parts=parts)["episodes"] == 1
    with pytest.warns(UserWarning, match=r"was run with Parts\(env=test_evaluate.make_pendulum\); you evaluate "
                                         r"it with test_evaluate.test_a_run_on_a_users_env.*<lambda>"):
        evaluate_run(run_dir, episodes=1, parts=Parts(env=lambda: make_pendulum()))
    config = apex_config(str(tmp_path), serial=True)
    config.run.resume, config.run.max_env_steps = run_dir, 800
    assert apex.run(config, parts=parts, quiet=True)["env_steps"] >= 800
