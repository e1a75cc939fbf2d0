"""The jobs under torchrun: the same module joins the launcher's world; with
--max-restarts a killed rank's world restarts and resumes from the newest
checkpoint in the same run directory."""

import json
import os
import secrets
import subprocess
import sys

import pytest

from rlpar.distributed.ports import free_port

HERE = os.path.dirname(__file__)


def _torchrun(tmp_path, module, nproc, *args, env=None, max_restarts=0, timeout=200):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
           "--max-restarts", str(max_restarts), "-m", module, *args]
    # The run secret every rank of a torchrun world needs (docs/torchrun.md: the same on every node).
    # PYTHONFAULTHANDLER: a rank that aborts in C++ prints its Python threads' stacks (rank 1 of
    # the A3C world did, SIGABRT at exit, until liveness.Heartbeat.stop waited for its beat).
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.getcwd()]), PYTHONFAULTHANDLER="1",
                    RLPAR_RUN_SECRET=secrets.token_hex(16), **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.mark.timeout(240)
def test_a_killed_actors_world_stops_on_sigterm_and_resumes_from_its_final_checkpoint(tmp_path):
    """torchrun SIGTERMs the survivors of a dead rank: they must leave well inside its
    30 s grace (not be SIGKILLed), the learner writing its final checkpoint on the way
    out, and the restarted world resumes from that one. With the default
    --checkpoint-every (300 s) it is the only checkpoint the first world writes.
    Two ranks, the learner and its one actor: every rank of each world is a fresh
    interpreter (a torch import each), and the killed actor's world takes the same
    SIGTERM, final-checkpoint and resume path as with more actors (a surviving
    actor's stop on SIGTERM is test_stop_signals')."""
    runs = tmp_path / "runs"
    # RLPAR_LOST_S=3: the SIGTERMed survivors wait that long for the dead rank before
    # leaving without it (else 5 s, their stop's bound); three missed beats are still
    # beyond a loaded machine's scheduling delays of a live rank's beat.
    out = _torchrun(
        tmp_path, "experiments.apex", 2, "--env-id", "user_envs:KillOnceCounting-v0", "--num-envs", "2",
        "--learning-starts", "200", "--batch-size", "32", "--hidden", "32", "--max-env-steps", "2000",
        "--eval-every", "100000", "--log-dir", str(runs), "--status-every", "0",
        max_restarts=1, env={"KILL_MARKER": str(tmp_path / "killed"), "KILL_RANK": "1", "KILL_AFTER": "600",
                             "RLPAR_LOST_S": "3"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "killed").exists()
    assert "forcefully exiting" not in out.stderr, out.stderr[-3000:]  # torchrun's SIGKILL after its grace
    (run_dir,) = [d for d in os.listdir(runs) if not d.startswith(".")]
    summary = json.load(open(runs / run_dir / "summary.json"))
    assert summary["env_steps"] >= 2000 and summary["stop_reason"] == "env step budget"
    steps = sorted(int(name[len("ckpt-"):].split(".")[0])
                   for name in os.listdir(runs / run_dir / "checkpoints") if name.endswith(".pt"))
    # The first world's final checkpoint, then the second's: the kill came after 600
    # steps of one of rank 1's two envs, all but the last 20 ms reported (program.REPORT_EVERY_S),
    # so the first world had at least 800 steps.
    assert len(steps) == 2 and summary["resumed_from_step"] == steps[0] >= 800, (steps, summary)


@pytest.mark.timeout(120)
def test_a3c_under_torchrun_is_one_world_of_workers(tmp_path):
    out = _torchrun(tmp_path, "experiments.a3c", 2, "--num-envs", "2", "--n-steps", "4", "--max-env-steps",
                    "800", "--eval-every", "100000", "--log-dir", str(tmp_path / "runs"),
                    "--status-every", "0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("A3C on CartPole-v1") == 1  # one summary: rank 0's
    assert "actors             1 x 2 envs" in out.stdout  # rank 0 is the learner
