"""Loaded buffer states are checked (issue 30.4): a state that does not fit raises
StateError naming the key path and the problem, and leaves the buffer as it was."""

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlpar.buffers import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    ReplayShard,
    RingStorage,
    SharedFrames,
)
from rlpar.buffers.hosted import HostedBuffer
from rlpar.checkpoint import load_checkpoint, save_checkpoint
from rlpar.errors import StateError
from tests.corrupt import corruptions, paths, replaced

CAPACITY = 8


def batch(start, n):
    t = np.arange(start, start + n)
    return {"obs": np.stack([t, -t, 2 * t], 1).astype(np.float32), "action": t.astype(np.int64),
            "done": t % 3 == 0}


def frames_batch(start, n):
    """Frame stacks of 4 frames (2 pixels each) whose next_obs continues obs by one step."""
    t = np.arange(start, start + n)
    frame = lambda i: np.stack([i % 256, (3 * i) % 256], -1).astype(np.uint8)  # noqa: E731
    stack = lambda s: np.stack([frame(s + j) for j in range(4)], 1)  # noqa: E731
    return {"obs": stack(t), "next_obs": stack(t + 1), "action": t.astype(np.int64)}


KINDS = {
    "uniform": lambda seed: ReplayBuffer(capacity=CAPACITY, seed=seed),
    "prioritized": lambda seed: PrioritizedReplayBuffer(capacity=CAPACITY, seed=seed),
    "frames": lambda seed: PrioritizedReplayBuffer(capacity=CAPACITY, seed=seed,
                                                   shared_frames=SharedFrames()),
}


def filled(kind, *, seed=0, start=0, n=11):
    buf = KINDS[kind](seed)
    data = frames_batch if kind == "frames" else batch
    buf.add(data(start, n), None if kind == "uniform" else np.linspace(0.5, 3.0, n))
    return buf


def snapshot(buf):
    """Everything a load could change, copied (a state dict's columns are views)."""
    return copy.deepcopy(buf.state_dict())


def assert_same(a, b, where="state"):
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    else:
        assert a == b or (a != a and b != b), where


def refused(buf, state, match):
    """``buf.load_state_dict(state)`` raises StateError matching ``match``; buf unchanged."""
    before = snapshot(buf)
    with pytest.raises(StateError, match=match):
        buf.load_state_dict(state)
    assert_same(snapshot(buf), before)


# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_through_a_checkpoint_still_loads_and_samples_the_same(tmp_path, kind):
    source = filled(kind, seed=1)
    save_checkpoint(tmp_path, {"replay": source.state_dict()}, kind="t", step=1)
    state, _ = load_checkpoint(tmp_path, kind="t")
    back = filled(kind, seed=5, start=100, n=3)
    back.load_state_dict(state["replay"])
    a, b = source.sample(6), back.sample(6)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.weights, b.weights)
    for k in a.batch:
        np.testing.assert_array_equal(a.batch[k], b.batch[k])


def test_an_older_state_without_shared_frames_still_loads():
    state = filled("prioritized").state_dict()
    del state["storage"]["shared_frames"]  # added after the first checkpoints
    back = KINDS["prioritized"](0)
    back.load_state_dict(state)
    assert len(back) == CAPACITY


def test_an_empty_state_empties_the_buffer_and_keeps_its_declared_spec():
    spec = {"obs": ((3,), np.float32), "action": ((), np.int64), "done": ((), np.bool_)}
    buf = ReplayBuffer(capacity=CAPACITY, spec=spec)
    buf.add(batch(0, 5))
    buf.load_state_dict(ReplayBuffer(capacity=CAPACITY).state_dict())
    assert len(buf) == 0 and buf.spec is not None
    buf.add(batch(0, 2))


# ---------------------------------------------------- wrong kind, keys, hyper


def test_a_uniform_state_into_a_prioritized_buffer_names_the_missing_priorities():
    refused(filled("prioritized"), filled("uniform").state_dict(),
            r"PrioritizedReplayBuffer.load_state_dict: state is missing key\(s\) "
            r"\['leaves', 'max_priority', 'sample_steps', 'hyper'\] \(a uniform ReplayBuffer's state")


def test_a_prioritized_state_into_a_uniform_buffer_is_refused():
    refused(filled("uniform"), filled("prioritized").state_dict(),
            r"ReplayBuffer.load_state_dict: state has unexpected key\(s\) .*'leaves'.*prioritized")


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("alpha", -1.0, r"must be a finite number in \[0.0, inf\], got -1.0"),
    ("alpha", float("nan"), "must be a finite number"),
    ("beta", 1.5, r"must be a finite number in \[0.0, 1.0\], got 1.5"),
    ("beta_final", -0.1, r"must be a finite number in \[0.0, 1.0\], got -0.1"),
    ("eps", "0.1", "must be a number, got str '0.1'"),
    ("beta_anneal_steps", 2.5, "must be an int, got float 2.5"),
    ("alpha", None, "must be a number, got NoneType None"),
])
def test_out_of_range_or_mistyped_hyper_parameters_are_named(name, value, problem):
    state = filled("prioritized", seed=3).state_dict()
    state["hyper"][name] = value
    refused(filled("prioritized"), state, rf"state\['hyper'\]\['{name}'\] {problem}")


def test_the_constructor_checks_hyper_parameters_the_same_way():
    with pytest.raises(ValueError, match=r"arguments\['beta'\] must be a finite number in \[0.0, 1.0\]"):
        PrioritizedReplayBuffer(capacity=4, beta=1.5)
    with pytest.raises(ValueError, match=r"arguments\['alpha'\]"):
        PrioritizedReplayBuffer(capacity=4, alpha=-1)


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_and_missing_keys_are_named(kind):
    state = filled(kind, seed=3).state_dict()
    refused(filled(kind), {**state, "extra": 1}, r"state has unexpected key\(s\) \['extra'\]")
    refused(filled(kind), {k: v for k, v in state.items() if k != "rng"},
            r"state is missing key\(s\) \['rng'\]")
    storage = {k: v for k, v in state["storage"].items() if k != "next_serial"}
    refused(filled(kind), {**state, "storage": storage},
            r"state\['storage'\] is missing key\(s\) \['next_serial'\]")
    refused(filled(kind), None, "state must be a mapping, got NoneType None")


# ------------------------------------------------------------------ columns


def with_storage(state, **changes):
    return {**state, "storage": {**state["storage"], **changes}}


def with_column(state, name, parts):
    storage = state["storage"]
    return with_storage(state, columns={**storage["columns"], name: parts})


@pytest.mark.parametrize("kind", KINDS)
def test_a_column_set_to_none_is_named(kind):
    state = with_column(filled(kind, seed=3).state_dict(), "obs", None)
    refused(filled(kind), state, r"state\['storage'\]\['columns'\]\['obs'\] must be a list, got NoneType")


@pytest.mark.parametrize("kind", KINDS)
def test_a_column_of_the_wrong_item_shape_or_dtype_is_named(kind):
    state = filled(kind, seed=3).state_dict()
    parts = state["storage"]["columns"]["obs"]
    wide = [torch.cat([p, p[:, :1]], 1) for p in parts]
    refused(filled(kind), with_column(state, "obs", wide),
            r"state\['storage'\]\['columns'\]\['obs'\]\[0\] holds rows of shape")
    retyped = [p.to(torch.float64) for p in parts]
    refused(filled(kind), with_column(state, "obs", retyped),
            r"\['obs'\]\[0\] must have dtype (float32|uint8|int64), got float64")  # int64: frame slots
    flat = [p.reshape(len(p), -1)[:, 0] for p in parts]
    refused(filled(kind), with_column(state, "obs", flat), r"\['obs'\]\[0\] must have \d dimension")


@pytest.mark.parametrize("kind", KINDS)
def test_truncated_columns_are_named(kind):
    state = filled(kind, seed=3).state_dict()
    parts = state["storage"]["columns"]["action"]
    refused(filled(kind), with_column(state, "action", [p[:-1] for p in parts]),
            r"state\['storage'\]\['columns'\]\['action'\] holds \d rows; expected 8")
    refused(filled(kind), with_column(state, "action", []), r"\['action'\] holds 0 rows; expected 8")


@pytest.mark.parametrize("kind", KINDS)
def test_capacity_and_position_must_fit(kind):
    state = filled(kind, seed=3).state_dict()
    refused(filled(kind), with_storage(state, capacity=16),
            r"state\['storage'\]\['capacity'\] is 16, this storage's capacity is 8")
    refused(filled(kind), with_storage(state, next_serial=-1),
            r"\['next_serial'\] must be an int in \[0, \d+\], got -1")
    refused(filled(kind), with_storage(state, next_serial=2**70), r"\['next_serial'\] must be an int in")
    refused(filled(kind), with_storage(state, next_serial="11"), r"\['next_serial'\] must be an int")
    refused(filled(kind), with_storage(state, next_serial=5), r"holds 8 rows; expected 5")
    refused(filled(kind), with_storage(state, spec=None), r"\['spec'\] is None \(nothing added\)")


def test_a_spec_that_differs_from_the_declared_one_is_named():
    spec = {"obs": ((3,), np.float64), "action": ((), np.int64), "done": ((), np.bool_)}
    buf = ReplayBuffer(capacity=CAPACITY, spec=spec)
    refused(buf, filled("uniform").state_dict(),
            r"state\['storage'\]\['spec'\] differs from this storage's spec at \['obs'\]")


def test_a_malformed_spec_is_named():
    state = filled("uniform").state_dict()
    spec = state["storage"]["spec"]
    refused(filled("uniform"), with_storage(state, spec={**spec, "obs": [[3], "O"]}),
            r"\['spec'\]\['obs'\]\[1\] is dtype object")
    refused(filled("uniform"), with_storage(state, spec={**spec, "obs": [[-3], "<f4"]}),
            r"\['spec'\]\['obs'\]\[0\]\[0\] must be an int >= 0, got -3")
    refused(filled("uniform"), with_storage(state, spec={**spec, "obs": [[3], "nonsense"]}),
            r"\['spec'\]\['obs'\]\[1\] is not a numpy dtype string, got str")
    refused(filled("uniform"), with_storage(state, spec={**spec, "obs": [[3], None]}),
            r"\['spec'\]\['obs'\]\[1\] is not a numpy dtype string, got NoneType")


def test_shared_frames_layout_and_step_counts_are_checked():
    state = filled("frames", seed=3).state_dict()
    refused(filled("frames"), with_storage(state, shared_frames=["obs", "next_obs", 1.5]),
            r"\['shared_frames'\] must be \[obs, next_obs, shift\]")
    refused(filled("frames"), with_storage(state, shared_frames=None),
            r"\['shared_frames'\] was saved with shared_frames=None")
    steps = [torch.zeros_like(p) for p in state["storage"]["columns"]["obs.steps"]]
    refused(filled("frames"), with_column(state, "obs.steps", steps),
            r"\['obs.steps'\] must hold step counts in \[1, 1\], got \[0, 0\]")


# --------------------------------------------------------------- priorities


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), 0.0])
def test_negative_nan_or_zero_priorities_are_named(bad):
    state = filled("prioritized", seed=3).state_dict()
    leaves = state["leaves"].clone()
    leaves[2] = bad
    refused(filled("prioritized"), {**state, "leaves": leaves},
            r"state\['leaves'\] must be finite and > 0")


def test_truncated_or_mistyped_priorities_are_named():
    state = filled("prioritized", seed=3).state_dict()
    refused(filled("prioritized"), {**state, "leaves": state["leaves"][:-1]},
            r"state\['leaves'\] holds 7 priorities for the 8 items stored")
    refused(filled("prioritized"), {**state, "leaves": state["leaves"].long()},
            r"state\['leaves'\] must be numeric, got dtype int64")
    refused(filled("prioritized"), {**state, "max_priority": 0.0},
            r"state\['max_priority'\] must be a finite number in \(0.0, inf\]")
    refused(filled("prioritized"), {**state, "sample_steps": -2}, r"\['sample_steps'\] must be an int >= 0")


def test_a_foreign_rng_state_is_named():
    state = filled("uniform", seed=3).state_dict()
    refused(filled("uniform"), {**state, "rng": {"bit_generator": "MT19937"}},
            r"state\['rng'\] is not a PCG64 state")
    refused(filled("uniform"), {**state, "rng": None}, r"state\['rng'\] is not a PCG64 state")


# ------------------------------------------------- wrappers: shard and hosted


@pytest.mark.parametrize("wrap", [ReplayShard, HostedBuffer])
def test_a_shard_or_hosted_buffer_refuses_through_its_lock(wrap):
    wrapped = wrap(filled("prioritized"))
    state = filled("prioritized", seed=3).state_dict()
    state["hyper"]["alpha"] = -1
    before = snapshot(wrapped.buffer)
    with pytest.raises(StateError, match=r"state\['hyper'\]\['alpha'\]"):
        wrapped.load_state_dict(state)
    assert_same(snapshot(wrapped.buffer), before)
    wrapped.load_state_dict(filled("prioritized", seed=3).state_dict())  # the lock was released


def test_ring_storage_names_itself():
    storage = RingStorage(capacity=4)
    with pytest.raises(StateError, match=r"RingStorage.load_state_dict: state is missing key"):
        storage.load_state_dict({})


# ---------------------------------------------------------- random corruption


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.filterwarnings("ignore:overflow encountered in power")  # alpha = 2**70 loads
@settings(max_examples=150)
@given(data=st.data())
def test_a_randomly_corrupted_state_loads_cleanly_or_raises_state_error(kind, data):
    """Never a bare KeyError/TypeError/IndexError, never a half-changed buffer, and a
    state that loads samples and takes priority updates."""
    state = filled(kind, seed=3, start=20).state_dict()
    places = list(paths(state))
    path, value = data.draw(st.sampled_from(places[1:]), label="path")
    new = data.draw(st.sampled_from(corruptions(value)), label="new")
    bad = replaced(state, path, new)
    buf = filled(kind)
    before = snapshot(buf)
    try:
        buf.load_state_dict(bad)
    except StateError:
        assert_same(snapshot(buf), before)
        return
    sample = buf.sample(4)
    assert np.isfinite(sample.weights).all()
    buf.update_priorities(sample.indices, np.full(4, 2.0))
    buf.add((frames_batch if kind == "frames" else batch)(50, 3),
            None if kind == "uniform" else np.ones(3))
