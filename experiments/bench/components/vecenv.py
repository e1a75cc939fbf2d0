"""Vector env throughput: rlpar's SubprocVectorEnv / InProcessVectorEnv against gymnasium's
SyncVectorEnv and AsyncVectorEnv(shared_memory=True) (and EnvPool on Pong when installed).

Run: ``python -m experiments.bench.components.vecenv [--quick]``. One JSON line per (case, impl):
env steps per second, and for rlpar's implementations the ratio against every peer.
``--quick`` (a smoke run) steps each case with 2 envs (its ``num_envs``).

``rlpar_subproc`` is the default configuration; ``rlpar_subproc_nospin`` the same with
blocking hand-offs only. The targets are for a quiet machine: on a 2-core box shared
with other CPU-bound processes, every design that meets its workers once per step
(ours, EnvPool) falls behind one process (SyncVectorEnv), and a design with one process
per env (AsyncVectorEnv) gains by taking a larger share of the CPU; the CPU
microseconds per env step (whole process tree) are the load-robust column there.

``pong-8`` steps ``envs.atari.make_atari`` Pong (gymnasium's Atari preprocessing and
frame stack, identical results, without the Python wrapper layers) in every gymnasium-based
impl, against EnvPool with the same settings; ``pong-8-gymwrappers`` is the same with
gymnasium's wrapper chain in every gymnasium-based impl.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from envs import InProcessVectorEnv, SubprocVectorEnv
from envs.testing import CountingEnv
from experiments.bench.tools.emit import emit


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def cpu_heavy() -> gym.Env:
    # About 200 us of Python CPU work per step (see CountingEnv.cpu_us).
    return CountingEnv(episode_length=500, cpu_us=200.0)


def pong() -> gym.Env:
    """Pong with the standard Atari preprocessing (noop reset up to 30, frame skip 4 with
    max-pooling, 84x84 grayscale, 4-frame stack, no sticky actions, no life-loss
    termination): EnvPool's settings below. ``envs.atari`` computes exactly what
    ``pong_gym_wrappers`` does (tests/envs/test_atari.py checks that) without the Python
    wrapper layers, as EnvPool does in C++: the emulator is the same ALE."""
    from envs.atari import make_atari

    return make_atari(
        "ALE/Pong-v5",
        frame_skip=4,
        screen_size=84,
        stack=4,
        noop_max=30,
        repeat_action_probability=0.0,
    )


def pong_gym_wrappers() -> gym.Env:
    """The same Pong through gymnasium's wrapper chain (about 130 us more CPU per step)."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84)
    return gym.wrappers.FrameStackObservation(env, stack_size=4)


class Timer:
    """Steps one vector env with fixed random actions and measures env steps/s."""

    def __init__(self, venv: Any, warmup: int) -> None:
        self.venv = venv
        venv.reset(seed=0)
        rng = np.random.default_rng(0)
        n = venv.num_envs
        space = venv.single_action_space
        self.actions = [rng.integers(0, space.n, size=n) for _ in range(64)]
        for i in range(warmup):
            venv.step(self.actions[i % 64])

    def rate(self, seconds: float) -> tuple[float, float]:
        """(env steps per second, CPU microseconds per env step over all processes)."""
        steps, cpu0, start = 0, tree_cpu_seconds(), time.perf_counter()
        while True:
            self.venv.step(self.actions[steps % 64])
            steps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and steps >= 5:
                env_steps = steps * self.venv.num_envs
                return env_steps / elapsed, (tree_cpu_seconds() - cpu0) / env_steps * 1e6


def tree_cpu_seconds() -> float:
    """CPU time of this process and all its live descendants (Linux /proc; else own only).

    CPU per env step is far less sensitive to other users' load than steps/s, so it
    shows the per-step overhead of each design even on a busy machine.
    """
    total = time.process_time()
    tick = os.sysconf("SC_CLK_TCK")
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return total
    parents: dict[int, tuple[int, float]] = {}
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().decode(errors="replace").rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    mine = {os.getpid()}
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _) in parents.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                changed = True
    return total + sum(parents[pid][1] for pid in mine - {os.getpid()} if pid in parents)


def envpool_impl(num_envs: int) -> Callable[[], Any] | str:
    try:
        import envpool
    except Exception as exc:  # not installed or broken
        return f"envpool not importable: {exc!r}"

    class EnvPoolVec:
        """EnvPool's gymnasium API with the same step/reset calls as the others."""

        def __init__(self) -> None:
            self.pool = envpool.make(
                "Pong-v5",
                env_type="gymnasium",
                num_envs=num_envs,
                batch_size=num_envs,
                num_threads=min(num_envs, len(os.sched_getaffinity(0))),
                episodic_life=False,
                reward_clip=False,
                repeat_action_probability=0.0,
                noop_max=30,
            )
            self.num_envs = num_envs
            self.single_action_space = self.pool.action_space

        def reset(self, seed: int | None = None) -> Any:
            return self.pool.reset()

        def step(self, actions: np.ndarray) -> Any:
            return self.pool.step(actions.astype(np.int32))

        def close(self) -> None:
            self.pool.close()

    return EnvPoolVec


def impls(fn: Callable[[], gym.Env], n: int, case: str) -> dict[str, Callable[[], Any] | str]:
    out: dict[str, Callable[[], Any] | str] = {
        # Defaults: W = CPU count with the parent stepping one share, and spin-then-block
        # hand-offs whenever every stepping process has a core (see envs/spin.py).
        "rlpar_subproc": lambda: SubprocVectorEnv([fn] * n),
        # Same, never spinning (always blocking): shows what the spinning buys.
        "rlpar_subproc_nospin": lambda: SubprocVectorEnv([fn] * n, spin_us=0.0),
        "rlpar_inprocess": lambda: InProcessVectorEnv([fn] * n),
        "gym_sync": lambda: gym.vector.SyncVectorEnv([fn] * n),
        "gym_async": lambda: gym.vector.AsyncVectorEnv([fn] * n, shared_memory=True),
    }
    if case.startswith("pong"):
        out["envpool"] = envpool_impl(n)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per impl")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best kept)")
    parser.add_argument(
        "--cases",
        default="",
        help="comma list of cases (pong-8) or families (pong); default all (--quick: two, 2 envs each)",
    )
    args = parser.parse_args(argv)
    seconds, warmup = (0.2, 5) if args.quick else (args.seconds, 50)
    rounds = 1 if args.quick else args.rounds
    # (case, family, env factory, num_envs); --cases takes case names or families.
    cases: list[tuple[str, str, Callable[[], gym.Env], int]] = [
        ("cartpole-8", "cartpole", cartpole, 8),
        ("cartpole-32", "cartpole", cartpole, 32),
        ("cartpole-64", "cartpole", cartpole, 64),
        ("cpu_heavy-8", "cpu_heavy", cpu_heavy, 8),
        ("cpu_heavy-32", "cpu_heavy", cpu_heavy, 32),
        ("pong-8", "pong", pong, 8),
        # Transparency: every gymnasium-based impl on gymnasium's own wrapper chain.
        ("pong-8-gymwrappers", "pong", pong_gym_wrappers, 8),
    ]
    wanted = set(filter(None, args.cases.split(",")))
    unknown = wanted - {c[0] for c in cases} - {c[1] for c in cases}
    if unknown:
        parser.error(f"unknown --cases {sorted(unknown)}; known: {[c[0] for c in cases]}")
    if args.quick and not wanted:
        wanted = {"cartpole-8", "cpu_heavy-8"}
    for case, family, fn, n in cases:
        if wanted and case not in wanted and family not in wanted:
            continue
        if args.quick:  # a process per env (AsyncVectorEnv), each importing its env: 2 run every path
            n = min(n, 2)
        if family == "pong":
            try:
                fn().close()
            except Exception as exc:
                emit({"bench": "vecenv", "case": case, "skipped": f"ale-py: {exc!r}"})
                continue
        # All impls stay alive and are timed in interleaved rounds, keeping each one's
        # best round: on a shared machine the load drifts, and interleaving exposes
        # every impl to the same drift.
        rates: dict[str, float] = {}
        cpu_us: dict[str, float] = {}
        timers: dict[str, Timer] = {}
        try:
            for impl, make in impls(fn, n, case).items():
                if isinstance(make, str):
                    skipped = {"bench": "vecenv", "case": case, "impl": impl, "skipped": make}
                    emit(skipped)
                    continue
                venv = make()
                try:
                    timers[impl] = Timer(venv, warmup)
                except BaseException:
                    venv.close()
                    raise
            for _ in range(rounds):
                for impl, timer in timers.items():
                    rate, cpu = timer.rate(seconds / rounds)
                    if rate > rates.get(impl, 0.0):
                        rates[impl], cpu_us[impl] = rate, cpu
        finally:
            for timer in timers.values():
                timer.venv.close()
        peers = {k: v for k, v in rates.items() if not k.startswith("rlpar")}
        for impl, rate in rates.items():
            line: dict[str, Any] = {
                "bench": "vecenv",
                "case": case,
                "impl": impl,
                "num_envs": n,
                "steps_per_s": round(rate, 1),
                "cpu_us_per_env_step": round(cpu_us[impl], 2),
                "cpus": len(os.sched_getaffinity(0)),
                "load1": round(os.getloadavg()[0], 2),  # >> cpus: a noisy, shared machine
            }
            if impl.startswith("rlpar") and peers:
                for peer, prate in peers.items():
                    line[f"ratio_vs_{peer}"] = round(rate / prate, 3)
                line["ratio_vs_best_peer"] = round(rate / max(peers.values()), 3)
            emit(line)


if __name__ == "__main__":
    main()
