"""RPC-hosted servers across ranks: compare-and-set winners, empty pulls, exact
gradient results, error pass-through, pickled accessors and a dead host."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time

import pytest
import server_programs as programs

from rlpar.distributed import free_port, launch
from tests.procs import is_dead, wait_until_dead

CAS_ROUNDS = 30
PUSHES = 4


@pytest.fixture(scope="module")
def results():
    return launch(
        programs.servers_everywhere,
        nprocs=3,
        args=(CAS_ROUNDS, PUSHES),
        timeout=110,
        preload=("torch", "rlpar.distributed", "rlpar.servers"),
    )


@pytest.mark.timeout(120)
def test_compare_and_set_has_exactly_one_winner_per_version(results):
    wins = [v for r in results for v in r["wins"]]
    assert sorted(wins) == list(range(CAS_ROUNDS))  # no version won twice, none skipped
    owner = {v: rank for rank, r in enumerate(results) for v in r["wins"]}
    assert results[0]["kv_values"] == [(owner[v], v) for v in range(CAS_ROUNDS)]


def test_pull_with_nothing_new_transfers_nothing(results):
    r = results[1]
    assert r["first_pull"] == (sum(range(1000)), 0)
    assert r["empty_pulls"] == [None] * 20
    assert r["kv_pulls"][0] is None and r["kv_pulls"][1][1] == CAS_ROUNDS - 1
    # Host counters: 21 pulls, one of them carried the 4000-byte payload.
    assert r["stats"] == {"pulls": 21, "transfers": 1, "bytes_out": 4000, "version": 0}


def test_gradients_from_two_workers_give_exact_parameters(results):
    w, version, metrics = results[0]["async"]
    total = [-(1.0 + 2.0) * PUSHES, -2.0 * PUSHES, 0.0]  # SGD lr=1: minus the sum
    assert (w, version) == (total, 2 * PUSHES)
    assert metrics["applied"] == 2 * PUSHES and metrics["dropped"] == 0
    w, version, metrics = results[0]["reduce"]
    assert (w, version) == ([x / 2 for x in total], PUSHES)  # mean of pairs
    assert metrics["steps"] == PUSHES and metrics["pending"] == 0


def test_errors_and_staleness_behave_as_locally(results):
    r = results[1]
    assert r["bad_newer_than"][0] == "TypeError"
    assert r["old_version"][0] == "ValueError" and "not newer" in r["old_version"][1]
    assert r["pushed"] == 7
    assert r["conflict"][0] == "VersionConflict"
    assert r["stale"] == [True, False, False]
    assert r["stale_metrics"]["dropped"] == 2 and r["stale_metrics"]["applied"] == 1
    assert r["bad_grad"][0] == "ValueError"
    assert results[0]["host_pull"] == ([1.0, 1.0], 7)
    assert results[0]["pickled"] == 7


@pytest.mark.timeout(90)
def test_dead_host_gives_peer_unavailable_within_timeout(tmp_path):
    timeout, port, secret = 3.0, free_port(), secrets.token_hex(16)
    here = os.path.dirname(os.path.abspath(__file__))
    # One interpreter imports torch once and forks the host (which dies with it, and
    # writes its pid for the signals below); the process itself goes on as the client.
    code = ("import os, sys, server_programs as p\n"
            "from rlpar.distributed._zygote import _die_with_parent\n"
            "role = 'client' if os.fork() else 'host'\n"
            "if role == 'host':\n"
            "    _die_with_parent()\n"
            "    open(os.path.join(sys.argv[2], 'host_pid'), 'w').write(str(os.getpid()))\n"
            "p.dead_host(role, int(sys.argv[1]), sys.argv[2], float(sys.argv[3]))")
    client = subprocess.Popen([sys.executable, "-c", code, str(port), str(tmp_path), str(timeout)], cwd=here,
                              env={**os.environ, "PYTHONPATH": here, "RLPAR_RUN_SECRET": secret})
    host = None
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f).exists() for f in ("host_ready", "client_ready")):
            assert time.monotonic() < deadline, "ranks did not start"
            assert client.poll() is None, f"client exited early with {client.returncode}"
            if host is None and (tmp_path / "host_ready").exists():
                host = int((tmp_path / "host_pid").read_text())
            assert host is None or not is_dead(host), "host exited early"
            time.sleep(0.05)
        host = int((tmp_path / "host_pid").read_text())
        os.kill(host, signal.SIGSTOP)
        (tmp_path / "host_stopped").touch()
        _wait_for(tmp_path / "client_stopped", client, timeout + 20)
        os.kill(host, signal.SIGKILL)
        assert not wait_until_dead([host])
        (tmp_path / "host_killed").touch()
        assert client.wait(timeout=timeout + 20) == 0
        result = json.loads((tmp_path / "result.json").read_text())
    finally:
        if client.poll() is None:
            client.kill()  # the host dies with it
        client.wait()
        if host is not None:
            wait_until_dead([host])
    assert result["first"] == 0
    for phase in ("stopped", "killed"):
        outcome, elapsed = result[phase]["outcome"], result[phase]["elapsed"]
        assert outcome.startswith("PeerUnavailable"), outcome
        assert elapsed < timeout + 5
    # A silent host is only noticed by the timeout; a dead one at once.
    assert result["stopped"]["elapsed"] >= timeout * 0.9


def _wait_for(path, proc, seconds):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, f"client exited early with {proc.returncode}"
        assert time.monotonic() < deadline, f"{path.name} did not appear"
        time.sleep(0.02)


def test_sharded_gradient_server_splits_and_merges_exactly(results):
    assert results[1]["big_accepted"] == [True] * PUSHES == results[2]["big_accepted"]
    state, version, metrics = results[0]["big"]
    n = 2 * PUSHES  # two workers; SGD lr=1 gives minus the sum of the gradients
    assert version == n
    assert state == {"a": [-1.0 * n] * 4, "b": [-2.0 * n] * 3, "c": [-3.0 * n] * 2, "count": 5}
    assert [m["version"] for m in metrics["shards"]] == [n, n]
    assert metrics["applied"] == n
    assert results[0]["big_empty"] is None
    assert results[2]["big_bad_key"][0] == "ValueError"


def test_non_finite_gradients_are_refused_by_remote_and_sharded_servers(results):
    r = results[2]
    assert r["nan_push"] is False
    assert r["nan_raised"][0] == "NonFiniteGradients" and "2 gradient pushes" in r["nan_raised"][1]
    assert r["nan_then_good"] is True and r["nan_state"] == [-1.0, -1.0, -1.0]
    m = r["nan_metrics"]
    assert (m["received"], m["applied"], m["rejected_non_finite"], m["version"]) == (3, 1, 2, 1)
    # Every shard rejects together (only shard 1's part held the inf): still in lockstep.
    assert r["bignan_push"] is False and r["bignan_raised"][0] == "NonFiniteGradients"
    assert r["bignan_then_good"] is True
    assert r["bignan_metrics"] == (2, [1, 1])
