"""Issue 30.7: another process on the machine, without the run's secret, cannot read the
job's store, join its world or call its services, and the secret shows nowhere but in
the ranks' environment (not on a command line, not in the run directory or output)."""

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta

import pytest
import torch.distributed as dist

from rlpar.distributed.sealed import SealedStore

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return out


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        found += kids
        todo += kids
    return found


def _read(pid: int, what: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{what}", "rb") as f:
            return f.read()
    except OSError:  # exited meanwhile
        return b""


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports ``pid`` listens on: what ``ss -ltnp`` shows its own user."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in _read(pid, f"net/{table}").decode().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def _wait_for_status(proc):
    for _ in range(2000):
        line = proc.stdout.readline()
        if line.startswith("[apex] ") and "env_steps=" in line:
            return
        if not line and proc.poll() is not None:
            break
    raise AssertionError("the job printed no status line")


@pytest.mark.timeout(150)
def test_a_process_without_the_secret_cannot_read_join_or_call_a_running_job(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=os.pathsep.join([HERE, ROOT]))
    os.makedirs(env["TMPDIR"])
    job = subprocess.Popen(
        # One actor, whose envs sleep through each step: every rank of the world runs all
        # along the intruder's tries, at a fraction of a core (CartPole's kept both busy).
        [sys.executable, "-m", "experiments.apex", "--max-seconds", "120", "--status-every", "0.5",
         "--log-dir", str(tmp_path / "runs"), "--num-envs", "2", "--num-actors", "1", "--target-return", "1e9",
         "--env-id", "user_envs:SleepyCounting-v0", "--learning-starts", "100"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
        start_new_session=True)
    try:
        _wait_for_status(job)
        ranks = _descendants(job.pid)  # the launcher's helper, the ranks, their env workers
        # The ranks' environment as /proc shows it (the helper's: ranks are forked from it).
        # The same user can read the secret there: the limit docs/security.md states.
        environ = dict(v.split(b"=", 1) for v in _read(ranks[-1], "environ").split(b"\0") if b"=" in v)
        secret = environ[b"RLPAR_RUN_SECRET"].decode()
        store_port = int(environ[b"MASTER_PORT"])
        for pid in [job.pid, *ranks]:
            assert secret.encode() not in _read(pid, "cmdline")
        # With the secret, the job's entries are where the World put them.
        client = dist.TCPStore("127.0.0.1", store_port, 1, False, timedelta(seconds=5))
        friend = dist.PrefixStore("rlpar/", SealedStore(client, secret))
        assert friend.get("world/name/0") == b"rank0"
        assert friend.get("svc/apex/s/coord/eval") == b"rank0"
        # The learner (rank 0, which hosts the store) listens on 17 ports (TensorPipe's
        # and its channel's lanes); a stranger would try each, we take the right one.
        (learner,) = [p for p in ranks if store_port in _listening_ports(p)]
        address = dist.PrefixStore("rpc_prefix_0", SealedStore(client, secret)).get("addrs/rank0")
        rpc_port = int(address.decode().rsplit(":", 1)[1])
        assert rpc_port in _listening_ports(learner)

        intruder = subprocess.run(
            [sys.executable, os.path.join(ROOT, "tests", "experiments", "intruder.py"),
             str(store_port), str(rpc_port)],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
            env={k: v for k, v in env.items() if k != "RLPAR_RUN_SECRET"})
        assert intruder.returncode == 0, intruder.stderr[-3000:]
        attempts = json.loads(intruder.stdout.strip().splitlines()[-1])
        job.send_signal(signal.SIGTERM)
        out, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()

    assert attempts["found"] == [], attempts
    assert attempts["join"].startswith("failed"), attempts
    for what in ("fake_eval", "run_code"):
        assert attempts[what].startswith("failed") and "not signed with this run's secret" in attempts[what], attempts
    assert job.returncode == 0, err[-3000:]
    (run_dir,) = os.listdir(tmp_path / "runs")
    summary = json.load(open(tmp_path / "runs" / run_dir / "summary.json"))
    assert summary["stop_reason"] == "terminated" and not summary["solved"], summary
    assert "SOLVED" not in out
    for text in (out, err):
        assert secret not in text and secret.upper() not in text
    for folder, _, files in os.walk(tmp_path / "runs"):
        for name in files:
            data = open(os.path.join(folder, name), "rb").read()
            assert secret.encode() not in data and bytes.fromhex(secret) not in data, name
