"""The hosted trajectory queue's world (importable by the ranks): rank 0 hosts the
queue, ranks 1 and 2 put into it; then puts wait for room longer than their RPC
timeout (rank 2's at rank 0: they succeed) while rank 1, hosting a queue that rank 0
waits at, freezes (rank 0's put fails); then rank 2 is SIGKILLed mid-send."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import torch

from rlpar.buffers import HostedQueue, TrajectoryQueue
from rlpar.distributed import World
from tests.procs import is_dead

UNROLL = (20, 8, 10, 10, 6)  # 20 steps x 8 envs of 10x10x6 observations: 384 KB
BIG = 2_000_000  # floats: 8 MB, so that a kill likely lands mid-transfer
PER = 12  # items per producer in the ordered phase
IN_FLIGHT = 4
CAPACITY = 2
THREADS = 4  # the host's RPC threads: fewer than the puts that wait for room
SHORT = 1.0  # the RPC timeout of the long waits' puts


def unroll(producer: int, seq: int, shape) -> dict:
    obs = np.full(shape, seq, np.float32)
    return {"obs": obs, "meta": np.array([producer, seq, obs.size])}


def whole(item) -> bool:
    producer, seq, size = item["meta"].tolist()
    return item["obs"].size == size and bool((item["obs"] == seq).all())


def _wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def hosted_queue_world(timeout: float):
    torch.set_num_threads(1)
    world = World.from_env(rpc_timeout=timeout, num_worker_threads=THREADS)
    group = world.create_rpc_group("q", world.names)
    slow = HostedQueue.host(group, "slow", TrajectoryQueue(capacity=1)) if world.rank == 0 else None
    frozen = HostedQueue.host(group, "frozen", TrajectoryQueue(capacity=1)) if world.rank == 1 else None
    out = (_host if world.rank == 0 else _produce)(world, group, timeout, slow, frozen)
    world.shutdown(graceful=False)  # rank 2 is dead: the ranks met in the store instead
    return out


def _host(world, group, timeout, slow, frozen):
    out = {}
    queue = TrajectoryQueue(capacity=CAPACITY)
    hosted = HostedQueue.host(group, "traj", queue)
    group.register("ping", lambda x: x + 1)
    group.barrier(timeout=timeout)

    # Ordered phase: the first get waits in this thread while RPC threads put.
    taken = hosted.get(1, timeout=timeout)
    # A put is answered once enqueued: with the queue full, each producer's IN_FLIGHT
    # unanswered puts all wait for room, more of them than the host has RPC threads,
    # and another service still answers.
    out["full"] = _wait_until(lambda: queue.stats().waiting == 2 * IN_FLIGHT, timeout)
    out["ping"] = group.call("ping", 1, timeout=timeout)
    time.sleep(0.2)  # the producers are blocked: nothing more arrives
    out["held"] = queue.stats()
    while len(taken) < 2 * PER:
        taken += hosted.get(min(2, 2 * PER - len(taken)), timeout=timeout)
    out["ordered"] = [tuple(x["meta"][:2].tolist()) for x in taken]
    out["ordered_whole"] = all(whole(x) for x in taken)
    group.barrier(timeout=timeout)  # the producers saw their puts answered
    out.update(_long_waits(world, group, timeout, slow))

    # Kill phase: rank 2 sends 8 MB items in a loop; once 3 came out it is told to
    # SIGKILL itself right after a put returns, while the host reads that item's bytes.
    pid2 = int(world.store.get("pid2"))
    seen: dict[int, list[int]] = {1: [], 2: []}
    items = []

    def take():
        items.append(hosted.get(1, timeout=timeout)[0])
        seen[int(items[-1]["meta"][0])].append(int(items[-1]["meta"][1]))

    while len(seen[2]) < 3:
        take()
    world.store.set("kill2", "1")
    while not is_dead(pid2):  # rank 2 may wait for room before its last put
        take()
    at_kill = len(seen[1])
    while len(seen[1]) < at_kill + 20:  # the other producer goes on
        take()
    out["seen"], out["killed_whole"] = seen, all(whole(x) for x in items)
    out["big"] = {x["obs"].size for x in items if x["meta"][0] == 2}
    hosted.close()  # rank 1's waiting and later puts are answered False
    out["bye"] = _wait_until(lambda: world.store.check(["bye1"]), timeout)
    out["stats"] = hosted.stats()
    return out


def _long_waits(world, group, timeout, slow):
    # Rank 2's second put waits at the full "slow" queue (here) for 3 of its RPC
    # timeouts, while this rank's second put waits at rank 1's full "frozen" queue
    # until rank 1 freezes (SIGSTOP).
    remote = HostedQueue.connect(group, "frozen", max_in_flight=2, timeout=SHORT)
    assert remote.put(unroll(0, 0, (4,))) and remote.put(unroll(0, 1, (4,)))
    assert _wait_until(lambda: slow.stats().waiting == 1, timeout)
    held_since = time.monotonic()
    assert _wait_until(lambda: world.store.check(["frozen1"]), timeout)
    frozen_at = time.monotonic()
    try:
        remote.wait(timeout=timeout)
        failed = "no error"
    except Exception as exc:  # noqa: BLE001 - its type is the result
        failed = type(exc).__name__
    out = {"frozen_failed": failed, "frozen_failed_after": time.monotonic() - frozen_at}
    os.kill(int(world.store.get("pid1")), signal.SIGCONT)
    time.sleep(max(0.0, 3 * SHORT - (time.monotonic() - held_since)))
    out["slow_ids"] = [int(slow.get(1, timeout=timeout)[0]["meta"][1]) for _ in range(2)]
    assert _wait_until(lambda: world.store.check(["slow2"]), timeout)
    out["slow_held"] = time.monotonic() - held_since
    out["slow_producer"] = world.store.get("slow2").decode()
    group.barrier(timeout=timeout)
    return out


def _produce(world, group, timeout, slow, frozen):
    rank = world.rank
    world.store.set(f"pid{rank}", str(os.getpid()))
    remote = HostedQueue.connect(group, "traj", max_in_flight=IN_FLIGHT)
    group.barrier(timeout=timeout)
    for seq in range(PER):
        assert remote.put(unroll(rank, seq, UNROLL))
    assert remote.wait(timeout=timeout)
    out = {"depth_seen": len(remote)}
    group.barrier(timeout=timeout)

    if rank == 2:  # a put that waits past its RPC timeout, at a host that answers
        remote = HostedQueue.connect(group, "slow", max_in_flight=2, timeout=SHORT)
        assert remote.put(unroll(rank, 0, (4,))) and remote.put(unroll(rank, 1, (4,)))
        try:
            world.store.set("slow2", f"{remote.wait(timeout=timeout)} {remote.dropped} {remote.timeouts}")
        except Exception as exc:  # noqa: BLE001 - told to the host, which checks
            world.store.set("slow2", repr(exc))
    else:  # rank 0's put waits at this host, told "still waiting", until it freezes
        assert _wait_until(lambda: frozen.stats().waiting == 1, timeout)
        time.sleep(2 * SHORT)
        world.store.set("frozen1", "1")
        os.kill(os.getpid(), signal.SIGSTOP)  # rank 0 sends SIGCONT once its put failed
    group.barrier(timeout=timeout)

    remote = HostedQueue.connect(group, "traj", max_in_flight=2)  # a new stream
    seq = 0
    if rank == 2:
        while not world.store.check(["kill2"]):
            remote.put(unroll(rank, seq, BIG))
            seq += 1
        remote.put(unroll(rank, seq, BIG))  # sent: the host reads it from this process
        os.kill(os.getpid(), signal.SIGKILL)
    while remote.put(unroll(rank, seq, (4,))):
        seq += 1
    remote.wait(timeout=timeout)
    out.update(sent=remote.sent, closed=remote.closed, dropped=remote.dropped,
               refused=remote.put(unroll(rank, seq, (4,))))
    world.store.set("bye1", "1")
    return out
