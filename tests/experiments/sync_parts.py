"""Parts for the synchronous jobs' tests, importable in every rank: a PPO that writes
what each update saw and made, one that kills its rank once, and an env that is slow
on one rank."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time

import gymnasium as gym
import numpy as np

from algorithms.ppo import PPO


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


class TracedPPO(PPO):
    """Appends one JSON line per update to ``$TRACE_DIR/rank<RANK>.jsonl``: the update's
    number, its rollout's length and a digest of its observations, and digests of the
    parameters it started from and of those it left (bit for bit)."""

    def _params(self) -> str:
        return digest(*[p.detach().cpu().numpy() for p in self.model.parameters()])

    def update(self, batch):
        start = self._params()
        metrics = super().update(batch)
        line = {"pid": os.getpid(), "update": self.updates, "steps": int(np.shape(batch["rewards"])[0]),
                "data": digest(np.asarray(batch["obs"])), "start": start, "params": self._params()}
        with open(os.path.join(os.environ["TRACE_DIR"], f"rank{os.environ.get('RANK', '0')}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
        return metrics


class KilledOncePPO(TracedPPO):
    """SIGKILLs its own process (as ``kill -9``) after its $KILL_AFTER-th update in the
    rank $KILL_RANK, once per $KILL_MARKER file, and only once a checkpoint exists."""

    def update(self, batch):
        metrics = super().update(batch)
        marker = os.environ["KILL_MARKER"]
        if (os.environ.get("RANK") == os.environ["KILL_RANK"] and not os.path.exists(marker)
                and self.updates >= int(os.environ["KILL_AFTER"])):
            # The lead checkpoints on its clock between updates; on a fast machine the
            # whole budget could pass before the first one, so wait for it (the lead
            # reaches its next checkpoint while this member holds the next all-reduce).
            deadline = time.monotonic() + 30.0
            while not _has_checkpoint(os.environ["RUNS"]) and time.monotonic() < deadline:
                time.sleep(0.05)
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return metrics


class DiesMidUpdatePPO(TracedPPO):
    """SIGKILLs the rank $KILL_RANK in its update number $KILL_AFTER + 1, before the
    gradient average of the update's second minibatch step, once per $KILL_MARKER: the
    other members have taken that update's first optimizer step, not its others."""

    def update(self, batch):
        self._steps = 0
        return super().update(batch)

    def optimize(self, loss):
        self._steps += 1
        marker = os.environ["KILL_MARKER"]
        if (os.environ.get("RANK") == os.environ["KILL_RANK"] and self.updates == int(os.environ["KILL_AFTER"])
                and self._steps == 2 and not os.path.exists(marker)):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().optimize(loss)


class DiesMidRollout(gym.Wrapper):
    """The rank $KILL_RANK SIGKILLs itself at the first step of its rollout number
    $KILL_AFTER + 1 (of $N_STEPS steps; after $KILL_AFTER whole updates), once per
    $KILL_MARKER. The lead (rank 0), at the same step of the same rollout, waits for
    that death, then until it is asked to stop (at most 20 s): a lead in the middle of
    a long rollout, far from its next collective, when the launcher sees the death."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        from rlpar.distributed import stops

        self.steps += 1
        marker, rank = os.environ["KILL_MARKER"], os.environ.get("RANK")
        at = int(os.environ["KILL_AFTER"]) * int(os.environ["N_STEPS"]) + 1
        if self.steps == at and rank == os.environ["KILL_RANK"] and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        if self.steps == at and rank == "0" and not os.path.exists(marker + ".waited"):
            open(marker + ".waited", "w").close()  # once: the vector env's other copies step on
            deadline = time.monotonic() + 20.0
            while not os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.01)
            while stops.requested() is None and time.monotonic() < deadline:
                time.sleep(0.01)
        return super().step(action)


def dies_mid_rollout():
    return DiesMidRollout(gym.make("CartPole-v1"))


def _has_checkpoint(runs: str) -> bool:
    return any(name.startswith("ckpt-") and name.endswith(".pt")
               for _, _, names in os.walk(runs) for name in names)


class SlowOnRank(gym.Wrapper):
    """Sleeps $SLOW_STEP_S seconds in every step on the rank $SLOW_RANK (a straggler)."""

    def step(self, action):
        if os.environ.get("RANK") == os.environ.get("SLOW_RANK"):
            time.sleep(float(os.environ["SLOW_STEP_S"]))
        return super().step(action)


def slow_cartpole():
    return SlowOnRank(gym.make("CartPole-v1"))


def traces(directory, *, last_world: bool = False) -> dict[int, list[dict]]:
    """Rank -> its trace lines, in order (``last_world``: only its last process's)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("rank") and name.endswith(".jsonl"):
            with open(os.path.join(directory, name)) as f:
                lines = [json.loads(line) for line in f]
            out[int(name[4:-6])] = [t for t in lines if t["pid"] == lines[-1]["pid"]] if last_world else lines
    return out
