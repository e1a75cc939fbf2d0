"""The run secret (issue 30.7): checked values, the sealed store a stranger cannot
read or write, and RPC payloads a stranger cannot get unpickled. The attack on a
running job is in tests/experiments/test_foreign_process.py."""

from __future__ import annotations

import logging
import secrets
import socket
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from rlpar.distributed import World
from rlpar.distributed.ports import free_port
from rlpar.distributed.sealed import ForgedEntry, SealedStore, seal_rpc
from rlpar.distributed.secret import RECIPE, check_secret, secret_from_env


@pytest.fixture
def tcp():
    return dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=5), wait_for_workers=False)


def _client(tcp):
    """A plain client on the same port: what any local process can open."""
    return dist.TCPStore("127.0.0.1", tcp.port, 1, False, timedelta(seconds=1))


@pytest.mark.parametrize("value, message", [
    ("", "hex digits only"),
    ("g" * 32, "hex digits only"),
    ("0123456789abcdef0123456789abcde ", "hex digits only"),
    ("0123456789abcdef", "32 to 128 hex digits"),
    ("0123456789abcdef" * 9, "32 to 128 hex digits"),
    ("0" * 32, "does not look random"),
    ("ab" * 16, "does not look random"),
])
def test_bad_secrets_are_refused_with_the_recipe_and_never_quoted(value, message):
    with pytest.raises(ValueError, match=message) as info:
        check_secret(value)
    assert RECIPE in str(info.value)
    assert not value.strip() or value not in str(info.value)


def test_good_secrets_pass_in_either_case():
    value = secrets.token_hex(16)
    assert check_secret(value) == value
    assert check_secret(value.upper()) == value.upper()
    with pytest.raises(ValueError, match="must be a string"):
        check_secret(b"0" * 32)


def test_a_missing_secret_is_an_error_unless_opted_out_with_a_warning(caplog):
    with pytest.raises(ValueError, match="RLPAR_RUN_SECRET is not set") as info:
        secret_from_env({})
    assert RECIPE in str(info.value)
    with caplog.at_level(logging.WARNING, logger="rlpar.distributed.secret"):
        assert secret_from_env({"RLPAR_ALLOW_NO_SECRET": "1"}) is None
    assert "open to every process" in caplog.text
    value = secrets.token_hex(16)
    assert secret_from_env({"RLPAR_RUN_SECRET": value, "RLPAR_ALLOW_NO_SECRET": "1"}) == value
    with pytest.raises(ValueError, match="32 to 128"):
        secret_from_env({"RLPAR_RUN_SECRET": "abc"})


def test_a_world_with_a_bad_or_missing_secret_fails_before_it_listens(monkeypatch):
    port = free_port()
    with pytest.raises(ValueError, match="32 to 128"):
        World(rank=0, world_size=1, master_port=port, secret="1234")
    monkeypatch.delenv("RLPAR_RUN_SECRET", raising=False)
    monkeypatch.delenv("RLPAR_ALLOW_NO_SECRET", raising=False)
    with pytest.raises(ValueError, match="RLPAR_RUN_SECRET is not set"):
        World(rank=0, world_size=1, master_port=port)
    with socket.socket() as free:
        free.bind(("127.0.0.1", port))  # nothing was left listening on it


def test_a_stranger_finds_no_key_by_name_nor_anything_readable(tcp):
    secret = secrets.token_hex(16)
    world = dist.PrefixStore("rlpar/", SealedStore(tcp, secret))
    world.set("world/name/0", "learner")
    world.set("svc/apex/s/coord/eval", "learner")
    stranger = _client(tcp)
    plain = dist.PrefixStore("rlpar/", stranger)
    assert not plain.check(["world/name/0"]) and not plain.check(["svc/apex/s/coord/eval"])
    names = stranger.list_keys()
    assert len(names) == 2
    for name in names:  # neither the secret nor the names nor the values show
        assert secret not in name and "world" not in name and "coord" not in name
        value = stranger.get(name)
        assert b"learner" not in value and secret.encode() not in value
    # With the secret the same client finds them: the names are hashed, not lost.
    friend = dist.PrefixStore("rlpar/", SealedStore(_client(tcp), secret))
    assert friend.get("world/name/0") == b"learner"
    # Another secret (another run on the same store) sees nothing.
    other = dist.PrefixStore("rlpar/", SealedStore(_client(tcp), secrets.token_hex(16)))
    assert not other.check(["world/name/0"])


def test_what_a_stranger_writes_fails_authentication(tcp):
    secret = secrets.token_hex(16)
    world = SealedStore(tcp, secret)
    world.set("a", "uv://127.0.0.1:1234")
    world.set("b", "other")
    stranger = _client(tcp)
    name_a, name_b = (world._name(k) for k in ("a", "b"))
    stranger.set(name_a, "uv://127.0.0.1:6666")  # redirect a peer's address
    with pytest.raises(ForgedEntry, match="not written with its run secret"):
        world.get("a")
    stranger.set(name_a, stranger.get(name_b))  # a sealed value moved to another key
    with pytest.raises(ForgedEntry):
        world.get("a")


def test_the_operations_torch_and_rlpar_use_behave_as_on_the_plain_store(tcp):
    store = dist.PrefixStore("p", SealedStore(tcp, secrets.token_hex(16)))
    assert store.compare_set("k", "", "first") == b"first"
    assert store.compare_set("k", "", "second") == b"first"  # set only if absent
    assert store.compare_set("k", "first", "third") == b"third"
    assert store.compare_set("k", "nope", "fourth") == b"third"
    assert store.add("n", 2) == 2 and store.add("n", 3) == 5
    assert store.get("n") == b"5"  # counters stay plain integers
    store.set("empty", b"")
    assert store.get("empty") == b""
    big = bytes(range(256)) * 40
    store.set("big", big)
    assert store.get("big") == big
    store.wait(["k", "n"])
    store.wait(["k"], timedelta(seconds=1))
    assert store.check(["k", "big"]) and not store.check(["absent"])
    assert store.delete_key("k") and not store.check(["k"])
    with pytest.raises(dist.DistStoreError):
        store.wait(["absent"], timedelta(milliseconds=100))
    twin = store.clone()  # through torch's C++ PrefixStore, as a process group clones
    assert twin.get("big") == big and twin.get("n") == b"5"


def _unsigned(obj):
    """What a process without the secret sends: torch's own pickling."""
    from torch.distributed.rpc.internal import _InternalRPCPickler

    return _InternalRPCPickler().serialize(obj)


def test_rpc_payloads_are_signed_and_unsigned_ones_refused_before_unpickling():
    from torch.distributed.rpc import internal

    secret = secrets.token_hex(16)
    seal_rpc(secret)
    try:
        data, tensors = internal.serialize({"x": torch.ones(2), "y": 3})
        value = internal.deserialize(data, tensors)
        assert value["y"] == 3 and value["x"].tolist() == [1.0, 1.0]
        for payload in (_unsigned(("os", "system")), b"", data[:-1] + bytes([data[-1] ^ 1])):
            with pytest.raises(PermissionError, match="not signed with this run's secret"):
                internal.deserialize(payload, [])
        seal_rpc(secrets.token_hex(16))  # another run's signature does not pass either
        with pytest.raises(PermissionError):
            internal.deserialize(data, tensors)
    finally:
        seal_rpc(None)
    plain, _ = internal.serialize(5)  # no World: torch's RPC as it was
    assert plain == _unsigned(5)[0] and internal.deserialize(plain, []) == 5
