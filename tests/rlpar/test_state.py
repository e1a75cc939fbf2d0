"""rlpar.state: the checks every load_state_dict shares, and StateError's wording."""

import pickle

import numpy as np
import pytest
import torch

from rlpar.errors import CheckpointError, StateError
from rlpar.state import StatePath, array, integer, mapping, number, sequence

WHERE = StatePath("Thing.load_state_dict")


def test_paths_name_the_loader_and_every_key_on_the_way():
    error = WHERE["hyper"]["alpha"].error("must be >= 0, got -1")
    assert str(error) == "Thing.load_state_dict: state['hyper']['alpha'] must be >= 0, got -1"
    assert isinstance(error, ValueError) and isinstance(error, CheckpointError)
    back = pickle.loads(pickle.dumps(error))  # crosses RPC with its type and fields
    assert type(back) is StateError and (back.owner, back.path, back.problem) == (
        error.owner, error.path, error.problem)


def test_numbers_accept_numpy_and_0d_tensors_but_not_bools_or_strings():
    assert integer(np.int64(3), WHERE) == 3 and integer(torch.tensor(4), WHERE) == 4
    assert number(np.float32(0.5), WHERE, high=1.0) == 0.5 and number(2, WHERE) == 2.0
    for bad in (True, "3", None, 2.0, torch.zeros(2)):
        with pytest.raises(StateError, match="must be an int"):
            integer(bad, WHERE)
    with pytest.raises(StateError, match=r"must be a finite number in \(0.0, inf\], got 0.0"):
        number(0.0, WHERE, low=0.0, open_low=True)
    with pytest.raises(StateError, match="must be a number, got bool"):
        number(False, WHERE)


def test_mappings_sequences_and_arrays():
    with pytest.raises(StateError, match=r"state has unexpected key\(s\) \['b'\] \(hint\)"):
        mapping({"a": 1, "b": 2}, WHERE, required=("a",), hint=" (hint)")
    assert mapping({"a": 1, "b": 2}, WHERE, required=("a",), optional=None)["b"] == 2
    with pytest.raises(StateError, match="must hold 2 items, got 1"):
        sequence([1], WHERE, length=2)
    assert array(torch.arange(3), WHERE, ndim=1).tolist() == [0, 1, 2]
    with pytest.raises(StateError, match="must be numeric, got dtype object"):
        array(np.array([None]), WHERE)
    with pytest.raises(StateError, match=r"must have 2 dimension\(s\), got shape \(3,\)"):
        array(np.zeros(3), WHERE, ndim=2)
