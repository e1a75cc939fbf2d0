"""Store keys are scoped by torchrun's restart count: a restarted world never reads the
keys a failed attempt left in the agent's store."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch.distributed as dist

from rlpar.distributed import launch
from rlpar.distributed.rendezvous import attempt_store, restart_count


@pytest.fixture
def store():
    return dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=10), wait_for_workers=False)


def test_restart_count_comes_from_the_elastic_agent(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert restart_count() == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert restart_count() == 2
    for bad in ("x", "-1", "1.5"):
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", bad)
        with pytest.raises(ValueError, match=f"TORCHELASTIC_RESTART_COUNT must be an int >= 0, got '{bad}'"):
            restart_count()


def test_two_attempts_on_one_store_do_not_see_each_others_keys(store, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    first = attempt_store(store)
    first.set("rank/1/address", "127.0.0.1:1111")  # the failed attempt's peer
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    second = attempt_store(store)
    assert not second.check(["rank/1/address"])
    second.set("rank/1/address", "127.0.0.1:2222")
    assert first.get("rank/1/address") == b"127.0.0.1:1111"
    assert second.get("rank/1/address") == b"127.0.0.1:2222"
    assert store.get("restart0/rank/1/address") == b"127.0.0.1:1111"
    assert store.get("restart1/rank/1/address") == b"127.0.0.1:2222"
    # Without an elastic agent, keys are not prefixed.
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT")
    assert attempt_store(store) is store


def _world_keys(key: str):
    import os

    from rlpar.distributed import World
    from rlpar.distributed.sealed import SealedStore

    with World.from_env(rpc_timeout=20) as world:
        raw = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), 1, False,
                            timedelta(seconds=10))
        secret = os.environ["RLPAR_RUN_SECRET"]

        def world_view(store):  # how the World sees ``store``: sealed with the run secret
            return dist.PrefixStore("rlpar/", SealedStore(store, secret))

        return {
            "restart_count": world.restart_count,
            "scoped": world_view(dist.PrefixStore("restart3", raw)).check([key]),
            "unscoped": world_view(raw).check([key]),
        }


@pytest.mark.timeout(90)
def test_a_world_under_an_agent_writes_every_key_under_its_attempt():
    (result,) = launch(_world_keys, nprocs=1, args=("world/name/0",), timeout=80,
                       env={"TORCHELASTIC_RESTART_COUNT": "3"})
    assert result == {"restart_count": 3, "scoped": True, "unscoped": False}
