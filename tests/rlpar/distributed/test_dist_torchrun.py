"""The torchrun path: the same World.from_env entry runs under torchrun --standalone."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = Path(__file__).with_name("dist_torchrun_program.py")
RESTART_PROGRAM = Path(__file__).with_name("dist_torchrun_restart_program.py")


def torchrun(program: Path, *options: str, secret: str | None = None, ok: bool = True, nproc: int = 2) -> str:
    """Output of ``torchrun --standalone --nproc-per-node <nproc> [options] program``,
    which must succeed (fail if not ``ok``); the ranks get a fresh run secret, or
    ``secret`` ("" for none)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           *options, str(program)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path),
               RLPAR_RUN_SECRET=secrets.token_hex(16) if secret is None else secret)
    if not env["RLPAR_RUN_SECRET"]:
        del env["RLPAR_RUN_SECRET"]
    # Own session, so a timeout can take torchrun and its workers down together.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=100)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"torchrun did not finish:\n{output[-3000:]}")
    assert (proc.returncode == 0) == ok, output[-3000:]
    return output


@pytest.mark.timeout(120)
def test_a_program_runs_under_torchrun_and_its_restarted_world_does_not_meet_the_failed_attempts_keys():
    # One torchrun for both (each costs a torch import per process): the first attempt
    # runs the program as without restarts and reports; rank 1 then dies, and the agent
    # restarts both ranks, whose store still holds the first attempt's addresses.
    output = torchrun(RESTART_PROGRAM, "--max-restarts", "1")
    results = sorted(parse_results(output), key=lambda r: (r["restart"], r["name"]))
    assert [(r["name"], r["restart"]) for r in results] == [
        ("rank0", 0), ("rank1", 0), ("rank0", 1), ("rank1", 1)], output[-3000:]
    assert all(r["names"] == ["rank0", "rank1"] for r in results)
    assert [r["doubled"] for r in results] == [40, 42, 40, 42]
    assert {r["total"] for r in results} == {3.0}
    assert {r["learned"] for r in results} == {30.0}


@pytest.mark.timeout(60)
def test_a_world_under_torchrun_without_a_run_secret_is_refused_with_the_recipe(monkeypatch):
    monkeypatch.delenv("RLPAR_ALLOW_NO_SECRET", raising=False)
    # One rank: each refuses on its own, before it meets any other.
    output = torchrun(PROGRAM, "--max-restarts", "0", secret="", ok=False, nproc=1)
    assert "RLPAR_RUN_SECRET is not set" in output
    assert "export RLPAR_RUN_SECRET=$(python -c 'import secrets; print(secrets.token_hex(16))')" in output
    assert "RESULT" not in output.replace('print("RESULT "', "")


def parse_results(output: str) -> list[dict]:
    """Every ``RESULT {json}`` in ``output``: both ranks write to one pipe, so two
    results can share a line (seen in CI: ``RESULT {...}RESULT {...}``). A failed
    attempt's traceback quotes the program's ``print("RESULT " + ...)`` line: skipped."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(chunk)[0] for chunk in output.split("RESULT ")[1:] if chunk.startswith("{")]
