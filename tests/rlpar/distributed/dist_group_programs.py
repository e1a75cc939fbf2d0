"""Entries for the learner-group tests: a world of 2 learners and 2 actors, the ring
all-reduce built from point-to-point sends, and remote handles."""

from __future__ import annotations

import copy
import os
import signal
import time

import dist_programs
import torch
import torch.distributed as dist
from torch import nn

from rlpar.distributed import World
from tests.procs import is_dead

LEARNERS = [0, 1]
TOL = {"rtol": 1e-5, "atol": 1e-6}  # float32 sums in another order differ in the last bits


def ring_all_reduce(group, tensor, *, me: int, size: int, left: int, right: int):
    """The PyTorch tutorial's ring all-reduce ("Writing Distributed Applications"), in
    its bandwidth-optimal form: the tensor is cut into ``size`` chunks; in size-1
    reduce-scatter steps each member sends a chunk to its right neighbour and adds the
    one from its left, so that each ends with one chunk fully summed; in size-1
    all-gather steps those sums go round the ring. ``me`` is the position in the ring;
    ``left``/``right`` are the neighbours as ``group`` addresses them."""
    out = tensor.clone().reshape(-1)
    chunks = torch.tensor_split(out, size)
    for step in range(size - 1):
        send, recv = (me - step) % size, (me - step - 1) % size
        incoming = torch.empty_like(chunks[recv])
        pending = [group.isend(chunks[send], right), group.irecv(incoming, left)]
        for work in pending:
            work.wait()
        chunks[recv].add_(incoming)
    for step in range(size - 1):
        send, recv = (me - step + 1) % size, (me - step) % size
        pending = group.isend(chunks[send], right)
        group.recv(chunks[recv], left)
        pending.wait()
    return out.reshape(tensor.shape)


def _caught(fn, *args, **kwargs):
    start = time.monotonic()
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        return type(exc).__name__, str(exc), time.monotonic() - start
    return None


def _wait_key(store, key: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not store.check([key]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"store key {key!r} not set within {timeout} s")
        time.sleep(0.005)


def gated_square(x):
    """A service that finishes only once the caller opens the gate."""
    from rlpar.distributed import current_world

    _wait_key(current_world().store, "t/gate", 20.0)
    return x * x


def later_cube(x):
    fut = torch.futures.Future()
    fut.set_result(x ** 3)
    return fut


def fail(x):
    raise KeyError(f"no such thing {x}")


def fetch(handle):
    """Runs on a third rank: asks the host whether the value is ready (a copy of a
    handle does not know) and fetches it straight from the host."""
    return handle.done(), handle.value()


def _everyone(world, out):
    """Every rank (a synchronous job's group): point to point and the ring."""
    group = world.create_learner_group("everyone", range(world.world_size))
    me, size = group.rank, group.size
    right, left = (me + 1) % size, (me - 1) % size
    torch.manual_seed(100 + world.rank)
    data = torch.randn(4, 9)
    out["ring"] = ring_all_reduce(group, data, me=me, size=size, left=left, right=right)
    out["all_reduce"] = group.all_reduce(data.clone())
    got = group.recv(torch.zeros(2), left, tag=3) if me % 2 else None
    if me % 2 == 0:
        group.send(torch.tensor([float(me), 7.0]), right, tag=3)
    else:
        out["recv"] = got.tolist()
    out["self_send"] = _caught(group.isend, torch.zeros(1), me)
    out["bad_peer"] = _caught(group.recv, torch.zeros(1), size)
    group.destroy()
    out["after_destroy"] = _caught(group.barrier)


class _Net(nn.Module):
    """Float32 and float64 parameters, and a layer the loss never uses (no grad)."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.unused = nn.Linear(5, 4), nn.Linear(2, 2)
        self.scale = nn.Parameter(torch.rand(4, dtype=torch.float64))


def _learners(world, out):
    group = world.create_learner_group("learners", LEARNERS)
    out["repr"] = repr(group)
    out["group"] = (group.rank, group.size, group.ranks, group.backend, str(group.device))
    out["sum"] = group.all_reduce(torch.tensor([world.rank + 1.0])).item()
    out["max"] = group.all_reduce(torch.tensor([float(world.rank)]), op="max").item()
    out["broadcast"] = group.broadcast(torch.tensor([float(world.rank), 5.0]), src=1).tolist()
    out["all_gather"] = [t.item() for t in group.all_gather(torch.tensor([10.0 * world.rank]))]
    group.barrier()
    out["conflict"] = _caught(world.create_learner_group, "learners", [0, 1, 2])
    if not torch.cuda.is_available():
        out["nccl_on_cpu"] = _caught(world.create_learner_group, f"gpus{world.rank}",
                                     [world.rank], backend="nccl")
    # Different initial networks, then rank 1's everywhere.
    torch.manual_seed(world.rank)
    net = _Net()
    group.broadcast_parameters(net, src=1)
    flat = torch.cat([p.detach().double().reshape(-1) for p in net.parameters()])
    out["params_equal"] = all(torch.equal(flat, t) for t in group.all_gather(flat))

    def loss(model, r):
        x = torch.linspace(-1, 1, 15).reshape(3, 5) * (r + 1)
        return (model.body(x).double() * model.scale).pow(2).sum()

    expected = []
    for r in range(group.size):  # what each member computes, done here for both
        twin = copy.deepcopy(net)
        loss(twin, r).backward()
        expected.append([p.grad if p.grad is not None else torch.zeros_like(p)
                         for p in twin.parameters()])
    loss(net, group.rank).backward()
    group.average_gradients(net, bucket_mb=60 / 2**20)  # a few dozen bytes: many buckets
    out["grads_mean"] = all(torch.allclose(p.grad, (a + b) / 2, **TOL)
                            for p, a, b in zip(net.parameters(), *expected))
    out["unused_grad_zero"] = net.unused.weight.grad is not None and not net.unused.weight.grad.any()
    # The same on bare tensors (what an algorithm's gradient hook hands over).
    tensors = [torch.full((3,), float(group.rank)), torch.full((2, 2), 10.0 * group.rank)]
    group.average(tensors, bucket_mb=16 / 2**20)
    out["tensors_mean"] = (torch.equal(tensors[0], torch.full((3,), 0.5))
                           and torch.equal(tensors[1], torch.full((2, 2), 5.0)))
    return group


def _rejoin_while_reducing(world, group, out):
    """Learners all-reduce without pause while actor 2 dies and its replacement
    rejoins; rank 0 decides each reduce's phase and the stop, so both count alike."""
    store = world.store
    counts = [0, 0, 0]  # before the kill, while the actor is dead or rejoining, after
    phase, after, dead_pid = 0, 0, None
    while True:
        if world.rank == 0:
            if dead_pid is None and store.check(["t/actor_pid"]):
                pid = int(store.get("t/actor_pid"))
                dead_pid = pid if is_dead(pid) else None
            if store.check(["t/rejoined"]):
                phase = 2
            elif dead_pid is not None:
                phase = 1
            after += phase == 2
            stop = float(after >= 10)
            state = torch.tensor([1.0, float(phase), stop])
        else:
            state = torch.tensor([1.0, 0.0, 0.0])
        group.all_reduce(state)
        out.setdefault("reduce_sums", set()).add(state[0].item())
        counts[int(state[1])] += 1
        if world.rank == 0:
            store.set("t/learning", "1")
            if counts[1] >= 5:
                store.set("t/saw_dead", "1")
        if state[2]:
            break
    out["counts"] = counts


def _failures(world, group, out, rpc):
    """A silent member times the group out; a dead one breaks it at once."""
    store = world.store
    quiet = world.create_learner_group("quiet", LEARNERS, timeout=1.0)
    if world.rank == 0:
        out["silent"] = _caught(quiet.all_reduce, torch.zeros(1))
        out["after_silent"] = _caught(quiet.barrier)
        store.set("t/quiet_done", "1")
    else:
        _wait_key(store, "t/quiet_done")
    out["learners_still"] = group.all_reduce(torch.ones(1)).item()
    if world.rank == 0:
        store.set("t/doomed_go", "1")
        doomed = world.create_learner_group("doomed", [0, 3])
        out["doomed_first"] = doomed.all_reduce(torch.ones(1)).item()
        kept = rpc.remote("square", torch.tensor(7.0))
        while not kept.done():
            time.sleep(0.005)
        store.set("t/kill3", "1")
        _wait_key(store, "t/pid3")
        while not is_dead(int(store.get("t/pid3"))):
            time.sleep(0.005)
        out["dead_member"] = _caught(doomed.all_reduce, torch.ones(1))
        out["dead_host_kept"] = _caught(kept.value)
        out["dead_host_new"] = _caught(lambda: rpc.remote("square", 2).value())


def _handles(world, rpc, out):
    """Rank 0 starts services on rank 3 and fetches their values later."""
    gated = rpc.remote("gated", 5)
    out["done_before_gate"] = gated.done()
    world.store.set("t/gate", "1")
    while not gated.done():
        time.sleep(0.005)
    out["gated"] = (gated.value(), gated.value())  # the second comes from the handle
    out["deferred"] = rpc.remote("later", 3).value()
    out["fail"] = _caught(rpc.remote("fail", 4).value)
    out["missing"] = _caught(rpc.remote, "nobody", 1)
    passed = rpc.remote("square", 6)
    while not passed.done():
        time.sleep(0.005)
    out["third_rank"] = rpc.call("fetch", passed)
    out["after_third"] = _caught(passed.value)
    released = rpc.remote("square", 8)
    out["released"] = released.release()
    out["after_release"] = _caught(released.value)


def learners_and_actors():
    """4 ranks: learners 0 and 1, actors 2 and 3 (restartable)."""
    torch.set_num_threads(1)
    out: dict = {}
    with World.from_env(rpc_timeout=20.0) as world:
        store, rank = world.store, world.rank
        rpc = world.create_rpc_group("g", world.names)
        out["default_pg"] = dist.is_initialized()
        if world.rejoined:
            out["non_member"] = _caught(world.create_learner_group, "learners", LEARNERS)
            if rank == 2:
                _wait_key(store, "t/saw_dead")
                out["ping"] = rpc.call("ping", rank)
                store.set("t/rejoined", "1")
            store.set(f"t/done/{rank}", "1")
            return rank, world.rank_restarts, out
        if rank == 0:
            rpc.register("ping", lambda r: r * 10)
        if rank == 1:
            rpc.register("fetch", fetch)
        if rank == 3:
            for key, fn in (("gated", gated_square), ("fail", fail), ("square", lambda x: x * x)):
                rpc.register(key, fn)
            rpc.register("later", later_cube, deferred=True)
        rpc.barrier()
        if rank == 0:
            _handles(world, rpc, out)
        _everyone(world, out)
        if rank in LEARNERS:
            group = _learners(world, out)
            out["listening"] = dist_programs.listening_addresses()
            _rejoin_while_reducing(world, group, out)
            _failures(world, group, out, rpc)
            store.set(f"t/done/{rank}", "1")
            # Rank 0 hosts the store: it stays until every rank, replacements
            # included, is done with it (its shutdown will not wait for ranks it saw die).
            if rank == 0:
                for r in range(1, world.world_size):
                    _wait_key(store, f"t/done/{r}")
        else:
            if rank == 2:
                _wait_key(store, "t/learning")
                out["ping"] = rpc.call("ping", rank)
                store.set("t/actor_pid", str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            _wait_key(store, "t/doomed_go")
            doomed = world.create_learner_group("doomed", [0, 3])
            doomed.all_reduce(torch.ones(1))
            _wait_key(store, "t/kill3")
            store.set("t/pid3", str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return rank, world.rank_restarts, out
