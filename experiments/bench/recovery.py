"""How fast a run recovers: ``python -m experiments.bench.recovery``.

Two cases on Ape-X (CartPole, the default local world), each killed once with
SIGKILL (as ``kill -9`` or the OOM killer would) mid-run:

- ``actor``: an actor's env kills its own process after ``--kill-after`` steps;
- ``learner``: the learner kills its process after ``--kill-after`` / 4 updates.

The actor is restarted alone and rejoins while the learner trains on; the learner's
death restarts the world from the newest checkpoint (``--checkpoint-every``).
From the run's TensorBoard events (wall-clock stamped) the bench reports the time
from the death to the job's env-step throughput back at 90% of its rate before the
death (``actor_recovery_s``), and to the first learner update after it
(``learner_recovery_s``), the env steps lost (progress since the last checkpoint
when the world restarted; an actor's rejoin loses only ``lost_transitions``),
and the checkpoint's pause and size. One JSON line per case. The Atari-frame
checkpoint cost (100K transitions) is ``python -m experiments.bench.checkpoint``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from typing import Any

import gymnasium as gym

from algorithms.apex import ApexLearner
from envs.testing import CountingEnv

KILL_ENV = "RecoveryBenchKillOnce-v0"
MARKER = "RLPAR_RECOVERY_MARKER"


def _kill_once() -> bool:
    marker = os.environ.get(MARKER, "")
    if not marker or os.path.exists(marker):
        return False
    with open(marker, "w") as f:
        f.write(repr(__import__("time").time()))
    os.kill(os.getpid(), signal.SIGKILL)
    return True


_steps_in_process = 0


class KillOnceEnv(CountingEnv):
    """A counting env whose copies in actor rank 1 SIGKILL their process once, after
    ``kill_after`` steps of all copies in that process together."""

    def __init__(self, *, kill_after: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kill_after = kill_after

    def step(self, action: Any):
        global _steps_in_process
        _steps_in_process += 1
        if os.environ.get("RANK") == "1" and self.kill_after and _steps_in_process >= self.kill_after:
            _kill_once()
        return super().step(action)


class KillOnceLearner(ApexLearner):
    """The learner, SIGKILLing its process once after ``$RLPAR_RECOVERY_UPDATES`` updates."""

    def step(self):
        if self.updates >= int(os.environ.get("RLPAR_RECOVERY_UPDATES", "0")) > 0:
            _kill_once()
        return super().step()


if KILL_ENV not in gym.registry:
    gym.register(KILL_ENV, entry_point=KillOnceEnv, kwargs={"episode_length": 200}, reward_threshold=1e9)


def run_case(case: str, args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    from experiments.apex import ApexJobConfig, run
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    marker = os.path.join(workdir, f"{case}.killed")
    os.environ[MARKER] = marker
    kill_after = args.kill_after if case == "actor" else 0
    os.environ["RLPAR_RECOVERY_UPDATES"] = str(args.kill_after // 4 if case == "learner" else 0)
    gym.register(KILL_ENV, entry_point=KillOnceEnv, kwargs={"episode_length": 200, "kill_after": kill_after},
                 reward_threshold=1e9)
    config = ApexJobConfig()
    apply_overrides(config, {"env_id": f"{__name__}:{KILL_ENV}", "max_env_steps": args.env_steps,
                             "checkpoint_every": args.checkpoint_every, "log_dir": workdir,
                             "status_every": 0.0, "eval_every": 10**9, "num_actors": args.actors,
                             "max_seconds": 600.0})
    parts = Parts(learner=KillOnceLearner) if case == "learner" else None
    summary = run(config, parts=parts, quiet=True)
    died = float(open(marker).read())
    recovery = _recovery(summary["run_dir"], died)
    # Progress after the newest checkpoint died with the world: it is redone.
    resumed = summary["resumed_from_step"] or 0
    before = recovery.pop("steps_before_death")
    recovery["env_steps_lost"] = max(0, before - resumed) if summary["restarts"] else 0
    return {"case": case, "restarts": summary["restarts"], "actor_restarts": summary["actor_restarts"],
            "lost_transitions": summary["lost_transitions"], **recovery,
            "checkpoint_every_s": args.checkpoint_every, "checkpoint_pause_s": summary["checkpoint_pause_s"],
            "checkpoint_bytes": summary["checkpoint_bytes"], "env_steps": summary["env_steps"],
            "resumed_from_step": summary["resumed_from_step"]}


def _recovery(run_dir: str, died: float) -> dict[str, Any]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sps, updates = [], []
    for name in sorted(os.listdir(run_dir)):
        if name.startswith("events.out"):
            acc = EventAccumulator(os.path.join(run_dir, name), size_guidance={"scalars": 0})
            acc.Reload()
            tags = acc.Tags()["scalars"]
            sps += [(e.wall_time, e.step, e.value) for e in acc.Scalars("charts/SPS")] if "charts/SPS" in tags else []
            updates += ([(e.wall_time, e.step, e.value) for e in acc.Scalars("charts/updates")]
                        if "charts/updates" in tags else [])
    before = [v for t, _, v in sps if died - 5.0 <= t < died]
    rate = sum(before) / len(before) if before else float("nan")
    back = next((t for t, _, v in sorted(sps) if t > died and v >= 0.9 * rate), None)
    steps_before = max((s for t, s, _ in sps if t < died), default=0)
    learning = [(t, v) for t, _, v in sorted(updates) if t > died]
    first_update = next((t for (t, v), (_, w) in zip(learning, learning[1:]) if w > v), None)
    return {"rate_before": round(rate, 1),
            "actor_recovery_s": round(back - died, 2) if back else None,
            "learner_recovery_s": round(first_update - died, 2) if first_update else None,
            "steps_before_death": steps_before}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="actor,learner", help="comma-separated: actor, learner")
    parser.add_argument("--env-steps", type=int, default=60_000, help="env step budget of each run")
    parser.add_argument("--kill-after", type=int, default=20_000, help="env steps of the killed actor before it dies")
    parser.add_argument("--checkpoint-every", type=float, default=5.0, help="seconds between checkpoints")
    parser.add_argument("--actors", type=int, default=2, help="actors")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (tests)")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - {"actor", "learner"})
    if unknown:
        parser.error(f"--cases: unknown {unknown}")
    if args.quick:
        args.env_steps, args.kill_after, args.checkpoint_every = 6000, 1000, 0.5
    with tempfile.TemporaryDirectory(prefix="rlpar-recovery-") as workdir:
        for case in cases:
            print(json.dumps({"bench": "recovery", **run_case(case, args, workdir)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
