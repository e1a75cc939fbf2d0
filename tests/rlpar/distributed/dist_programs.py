"""Entry points run in launched ranks by the distributed tests (importable by children)."""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time

import torch

from rlpar.distributed import World, current_world
from rlpar.errors import PeerUnavailable, RemoteError, ServiceNotFound
from tests.procs import is_dead


def square(x):
    return x * x


def slow(seconds):
    time.sleep(seconds)
    return seconds


def fail_with_key_error(x):
    raise KeyError(f"missing thing {x}")


def later_square(x):
    """A deferred service: the answer comes from another thread after the call returned."""
    fut = torch.futures.Future()
    threading.Timer(0.01, fut.set_result, (x * x,)).start()
    return fut


def later_fail(x):
    fut = torch.futures.Future()
    fut.set_exception(KeyError(f"missing later {x}"))
    return fut


def _caught(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None


def use_group_remotely(group, x):
    """Runs on another rank with an unpickled group: call a service through it."""
    return group.current_member, group.call("square", x)


def async_future_semantics(g):
    """call_async futures behave like torch futures with rlpar's errors everywhere a
    caller can read them: wait, value, wait_all, collect_all, then."""
    failed = g.call_async("fail", 8)
    out = {"wait_all_error": _caught(torch.futures.wait_all, [failed]),
           "done": failed.done(),
           "value_error": _caught(failed.value),
           "wait_all": torch.futures.wait_all([g.call_async("square", i) for i in (2, 3)]),
           "collect_all": [f.wait() for f in torch.futures.collect_all(
               [g.call_async("square", 4), g.call_async("square", x=5)]).wait()],
           "then": g.call_async("square", 6).then(lambda f: f.wait() + 1).wait(),
           "missing": _caught(g.call_async, "nobody", 1)}
    try:
        failed.wait()
    except RemoteError as exc:
        out["traceback"] = exc.child_traceback
    return out


def rpc_roundtrips():
    """Three ranks: services, errors, pickled groups, pairing, barriers, collectives."""
    torch.set_num_threads(1)
    with World.from_env(rpc_timeout=20, process_group_backend="gloo") as world:
        g = world.create_rpc_group("svc", world.names)
        out = {"names": world.names, "name": world.name, "rank": world.rank,
               "current_world": current_world() is world}
        if world.rank == 1:
            g.register("square", square)
            g.register("fail", fail_with_key_error)
            g.register("slow", slow)
            g.register("later", later_square, deferred=True)
            g.register("later_fail", later_fail, deferred=True)
            g.register("not_a_future", square, deferred=True)
            out["dup"] = _caught(g.register, "square", square)
            g.pair("weights", torch.arange(4.0))
        g.barrier(timeout=20)
        if world.rank == 2:
            out["dup_other"] = _caught(g.register, "square", square)
        if world.rank == 0:
            out["call"] = g.call("square", 7)
            out["kwargs"] = g.call("square", x=torch.full((2,), 3.0)).tolist()
            futs = [g.call_async("square", i) for i in range(20)]
            out["async"] = [f.wait() for f in futs]
            try:
                g.call("fail", 5)
            except RemoteError as exc:
                out["remote"] = (str(exc), exc.child_name, exc.child_traceback)
            try:
                g.call_async("fail", 6).wait()
            except RemoteError as exc:
                out["remote_async"] = exc.child_traceback
            out["async_futures"] = async_future_semantics(g)
            out["deferred"] = [g.call("later", 3), g.call_async("later", 4).wait()]
            out["deferred_fail"] = _caught(g.call, "later_fail", 5)
            out["not_a_future"] = _caught(g.call_async("not_a_future", 2).wait)
            out["missing"] = _caught(g.call, "nobody", 1)
            out["bad_timeout"] = _caught(g.call, "square", 1, timeout=-1.0)
            out["is_registered"] = (g.is_registered("square"), g.is_registered("nobody"))
            out["paired"] = g.get_paired("weights").to_here().tolist()
            out["paired_missing"] = _caught(g.get_paired, "nothing")
            start = time.monotonic()
            out["silent"] = _caught(g.call, "slow", 3.0, timeout=0.5)
            out["silent_async"] = _caught(lambda: g.call_async("slow", 3.0, timeout=0.5).wait())
            out["silent_s"] = time.monotonic() - start
            out["after_silent"] = g.call("square", 2)
            g.wait_registered("late", timeout=20)
            out["late"] = g.call("late", 11)
        if world.rank == 2:
            time.sleep(0.3)  # registered late, without a barrier: rank 0 waits for it
            g.register("late", square)
            other = world.create_rpc_group("helper", ["rank2"])
            other.register("use_group", use_group_remotely)
        g.barrier(timeout=20)
        if world.rank == 0:
            helper = world.get_rpc_group("helper")
            out["pickled"] = helper.call("use_group", g, 5)
            out["conflict"] = _caught(world.create_rpc_group, "helper", ["rank0"])
        g.barrier(timeout=20)
        if world.rank == 1:
            out["self_call"] = g.call("square", 6)
            out["local_rank"] = world.local_rank
            g.deregister("square")
        g.barrier(timeout=20)
        if world.rank == 0:
            out["after_deregister"] = _caught(g.call, "square", 2)
        g.barrier(timeout=20)
        out.update(collectives(world))
        out["listening"] = listening_addresses()
        return out


def collectives(world):
    """Collectives on the subgroup of ranks 0 and 2 and on the whole world (gloo)."""
    out = {}
    pair = world.create_collective_group([0, 2])  # every rank creates every group
    everyone = world.create_collective_group(range(world.world_size))
    me = float(world.rank)
    if pair.is_member:
        out["all_reduce"] = pair.all_reduce(torch.tensor([me + 1.0])).item()
        out["all_reduce_max"] = pair.all_reduce(torch.tensor([me]), op="max").item()
        out["broadcast"] = pair.broadcast(torch.tensor([me, -me]), src=2).tolist()
        out["all_gather"] = [t.item() for t in pair.all_gather(torch.tensor([10.0 * me]))]
        out["reduce"] = pair.reduce(torch.tensor([me + 1.0]), dst=0).item()
        gathered = pair.gather(torch.tensor([me * me]), dst=2)
        out["gather"] = None if gathered is None else [t.item() for t in gathered]
        chunks = [torch.tensor([5.0]), torch.tensor([7.0])] if world.rank == 0 else None
        out["scatter"] = pair.scatter(torch.zeros(1), src=0, chunks=chunks).item()
        out["bad_op"] = _caught(pair.all_reduce, torch.zeros(1), op="median")
        out["bad_src"] = _caught(pair.broadcast, torch.zeros(1), src=1)
        pair.barrier()
    else:
        out["non_member"] = _caught(pair.all_reduce, torch.zeros(1))
    out["world_sum"] = everyone.all_reduce(torch.tensor([me])).item()
    out.update(point_to_point(world, everyone))
    everyone.barrier()
    return out


def point_to_point(world, everyone):
    """send/recv/isend/irecv by world rank, and the ring all-reduce built from them."""
    from dist_group_programs import ring_all_reduce

    size, me = world.world_size, world.rank
    right, left = (me + 1) % size, (me - 1) % size
    out = {}
    torch.manual_seed(10 + me)
    data = torch.randn(3, 7)
    out["ring"] = ring_all_reduce(everyone, data, me=me, size=size, left=left, right=right)
    out["ring_reference"] = everyone.all_reduce(data.clone())
    if me == 0:
        everyone.send(torch.tensor([1.0, 2.0]), dst=2)
        incoming = torch.zeros(1)
        everyone.irecv(incoming, src=1).wait()
        out["recv"] = incoming.tolist()
    elif me == 1:
        everyone.isend(torch.tensor([9.0]), dst=0).wait()
    else:
        out["recv"] = everyone.recv(torch.zeros(2), src=0).tolist()
    out["self_send"] = _caught(everyone.send, torch.zeros(1), me)
    return out


def call_dead_peer(timeout):
    """Rank 1 hosts a service then SIGKILLs itself; rank 0 must get PeerUnavailable
    within the timeout, and its shutdown must not hang."""
    torch.set_num_threads(1)
    world = World.from_env(rpc_timeout=timeout)
    g = world.create_rpc_group("g", world.names)
    if world.rank == 1:
        g.register("square", square)
        world.store.set("pid1", str(os.getpid()))
    g.barrier(timeout=timeout)
    if world.rank == 1:
        g.barrier(timeout=timeout)
        os.kill(os.getpid(), signal.SIGKILL)
    first = g.call("square", 3)
    g.barrier(timeout=timeout)
    pid = int(world.store.get("pid1"))
    while not is_dead(pid):
        time.sleep(0.01)
    start = time.monotonic()
    outcomes = []
    for call in (lambda: g.call("square", 4, timeout=timeout),
                 lambda: g.call_async("square", 5, timeout=timeout).wait()):
        try:
            call()
            outcomes.append("no error")
        except PeerUnavailable as exc:
            outcomes.append(f"PeerUnavailable: {exc}")
    elapsed = time.monotonic() - start
    # A replacement takes over the dead host's key; the stale cached host is dropped.
    g.register("square", square, replace=True)
    replaced = g.call("square", 6)
    never = _caught(g.wait_registered, "never", timeout=0.2)
    t0 = time.monotonic()
    world.shutdown(timeout=timeout)
    return first, outcomes, elapsed, time.monotonic() - t0, replaced, never


def dump(path, value):
    with open(path, "wb") as f:
        pickle.dump(value, f)


def current_world_name():
    with World.from_env(rpc_timeout=20) as world:
        return world.name, current_world() is world, ServiceNotFound.__name__


def listening_addresses():
    """Local addresses of the TCP sockets this process listens on (from /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                    found.append(_decode_address(fields[1]))
    return found


def _decode_address(text):
    import ipaddress
    import struct

    hex_ip, hex_port = text.split(":")
    raw = bytes.fromhex(hex_ip)
    # /proc/net stores the address as native-endian 32-bit words.
    words = struct.unpack(f"<{len(raw) // 4}I", raw)
    packed = b"".join(struct.pack(">I", w) for w in words)
    return str(ipaddress.ip_address(packed)), int(hex_port, 16)


def listen_on(address):
    """A one-rank world listening on ``address``: what it logs and where it listens."""
    import logging

    messages = []

    class Keep(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    logger = logging.getLogger("rlpar.distributed.world")
    logger.addHandler(Keep())
    with World.from_env(rpc_timeout=20, listen_address=address) as world:
        g = world.create_rpc_group("solo", world.names)
        g.register("square", square)
        value = g.call("square", 5)
        listening = listening_addresses()
    return messages, listening, os.environ.get("TP_SOCKET_IFNAME"), value
