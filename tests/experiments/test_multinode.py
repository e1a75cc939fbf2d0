"""The jobs under torchrun across two "machines" (network namespaces joined by a veth
pair, each with its own address; tests/experiments/netns.py): a world that leaves
loopback, a link cut for 4 s, a node lost whole mid-run and during start-up.

Skipped, saying why, without root or iproute2. Each test starts six Python processes
on two nodes (an agent and its workers), hence few of them and short budgets: one job
per rendezvous, PPO's c10d and Ape-X's static one (IMPALA, A3C and MADDPG ride the same
launcher and RPC paths, tested on loopback); the faults are run on Ape-X only."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time

import pytest
from netns import TwoNodes, unavailable, wait_for_text
from user_envs import SLEEPY_ID

from rlpar.distributed.liveness import LOST_S
from rlpar.distributed.ports import free_port

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
# The link-cut test's RLPAR_LOST_S (see there).
CUT_LOST_S = 6.0
APEX = ["--num-envs", "2", "--learning-starts", "200", "--batch-size", "32", "--hidden", "32",
        "--eval-every", "100000", "--status-every", "1", "--max-env-steps", "1000000", "--rpc-timeout", "30"]


@pytest.fixture
def nodes():
    why = unavailable()
    if why:
        pytest.skip(why)
    two = TwoNodes()
    try:
        try:
            two.create()
        except Exception as exc:  # e.g. a container without CAP_NET_ADMIN
            pytest.skip(f"cannot create network namespaces here: {exc}")
        yield two
    finally:
        two.destroy()


def _start(nodes, tmp_path, module, args, *, nproc, static=True, rpc_timeout=None, listen=None, lost_s=None):
    """torchrun on both nodes (node 0 hosts the rendezvous); the two processes and logs."""
    port = free_port()  # every port is free in a fresh namespace; any number will do
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, ROOT]), PYTHONUNBUFFERED="1",
               RLPAR_RUN_SECRET=secrets.token_hex(16), OMP_NUM_THREADS="1")
    if lost_s is not None:
        env["RLPAR_LOST_S"] = str(lost_s)
    procs, logs = [], []
    for node in (0, 1):
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", str(nproc)]
        if static:  # node 0 holds ranks 0..nproc-1: the learner
            argv += ["--node-rank", str(node), "--master-addr", nodes.address[0], "--master-port", str(port)]
        else:
            # The nodes share a hostname ("localhost" here), so torch needs telling what
            # it would find on a cluster: which node hosts the rendezvous (it matches the
            # endpoint against the hostname's addresses only) and each node's address
            # (--local-addr: the workers' MASTER_ADDR when the node holds rank 0).
            argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{nodes.address[0]}:{port}",
                     "--rdzv-id", "multinode", "--rdzv-conf", f"is_host={int(node == 0)}",
                     "--local-addr", nodes.address[node]]
        argv += ["-m", module, "--listen-address", listen or nodes.address[node], "--log-dir", str(tmp_path / "runs"),
                 *args]
        if rpc_timeout is not None:
            argv += ["--rpc-timeout", str(rpc_timeout)]
        logs.append(str(tmp_path / f"node{node}.log"))
        procs.append(nodes.start(node, argv, env=env, log=logs[-1]))
    return procs, logs


def _wait(procs, timeout):
    deadline = time.monotonic() + timeout
    return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]


def _read(path):
    with open(path, errors="replace") as f:
        return f.read()


def _run_dir(tmp_path):
    (run,) = [d for d in os.listdir(tmp_path / "runs") if not d.startswith(".")]
    return tmp_path / "runs" / run


@pytest.mark.timeout(150)
def test_ppo_runs_across_two_nodes_after_a_c10d_rendezvous(nodes, tmp_path):
    procs, logs = _start(nodes, tmp_path, "experiments.ppo",
                         ["--num-envs", "2", "--n-steps", "16", "--minibatches", "2", "--epochs", "2",
                          "--hidden", "16", "--eval-every", "100000", "--status-every", "0",
                          "--max-env-steps", "400", "--max-seconds", "60"], nproc=1, static=False,
                         listen="auto")  # each node's own address: the one it reaches MASTER_ADDR from
    assert _wait(procs, 120) == [0, 0], _read(logs[0])[-3000:] + _read(logs[1])[-3000:]
    both = _read(logs[0]) + _read(logs[1])
    assert "PPO" in both and "members            2 x 2 envs" in both, both[-3000:]
    for node in (0, 1):
        assert f"listens on {nodes.address[node]}" in _read(logs[node])


@pytest.mark.timeout(200)
def test_apex_rides_out_a_link_cut_then_names_a_node_lost_whole_and_ends_with_its_summary(nodes, tmp_path):
    # One run for both faults (each run costs six interpreters' start-up). 16 s: node 1,
    # killed at about t=6, has been silent for 10 s when the budget ends, so the
    # learner does not wait for its actors' final reports (coordinator.silent_after).
    # Lost after 6 s without a beat, not 10: the survivors' end waits that long for the
    # lost node. Still six missed beats (BEAT_S=1), far beyond a loaded machine's
    # scheduling delays of a beat (tests/rlpar/distributed/test_dist_liveness.py uses 3).
    # Envs that sleep through each step: the world runs its 16 s (the learner training,
    # the actors sending, their reports and beats) at a fraction of a core, not every core.
    procs, logs = _start(nodes, tmp_path, "experiments.apex",
                         [*APEX, "--max-seconds", "16", "--env-id", f"user_envs:{SLEEPY_ID}"], nproc=2,
                         lost_s=CUT_LOST_S)
    wait_for_text(logs[0], "[apex] t=", timeout=90, procs=procs)  # the world runs
    nodes.link(up=False)
    # 4 s: four missed beats and every connection's TCP retransmission backing off
    # (0.2, 0.4, 0.8, 1.6 s, the next only after the link is back), so the world rides
    # out a real outage; shorter than what it must not trigger: a lost rank (CUT_LOST_S),
    # a silent actor (10 s) and an RPC timeout (30 s).
    time.sleep(4.0)
    nodes.link(up=True)
    time.sleep(1.0)
    # The cut killed nothing: both nodes' agents and workers run on, nobody failed.
    assert [p.poll() for p in procs] == [None, None] and len(nodes.pids(1)) >= 3
    assert "Traceback" not in _read(logs[0]) + _read(logs[1]), _read(logs[0])[-3000:] + _read(logs[1])[-3000:]
    nodes.kill(1)
    # The learner's work ends when it writes summary.json; from then on it and the actor
    # beside it must not wait for the lost node beyond LOST_S (before: 60 s in torch's
    # graceful shutdown, then 300 s in torchrun's exit barrier).
    start = time.monotonic()
    while not list((tmp_path / "runs").glob("*/summary.json")):
        assert procs[0].poll() is None and time.monotonic() - start < 90, _read(logs[0])[-3000:]
        time.sleep(0.1)
    ended = time.monotonic()
    code = _wait(procs[:1], 60)[0]
    left_after = time.monotonic() - ended
    text = _read(logs[0])
    assert code != 0, text[-3000:]  # so that torchrun and Slurm end the job
    assert "ranks [2, 3] (rank2, rank3) were lost" in text, text[-3000:]
    assert f"Ape-X DQN on user_envs:{SLEEPY_ID}" in text and "time budget" in text
    assert left_after < CUT_LOST_S + 20, (left_after, text[-3000:])
    run = _run_dir(tmp_path)
    assert json.loads((run / "summary.json").read_text())["lost_ranks"] == [2, 3]
    assert list((run / "checkpoints").glob("ckpt-*.pt"))  # the final checkpoint
    print(f"left {left_after:.1f} s after the learner's summary.json")


@pytest.mark.timeout(180)
def test_a_node_lost_during_start_up_is_named_within_the_rpc_timeout(nodes, tmp_path):
    procs, logs = _start(nodes, tmp_path, "experiments.apex", [*APEX, "--max-seconds", "30"], nproc=2,
                         rpc_timeout=8)
    # Node 1's agent has started its two workers: they import, then join the world.
    start = time.monotonic()
    while len(nodes.pids(1)) < 3:
        assert time.monotonic() - start < 60 and procs[1].poll() is None, _read(logs[1])[-3000:]
        time.sleep(0.05)
    nodes.kill(1)
    killed = time.monotonic()
    code = _wait(procs[:1], 90)[0]
    took = time.monotonic() - killed
    text = _read(logs[0])
    assert code != 0, text[-3000:]
    # Named at the check-in ("did not join the world"), or, if they had reached the
    # store, as lost by their heartbeats during RPC's start-up.
    assert "[2, 3]" in text and ("did not join the world within 8 s" in text or "lost" in text), text[-3000:]
    assert took < 8 + LOST_S + 20, (took, text[-3000:])
