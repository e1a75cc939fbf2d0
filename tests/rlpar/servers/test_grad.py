"""Local gradient server: exact parameters for known gradients, staleness, LR."""

import threading

import pytest
import torch
from torch import nn

from rlpar.protocols import GradientSink
from rlpar.servers import GradServer, GradServerConfig


class Vec(nn.Module):
    def __init__(self, n: int = 3) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n))
        self.b = nn.Parameter(torch.zeros(1))


def sgd(params):
    return torch.optim.SGD(params, lr=1.0)


def server(**kwargs) -> GradServer:
    return GradServer(model=Vec(), optimizer_factory=sgd, **kwargs)


def g(*values):
    return {"w": torch.tensor(values, dtype=torch.float32)}


def test_async_applies_each_gradient_on_arrival():
    srv = server()
    assert isinstance(srv, GradientSink)
    assert srv.push_gradients(g(1, 2, 3), version=0)
    assert srv.push_gradients(g(1, 1, 1), version=1)
    state, version = srv.pull(newer_than=0)
    assert version == 2
    assert torch.equal(state["w"], torch.tensor([-2.0, -3.0, -4.0]))
    assert torch.equal(state["b"], torch.zeros(1))  # no gradient reached b
    assert srv.pull(newer_than=2) is None
    m = srv.metrics()
    assert (m["applied"], m["dropped"], m["steps"], m["version"]) == (2, 0, 2, 2)
    assert m["mean_staleness"] == 0.0


def test_reduce_averages_every_batch():
    srv = server(mode="reduce", reduce_batch_size=2)
    assert srv.push_gradients(g(2, 0, 0), version=0)
    assert srv.version == 0 and srv.metrics()["pending"] == 1
    assert srv.push_gradients({"w": torch.tensor([0.0, 4.0, 0.0]), "b": torch.ones(1)}, version=0)
    state, version = srv.pull()
    assert version == 1
    assert torch.equal(state["w"], torch.tensor([-1.0, -2.0, 0.0]))
    assert torch.equal(state["b"], torch.tensor([-0.5]))


@pytest.mark.parametrize("mode,batch", [("async", 1), ("reduce", 3)])
def test_concurrent_workers_give_exact_parameters(mode, batch):
    srv = server(mode=mode, reduce_batch_size=batch)
    pushes = 6  # per worker; 3 workers -> 18 gradients, a multiple of the batch

    def worker(k: int) -> None:
        for _ in range(pushes):
            srv.push_gradients(g(k, 1, 0), version=srv.version)

    threads = [threading.Thread(target=worker, args=(k,)) for k in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    state, version = srv.pull()
    if mode == "async":
        # SGD with lr=1 sums: w = -sum of all gradients, whatever the order.
        expected, steps = torch.tensor([-6.0 * pushes, -3.0 * pushes, 0.0]), 18
    else:
        # Each step averages 3 gradients: the total is the sum divided by 3.
        expected, steps = torch.tensor([-2.0 * pushes, -1.0 * pushes, 0.0]), 6
    assert version == steps
    assert torch.allclose(state["w"], expected)
    assert srv.metrics()["applied"] == 18


def test_staleness_drop():
    srv = server(max_staleness=1, staleness_policy="drop")
    assert srv.push_gradients(g(1, 0, 0), version=0)  # staleness 0
    assert srv.push_gradients(g(1, 0, 0), version=0)  # staleness 1
    assert not srv.push_gradients(g(100, 0, 0), version=0)  # staleness 2: dropped
    state, version = srv.pull()
    assert version == 2 and torch.equal(state["w"], torch.tensor([-2.0, 0.0, 0.0]))
    m = srv.metrics()
    assert (m["received"], m["applied"], m["dropped"]) == (3, 2, 1)
    assert m["mean_staleness"] == 0.5


def test_staleness_downweight():
    srv = server(max_staleness=1, staleness_policy="downweight")
    srv.push_gradients(g(1, 0, 0), version=0)
    srv.push_gradients(g(1, 0, 0), version=0)
    assert srv.push_gradients(g(8, 0, 0), version=0)  # staleness 2 -> weight 1/2
    assert srv.push_gradients(g(9, 0, 0), version=0)  # staleness 3 -> weight 1/3
    state, _ = srv.pull()
    assert torch.allclose(state["w"], torch.tensor([-(1 + 1 + 4 + 3.0), 0.0, 0.0]))
    m = srv.metrics()
    assert (m["applied"], m["dropped"], m["downweighted"]) == (4, 0, 2)
    assert m["mean_staleness"] == pytest.approx(1.5)


def test_lr_scheduler_is_stepped():
    srv = server(lr_scheduler_factory=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, 0.5))
    for v in range(3):
        srv.push_gradients(g(1, 0, 0), version=v)
    state, _ = srv.pull()
    assert torch.allclose(state["w"][0], torch.tensor(-1.75))
    assert srv.metrics()["lr"] == pytest.approx(0.125)


def test_pull_is_a_snapshot_and_push_overwrites():
    srv = server(mode="reduce", reduce_batch_size=2)
    state0, _ = srv.pull()
    srv.push_gradients(g(1, 1, 1), version=0)
    assert srv.push({"w": torch.ones(3), "b": torch.ones(1)}) == 1
    assert srv.metrics()["dropped"] == 1  # the pending gradient was for version 0
    assert torch.equal(state0["w"], torch.zeros(3))
    state, version = srv.pull(newer_than=0)
    assert version == 1 and torch.equal(state["w"], torch.ones(3))


def test_invalid_arguments():
    with pytest.raises(ValueError, match="mode"):
        server(mode="sync")
    with pytest.raises(ValueError, match="reduce_batch_size"):
        server(mode="async", reduce_batch_size=4)
    with pytest.raises(ValueError, match="reduce_batch_size"):
        server(mode="reduce", reduce_batch_size=0)
    with pytest.raises(ValueError, match="max_staleness"):
        server(max_staleness=-1)
    with pytest.raises(ValueError, match="staleness_policy"):
        server(max_staleness=1, staleness_policy="ignore")
    with pytest.raises(TypeError, match="Module"):
        GradServer(model={"w": 1}, optimizer_factory=sgd)
    with pytest.raises(TypeError, match="Optimizer"):
        GradServer(model=Vec(), optimizer_factory=lambda p: None)
    srv = server()
    with pytest.raises(ValueError, match="unknown"):
        srv.push_gradients({"nope": torch.zeros(3)}, version=0)
    with pytest.raises(ValueError, match="shape"):
        srv.push_gradients({"w": torch.zeros(4)}, version=0)
    with pytest.raises(ValueError, match="version"):
        srv.push_gradients(g(1, 1, 1), version=5)
    with pytest.raises(TypeError, match="mapping"):
        srv.push_gradients([torch.zeros(3)], version=0)
    cfg = GradServerConfig(mode="reduce", reduce_batch_size=2)
    assert GradServer(model=Vec(), optimizer_factory=sgd, **vars(cfg)).config == cfg


def test_push_gradients_and_pull_is_one_call():
    srv = server(max_staleness=0)
    accepted, pulled = srv.push_gradients_and_pull(g(1, 2, 3), 0, newer_than=0)
    assert accepted and pulled[1] == 1
    assert torch.equal(pulled[0]["w"], torch.tensor([-1.0, -2.0, -3.0]))
    # Stale: dropped, and nothing newer than what the caller already has.
    assert srv.push_gradients_and_pull(g(1, 1, 1), 0, newer_than=1) == (False, None)
    with pytest.raises(TypeError):
        srv.push_gradients_and_pull(g(1, 1, 1), 1, newer_than="1")
    with pytest.raises(ValueError, match="unknown"):
        srv.push_gradients_and_pull({"nope": torch.ones(3)}, 1, newer_than=1)
    assert srv.version == 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_gradients_are_rejected_and_counted(bad):
    srv = server()
    assert srv.push_gradients(g(1, 1, 1), version=0)
    assert not srv.push_gradients({"w": torch.tensor([0.0, bad, 0.0]), "b": torch.ones(1)}, 1)
    state, version = srv.pull()
    assert version == 1 and torch.equal(state["w"], -torch.ones(3))  # nothing applied
    assert torch.equal(state["b"], torch.zeros(1))  # not even the finite tensor
    m = srv.metrics()
    assert (m["received"], m["applied"], m["rejected_non_finite"], m["steps"]) == (2, 1, 1, 1)


def test_reduce_mode_keeps_non_finite_gradients_out_of_the_average():
    srv = server(mode="reduce", reduce_batch_size=2)
    assert srv.push_gradients(g(2, 0, 0), version=0)
    assert not srv.push_gradients(g(float("nan"), 0, 0), version=0)
    assert srv.metrics()["pending"] == 1
    assert srv.push_gradients(g(0, 4, 0), version=0)
    assert torch.equal(srv.pull()[0]["w"], torch.tensor([-1.0, -2.0, 0.0]))


def test_too_many_non_finite_pushes_in_a_row_raise():
    from rlpar.errors import NonFiniteGradients

    srv = server(max_non_finite=3)
    nan = g(float("nan"), 0, 0)
    assert not srv.push_gradients(nan, 0) and not srv.push_gradients(nan, 0)
    assert srv.push_gradients(g(1, 1, 1), 0)  # a good one resets the run
    assert not srv.push_gradients(nan, 1) and not srv.push_gradients(nan, 1)
    with pytest.raises(NonFiniteGradients, match="3 gradient pushes in a row held NaN or inf") as exc:
        srv.push_gradients(nan, 1)
    assert (exc.value.count, exc.value.limit) == (3, 3)
    with pytest.raises(NonFiniteGradients, match="4 gradient pushes"):
        srv.push_gradients(nan, 1)  # still diverged
    assert srv.version == 1 and srv.metrics()["rejected_non_finite"] == 6
    with pytest.raises(NonFiniteGradients):  # the sharded accessor's path counts the same
        srv.reject_non_finite()
    never = server(max_non_finite=None)
    for _ in range(150):
        assert not never.push_gradients(nan, 0)
    with pytest.raises(ValueError, match="max_non_finite"):
        server(max_non_finite=0)
    with pytest.raises(ValueError, match="max_non_finite"):
        GradServerConfig(max_non_finite=True)


def test_non_finite_error_survives_pickling():
    import pickle

    from rlpar.errors import NonFiniteGradients

    back = pickle.loads(pickle.dumps(NonFiniteGradients(7, 5)))
    assert (back.count, back.limit) == (7, 5) and "7 gradient pushes" in str(back)


def test_all_finite_looks_at_every_floating_tensor_once():
    from rlpar.servers.grad import all_finite

    assert all_finite([]) and all_finite([None])
    # Large but finite values: a 2-norm would overflow float32 here, max-abs does not.
    assert all_finite([torch.full((10,), 3e38), torch.full((3,), 65504.0, dtype=torch.float16)])
    assert all_finite([torch.arange(3), None, torch.ones(2, dtype=torch.bfloat16)])
    assert not all_finite([torch.ones(3), torch.tensor([[1.0], [float("nan")]])])
    assert not all_finite([torch.tensor([complex(0, float("inf"))])])
    # The 2-norm overflows on the first tensor; the exact check still finds the -inf.
    assert not all_finite([torch.full((10,), 3e38), torch.tensor([1.0, float("-inf")])])
    assert not all_finite([torch.full((10,), 3e38), torch.tensor([float("nan")], dtype=torch.float16)])


def _trained_server(**kwargs) -> GradServer:
    srv = server(lr_scheduler_factory=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2),
                 **kwargs)
    srv.push_gradients(g(1, 2, 3), version=0)
    return srv


def test_a_loaded_state_is_checked_whole_before_anything_changes():
    from rlpar.errors import StateError

    state = _trained_server().state_dict()
    srv = server(lr_scheduler_factory=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2))
    srv.load_state_dict(state)  # the round trip
    assert srv.version == 1 and torch.equal(srv.pull()[0]["w"], torch.tensor([-1.0, -2.0, -3.0]))
    before = srv.state_dict()
    counters = {k: v for k, v in state["counters"].items() if k != "rejected"}
    cases = [
        ({k: v for k, v in state.items() if k != "counters"}, r"state is missing key\(s\) \['counters'\]"),
        ({**state, "counters": counters}, r"state\['counters'\] is missing key\(s\) \['rejected'\]"),
        ({**state, "counters": {**state["counters"], "version": "1"}},
         r"state\['counters'\]\['version'\] must be an int, got str"),
        ({**state, "model": {"w": torch.zeros(4), "b": torch.zeros(1)}},
         r"state\['model'\]\['w'\] has shape \(4,\), the module's is \(3,\)"),
        ({**state, "lr_scheduler": {"junk": 1}}, r"state\['lr_scheduler'\] is missing key"),
    ]
    for bad, match in cases:
        with pytest.raises(StateError, match=f"GradServer.load_state_dict: {match}"):
            srv.load_state_dict(bad)
        after = srv.state_dict()
        assert torch.equal(after["model"]["w"], before["model"]["w"])
        assert after["counters"] == before["counters"]
        assert after["lr_scheduler"] == before["lr_scheduler"]
