"""A job launched by srun without torchrun, one task per process: every task's
SLURM_* variables make it a rank of one world (simulated here on loopback)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import pytest

from experiments.runtime.job import launcher
from rlpar.distributed.ports import free_port

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
LAUNCHERS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.mark.timeout(150)
def test_two_srun_tasks_form_one_apex_world(tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHERS and not k.startswith(("SLURM_", "TORCHELASTIC_"))}
    # What srun gives each task; the store's host is the step's first node (localhost
    # here), its port MASTER_PORT (the default from SLURM_JOB_ID is not a free port).
    base.update(SLURM_NTASKS="2", SLURM_STEP_ID="0", SLURM_JOB_ID="777", SLURM_NODEID="0",
                SLURM_JOB_NODELIST="localhost,node[2-3]", SLURM_STEP_TASKS_PER_NODE="2",
                MASTER_PORT=str(free_port()), RLPAR_RUN_SECRET=secrets.token_hex(16), OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([HERE, ROOT]))
    args = ["--num-envs", "2", "--learning-starts", "200", "--batch-size", "32", "--hidden", "32",
            "--eval-every", "100000", "--status-every", "0", "--max-env-steps", "500", "--max-seconds", "60",
            "--rpc-timeout", "30", "--log-dir", str(tmp_path / "runs")]
    procs = [subprocess.Popen([sys.executable, "-m", "experiments.apex", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=dict(base, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank)))
             for rank in range(2)]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outs)
    # One world: rank 0 is its learner, rank 1 its actor; only the learner has a summary.
    assert "Ape-X DQN on CartPole-v1" in outs[0] and "actors             1 " in outs[0], outs[0][-2000:]
    assert "Ape-X DQN on" not in outs[1]
    (run,) = os.listdir(tmp_path / "runs")
    assert json.loads((tmp_path / "runs" / run / "summary.json").read_text())["env_steps"] >= 500


def test_a_step_of_one_task_runs_its_own_local_world_and_a_bad_variable_is_named(monkeypatch):
    for key in LAUNCHERS:
        monkeypatch.delenv(key, raising=False)
    task = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_ID": "3", "SLURM_JOB_ID": "9",
            "SLURM_JOB_NODELIST": "n1"}
    for key, value in task.items():
        monkeypatch.setenv(key, value)
    assert launcher() is None
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert (launcher().launcher, launcher().world_size) == ("srun", 4)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-")
    with pytest.raises(ValueError, match="SLURM_JOB_NODELIST"):
        launcher()


def test_listen_address_auto_is_the_address_toward_the_store(monkeypatch):
    from experiments.runtime.config import RunConfig
    from rlpar.distributed.netif import address_toward

    for key in LAUNCHERS:
        monkeypatch.delenv(key, raising=False)
    assert RunConfig(listen_address="auto").resolved_listen_address() == "127.0.0.1"  # no launcher
    monkeypatch.setenv("RLPAR_LISTEN_ADDRESS", "auto")
    for key, value in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    assert RunConfig().resolved_listen_address() == "127.0.0.1"
    RunConfig().validate()
    assert address_toward("127.0.0.1") == "127.0.0.1"
