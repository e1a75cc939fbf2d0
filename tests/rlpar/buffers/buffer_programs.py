"""Entry point run in 3 ranks by the distributed replay test (importable by children)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import torch

from rlpar.buffers import (
    DistributedPrioritizedReplayBuffer,
    DistributedReplayBuffer,
    PrefetchingSampler,
    SharedFrames,
)
from rlpar.buffers.distributed import SHARD_SHIFT
from rlpar.distributed import World
from rlpar.errors import PeerUnavailable
from tests.procs import is_dead

SIZES = (5, 9, 6)


def items(start, n):
    ids = np.arange(start, start + n)
    return {"obs": ids[:, None].astype(np.float32), "action": ids.astype(np.int64)}


def frame_items(start, n):
    """Steps ``start..start+n-1`` of a stream of 2x3 frames (frame t is all t), as
    3-frame stacks: next_obs shares 2 frames with obs."""
    frames = np.repeat(np.arange(start, start + n + 3, dtype=np.uint8), 6).reshape(-1, 2, 3)
    t = np.arange(n)
    return {
        "obs": np.stack([frames[i : i + 3] for i in t]),
        "next_obs": np.stack([frames[i + 1 : i + 4] for i in t]),
        "action": start + t,
    }


def frame_rows_ok(batch):
    t = batch["action"][:, None, None, None] + np.arange(3)[:, None, None]
    return bool((batch["obs"] == t).all() and (batch["next_obs"] == t + 1).all())


def priorities(rank):
    return np.linspace(0.5, 3.0, SIZES[rank]) * (rank + 1)


def _caught(fn):
    t0 = time.monotonic()
    try:
        fn()
        return "no error", time.monotonic() - t0
    except PeerUnavailable as exc:
        return f"PeerUnavailable: {exc}", time.monotonic() - t0


def sharded_world(draws, timeout):
    """One shard per rank; rank 0 samples (through a PrefetchingSampler) and checks
    stale updates; a uniform buffer with dedicated shards on ranks 1, 2 takes rank
    0's adds remotely. Then rank 2 SIGKILLs itself and rank 0 samples again from a
    buffer configured to raise and from one configured to drop the dead shard."""
    torch.set_num_threads(1)
    world = World.from_env(rpc_timeout=timeout)
    rank = world.rank
    group = world.create_rpc_group("replay", world.names)
    per = DistributedPrioritizedReplayBuffer(
        group=group,
        name="per",
        capacity=16,
        alpha=0.6,
        beta=0.4,
        eps=0.0,
        seed=rank,
        timeout=timeout,
    )
    uni = DistributedReplayBuffer(
        group=group, name="uni", capacity=32, shard_members=["rank1", "rank2"], timeout=timeout
    )
    frames = DistributedReplayBuffer(
        group=group, name="frames", capacity=16, timeout=timeout, seed=rank,
        shared_frames=SharedFrames(),
    )
    policies = {
        policy: DistributedPrioritizedReplayBuffer(
            group=group,
            name=policy,
            capacity=16,
            timeout=timeout,
            on_shard_failure=policy,
            seed=rank,
        )
        for policy in ("raise", "drop")
    }
    if rank == 1:
        group.register("refill", lambda: per.add(items(500, 16), priorities=np.full(16, 2.0)))
    if rank in (1, 2):
        group.register(f"leaves{rank}", lambda: per.shard.buffer.sum_tree.leaves.copy())
    world.store.set(f"pid{rank}", str(os.getpid()))
    group.barrier(timeout=timeout)  # every shard's services are registered

    per.add(items(sum(SIZES[:rank]), SIZES[rank]), priorities=priorities(rank))
    uni.add(items(1000 + 10 * rank, 3))  # rank 0 hosts no "uni" shard: remote add
    frames.add(frame_items(50 * rank, 6))
    for buf in policies.values():
        buf.add(items(10 * rank, 4))
    group.barrier(timeout=timeout)
    out = {"local_size": per.local_size}
    if rank == 0:
        actions, weights = [], []
        with PrefetchingSampler(buffer=per, batch_size=8, depth=2) as pre:
            for _ in range(draws):
                s = pre.sample()
                actions.append(s.batch["action"])
                weights.append(s.weights)
            out["wait_fraction"] = pre.wait_fraction
        out["actions"], out["weights"] = np.concatenate(actions), np.concatenate(weights)
        # Shard 1 is refilled after the sample and before its priority update lands.
        s = per.sample(20)
        group.call("refill", timeout=timeout)
        per.update_priorities(s.indices, np.full(20, 50.0))
        per.flush_updates()
        out["sampled_shards"] = sorted(set((s.indices >> SHARD_SHIFT).tolist()))
        out["leaves1"] = group.call("leaves1", timeout=timeout)
        out["leaves2"] = group.call("leaves2", timeout=timeout)
        out["update_errors"] = per.sampler.update_errors
        out["uni_len"] = len(uni)
        out["uni_actions"] = np.sort(uni.sample(9).batch["action"])
        # Shards reply with frames as stored; the sampler splits the merged batch.
        batch = frames.sample(18).batch
        out["frames_ok"] = frame_rows_ok(batch)
        out["frames_shards"] = sorted(set((batch["action"] // 50).tolist()))
        for buf in policies.values():
            buf.sample(6)  # every shard has replied once
    group.barrier(timeout=timeout)
    if rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == 0:
        pid = int(world.store.get("pid2"))
        while not is_dead(pid):
            time.sleep(0.01)
        out["raise"], out["raise_s"] = _caught(lambda: policies["raise"].sample(6))
        t0 = time.monotonic()
        s = policies["drop"].sample(6)
        out["drop_s"] = time.monotonic() - t0
        out["drop_shards"] = sorted(set((s.indices >> SHARD_SHIFT).tolist()))
        out["drop_len"] = len(policies["drop"])
        policies["drop"].update_priorities(s.indices, np.ones(6))
        policies["drop"].flush_updates()
        out["drop_update_errors"] = policies["drop"].sampler.update_errors
        world.store.set("rank0_done", "1")
    else:
        world.store.wait(["rank0_done"])
    world.shutdown(timeout=timeout)
    return out
