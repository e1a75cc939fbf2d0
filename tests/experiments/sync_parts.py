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
    number, its rollout's length and a digest of its observations, and a digest of the
    parameters it left (bit for bit)."""

    def update(self, batch):
        metrics = super().update(batch)
        params = [p.detach().cpu().numpy() for p in self.model.parameters()]
        line = {"pid": os.getpid(), "update": self.updates, "steps": int(np.shape(batch["rewards"])[0]),
                "data": digest(np.asarray(batch["obs"])), "params": digest(*params)}
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
