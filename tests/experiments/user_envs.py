"""A user's env module, named as ``user_envs:UserCountingEnv-v0``: importing it registers
the env (gymnasium's ``module:EnvId`` form), in whichever rank imports it."""

import gymnasium as gym

from envs.testing import CountingEnv

ENV_ID = "UserCountingEnv-v0"

if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=CountingEnv, kwargs={"episode_length": 20},
                 reward_threshold=1e9)

KILL_ONCE_ID = "KillOnceCounting-v0"


class KillOnceEnv(CountingEnv):
    """CountingEnv that SIGKILLs its own process (``kill -9``) at its $KILL_AFTER-th
    step, in the rank whose RANK is $KILL_RANK, once per $KILL_MARKER file, and (with
    $KILL_AFTER_GLOB) only once a file matching it exists (e.g. a first checkpoint)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.steps = 0

    def step(self, action):
        import os
        import signal

        self.steps += 1
        marker = os.environ.get("KILL_MARKER", "")
        import glob

        after = os.environ.get("KILL_AFTER_GLOB")
        if (marker and os.environ.get("RANK") == os.environ.get("KILL_RANK")
                and self.steps >= int(os.environ.get("KILL_AFTER", "1")) and not os.path.exists(marker)
                and (not after or glob.glob(after))):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


if KILL_ONCE_ID not in gym.registry:
    gym.register(KILL_ONCE_ID, entry_point=KillOnceEnv, kwargs={"episode_length": 20},
                 reward_threshold=1e9)

SLOW_START_ID = "SlowStartCounting-v0"


class SlowStartEnv(CountingEnv):
    """CountingEnv whose first reset in the rank whose RANK is $SLOW_RANK sleeps
    $SLOW_START_S seconds (an env slow to come up, a loaded machine): that actor starts
    late while the others play. Other ranks, and later resets, do not wait."""

    started = False  # per process: only the rank's first env waits

    def reset(self, *, seed=None, options=None):
        import os
        import time

        if not SlowStartEnv.started and os.environ.get("RANK") == os.environ.get("SLOW_RANK"):
            SlowStartEnv.started = True
            time.sleep(float(os.environ.get("SLOW_START_S", "0")))
        return super().reset(seed=seed, options=options)


if SLOW_START_ID not in gym.registry:
    gym.register(SLOW_START_ID, entry_point=SlowStartEnv, kwargs={"episode_length": 20},
                 reward_threshold=1e9)

SLEEPY_ID = "SleepyCounting-v0"


class SleepyEnv(CountingEnv):
    """CountingEnv whose every step sleeps 10 ms: a world of them runs for as long as
    a test needs (a link cut, an intruder's tries) at a few percent of a core, where
    CartPole's actors and the learner they feed would keep every core busy."""

    def step(self, action):
        import time

        time.sleep(0.01)
        return super().step(action)


if SLEEPY_ID not in gym.registry:
    gym.register(SLEEPY_ID, entry_point=SleepyEnv, kwargs={"episode_length": 20},
                 reward_threshold=1e9)

MOSTLY_SHORT_ID = "MostlyShortCounting-v0"


class MostlyShortEnv(CountingEnv):
    """CountingEnv whose episodes take 3 steps but every tenth (the first included),
    which takes 12: at R2D2's burn-in of 4 a sequence needs 6 steps, so only one episode
    in ten makes one, a sequence per 39 env steps."""

    def reset(self, *, seed=None, options=None):
        self.episode_length = 12 if self.resets_total % 10 == 0 else 3
        return super().reset(seed=seed, options=options)


if MOSTLY_SHORT_ID not in gym.registry:
    gym.register(MOSTLY_SHORT_ID, entry_point=MostlyShortEnv, reward_threshold=1e9)
