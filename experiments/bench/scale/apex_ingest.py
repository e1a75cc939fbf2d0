"""Ingest at Ape-X scale: K sender processes fill one prioritized replay while a
learner samples batches of 512 from it and sends their priorities back.

A sender is an Ape-X actor without env or network: it replays pre-built batches
exactly as :class:`~algorithms.apex.ApexActor` adds them (n-step transitions of
``num_envs`` envs over ``add_every`` vector steps, 4x84x84 uint8 frame stacks that
overlap as Atari's do, initial priorities) through the same handles the job uses:
``HostedBuffer.connect`` (replay in the learner process), a
``DistributedPrioritizedReplayBuffer`` without a shard of its own (replay ranks) or
with one (placement "actors": adds are local, the learner samples every shard).
The replay stores frames in the shared-frames layout, as the job does for Atari.

One local world per point: rank 0 is the learner (and the replay's host with
``placement="learner"``), ranks 1..R replay ranks, the rest senders. Phases,
separated by barriers, each with its own figures:

``raw_local``   the replay host adds the same batches itself (no RPC): the replay's
                insert ceiling;
``offered``     senders add at ``rate`` transitions/s together (the paper's 12.5K/s by
                default) while the learner samples and updates priorities non-stop;
``max``         the same with senders as fast as their handles let them;
``raw_rpc``     senders ``rpc_async`` the same arrays as tensors to a no-op on the
                same host (4 in flight, as RemoteAdder): the transport's ceiling
                (none with placement "actors").
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np

PHASES = ("offered", "max")


@dataclasses.dataclass(frozen=True)
class IngestPoint:
    placement: str  # "learner", "replay-ranks" or "actors"
    senders: int
    replay_ranks: int
    rate: float  # offered transitions/s of all senders together
    seconds: float  # per measured phase
    capacity: int  # replay capacity (all shards together)
    batch_size: int = 512
    num_envs: int = 8  # env copies per simulated actor (the job's default)
    add_every: int = 16  # vector steps per add (ApexConfig.add_every)
    n_step: int = 3
    in_flight: int = 4  # RemoteAdder's default max_in_flight

    @property
    def nprocs(self) -> int:
        return 1 + self.replay_ranks + self.senders


def memory_mb() -> dict[str, float]:
    """This process's resident (RSS) and proportional (PSS: shared pages split
    between the processes that map them) memory."""
    out = {}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                key, value = line.split()[:2]
                if key in ("Rss:", "Pss:"):
                    out[key[:-1].lower() + "_mb"] = int(value) / 1024
    except OSError:
        pass
    return out


def actor_batches(point: IngestPoint, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """``count`` add batches as one actor makes them: its ``num_envs`` frame-stacked
    streams through an NStepAssembler, ``add_every`` vector steps per batch."""
    from rlpar.buffers import NStepAssembler

    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, size=(97, 84, 84), dtype=np.uint8)
    start = rng.integers(0, 97, size=point.num_envs)
    assembler = NStepAssembler(num_envs=point.num_envs, n=point.n_step, gamma=0.99)

    def stacks(t: int) -> np.ndarray:
        return np.stack([pool[(start[e] + t + np.arange(4)) % 97] for e in range(point.num_envs)])

    batches, pending, t = [], [], 0
    while len(batches) < count:
        done = assembler.step(obs=stacks(t), action=rng.integers(0, 4, point.num_envs),
                              reward=rng.random(point.num_envs), next_obs=stacks(t + 1),
                              terminated=np.zeros(point.num_envs, bool),
                              truncated=np.zeros(point.num_envs, bool))
        t += 1
        if len(done["reward"]):
            pending.append(done)
        if len(pending) == point.add_every:
            batch = {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
            priorities = (0.1 + rng.random(len(batch["reward"]))).astype(np.float32)
            batches.append((batch, priorities))
            pending = []
    return batches


def _noop(batch: Any, priorities: Any) -> None:
    return None


def _replay(point: IngestPoint, group: Any, names: list[str], role: str):
    """The replay handle of this rank, built as the job builds it."""
    from experiments.roles.actor_learner import REPLAY
    from rlpar.buffers import (
        DistributedPrioritizedReplayBuffer,
        HostedBuffer,
        PrefetchingBuffer,
        PrioritizedReplayBuffer,
        SharedFrames,
    )

    frames = SharedFrames.for_steps(point.n_step, stack=4)  # the stacks of `stacks` above
    if point.placement == "learner":
        if role == "learner":
            local = PrioritizedReplayBuffer(capacity=point.capacity, alpha=0.6, beta=0.4, seed=0,
                                            shared_frames=frames)
            return HostedBuffer.host(group, REPLAY, local)
        return HostedBuffer.connect(group, REPLAY, max_in_flight=point.in_flight)
    # Replay ranks host the shards, or (placement "actors") every sender its own.
    shards = names[1:1 + point.replay_ranks] if point.placement == "replay-ranks" else names[1:]
    buffer = DistributedPrioritizedReplayBuffer(
        group=group, name=REPLAY, capacity=max(1, point.capacity // len(shards)), alpha=0.6,
        beta=0.4, shard_members=shards, timeout=60.0, seed=0, shared_frames=frames)
    if role == "learner":  # the job's auto prefetch depth for remote shards
        return PrefetchingBuffer(buffer, batch_size=point.batch_size, depth=2, timeout=60.0)
    return buffer


def _local_buffer(replay: Any):
    """The PrioritizedReplayBuffer behind this rank's replay handle (or None)."""
    inner = getattr(replay, "buffer", None)  # HostedBuffer
    if inner is not None and hasattr(inner, "storage"):
        return inner
    shard = getattr(replay, "shard", None)  # DistributedPrioritizedReplayBuffer
    return shard.buffer if shard is not None else None


def _ingested(replay: Any) -> int:
    local = _local_buffer(replay)
    return 0 if local is None else int(local.storage.next_serial)


def _fill_and_time_local(point: IngestPoint, replay: Any, seconds: float, seed: int) -> float:
    """Fill this host's replay to capacity with local adds, then time local adds
    into the full replay for ``seconds``: transitions/s with no RPC at all."""
    local = _local_buffer(replay)
    batches = actor_batches(point, 4, seed)
    i = 0
    while len(local) < local.capacity:
        batch, priorities = batches[i % len(batches)]
        replay.add(batch, priorities)  # this process's own replay: a local call
        i += 1
    rows, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        batch, priorities = batches[i % len(batches)]
        replay.add(batch, priorities)
        rows += len(priorities)
        i += 1
    return rows / (time.perf_counter() - t0)


def _learn(point: IngestPoint, replay: Any, seconds: float) -> dict[str, float]:
    """Sample batches of ``batch_size`` and send back priorities for ``seconds``."""
    rng = np.random.default_rng(0)
    priorities = (0.1 + rng.random(point.batch_size)).astype(np.float32)
    batches, waited, t0 = 0, 0.0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        s0 = time.perf_counter()
        sample = replay.sample(point.batch_size)
        waited += time.perf_counter() - s0
        replay.update_priorities(sample.indices, priorities)
        batches += 1
    elapsed = time.perf_counter() - t0
    return {"learner_batches_per_s": batches / elapsed, "learner_wait_fraction": waited / elapsed}


def _send(point: IngestPoint, replay: Any, batches: list, seconds: float, rate: float,
          rank: int) -> dict[str, Any]:
    """Add ``batches`` in turn for ``seconds`` at ``rate`` transitions/s (0: no pause);
    the time each ``add`` call blocked this sender, as an actor would be blocked."""
    blocked: list[float] = []
    rows, errors, i = 0, 0, 0
    last_error = ""
    interval = len(batches[0][1]) / rate if rate > 0 else 0.0
    t0 = time.perf_counter()
    # Spread the senders' first adds over one interval, as independent actors are.
    next_at = t0 + (rank * 0.618034 % 1.0) * interval
    while True:
        now = time.perf_counter()
        if now - t0 >= seconds:
            break
        if interval and now < next_at:
            time.sleep(min(next_at - now, t0 + seconds - now))
            continue
        batch, priorities = batches[i % len(batches)]
        i += 1
        a = time.perf_counter()
        try:
            replay.add(batch, priorities)
            rows += len(priorities)
        except Exception as exc:  # counted: a refused add is a result, not a crash
            errors += 1
            last_error = f"{type(exc).__name__}: {exc}"[:300]
        blocked.append(time.perf_counter() - a)
        # Behind by more than a second (an overloaded box): drop the backlog
        # instead of bursting it, and let the achieved rate show the deficit.
        next_at = max(next_at + interval, time.perf_counter() - 1.0) if interval else 0.0
    if hasattr(replay, "wait"):
        try:
            replay.wait()
        except Exception as exc:
            errors += 1
            last_error = f"{type(exc).__name__}: {exc}"[:300]
    return {"rows": rows, "blocked": blocked, "errors": errors, "last_error": last_error,
            "elapsed": time.perf_counter() - t0}


def _raw_rpc(host: str, batches: list, seconds: float, in_flight: int) -> dict[str, Any]:
    import torch
    import torch.distributed.rpc as rpc

    from experiments.bench.scale import apex_ingest as this  # the callee by module name
    from rlpar.buffers.shard import to_wire

    wired = [(to_wire(b), torch.from_numpy(p)) for b, p in batches]
    futures: list = []
    rows, i, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if len(futures) >= in_flight:
            futures.pop(0).wait()
        batch, priorities = wired[i % len(wired)]
        futures.append(rpc.rpc_async(host, this._noop, args=(batch, priorities)))
        rows += len(priorities)
        i += 1
    for fut in futures:
        fut.wait()
    return {"rows": rows, "elapsed": time.perf_counter() - t0}


def ingest_rank(point: IngestPoint) -> dict[str, Any]:
    """One rank of an ingest point (run by ``rlpar.distributed.launch``)."""
    import torch

    from experiments.apex import PROGRAM
    from rlpar.distributed import World

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    role = "learner" if rank == 0 else "replay" if rank <= point.replay_ranks else "sender"
    out: dict[str, Any] = {"role": role, "rank": rank}
    with World.from_env(rpc_timeout=120.0) as world:
        group = world.create_rpc_group(PROGRAM.name, world.names)
        replay = _replay(point, group, world.names, role)
        hosts_replay = _local_buffer(replay) is not None
        batches = actor_batches(point, 2, seed=rank) if role == "sender" else []
        group.barrier()
        if hosts_replay:
            out["raw_local_transitions_per_s"] = _fill_and_time_local(
                point, replay, point.seconds / 2, seed=1000 + rank)
        for phase in PHASES:
            before = _ingested(replay)
            group.barrier()  # after the hosts' count: no add of this phase is missed
            c0, t0 = time.process_time(), time.perf_counter()
            if role == "learner":
                out[phase] = _learn(point, replay, point.seconds)
            elif role == "sender":
                rate = point.rate / point.senders if phase == "offered" else 0.0
                out[phase] = _send(point, replay, batches, point.seconds, rate, rank)
            group.barrier()  # every add of the phase has landed
            elapsed = time.perf_counter() - t0
            stats = out.setdefault(phase, {})
            stats["cpu_cores"] = (time.process_time() - c0) / elapsed
            if hosts_replay:
                stats["ingested"] = _ingested(replay) - before
                stats["window_s"] = elapsed
        if role == "sender" and point.placement != "actors":  # an actor's own shard: no RPC
            host = world.names[0]
            if point.placement == "replay-ranks":
                host = replay.home.name  # the replay rank this sender adds to
            out["raw_rpc"] = _raw_rpc(host, batches, point.seconds / 2, point.in_flight)
        group.barrier()
        if hosts_replay or role == "learner":
            out["memory"] = memory_mb()
        if hasattr(replay, "close"):
            replay.close()
        group.barrier()
    return out


def summarize(point: IngestPoint, ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One JSON-ready line per phase of a point, from every rank's figures."""
    learner = ranks[0]
    hosts = [r for r in ranks if "raw_local_transitions_per_s" in r]
    senders = [r for r in ranks if r["role"] == "sender"]
    wired = [s["raw_rpc"] for s in senders if "raw_rpc" in s]
    raw = sum(w["rows"] for w in wired) / max(w["elapsed"] for w in wired) if wired else None
    memory = [r.get("memory", {}) for r in hosts] + ([learner.get("memory", {})] if learner not in hosts else [])
    lines = []
    for phase in PHASES:
        blocked = np.concatenate([np.asarray(s[phase]["blocked"]) for s in senders]) * 1e3
        sent = sum(s[phase]["rows"] for s in senders)
        ingested = sum(h[phase]["ingested"] for h in hosts)
        window = max(h[phase]["window_s"] for h in hosts)
        errors = [s[phase]["last_error"] for s in senders if s[phase]["errors"]]
        lines.append({
            "bench": "apex_scale", "case": "ingest", "placement": point.placement,
            "replay_ranks": point.replay_ranks, "senders": point.senders, "phase": phase,
            "offered_transitions_per_s": point.rate if phase == "offered" else None,
            "transitions_per_s": round(ingested / window, 1),
            "learner_batches_per_s": round(learner[phase]["learner_batches_per_s"], 2),
            "batch_size": point.batch_size,
            "learner_wait_fraction": round(learner[phase]["learner_wait_fraction"], 3),
            "add_p50_ms": round(float(np.percentile(blocked, 50)), 3) if blocked.size else None,
            "add_p99_ms": round(float(np.percentile(blocked, 99)), 3) if blocked.size else None,
            "adds": int(blocked.size), "add_errors": sum(s[phase]["errors"] for s in senders),
            "first_error": errors[0] if errors else None,
            "dropped": sent - ingested,
            "learner_process_cpu_cores": round(learner[phase]["cpu_cores"], 3),
            "replay_process_cpu_cores": round(sum(h[phase]["cpu_cores"] for h in hosts), 3),
            "replay_rss_mb": round(sum(m.get("rss_mb", 0.0) for m in memory), 1),
            "replay_pss_mb": round(sum(m.get("pss_mb", 0.0) for m in memory), 1),
            "rows_per_add": point.num_envs * point.add_every,
            "capacity": point.capacity,
            "raw_transitions_per_s": round(raw, 1) if raw is not None else None,
            "raw_local_transitions_per_s": round(sum(
                h["raw_local_transitions_per_s"] for h in hosts), 1),
        })
    return lines
