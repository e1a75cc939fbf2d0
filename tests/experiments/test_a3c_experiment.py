import copy
import functools

import pytest
import torch

from experiments.a3c import A3CRunConfig, format_summary, run
from experiments.a3c_roles import WorkerShell, role_of
from experiments.cli import parse_config


# TensorPipe (torch 2.13) aborted a rank once in ~10 full-suite runs with std::bad_alloc
# under heavy load; rerun once on that native abort only, never on a failed assertion.
@pytest.mark.flaky(reruns=1, only_rerun=["killed by signal SIGABRT"])
@pytest.mark.timeout(150)
def test_three_process_run_advances_versions_and_changes_parameters():
    # rank 0 only serves; ranks 1 and 2 are workers: 2 envs x 4 steps = 8 env steps per update.
    config = A3CRunConfig(num_workers=2, server_acts=False, envs_per_worker=2, n_steps=4,
                          max_env_steps=2400, eval_every=1200, eval_episodes=2, log_dir=None,
                          report_every=0.05, max_seconds=100.0, rpc_timeout=30.0)
    assert config.world_size() == 3
    summary = run(config, quiet=True)
    assert summary["stop_reason"] == "env step budget"
    assert summary["num_workers"] == summary["workers_finished"] == 2
    # Every gradient pushed was applied (no staleness bound) and made a new version.
    assert summary["updates"] == summary["received"] == summary["version"] >= 250
    assert summary["dropped"] == 0
    assert summary["env_steps"] >= 2400 and summary["episodes"] > 0
    assert summary["param_change"] > 0
    assert summary["evaluations"] >= 1
    text = format_summary(summary)
    assert "A3C on CartPole-v1" in text and "env step budget" in text


def test_role_rule():
    acting, serving = A3CRunConfig(), A3CRunConfig(server_acts=False)
    assert role_of(0, 3, acting) == ("server+worker", 0)
    assert role_of(2, 3, acting) == ("worker", 2)
    assert role_of(0, 3, serving) == ("server", -1)
    assert role_of(1, 3, serving) == ("worker", 0)
    assert serving.workers_for(3) == 2 and acting.workers_for(3) == 3
    with pytest.raises(ValueError, match="outside"):
        role_of(3, 3, acting)


def test_gaussian_worker_runs_on_pendulum_against_a_local_server():
    from algorithms.a2c import make_optimizer
    from rlpar.servers import GradServer

    config = A3CRunConfig(env_id="Pendulum-v1", envs_per_worker=2, n_steps=8, reward_scale=0.1,
                          device="cpu", log_dir=None)
    config.validate()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        probe = WorkerShell(config, _NoSink(), index=0, device="cpu")
        server = GradServer(model=copy.deepcopy(probe.worker.agent.model),
                            optimizer_factory=functools.partial(make_optimizer,
                                                                config=config.a2c_config()))
        probe.close()
        shell = WorkerShell(config, server, index=0, device="cpu")
        for _ in range(4):
            shell.step()
        steps, returns, sums, count = shell.take_report()
        shell.close()
    finally:
        torch.set_num_threads(threads)
    assert steps == 4 * 2 * 8 and count == 4
    assert server.metrics()["version"] == 4
    assert all(v == v for v in sums.values())  # finite, no NaN
    assert shell.worker.agent.model.log_std is not None


class _NoSink:
    def pull(self, newer_than=-1):
        return None

    def push_gradients(self, grads, version):
        raise AssertionError("not used")


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--n-steps", "0"], "--n-steps"),
        (["--envs-per-worker", "0"], "--envs-per-worker"),
        (["--gamma", "1.5"], "--gamma"),
        (["--lr", "-1"], "--lr"),
        (["--entropy-coef", "-0.1"], "--entropy-coef"),
        (["--hidden", "64,x"], "--hidden"),
        (["--env-id", "NoSuchEnv-v9"], "--env-id"),
        (["--env-id", "Blackjack-v1"], "--env-id"),  # Tuple observations
        (["--optimizer", "sgd"], "--optimizer"),
        (["--max-seconds", "0"], "--max-seconds"),
        (["--max-staleness", "-1"], "--max-staleness"),
        (["--device", "tpu"], "--device"),
    ],
)
def test_invalid_flags_exit_2_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(A3CRunConfig, argv)
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_one_worker_runs_in_process_without_spawning():
    import multiprocessing

    config = A3CRunConfig(num_workers=1, envs_per_worker=2, n_steps=4, max_env_steps=800,
                          eval_every=300, eval_episodes=2, log_dir=None, max_seconds=50.0)
    threads = torch.get_num_threads()
    summary = run(config, quiet=True)
    assert multiprocessing.active_children() == []
    assert torch.get_num_threads() == threads  # restored after the run
    assert summary["stop_reason"] == "env step budget" and summary["num_workers"] == 1
    assert summary["updates"] == summary["version"] >= 100 and summary["mean_staleness"] == 0.0
    assert summary["evaluations"] >= 2 and summary["param_change"] > 0
