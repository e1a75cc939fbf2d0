"""Local parameter store: snapshots on push, pull only when newer."""

import pytest
import torch

from rlpar.protocols import ParameterStore
from rlpar.servers import ModelStore


def test_push_copies_and_pull_when_newer():
    store = ModelStore()
    assert isinstance(store, ParameterStore)
    assert store.pull() is None
    w = torch.zeros(3)
    assert store.push({"w": w}) == 0
    w += 1  # the learner keeps training in place
    state, version = store.pull(newer_than=-1)
    assert version == 0 and torch.equal(state["w"], torch.zeros(3))
    assert store.pull(newer_than=0) is None
    assert store.push({"w": w}) == 1
    assert store.push({"w": w}, version=10) == 10
    state, version = store.pull(newer_than=1)
    assert version == 10 and torch.equal(state["w"], torch.ones(3))


def test_pull_with_nothing_new_transfers_nothing():
    store = ModelStore()
    store.push({"w": torch.zeros(1000)})
    assert store.pull(newer_than=-1) is not None
    for _ in range(5):
        assert store.pull(newer_than=0) is None
    stats = store.stats()
    assert stats == {"pulls": 6, "transfers": 1, "bytes_out": 4000, "version": 0}


def test_versions_must_increase():
    store = ModelStore()
    store.push({"w": torch.zeros(1)}, version=3)
    with pytest.raises(ValueError, match="not newer"):
        store.push({"w": torch.zeros(1)}, version=3)
    with pytest.raises(TypeError, match="version"):
        store.push({"w": torch.zeros(1)}, version="4")
    with pytest.raises(TypeError, match="state"):
        store.push([torch.zeros(1)])
    with pytest.raises(TypeError, match="newer_than"):
        store.pull(newer_than=None)


def test_device_copy():
    store = ModelStore(device="cpu")
    store.push({"w": torch.ones(2, dtype=torch.float64), "step": 3})
    state, _ = store.pull()
    assert state["w"].device.type == "cpu" and state["step"] == 3


def test_for_transfer_passes_cpu_tensors_through_uncopied():
    from rlpar.servers.tensors import for_transfer, nbytes

    w = torch.ones(3)
    out = for_transfer({"w": w, "n": 1}, keep_device=False)
    assert out["w"].data_ptr() == w.data_ptr() and out["n"] == 1
    assert nbytes(out) == 12


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_travel_as_cpu_unless_device_maps_are_configured():
    from rlpar.servers.tensors import for_transfer

    w = torch.ones(3, device="cuda")
    assert for_transfer({"w": w}, keep_device=False)["w"].device.type == "cpu"
    assert for_transfer({"w": w}, keep_device=True)["w"].is_cuda
    store = ModelStore(device="cpu")
    store.push({"w": w})
    assert store.pull()[0]["w"].device.type == "cpu"
