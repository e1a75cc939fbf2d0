"""What bounds the Ape-X learner and actors on MinAtar: update cost, its profile, its FLOP
rate, and an actor's env steps per CPU-second, per ``fast`` mode (:mod:`algorithms.fast`).

For each game's observations (``MinAtar/<Game>-v0``: 10x10xC booleans, C = 4..10) the
learner's DQN is built as the Ape-X job builds it (``q_network(..., dueling=True)``,
``DQNBuilder(learn=fill_learn(LearnConfig(fast=...), algorithm="dqn", family=...)).dqn``: double Q,
Huber, clipping, EagerAdam) and fed replay-shaped batches. Per (game, batch size,
intra-op threads) the ``--fast`` modes' learners take turns, 6 blocks each, and each
mode's line has its median block: CPU ms (``time.process_time``, all threads) and wall
ms per update, updates/s and samples/s (modes in turns, so a load that comes and goes
slows them alike). Then batch 128 on 1 thread (the job's default) runs under
``torch.profiler`` (the last mode): one line per cost group with its share of self CPU
time and top raw ops. "python, dispatch and autograd engine" is the self time of scopes
(the update call, autograd nodes) between aten ops; the profiler's own cost lands there
too, so it is an upper bound (the summary line has profiled and unprofiled ms per update).

FLOPs are analytic (conv and dense multiply-adds; bias, ReLU, Adam ignored): per sample a
forward on obs (F), its backward (weight grads F, input grads F less the first conv's),
online and target forwards on next_obs: 5F - F_first_conv. GFLOP/s against a float32
matmul's on this machine (``fraction_of_sgemm_peak``) says whether it is compute-bound.

The actor lines (``--parts actor|both``): an :class:`~algorithms.apex.ApexActor` on 8
in-process MinAtar copies adding to a local prioritized replay, pulling from a local
model store, no learner and no pacing: env steps per CPU-second of its thread (acting,
env steps, n-step transitions, initial priorities, adds), modes in turns.

    python -m experiments.bench.minatar.learner [--games Breakout,...] \\
        [--batch-sizes 32,64,128] [--threads 1,2] [--updates N] [--fast off,auto] \\
        [--parts learner|actor|both] [--actor-steps N] [--quick]

``--fast default`` is the config's default, and runs on a tree without the option too:
the "before" column below is this file run on the tree before it (commit f736e6e) with
``--fast default``, the "after" column this tree with ``--fast auto``, alternating
before/after runs, twice, the mean of the two; "off" is this tree's plain path (it keeps
the changes that need no option: a tied actor's target forward done once, one-step
transitions without the n-step ring, a cheaper ``zero_grad``). Recorded 2026-11-26
(22:50-22:56 UTC) on the 2-core Xeon (Sapphire Rapids, KVM) with nothing else running,
load average 1.0-1.7, 1 intra-op thread, 300 updates and 3,000 actor vector steps per
mode:

=============  ==================  =====================  ==========================
game           update b32, ms CPU  update b128, ms CPU    actor, env steps / CPU-s
               before / after      before / after (off)   before / after (off)
=============  ==================  =====================  ==========================
Breakout       2.42 / 2.26         4.24 / 3.71 (4.14)     12.0K / 28.3K (14.4K) 2.37x
SpaceInvaders  2.48 / 2.40         4.50 / 4.09 (4.56)     8.8K / 15.4K (10.0K) 1.75x
Asterix        2.40 / 2.24         4.28 / 3.68 (4.11)     12.4K / 26.8K (14.2K) 2.17x
Freeway        2.44 / 2.31         4.54 / 3.96 (4.48)     11.4K / 23.0K (13.2K) 2.01x
Seaquest       2.58 / 2.52         4.82 / 4.57 (4.92)     10.7K / 20.0K (12.2K) 1.87x
=============  ==================  =====================  ==========================

Fraction of the matmul limit at batch 128: 0.32-0.36 before, 0.34-0.36 after; at batch
32: 0.14-0.17 before and after. The batch-128 update is 1.05-1.16x cheaper, far from
1.5x: 60% of it is oneDNN's convolution and MKL's matmuls (profile shares: dense
matmuls 29-33%, convolution forward 14-16% and backward 10-12%), which no mode here
changes, and the rest is spread over ~60 small ops. Tried and dropped: an im2col
convolution (one gather, one matmul whose backward is the weight gradient) took 3.9 ms
against 3.7 (the gather and the casts around it cost more than oneDNN saves); bf16
dense matmuls (AMX) saved ~12% and change the numerics. The actor is 1.75-2.37x: a
batch-8 act went from 270 to ~100 us (im2col convolution for small batches, a folded
dueling head, a cached transpose of the dense weight), its initial priorities from 3
forwards over each flushed batch to none (:class:`algorithms.apex.ActingScores`: the Q
values computed to act), one-step transitions from 85 to 30 us a vector step. What is
left per env step: Breakout 35 us, of which the MinAtar env 9; SpaceInvaders 65, of
which the env 31 (pure-Python game logic, which bounded its ratio).

SpaceInvaders since (:mod:`envs.minatar`: the same game without ``np.roll``, 21.6 -> 9.6
us a step): before (f736e6e, ``--fast default``) 9.3K / 9.5K, after (c2fd170, ``--fast
auto``) 20.9K / 22.6K env steps per CPU-s (the actor thread's CPU time), alternating,
2026-11-27 00:55 UTC, nothing else running (load average 3.2-4.3, falling from a
benchmark that had just ended): **2.31x** (``off``: 12.3K / 12.7K), 44-48 us an env step.

Seaquest since (:class:`envs.minatar.SeaquestEngine`: the same game at 1.7 against 3.1 us
a step, act and state, random play): before (f736e6e, ``--fast default``) 11.4K / 12.2K /
11.1K / 11.5K, after (eea464f, ``--fast auto``) 23.2K / 25.7K / 22.1K / 24.5K env steps
per CPU-s, alternating four times, 2026-11-27 03:06 UTC (load 1.5, a benchmark finishing)
and 03:58 (nothing else, load 1.0): **2.07x** (1.99-2.11 a pair; ``off``: 13.7K / 14.2K /
12.9K / 13.5K). So every game's actor is 2x or more.

Tried on the batch-128 update since, and dropped (2026-11-27): the MinAtar torso's
forward and backward as one autograd node with the convolution's weight gradient on
channels-last tensors (alone 152 against 344 us at 4 channels) left the update within
noise (3.6-4.3 against 3.6-4.1 ms, machine loaded); a hand-written update with no
autograd at all (the same kernels) saved ~10%; bf16 dense layers on top of it 5-10% more.
The update's fresh 128 x 1024 float tensors are above glibc's mmap threshold, so each is
mapped and faulted in anew (180-510 minor page faults an update); keeping freed memory
(``MALLOC_MMAP_THRESHOLD_=32 MiB``) removed the faults but not measurably the time on a
quiet machine (Breakout 3.93 / 3.59 against 3.62 / 3.75 ms, Seaquest 4.65 / 4.28 against
4.56 / 4.32, alternating). What remains is kernels at this CPU's float32 rate and
per-op work around them.

On a trained net the plain path also pays for subnormal Adam moments (algorithms.fast):
SpaceInvaders' learner state after 170K env steps (10.5K updates) with its dead weights'
moments aged 70K more updates: 5.13 ms (off) against 4.34 ms (auto) at batch 128, 2.82
against 2.38 ms at batch 32 (load 4-5). ``--fast compile`` (not in the table): the DQN
update at batch 128 took 6.4-7.0 ms against 5.4-5.7 ms eager and 20-40 s to compile per
shape (load 5-10); inductor stores each ReLU's backward mask as bools at ~10 ns an
element. Intra-op threads: 2 threads on this loaded 2-core box took 119 ms of CPU per
SpaceInvaders batch-128 update against 7.0 ms for 1 (load 9; libgomp's workers spin
while they wait), 13.7 ms with ``OMP_WAIT_POLICY=PASSIVE``: keep 1 thread per role here.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import Any

import numpy as np
import torch
from torch import nn

from experiments.bench.tools.emit import emit

# algorithms.fast.FAST_MODES (the bench also runs on trees without it: --fast default)
FAST_MODES = ("auto", "off", "eager", "compile")

GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
PROFILE_BATCH, PROFILE_THREADS = 128, 1
BENCH = "minatar_learner"
ROUNDS = 6  # blocks per mode in timing and actor_rates, taken in turns
OVERHEAD = "python, dispatch and autograd engine"
UPDATE_SCOPE = "bench::update"
_DENSE = {"aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear"}
_RELU = {"aten::relu", "aten::relu_", "aten::clamp_min", "aten::threshold_backward"}
_CLIP = {"aten::_foreach_norm", "aten::_foreach_mul_"}


def learner_config(learn):
    """The learner DQN's config, as the Ape-X job's builder derives it from ``learn``."""
    from algorithms.dqn import DQNBuilder

    return DQNBuilder(learn=learn, spec=None).dqn


def dqn_config(shape: tuple[int, ...], fast: str | None):
    """The Ape-X job's DQN config for observations of ``shape`` (``fast`` as given;
    None: a tree without the option, which the ``before`` numbers were taken on)."""
    from algorithms.nets import observation_family
    from experiments.apex import LearnConfig, fill_learn

    learn = LearnConfig() if fast is None else LearnConfig(fast=fast)
    return fill_learn(learn, algorithm="dqn", family=observation_family(shape))


def build_learner(game: str, *, seed: int = 0, fast: str | None = None
                  ) -> tuple[Any, tuple[int, ...], np.dtype, int]:
    """The Ape-X learner's DQN for ``game``, its obs shape, obs dtype and action count."""
    from algorithms.dqn import DQN
    from algorithms.nets import q_network
    from envs.registry import make_env

    env = make_env(f"MinAtar/{game}-v0")
    shape, dtype, n = tuple(env.observation_space.shape), env.observation_space.dtype, int(env.action_space.n)
    env.close()
    torch.manual_seed(seed)
    config = learner_config(dqn_config(shape, fast))
    dqn = DQN(network=q_network(shape, n, dueling=True), num_actions=n, config=config, seed=seed)
    return dqn, shape, dtype, n


def make_batches(shape, dtype, n_actions: int, batch: int, count: int, seed: int = 0) -> list[dict]:
    """Replay-shaped batches; MinAtar frames are sparse masks (a few % of cells set)."""
    rng = np.random.default_rng(seed)
    return [{"obs": (rng.random((batch, *shape)) < 0.05).astype(dtype),
             "next_obs": (rng.random((batch, *shape)) < 0.05).astype(dtype),
             "action": rng.integers(n_actions, size=batch),
             "reward": rng.integers(-1, 2, size=batch).astype(np.float32),
             "terminated": rng.random(batch) < 0.02,
             "discount": np.full(batch, 0.99 ** 3, np.float32),
             "weights": rng.uniform(0.3, 1.0, size=batch).astype(np.float32)} for _ in range(count)]


def update_flops(net: nn.Module, shape: tuple[int, ...], batch: int) -> int:
    """Analytic FLOPs of one update from the conv and dense layers' shapes (see above)."""
    layers: list[int] = []

    def hook(module: nn.Module, inputs: Any, out: torch.Tensor) -> None:
        if isinstance(module, nn.Conv2d):
            k = module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
        else:
            k = module.in_features
        layers.append(2 * out[0].numel() * k)

    handles = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        net(torch.zeros((1, *shape)))
    for h in handles:
        h.remove()
    return batch * (5 * sum(layers) - layers[0])


def sgemm_gflop_per_cpu_s(reps: int, size: int = 512) -> float:
    """A float32 matmul's GFLOP per CPU-second at the current thread count: the ceiling."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    start = time.process_time()
    for _ in range(reps):
        torch.mm(a, b)
    return 2 * size ** 3 * reps / max(time.process_time() - start, 1e-9) / 1e9


def time_updates(dqn: Any, batches: list[dict], updates: int, warmup: int) -> tuple[float, float]:
    """(CPU s, wall s) of ``updates`` updates after ``warmup`` untimed ones."""
    for i in range(warmup):
        dqn.update(batches[i % len(batches)])
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(updates):
        dqn.update(batches[i % len(batches)])
    return time.process_time() - cpu, time.perf_counter() - wall


def cost_group(event: Any) -> tuple[str, str]:
    """(cost group, raw op named for it) of one profiler event: anything under the
    optimizer's step is the optimizer; an aten op with no group of its own belongs to
    the innermost enclosing aten op that has one (the transposes inside ``linear``)."""
    node = event
    while node is not None:
        if node.name.startswith("Optimizer."):
            return "optimizer (Adam step, zero_grad)", event.name
        node = node.cpu_parent
    if not event.name.startswith("aten::"):
        return OVERHEAD, event.name
    node = event
    while node is not None and node.name.startswith("aten::"):
        name = node.name
        if name in _DENSE:
            return "dense layer matmuls (forward and backward)", name
        if "convolution" in name or name.startswith("aten::conv"):
            return ("convolution backward" if "backward" in name else "convolution forward"), name
        if name in _RELU:
            return "ReLU forward and backward", name
        if name in _CLIP:
            return "gradient-norm clipping", name
        node = node.cpu_parent
    return "elementwise and copies", event.name


def profile_costs(dqn: Any, batches: list[dict], updates: int) -> dict[str, dict[str, float]]:
    """Self CPU microseconds per cost group and raw op over ``updates`` updates."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(updates):
            with record_function(UPDATE_SCOPE):
                dqn.update(batches[i % len(batches)])
    costs: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for event in prof.events():
        group, op = cost_group(event)
        costs[group][op] += event.self_cpu_time_total
    return costs


def timing(game: str, batch: int, threads: int, updates: int, warmup: int, peak: float,
           modes: list[str | None]) -> list[dict[str, Any]]:
    """One line per fast mode; the modes' learners take turns, ``ROUNDS`` blocks of
    ``updates / ROUNDS`` each, and each line has its median block (a loaded machine
    slows all of them alike)."""
    torch.set_num_threads(threads)
    learners = {mode: build_learner(game, fast=mode)[0] for mode in modes}
    _, shape, dtype, n = build_learner(game)
    batches = make_batches(shape, dtype, n, batch, 4)
    block = max(1, updates // ROUNDS)
    blocks: dict[str | None, list[tuple[float, float]]] = {mode: [] for mode in modes}
    for dqn in learners.values():
        time_updates(dqn, batches, 0, warmup)
    for i in range(ROUNDS):
        for mode in modes if i % 2 == 0 else modes[::-1]:
            blocks[mode].append(time_updates(learners[mode], batches, block, 0))
    flops = update_flops(learners[modes[0]].network, shape, batch)
    lines = []
    for mode in modes:
        cpu, wall = (float(np.median([b[k] for b in blocks[mode]])) / block for k in (0, 1))
        lines.append({"kind": "timing", "game": game, "fast": mode or "default", "obs_shape": list(shape),
                      "num_actions": n, "batch_size": batch, "threads": threads, "updates": block * ROUNDS,
                      "cpu_ms_per_update": round(1e3 * cpu, 3), "wall_ms_per_update": round(1e3 * wall, 3),
                      "updates_per_s": round(1 / wall, 1), "samples_per_s": round(batch / wall),
                      "mflop_per_update": round(flops / 1e6, 2), "gflop_per_cpu_s": round(flops / cpu / 1e9, 2),
                      "gflop_per_wall_s": round(flops / wall / 1e9, 2),
                      "fraction_of_sgemm_peak": round(flops / cpu / 1e9 / peak, 3)})
    return lines


def actor_rates(game: str, steps: int, modes: list[str | None], num_envs: int = 8) -> list[dict[str, Any]]:
    """An Ape-X actor's env steps per CPU-second on ``game``, unpaced: an
    :class:`~algorithms.apex.ApexActor` (``num_envs`` MinAtar copies stepped in its own
    process, as ``--env-workers 0`` runs them) adding to a local prioritized replay and
    pulling from a local model store, no learner. Modes take turns as in :func:`timing`."""
    from gymnasium.vector import AutoresetMode

    from algorithms.dqn import DQN, ApexActor
    from algorithms.nets import q_network
    from envs import make_vector_env
    from envs.registry import ensure_registered
    from rlpar.buffers import PrioritizedReplayBuffer
    from rlpar.servers.model import ModelStore

    torch.set_num_threads(1)
    actors = {}
    for mode in modes:
        env = make_vector_env(ensure_registered(f"MinAtar/{game}-v0"), num_envs=num_envs, num_workers=0,
                              autoreset_mode=AutoresetMode.SAME_STEP, seed=0)
        shape, n = tuple(env.single_observation_space.shape), int(env.single_action_space.n)
        learn = dqn_config(shape, mode)

        def make_dqn(shape: tuple[int, ...] = shape, n: int = n, learn: Any = learn) -> DQN:
            torch.manual_seed(0)
            return DQN(network=q_network(shape, n, dueling=True), num_actions=n, config=learner_config(learn), seed=0)

        params = ModelStore()
        params.push(make_dqn().policy_state(), version=0)
        actors[mode] = ApexActor(dqn=make_dqn(), env=env, buffer=PrioritizedReplayBuffer(capacity=100_000, seed=0),
                                 params=params, index=0, num_actors=2, config=learn, seed=0)
        actors[mode].sync()
        for _ in range(32):  # warm-up: the first add and pull
            actors[mode].step()
    per_step: dict[str | None, list[float]] = {mode: [] for mode in modes}
    block = max(1, steps // ROUNDS)
    for i in range(ROUNDS):
        for mode in modes if i % 2 == 0 else modes[::-1]:
            actor, start, taken = actors[mode], time.thread_time(), actors[mode].env_steps
            for _ in range(block):
                actor.step()
            per_step[mode].append((time.thread_time() - start) / (actor.env_steps - taken))
    for actor in actors.values():
        actor.env.close()
    return [{"kind": "actor", "game": game, "fast": mode or "default", "num_envs": num_envs,
             "vector_steps": block * ROUNDS, "cpu_us_per_env_step": round(1e6 * float(np.median(per_step[mode])), 2),
             "env_steps_per_cpu_s": round(1 / float(np.median(per_step[mode])))} for mode in modes]


def profile_lines(game: str, updates: int, warmup: int, unprofiled_ms: float | None,
                  mode: str | None = None) -> list[dict[str, Any]]:
    torch.set_num_threads(PROFILE_THREADS)
    dqn, shape, dtype, n = build_learner(game, fast=mode)
    batches = make_batches(shape, dtype, n, PROFILE_BATCH, 4)
    time_updates(dqn, batches, 0, warmup)
    costs = profile_costs(dqn, batches, updates)
    total = sum(sum(ops.values()) for ops in costs.values())
    config = {"game": game, "fast": mode or "default", "batch_size": PROFILE_BATCH, "threads": PROFILE_THREADS,
              "updates": updates}
    lines = []
    for group, ops in sorted(costs.items(), key=lambda kv: -sum(kv[1].values())):
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:4]
        lines.append({"kind": "profile", **config, "cost": group, "share": round(sum(ops.values()) / total, 4),
                      "cpu_ms_per_update": round(sum(ops.values()) / 1e3 / updates, 3),
                      "top_ops": [{"op": op, "share": round(us / total, 4)} for op, us in top]})
    flops = update_flops(dqn.network, shape, PROFILE_BATCH)
    lines.append({"kind": "profile_summary", **config, "profiled_cpu_ms_per_update": round(total / 1e3 / updates, 3),
                  "unprofiled_cpu_ms_per_update": unprofiled_ms, "mflop_per_update": round(flops / 1e6, 2),
                  "gflop_per_profiled_cpu_s": round(flops * updates / (total / 1e6) / 1e9, 2)})
    return lines


def positive_ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def fast_modes(text: str) -> list[str | None]:
    modes = text.split(",")
    if bad := [m for m in modes if m not in (*FAST_MODES, "default")]:
        raise argparse.ArgumentTypeError(f"unknown fast mode(s) {bad}; choose from {[*FAST_MODES, 'default']}")
    return [None if m == "default" else m for m in modes]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--games", help=f"comma-separated, from {list(GAMES)} (default: all; --quick: Breakout)")
    p.add_argument("--batch-sizes", type=positive_ints, help="default 32,64,128 (--quick: 128)")
    p.add_argument("--threads", type=positive_ints, help="intra-op thread counts, default 1,2 (--quick: 1)")
    p.add_argument("--updates", type=int, help="timed (and profiled) updates per config, default 300 (--quick: 20)")
    p.add_argument("--fast", type=fast_modes, help=(
        "comma-separated fast modes compared in turns (algorithms.fast), or 'default' (the config's "
        "default, also on a tree without the option); default off,auto (--quick: auto)"))
    p.add_argument("--parts", choices=("learner", "actor", "both"), default="both",
                   help="the learner's updates (timing, profile), the actor's env steps, or both")
    p.add_argument("--actor-steps", type=int, help="actor vector steps per mode, default 3000 (--quick: 60)")
    p.add_argument("--quick", action="store_true", help="a smoke run: one game, one config, few updates")
    args = p.parse_args(argv)
    q = args.quick
    games = (args.games or ("Breakout" if q else ",".join(GAMES))).split(",")
    if unknown := [g for g in games if g not in GAMES]:
        p.error(f"--games: unknown game(s) {unknown}; choose from {list(GAMES)}")
    batch_sizes = args.batch_sizes or ([128] if q else [32, 64, 128])
    threads = args.threads or ([1] if q else [1, 2])
    updates = args.updates if args.updates is not None else (20 if q else 300)
    actor_steps = args.actor_steps if args.actor_steps is not None else (60 if q else 3000)
    modes = args.fast or (["auto"] if q else ["off", "auto"])
    if updates < 1:
        p.error(f"--updates must be >= 1, got {updates}")
    if actor_steps < 1:
        p.error(f"--actor-steps must be >= 1, got {actor_steps}")
    warmup, default_threads, peak = max(5, updates // 10), torch.get_num_threads(), {}
    for t in sorted(set(threads) | {PROFILE_THREADS}) if args.parts != "actor" else ():
        torch.set_num_threads(t)
        peak[t] = sgemm_gflop_per_cpu_s(3 if q else 20)
        emit({"bench": BENCH, "kind": "sgemm_peak", "threads": t, "gflop_per_cpu_s": round(peak[t], 2)})
    for game in games:
        if args.parts != "actor":
            unprofiled_ms = None
            for batch in batch_sizes:
                for t in threads:
                    for line in timing(game, batch, t, updates, warmup, peak[t], modes):
                        emit({"bench": BENCH, **line})
                        if (batch, t, line["fast"]) == (PROFILE_BATCH, PROFILE_THREADS, modes[-1] or "default"):
                            unprofiled_ms = line["cpu_ms_per_update"]
            for line in profile_lines(game, updates, warmup, unprofiled_ms, modes[-1]):
                emit({"bench": BENCH, **line})
        if args.parts != "learner":
            for line in actor_rates(game, actor_steps, modes):
                emit({"bench": BENCH, **line})
    torch.set_num_threads(default_threads)


if __name__ == "__main__":
    main()
