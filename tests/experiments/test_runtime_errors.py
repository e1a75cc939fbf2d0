"""Bad input to any job is a one-line error naming the flag, exit 2, before any
process starts."""

import pytest

from experiments import a3c, apex


@pytest.mark.parametrize("main", [apex.main, a3c.main], ids=["apex", "a3c"])
@pytest.mark.parametrize("argv, message", [
    (["--device", "cuda"], "--device cuda: this machine has no CUDA device"),
    (["--device", "tpu"], "--device must be auto, cpu, cuda or cuda:N"),
    (["--env-id", "NoSuchEnv-v0"], "--env-id 'NoSuchEnv-v0'"),
    (["--env-id", "no_such_module_xyz:Foo-v0"], "no_such_module_xyz"),
    (["--target-return", "nan"], "--target-return must be a finite number"),
    (["--max-seconds", "nan"], "--max-seconds must be a finite number"),
    (["--listen-address", "10.254.253.252"], "--listen-address '10.254.253.252' is not an address of this machine"),
    (["--listen-address", "not-an-address"], "--listen-address 'not-an-address' is not an IPv4 address"),
    (["--num-envs", "0"], "--num-envs must be >= 1"),
    (["--eval-episodes", "0"], "--eval-episodes must be >= 1"),
])
def test_bad_input_exits_2_naming_the_flag(main, argv, message, capsys, monkeypatch):
    monkeypatch.setattr("experiments.runtime.rundir.RunDir.create", _no_run_dir)
    if "--device" in argv:
        import torch

        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _exit_code(main, argv) == 2
    err = capsys.readouterr().err
    assert message in err.strip().splitlines()[-1], err  # the error is one line


def _no_run_dir(*args, **kwargs):
    raise AssertionError("a run directory was created for a bad config")


@pytest.mark.parametrize("argv, message", [
    (["--priority-alpha", "nan"], "--priority-alpha must be a finite number"),
    (["--env-id", "Pendulum-v1", "--algorithm", "dqn"], "--algorithm dqn needs a Discrete action space"),
    (["--env-id", "CartPole-v1", "--algorithm", "td3"], "--algorithm td3 needs a Box action space"),
    (["--batch-size", "512", "--replay-capacity", "100"], "exceeds --replay-capacity"),
    (["--algorithm", "r2d2", "--batch-size", "16", "--replay-capacity", "100"],
     "--batch-size 16 exceeds --replay-capacity 100 / --period 8 = 12"),
    (["--serial", "--replay-placement", "actors"], "--serial"),
])
def test_apex_specific_errors(argv, message, capsys):
    code = _exit_code(apex.main, argv)
    assert code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--env-id", "CarRacing-v3"], "--env-id 'CarRacing-v3'"),  # needs box2d: not installed
    (["--optimizer", "sgd"], "invalid choice"),
    (["--max-staleness", "-1"], "--max-staleness must be >= 0"),
    # Retired with the fold into the actor-learner program (issue 47): each names its replacement.
    (["--server-acts"], "--server-acts is retired: rank 0 is the learner"),
    (["--round-timeout", "5"], "--round-timeout is retired: synchronous A2C is python -m experiments.a2c"),
    (["--report-every", "0.1"], "--report-every is retired"),
])
def test_a3c_specific_errors(argv, message, capsys):
    code = _exit_code(a3c.main, argv)
    assert code == 2 and message in capsys.readouterr().err


def test_a_job_entry_refuses_retired_flags_and_forwards_moved_ones(capsys, monkeypatch):
    """``JobEntry``'s ``retired`` and ``forward`` (A3C's three retired flags and ``--sync``),
    for any job: a retired flag in either form exits 2 naming its replacement; a forwarded
    one runs the other job's ``main`` with the other flags."""
    import sys
    import types

    from experiments.runtime.entry import JobEntry

    other = types.ModuleType("other_job")
    other.main = lambda argv: 40 + len(argv)
    monkeypatch.setitem(sys.modules, "other_job", other)
    entry = JobEntry(title="X", config_cls=object, roles="unused", describe=list, retired={"--old": "use --new"},
                     forward={"--elsewhere": ("other_job", "the other job")})
    assert entry.main(["--seed", "1", "--old=3"]) == 2 and "--old is retired: use --new" in capsys.readouterr().err
    assert entry.main(["--elsewhere", "--seed", "1"]) == 42
    assert "--elsewhere: running python -m other_job (the other job)" in capsys.readouterr().err


def _exit_code(main, argv):
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_the_listen_address_comes_from_the_environment(monkeypatch, capsys):
    from experiments.apex import ApexJobConfig

    monkeypatch.setenv("RLPAR_LISTEN_ADDRESS", "127.0.0.1")
    assert ApexJobConfig().run.resolved_listen_address() == "127.0.0.1"
    monkeypatch.setenv("RLPAR_LISTEN_ADDRESS", "10.254.253.252")
    assert _exit_code(apex.main, ["--max-env-steps", "10"]) == 2
    assert "taken from $RLPAR_LISTEN_ADDRESS" in capsys.readouterr().err
    # The flag wins over the environment.
    config = ApexJobConfig()
    config.run.listen_address = "127.0.0.1"
    assert config.run.resolved_listen_address() == "127.0.0.1"


@pytest.mark.parametrize("main", [apex.main, a3c.main], ids=["apex", "a3c"])
@pytest.mark.parametrize("secret, message", [
    (None, "RLPAR_RUN_SECRET is not set"),
    ("0123", "RLPAR_RUN_SECRET must be 32 to 128 hex digits"),
])
def test_a_launcher_world_without_a_good_run_secret_exits_2_before_its_run_directory(
        main, secret, message, capsys, monkeypatch):
    monkeypatch.setattr("experiments.runtime.rundir.RunDir.create", _no_run_dir)
    monkeypatch.setattr("experiments.runtime.rundir.RunDir.for_elastic", _no_run_dir)
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)  # torchrun's environment, whole
    monkeypatch.delenv("RLPAR_ALLOW_NO_SECRET", raising=False)
    if secret is None:
        monkeypatch.delenv("RLPAR_RUN_SECRET", raising=False)
    else:
        monkeypatch.setenv("RLPAR_RUN_SECRET", secret)
    assert _exit_code(main, ["--max-env-steps", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in err and "export RLPAR_RUN_SECRET=$(python -c" in err


def test_a_checkpoint_the_job_cannot_continue_is_a_one_line_error_not_a_traceback(capsys, monkeypatch):
    # e.g. an A3C run saved before A3C ran on the actor-learner program (its header has
    # no data path): the loader's CheckpointMismatch, raised once the run starts.
    from rlpar.errors import CheckpointMismatch

    def execute(job, ctx):
        raise CheckpointMismatch("run/checkpoints/ckpt-1.pt", "meta['data']", "gradients", "<missing>")

    monkeypatch.setattr("experiments.runtime.job.execute", execute)
    monkeypatch.setattr("experiments.runtime.job.prepare", lambda job, config, parts=None: None)
    assert _exit_code(a3c.main, ["--max-env-steps", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot resume" in err[0] and "meta['data'] is '<missing>'" in err[0], err
