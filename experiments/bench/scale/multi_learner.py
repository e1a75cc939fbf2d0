"""Several Ape-X learners (``--learners K``) on one machine: what the second learner
buys in learner throughput.

Each point runs the real job (``experiments.apex``) long enough to be learner-bound:
a replay ratio of ``--updates-per-step`` batches per env step (default 1 batch of 128
per env step, far above what actors need), so the actors mostly wait and the learners
decide the pace. Envs: ``cartpole`` (CartPole-v1, the default 128x128 MLP) and
``minatar`` (MinAtar Breakout, 10x10x4 images and the MinAtar conv net; the real
emulator, a few microseconds of CPU a step). Configurations: ``k1`` one learner (1
torch thread), ``k2`` two learners (1 thread each, gradients averaged, each sampling
its own shard of the replay), ``k1t2`` one learner with 2 torch threads (the other
way to spend a second core on learning).

Per point, from the first update on: group updates/s, batches/s (``updates_per_s x K``), samples/s (batches x
batch size), each learner's wall ms per update (its own compute plus waiting for the
other at the gradient all-reduce), the learners' waiting share, and
``efficiency``: samples/s per learner relative to ``k1`` (1.0: two learners draw twice
the samples; it needs a free core per learner), and ``cpu_efficiency``: ``k1``'s learner
process CPU per update over this point's (per learner), which the machine's load does
not change (1.0: the all-reduces and lockstep cost nothing). One JSON line per point, then a ``machine`` line with the load averages
before and after (the machine may be shared: compare figures of one run).

    python -m experiments.bench.scale.multi_learner [--quick] [--envs cartpole,minatar]
        [--configs k1,k2,k1t2] [--seconds 60]

The Ape-X SAC scaling curve: ``--algorithm sac`` (default envs then ``pendulum``,
Pendulum-v1, and ``halfcheetah``, HalfCheetah-v5 with the mujoco extra; the job's
SAC defaults: 256x256 MLPs, batch 128 here) over ``--actors 1,2,4``: one point per
(env, actors, config), each line with its ``algorithm``, ``actors``, updates/s and
env steps/s. With the default ``--replay-placement learner`` each learner samples
the shard of its own actors, so a point with fewer actors than learners cannot run
and gives a ``skipped`` line saying so; ``--replay-placement actors`` (a shard in
every actor, every learner sampling all of them) runs it.

    python -m experiments.bench.scale.multi_learner --algorithm sac --actors 1,2,4 --configs k1,k2
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from typing import Any

from experiments.bench.tools.emit import emit

ENVS = {"cartpole": "CartPole-v1", "minatar": "MinAtar/Breakout-v0", "pendulum": "Pendulum-v1",
        "halfcheetah": "HalfCheetah-v5"}
DISCRETE, CONTINUOUS = ("cartpole", "minatar"), ("pendulum", "halfcheetah")
ALGORITHMS = ("auto", "dqn", "td3", "sac")  # experiments.apex --algorithm (auto: dqn on discrete envs)
CONFIGS = {"k1": (1, 1), "k2": (2, 1), "k1t2": (1, 2)}  # name -> (learners, torch threads)


def job_config(env: str, *, learners: int, threads: int, seconds: float, updates_per_step: float,
               batch_size: int, actors: int, seed: int, algorithm: str = "auto", replay_placement: str = "learner"):
    from experiments.apex import ApexJobConfig
    from experiments.runtime.cli import apply_overrides

    config = ApexJobConfig()
    apply_overrides(config, {
        "env_id": ENVS[env], "algorithm": algorithm, "replay_placement": replay_placement, "learners": learners, "torch_threads": threads, "num_actors": actors,
        "num_envs": 4, "env_workers": 0, "max_seconds": seconds, "max_env_steps": 10**12,
        "eval_every": 10**12, "eval_episodes": 1, "target_return": 1e12, "log_dir": "none",
        "status_every": 0.0, "checkpoint_every": 0.0, "replay_capacity": 50_000,
        "batch_size": batch_size, "learning_starts": 1000, "updates_per_step": updates_per_step,
        "seed": seed, "device": "cpu"})
    return config


def point_line(env: str, name: str, summary: dict[str, Any], *, batch_size: int, actors: int | None = None,
               algorithm: str | None = None) -> dict[str, Any]:
    learners = summary.get("learners", 1)
    # From the first update on (the replay's fill before it is not the learner's pace).
    updates_per_s = summary["updates"] / max(1e-9, summary["learning_s"])
    return {
        "bench": "multi_learner", "env": env, "algorithm": algorithm or summary.get("algorithm"),
        "actors": actors if actors is not None else summary.get("num_actors"), "config": name, "learners": learners,
        "torch_threads": CONFIGS[name][1], "batch_size": batch_size,
        "updates_per_s": round(updates_per_s, 1), "batches_per_s": round(updates_per_s * learners, 1),
        "samples_per_s": round(updates_per_s * learners * batch_size),
        "env_steps_per_s": round(summary["env_steps_per_s"], 1),
        "learner_update_ms": summary.get("learner_update_ms", [round(summary["update_ms_per_update"], 3)]),
        # CPU ms of each learner's process per update: independent of the machine's load.
        "learner_process_cpu_ms": summary.get("learner_process_cpu_ms",
                                              [round(summary["process_cpu_ms_per_update"], 3)]),
        "learner_wait_fraction": round(summary["wait_fraction"], 3),
        "learners_identical": summary.get("learners_identical", True),
        "updates": summary["updates"], "learning_s": round(summary["learning_s"], 1),
        "startup_s": round(summary["startup_s"], 1), "wall_s": round(summary["wall_s"], 1),
    }


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive ints, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=(
        "a smoke run (cartpole, or pendulum for td3/sac; 15 s a point unless --seconds)"))
    parser.add_argument("--envs", default=None, help=(
        "comma-separated: " + ", ".join(ENVS) + " (default: cartpole,minatar; pendulum,halfcheetah for td3/sac)"))
    parser.add_argument("--algorithm", choices=ALGORITHMS, default="auto", help=(
        "experiments.apex --algorithm (auto: dqn on cartpole/minatar, td3 on pendulum/halfcheetah)"))
    parser.add_argument("--configs", default="k1,k2,k1t2", help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--seconds", type=float, default=None, help="each point's budget (its start included; "
                        "default 60, --quick 15)")
    parser.add_argument("--updates-per-step", type=float, default=1.0, help="batches per env step (learner-bound)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--actors", type=_ints, default=[2], help="comma-separated actor counts, e.g. 1,2,4")
    parser.add_argument("--replay-placement", choices=("learner", "actors"), default="learner", help=(
        "the job's --replay-placement (learner: each learner samples its own actors' shard, so a point "
        "needs actors >= learners)"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    continuous = args.algorithm in ("td3", "sac")
    if args.envs is None:
        args.envs = ("pendulum" if args.quick else "pendulum,halfcheetah") if continuous else (
            "cartpole" if args.quick else "cartpole,minatar")
    if args.seconds is None:
        args.seconds = 15.0 if args.quick else 60.0
    envs, configs = args.envs.split(","), args.configs.split(",")
    for names, table, what in ((envs, ENVS, "envs"), (configs, CONFIGS, "configs")):
        unknown = sorted(set(names) - set(table))
        if unknown:
            parser.error(f"unknown {what} {unknown}; choose from {sorted(table)}")
    wrong = [e for e in envs if args.algorithm != "auto" and e in (DISCRETE if continuous else CONTINUOUS)]
    if wrong:
        parser.error(f"--algorithm {args.algorithm} does not run on {wrong} (their action spaces)")
    if "halfcheetah" in envs and importlib.util.find_spec("mujoco") is None:
        parser.error("halfcheetah needs MuJoCo: pip install 'rlpar[mujoco]'")
    from experiments import apex

    load0, started = os.getloadavg(), time.time()
    for env in envs:
        for actors in args.actors:
            reference = None
            for name in configs:
                learners, threads = CONFIGS[name]
                head = {"bench": "multi_learner", "env": env, "algorithm": args.algorithm, "actors": actors,
                        "config": name, "learners": learners, "replay_placement": args.replay_placement}
                if args.replay_placement == "learner" and actors < learners:
                    emit({**head, "skipped": f"{learners} learners need at least {learners} actors with "
                          "--replay-placement learner (each samples its own actors' shard); "
                          "--replay-placement actors runs this point"})
                    continue
                config = job_config(env, learners=learners, threads=threads, seconds=args.seconds,
                                    updates_per_step=args.updates_per_step, batch_size=args.batch_size,
                                    actors=actors, seed=args.seed, algorithm=args.algorithm,
                                    replay_placement=args.replay_placement)
                summary = apex.run(config, quiet=True)
                line = {**head, **point_line(env, name, summary, batch_size=args.batch_size, actors=actors,
                                             algorithm=None if args.algorithm == "auto" else args.algorithm)}
                cpu = sum(line["learner_process_cpu_ms"]) / learners  # per learner per update
                if name == "k1":
                    reference = (line["samples_per_s"], cpu)
                if reference:
                    line["efficiency"] = round(line["samples_per_s"] / (learners * reference[0]), 3)
                    # What a learner's batch costs in CPU against one learner's: the share of
                    # linear scaling K learners would reach with a core each.
                    line["cpu_efficiency"] = round(reference[1] / cpu, 3)
                line["loadavg"] = [round(v, 2) for v in os.getloadavg()]
                emit(line)
    emit({"bench": "multi_learner", "case": "machine", "cpus": os.cpu_count(),
          "loadavg_start": [round(v, 2) for v in load0],
          "loadavg_end": [round(v, 2) for v in os.getloadavg()],
          "wall_s": round(time.time() - started, 1), "quick": args.quick})


if __name__ == "__main__":
    main()
