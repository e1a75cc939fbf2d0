"""Atomic checkpoints: crash safety, pruning, weights-only round trips, header checks."""

import os
import random
import subprocess
import sys
import textwrap
from collections import OrderedDict

import numpy as np
import pytest
import torch

from rlpar.buffers import PrioritizedReplayBuffer, SharedFrames
from rlpar.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_part,
    restore_rng_state,
    rng_state,
    save_checkpoint,
    save_part,
)
from rlpar.errors import CheckpointError, CheckpointMismatch, StateError

STACK = 4


def frame_stream(n):
    return np.random.default_rng(0).integers(0, 256, (n + 16, 84, 84), dtype=np.uint8)


def chunk(frames, start, n, shift):
    """Transitions of one stream: obs = frames t..t+3, next_obs ``shift`` frames on."""
    t = np.arange(start, start + n)
    return {
        "obs": np.stack([frames[i : i + STACK] for i in t]),
        "action": t.astype(np.int64),
        "next_obs": np.stack([frames[i + shift : i + shift + STACK] for i in t]),
    }


def assert_rows_match(batch, frames, shift):
    for j, t in enumerate(batch["action"]):
        np.testing.assert_array_equal(batch["obs"][j], frames[t : t + STACK])
        np.testing.assert_array_equal(batch["next_obs"][j], frames[t + shift : t + shift + STACK])


def test_save_writes_the_named_file_and_loads_back_with_its_header(tmp_path):
    path = save_checkpoint(tmp_path / "ck", {"w": torch.arange(3.0)}, kind="job", step=7,
                           meta={"layout": ("a", 2)})
    assert path == tmp_path / "ck" / "ckpt-000000000007.pt"
    state, header = load_checkpoint(path, kind="job", expect_meta={"layout": ["a", 2]})
    assert torch.equal(state["w"], torch.arange(3.0))
    assert header["kind"] == "job" and header["step"] == 7 and header["format"] == 1
    assert header["meta"] == {"layout": ["a", 2]} and header["created"] > 0
    # A directory loads its newest checkpoint.
    save_checkpoint(tmp_path / "ck", {"w": torch.ones(1)}, kind="job", step=8)
    state, header = load_checkpoint(tmp_path / "ck", kind="job")
    assert header["step"] == 8 and torch.equal(state["w"], torch.ones(1))


def test_only_the_newest_keep_checkpoints_remain(tmp_path):
    for step in (5, 1, 30, 12, 20):
        save_checkpoint(tmp_path, {"step": step}, kind="job", step=step, keep=3)
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt-000000000012.pt", "ckpt-000000000020.pt", "ckpt-000000000030.pt"]
    assert sorted(os.listdir(tmp_path)) == [p.name for p in list_checkpoints(tmp_path)]
    assert load_checkpoint(tmp_path, kind="job")[0] == {"step": 30}


def test_a_crash_between_write_and_rename_leaves_the_previous_checkpoint(tmp_path):
    save_checkpoint(tmp_path, {"w": torch.zeros(4)}, kind="job", step=1)
    # A writer killed after writing the temporary file, before the rename.
    program = textwrap.dedent(f"""
        import os, torch
        import rlpar.checkpoint as ck
        ck.os.replace = lambda *a: os._exit(3)
        ck.save_checkpoint({str(tmp_path)!r}, {{"w": torch.ones(1 << 20)}}, kind="job", step=2)
    """)
    done = subprocess.run([sys.executable, "-c", program], timeout=60,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 3
    leftovers = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert len(leftovers) == 1 and os.path.getsize(tmp_path / leftovers[0]) > 4 << 20
    # A half-written file under a checkpoint's own name (not ours: we rename) is no
    # candidate either.
    whole = (tmp_path / "ckpt-000000000001.pt").read_bytes()
    (tmp_path / "ckpt-000000000003.pt").write_bytes(whole[: len(whole) // 2])
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt-000000000001.pt"
    state, header = load_checkpoint(tmp_path, kind="job")
    assert header["step"] == 1 and torch.equal(state["w"], torch.zeros(4))
    # The next save clears the dead writer's temporary file.
    save_checkpoint(tmp_path, {"w": torch.ones(2)}, kind="job", step=4)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_a_failed_write_removes_its_temporary_file(tmp_path, monkeypatch):
    def refuse(*args):
        raise OSError("disk full")

    monkeypatch.setattr("rlpar.checkpoint.os.replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, {"w": torch.zeros(2)}, kind="job", step=1)
    assert os.listdir(tmp_path) == []


def test_numpy_nested_containers_and_torch_values_round_trip_under_weights_only(tmp_path):
    module_state = torch.nn.Linear(2, 3).state_dict()
    state = {
        "tensor": torch.arange(6).reshape(2, 3),
        "f32": np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)[:, ::2],  # strided
        "u16": np.array([1, 65535], dtype=np.uint16),
        "bools": np.array([[True, False]]),
        "empty": np.zeros((0, 5), dtype=np.int64),
        "big_endian": np.arange(3, dtype=">i4"),
        "text": np.array(["ab", "c"]),
        "scalars": [np.float64(1.5), np.int32(-7), np.bool_(True)],
        "nested": {"list": [1, 2.5, "x", None, (3, 4)], 3: b"bytes", "set": {1, 2}},
        "module": module_state,
        "dtype": torch.float16,
        "size": torch.Size([2, 3]),
        "big_int": 2**100,
    }
    save_checkpoint(tmp_path, state, kind="job", step=0)
    back, _ = load_checkpoint(tmp_path, kind="job")
    assert torch.equal(back["tensor"], state["tensor"])
    for key in ("f32", "u16", "bools", "empty", "big_endian", "text"):
        assert back[key].dtype == state[key].dtype and back[key].shape == state[key].shape, key
        np.testing.assert_array_equal(back[key], state[key])
    assert [type(v) for v in back["scalars"]] == [np.float64, np.int32, np.bool_]
    assert back["scalars"] == state["scalars"]
    assert back["nested"] == state["nested"]
    assert type(back["nested"]["list"][4]) is tuple
    assert type(back["module"]) is OrderedDict
    assert back["module"]._metadata == module_state._metadata
    torch.nn.Linear(2, 3).load_state_dict(back["module"])
    assert back["dtype"] == torch.float16 and back["size"] == torch.Size([2, 3])
    assert back["big_int"] == 2**100
    # The file itself needs nothing but the weights-only unpickler.
    torch.load(latest_checkpoint(tmp_path), weights_only=True)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (object(), r"state\['bad'\]: a builtins.object cannot be loaded"),
        (np.array([object()]), r"state\['bad'\]: numpy arrays of dtype object"),
        ({"inner": [1, lambda: 0]}, r"state\['bad'\]\['inner'\]\[1\]: a builtins.function"),
        ({(1, 2): 3}, r"key \(1, 2\) of type tuple"),
        (np.float64, r"a builtins.type cannot"),
    ],
)
def test_values_a_weights_only_load_would_refuse_are_refused_at_save(tmp_path, value, match):
    with pytest.raises(TypeError, match=match):
        save_checkpoint(tmp_path, {"bad": value}, kind="job", step=0)
    assert list_checkpoints(tmp_path) == []


def test_rng_states_round_trip_and_replay_the_same_numbers(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    gens = {"env": np.random.default_rng(4), "mt": np.random.Generator(np.random.MT19937(5))}
    save_checkpoint(tmp_path, {"rng": rng_state(gens)}, kind="job", step=0)

    def draw():
        return (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist(),
                gens["env"].integers(1 << 30, size=3).tolist(), gens["mt"].random())

    expected = draw()
    assert draw() != expected  # the streams moved on
    state, _ = load_checkpoint(tmp_path, kind="job")
    restore_rng_state(state["rng"], gens)
    assert draw() == expected
    with pytest.raises(StateError, match=r"state\['generators'\] has no state for numpy generator 'other'"):
        restore_rng_state(state["rng"], {"other": np.random.default_rng()})
    with pytest.raises(TypeError, match="must be a numpy Generator"):
        rng_state({"env": np.random.RandomState(0)})


def test_another_jobs_or_layouts_checkpoint_is_refused_naming_the_field(tmp_path):
    save_checkpoint(tmp_path, {}, kind="apex", step=1, meta={"actors": 2, "shared": True})
    with pytest.raises(CheckpointMismatch, match="kind is 'apex', expected 'a3c'") as exc:
        load_checkpoint(tmp_path, kind="a3c")
    assert (exc.value.field, exc.value.expected, exc.value.found) == ("kind", "a3c", "apex")
    assert isinstance(exc.value, ValueError) and "ckpt-000000000001.pt" in str(exc.value)
    with pytest.raises(CheckpointMismatch, match=r"meta\['actors'\] is 2, expected 3"):
        load_checkpoint(tmp_path, kind="apex", expect_meta={"actors": 3})
    with pytest.raises(CheckpointMismatch, match=r"meta\['gpus'\] is <missing>, expected 1"):
        load_checkpoint(tmp_path, kind="apex", expect_meta={"gpus": 1})
    load_checkpoint(tmp_path, kind="apex", expect_meta={"actors": 2, "shared": True})


def test_corrupt_missing_and_foreign_files_give_errors_naming_the_path(tmp_path):
    path = save_checkpoint(tmp_path, {"w": torch.zeros(1000)}, kind="job", step=1)
    data = bytearray(path.read_bytes())
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=f"checkpoint {truncated} cannot be read"):
        load_checkpoint(truncated, kind="job")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00" * 100)
    with pytest.raises(CheckpointError, match="garbage.pt cannot be read"):
        load_checkpoint(garbage, kind="job")
    foreign = tmp_path / "foreign.pt"
    torch.save({"w": torch.zeros(1)}, foreign)
    with pytest.raises(CheckpointError, match="foreign.pt is not an rlpar checkpoint"):
        load_checkpoint(foreign, kind="job")
    with pytest.raises(FileNotFoundError, match="missing.pt does not exist"):
        load_checkpoint(tmp_path / "missing.pt", kind="job")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "empty", kind="job")
    assert latest_checkpoint(tmp_path / "nowhere") is None


def test_bad_arguments_are_refused(tmp_path):
    for kwargs, match in [
        ({"kind": "", "step": 0}, "kind must be a non-empty string"),
        ({"kind": "j", "step": -1}, "step must be an int >= 0"),
        ({"kind": "j", "step": True}, "step must be an int >= 0"),
        ({"kind": "j", "step": 0, "keep": 0}, "keep must be an int >= 1"),
    ]:
        with pytest.raises(ValueError, match=match):
            save_checkpoint(tmp_path, {}, **kwargs)
    with pytest.raises(TypeError, match="meta must be a mapping"):
        save_checkpoint(tmp_path, {}, kind="j", step=0, meta=[1])
    with pytest.raises(TypeError, match=r"meta\['x'\] must hold only"):
        save_checkpoint(tmp_path, {}, kind="j", step=0, meta={"x": np.int64(1)})
    with pytest.raises(ValueError, match="is reserved"):
        save_checkpoint(tmp_path, {"__rlpar_ndarray__": 1}, kind="j", step=0)


def test_prioritized_shared_frames_replay_resumes_to_identical_samples(tmp_path):
    frames = frame_stream(700)
    buf = PrioritizedReplayBuffer(capacity=300, seed=3, beta_anneal_steps=50,
                                  shared_frames=SharedFrames(shift=3))
    for start in range(0, 640, 64):  # past the wrap
        buf.add(chunk(frames, start, 64, shift=3))
    for _ in range(5):
        sample = buf.sample(32)
        buf.update_priorities(sample.indices, np.abs(np.sin(sample.indices)) * 4 + 0.1)
    save_checkpoint(tmp_path, {"replay": buf.state_dict()}, kind="apex", step=640)

    state, _ = load_checkpoint(tmp_path, kind="apex")
    back = PrioritizedReplayBuffer(capacity=300, seed=99, shared_frames=SharedFrames(shift=3))
    back.load_state_dict(state["replay"])
    assert back.max_priority == buf.max_priority and back.sample_steps == buf.sample_steps
    for tree in ("sum_tree", "min_tree"):
        getattr(buf, tree).flush()
        getattr(back, tree).flush()
        np.testing.assert_array_equal(getattr(back, tree)._flat, getattr(buf, tree)._flat)
    np.testing.assert_array_equal(back.storage.columns["obs.steps"],
                                  buf.storage.columns["obs.steps"])
    for _ in range(3):
        a, b = buf.sample(48), back.sample(48)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.weights, b.weights)
        for key in a.batch:
            np.testing.assert_array_equal(a.batch[key], b.batch[key])
        assert_rows_match(b.batch, frames, shift=3)


def test_a_checkpoint_with_parts_is_complete_only_with_every_part(tmp_path, caplog):
    parts = ["shard-0-of-2", "shard-1-of-2"]
    for step in (10, 20):
        for i, part in enumerate(parts):
            save_part(tmp_path, {"rows": np.arange(step + i)}, kind="job", step=step, part=part,
                      meta={"part": i})
        save_checkpoint(tmp_path, {"step": step}, kind="job", step=step, parts=parts)
    # Step 30: the second shard's part never came (its writer died).
    save_part(tmp_path, {"rows": np.arange(3)}, kind="job", step=30, part=parts[0])
    newest = save_checkpoint(tmp_path, {"step": 30}, kind="job", step=30, parts=parts)
    assert [p.name for p in list_checkpoints(tmp_path, parts=parts)] == [
        "ckpt-000000000010.pt", "ckpt-000000000020.pt"]
    assert latest_checkpoint(tmp_path) == newest  # without parts: the main file alone
    with caplog.at_level("WARNING", logger="rlpar.checkpoint"):
        state, header = load_checkpoint(tmp_path, kind="job", parts=parts)
    assert header["step"] == 20 and state == {"step": 20}
    assert "ckpt-000000000030.pt: incomplete, part(s) ['shard-1-of-2'] missing" in caplog.text
    main = tmp_path / "ckpt-000000000020.pt"
    rows, part_header = load_part(main, parts[1], kind="job", expect_meta={"part": 1})
    np.testing.assert_array_equal(rows["rows"], np.arange(21))
    assert part_header["step"] == 20
    with pytest.raises(CheckpointMismatch, match="meta\\['part'\\]"):
        load_part(main, parts[1], kind="job", expect_meta={"part": 0})
    # Parts of another layout (three shards) are a mismatch, not a silent skip.
    with pytest.raises(CheckpointMismatch, match="parts is"):
        load_checkpoint(tmp_path, kind="job", parts=["shard-0-of-3", "shard-1-of-3", "shard-2-of-3"])
    with pytest.raises(FileNotFoundError, match="part .*shard-2-of-2.pt does not exist"):
        load_part(main, "shard-2-of-2", kind="job")
    with pytest.raises(ValueError, match="a part name"):
        save_part(tmp_path, {}, kind="job", step=1, part="a.b")


def test_pruning_keeps_the_newest_complete_checkpoints_and_their_parts(tmp_path):
    parts = ["p"]
    for step in (1, 2, 3):
        save_part(tmp_path, {"s": step}, kind="job", step=step, part="p")
        save_checkpoint(tmp_path, {"s": step}, kind="job", step=step, keep=2, parts=parts)
    # Incomplete ones (no part) do not count towards keep, and do not push complete ones out.
    for step in (4, 5, 6):
        save_checkpoint(tmp_path, {"s": step}, kind="job", step=step, keep=2, parts=parts)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-000000000002.p.pt", "ckpt-000000000002.pt", "ckpt-000000000003.p.pt",
                     "ckpt-000000000003.pt", "ckpt-000000000004.pt", "ckpt-000000000005.pt",
                     "ckpt-000000000006.pt"]
    assert load_checkpoint(tmp_path, kind="job", parts=parts)[1]["step"] == 3


def test_a_bad_rng_state_is_named_and_no_rng_is_changed():
    gens = {"env": np.random.default_rng(4)}
    good = rng_state(gens)
    expected = (random.random(), np.random.rand(), torch.rand(1).item(), gens["env"].random())
    cases = [
        ({**good, "python": (3, (1, 2), None)}, r"state\['python'\] is not a python RNG state"),
        ({**good, "numpy": {"bit_generator": "nonsense"}}, r"state\['numpy'\] is not a numpy RNG state"),
        ({**good, "torch": torch.zeros(3, dtype=torch.uint8)}, r"state\['torch'\] is not a torch RNG state"),
        ({**good, "cuda": [None]}, r"state\['cuda'\]\[0\] must be a uint8 tensor"),
        ({**good, "generators": {"env": {"bit_generator": "PCG64"}}},
         r"state\['generators'\]\['env'\] is not a PCG64 state"),
        ({k: v for k, v in good.items() if k != "torch"}, r"state is missing key\(s\) \['torch'\]"),
    ]
    for bad, match in cases:
        restore_rng_state(good, gens)
        with pytest.raises(StateError, match=f"restore_rng_state: {match}"):
            restore_rng_state(bad, gens)
        # Every stream is where the good state left it: nothing was half-restored.
        assert (random.random(), np.random.rand(), torch.rand(1).item(), gens["env"].random()) == expected
