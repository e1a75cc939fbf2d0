"""Failure paths of World/RpcGroup: bad arguments, a dead peer, an absent World."""

from __future__ import annotations

import pickle
import socket

import dist_programs as programs
import pytest
from unsupervised import run_ranks

from rlpar.distributed import World, current_world, launch
from rlpar.distributed.netif import _ipv4_of, interface_for_address


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rank": 0, "world_size": 0}, "world_size"),
        ({"rank": 2, "world_size": 2}, "rank"),
        ({"rank": -1, "world_size": 2}, "rank"),
        ({"rank": 0, "world_size": 1, "rpc_timeout": -1.0}, "rpc_timeout"),
        ({"rank": 0, "world_size": 1, "rpc_timeout": 0}, "rpc_timeout"),
        ({"rank": 0, "world_size": 1, "master_port": 0}, "master_port"),
        ({"rank": 0, "world_size": 1, "num_worker_threads": 0}, "num_worker_threads"),
        ({"rank": 0, "world_size": 1, "process_group_backend": "mpi"}, "process_group_backend"),
        ({"rank": 0, "world_size": 1, "name": "a/b"}, "name"),
    ],
)
def test_invalid_world_arguments_fail_before_anything_starts(kwargs, match):
    kwargs.setdefault("master_port", 29500)
    with pytest.raises(ValueError, match=match):
        World(**kwargs)
    with pytest.raises(RuntimeError, match="no rlpar World"):
        current_world()


def test_nccl_without_cuda_is_refused_before_anything_starts():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available: nccl is a valid choice here")
    with pytest.raises(ValueError, match="nccl"):
        World(rank=0, world_size=1, master_port=29500, process_group_backend="nccl")


def test_wrongly_typed_world_arguments_are_type_errors():
    with pytest.raises(TypeError, match="world_size"):
        World(rank=0, world_size=2.0, master_port=29500)
    with pytest.raises(TypeError, match="rpc_timeout"):
        World(rank=0, world_size=1, master_port=29500, rpc_timeout="1")


def test_from_env_without_launcher_environment_says_what_is_missing(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(RuntimeError, match="RANK"):
        World.from_env()


def _run_ranks(tmp_path, entry, args, nprocs, timeout):
    """Each rank's exit code, rank 0's surviving its peer's death (see unsupervised)."""
    run_ranks(tmp_path, entry, args, nprocs=nprocs, timeout=timeout)
    return [int((tmp_path / f"exit{rank}").read_text().split()[0]) for rank in range(nprocs)]


@pytest.mark.timeout(90)
def test_call_to_a_sigkilled_peer_raises_peer_unavailable_within_its_timeout(tmp_path):
    timeout = 5.0
    codes = _run_ranks(tmp_path, programs.call_dead_peer, (timeout,), 2, timeout=80)
    assert codes == [0, -9]
    with open(tmp_path / "result0.pkl", "rb") as f:
        status, value = pickle.load(f)
    assert status == "ok", value
    first, outcomes, elapsed, shutdown_s, replaced, never = value
    assert first == 9
    assert len(outcomes) == 2
    for outcome in outcomes:
        assert outcome.startswith("PeerUnavailable"), outcome
        assert "rank1" in outcome
    # Both calls failed within their own timeout rather than hanging.
    assert elapsed < 2 * timeout + 1
    # The broken connection was noticed, so shutdown did not wait for the dead peer.
    assert shutdown_s < timeout
    assert replaced == 36
    assert never[0] == "ServiceNotFound" and "'never'" in never[1]



def _non_loopback_ipv4():
    """(address, interface) of this machine's first non-loopback IPv4 interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, iface in socket.if_nameindex():
            address = _ipv4_of(sock, iface)
            if address and not address.startswith("127."):
                assert interface_for_address(address) == iface
                return address, iface
    return None


@pytest.mark.timeout(60)
def test_listening_beyond_loopback_is_explicit_and_logged():
    found = _non_loopback_ipv4()
    if found is None:
        pytest.skip("this machine has no non-loopback IPv4 interface to listen on")
    address, iface = found
    messages, listening, tp_iface, value = launch(
        programs.listen_on, nprocs=1, args=(address,), timeout=50)[0]
    assert value == 25
    assert tp_iface == iface
    assert any("beyond loopback" in m and address in m for m in messages), messages
    # What the run secret covers, and what it does not, said where it applies.
    (warning,) = [m for m in messages if "beyond loopback" in m]
    for said in ("run secret protects the RPC pickles", "store (keys and values sealed)",
                 "does not protect: the traffic (unencrypted", "a peer that has the secret"):
        assert said in warning, warning
    # RPC listens on the requested address; only the store (MASTER_ADDR) stays on loopback.
    assert {host for host, _ in listening} <= {address, "127.0.0.1"}
    assert address in {host for host, _ in listening}
