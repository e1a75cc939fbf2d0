"""Ape-X DQN, the project's main job: ``python -m experiments.apex``.

Horgan et al. 2018, "Distributed Prioritized Experience Replay" (ICLR,
arXiv:1803.00933). With no launcher environment it spawns a local world (1 learner
+ actors sized to the CPU count, at least 2) and stops when greedy evaluation over
``--eval-episodes`` episodes averages ``--target-return`` (475 on CartPole-v1) or
at the time/step budget. ``--serial`` runs the learner and every actor in this one
process. Under ``torchrun`` every rank takes a role by this rule
(:func:`experiments.roles.apex.role_of`):

    rank 0                      learner (coordinator, evaluation bookkeeping, TensorBoard)
    ranks 1 .. R                dedicated replay ranks (R = --replay-ranks, only with
                                --replay-placement replay-ranks)
    remaining ranks             actors (actor index = rank - 1 - R)

Evaluation (greedy, ``--eval-episodes`` envs, each env's first episode) runs on the
last actor, the least exploring one, after it pulls the newest parameters: the
learner never stalls for it.

Multi-node: ``torchrun --nnodes N --nproc-per-node M --rdzv-backend c10d
--rdzv-endpoint HOST:PORT -m experiments.apex --listen-address <this node's IP>``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from experiments.runtime import EnvConfig, Parts, RunConfig, field, flag, layer_sizes, section
from experiments.runtime.job import main_for, run_job


def default_actors() -> int:
    # One actor per core; the learner shares, and actors throttle to the learner's pace.
    return max(2, os.cpu_count() or 1)


@dataclasses.dataclass
class ReplayConfig:
    """The prioritized replay (Schaul et al. 2016) and where it lives.

    Which ``--replay-placement`` (figures from ``python -m experiments.bench.apex_scale``
    on 2 shared cores: Atari batches of 128 transitions from 1 to 64 actor processes,
    the paper's 12.5K transitions/s together, a learner drawing batches of 512 as fast
    as it can; README, "Ape-X on a cluster"):

    - ``learner`` (default): one buffer in the learner's process; actors send their
      adds (asynchronous, 4 in flight) and the learner samples with a local call. It
      took 12.4K/s from 4 to 64 actors while the learner drew 510-590 batches/s (the
      paper's learner: 19). The choice on one machine, and on a cluster while the
      learner's machine holds the replay (about 50 KB per Atari transition: 2.5 GB
      per 50K) and has a core to spare for the adds.
    - ``replay-ranks``: shards on ``--replay-ranks`` processes of their own; actors add
      to one, the learner samples every shard (one round trip each, prefetched). For a
      replay larger than the learner's machine, with the replay ranks on cores
      (machines) of their own: sharing 2 cores with the actors, the learner drew about
      100 batches/s with up to 16 actors, 58 with 32 and 16 with 64.
    - ``actors``: a shard in every actor; adds are local (no transfer at all), but the
      learner asks every actor for every batch: 157 batches/s with 1 actor, 37 with 16,
      14 with 64. For a few actors whose link to the learner is slow.
    """

    replay_capacity: int = field(100_000, help="replay capacity (transitions)")
    replay_placement: Literal["learner", "actors", "replay-ranks"] = field("learner", help=(
        "where the replay lives: in the learner process (the choice on one machine and for "
        "tens of actors), as shards on the actors (few actors, slow links), or on dedicated "
        "replay ranks (a replay too large for the learner's machine); README: Ape-X on a cluster"))
    replay_ranks: int = field(1, help="dedicated replay ranks (with --replay-placement replay-ranks)")
    prefetch: int = field(-1, help=(
        "replay batches the learner keeps in flight (0: sample synchronously; -1: auto, 0 with the "
        "replay in the learner process, 2 with remote shards)"))
    priority_alpha: float = field(0.6, help="prioritization exponent")
    priority_beta: float = field(0.4, help="importance-sampling exponent")
    share_frames: bool = field(True, help=(
        "frame-stack observations (Atari): store each transition's obs and next_obs once, as their "
        "4 + n_step distinct frames instead of 8"))

    def validate(self) -> None:
        if self.replay_capacity < 1:
            raise ValueError(f"{flag('replay_capacity')} must be >= 1, got {self.replay_capacity}")
        if self.replay_ranks < 0:
            raise ValueError(f"{flag('replay_ranks')} must be >= 0, got {self.replay_ranks}")
        if self.replay_placement == "replay-ranks" and self.replay_ranks < 1:
            raise ValueError(f"{flag('replay_ranks')} must be >= 1 with --replay-placement replay-ranks")
        if self.prefetch < -1:
            raise ValueError(f"{flag('prefetch')} must be >= -1 (-1: auto), got {self.prefetch}")
        if self.priority_alpha < 0:
            raise ValueError(f"{flag('priority_alpha')} must be >= 0, got {self.priority_alpha}")
        if not 0.0 <= self.priority_beta <= 1.0:
            raise ValueError(f"{flag('priority_beta')} must be in [0, 1], got {self.priority_beta}")

    def extra_ranks(self) -> int:
        return self.replay_ranks if self.replay_placement == "replay-ranks" else 0

    def prefetch_depth(self) -> int:
        """``--prefetch`` resolved: a replay in the learner process samples with a local
        call (tens of microseconds with the compiled sum tree), where a prefetch thread
        only adds GIL hand-offs (measured: 2.8 vs 0.7 ms per batch spent waiting on a
        loaded 2-core box); remote shards answer over RPC, which prefetching hides."""
        if self.prefetch >= 0:
            return self.prefetch
        return 0 if self.replay_placement == "learner" else 2


# Defaults by observation family (``algorithms.nets.observation_family``, the same
# rule that picks the default network), used for each of ``--lr``, ``--eps-alpha``,
# ``--n-step`` and ``--updates-per-step`` that is not given. Each small_image value was
# measured with the others as they were then: eps_alpha and n_step at lr 1e-3 and a
# replay ratio of 0.25, the ratio at lr 1e-3, the rate at both ratios.
#
# ``lr``, Adam's learning rate:
# - vector (CartPole-v1): measured, see LearnConfig below.
# - small_image (MinAtar's 10x10xC): 2.5e-4, the MinAtar paper's rate. 1e-3, chosen
#   first on the short runs below, learns as fast early but kills the dense layer:
#   the share of its 128 ReLUs that are zero on all of 3,000 random-play states
#   (``python -m experiments.bench.minatar_dormant`` on the runs' snapshots) grew to
#   95-98% in all four Asterix runs and on Seaquest by 250-450K env steps (three of
#   those Asterix runs and the Seaquest one learned nothing), 87% on Freeway, 83% on
#   SpaceInvaders over 30 min, 33% on Breakout; with 2.5e-4, Asterix kept 91-95% of
#   them and SpaceInvaders about half. Measured with the other defaults (bench
#   minatar, distributed, 480 s, one seed, 2-core machine; mean epsilon-0.1
#   evaluation from 200 s on, greedy in brackets), 1e-3 / 2.5e-4, replay ratio 0.125
#   unless stated: SpaceInvaders-v0 29.1 (43.5) / 31.4 (48.8) (ratio 0.25: 24.8
#   (31.8) / 25.9 (41.0)); Asterix-v0 (1e-3 at ratio 0.25) 0.3-1.0 in 3 runs of 4,
#   the fourth 4.1 (5.6) / 5.1 (6.7), rising to 8.5 by the end (at ratio 0.25: 1.2
#   (1.3)); Breakout-v0 10.0 (16.8) / 9.4 (13.9), the paper's 10 at 280 s / 267 s.
#   Earlier, shorter runs (one seed each, --serial, replay ratio 0.25; last-100
#   training return / best greedy evaluation of 10 episodes every 50K env steps):
#     SpaceInvaders-v0, 300K env steps: 1e-3: 18.6 / 21.9; 2.5e-3: 12.3 / 17.0 at 190K,
#       its evaluations falling 17.0 -> 14.2 -> 8.4 (unstable);
#     Breakout-v0, 200K env steps: 1e-3: 11.2 / 10.9; 2.5e-3: 10.7 / 13.0 (the same);
#       the paper's rate and ratio (2.5e-4, batch 32, 1 update per env step): 8.8 / 13.2
#       at twice the learner's CPU per env step; 1e-3 with batch 64: 8.3 / 10.3;
#     Seaquest-v0, 300K env steps: 0.2-0.3 at both rates (no signal yet).
# - frames (Atari 84x84 stacks, the Nature CNN): Rainbow's Adam rate (Hessel et al.
#   2018, 6.25e-5), not measured here: an Atari run takes hours on 2 cores, and the
#   CartPole rate is 40x what that paper found stable for this network.
# - other (a user's network on other observations): the vector rate.
#
# ``eps_alpha``, the exponent of Ape-X's exploration schedule eps_i = eps^(1 + alpha
# i / (N - 1)) over the N env copies:
# - vector, frames, other: the paper's 7 (with 2 actors x 8 envs: 0.4 down to 0.0007,
#   a quarter of the copies above 0.1).
# - small_image: 3 (0.4 down to 0.026; half of 16 copies at 0.1 or more),
#   measured on SpaceInvaders-v0 (bench minatar, distributed, 480 s each, one seed,
#   2-core machine, nothing else running; epsilon-0.1 evaluation of 30 episodes every
#   50K env steps, mean of those made from 200 s on, greedy in brackets): alpha 7:
#   18.1 (19.6); alpha 3: 23.4 (29.1); every copy at 0.1 (--eps 0.1 --eps-alpha 0):
#   19.1 (24.1); SB3's replay ratio instead (batch 32, an update per env step, lr
#   5e-4): 21.0 (28.4). On Breakout-v0 (900 s, same protocol) alpha 3 reached the
#   paper's 10 at 143 s / 150K env steps, where alpha 7 had taken 354 s / 300K (an
#   earlier 25-min run), and its windows 0-300 / 300-600 / 600-900 s averaged 9.2 /
#   11.0 / 12.9 against 7.1 / 9.5 / 9.2. Run for 30 min on SpaceInvaders, though,
#   alpha 3 did not keep its lead: windows 0-600 / 600-1200 / 1200-1800 s 19.9 / 20.4
#   / 23.7 against alpha 7's 19.0 / 23.6 / 25.6 (an earlier stop's run): one seed
#   each, so the choice rests on Breakout and is not settled for SpaceInvaders. With
#   alpha 7, three quarters of 16 copies explore below 0.1 (down to 0.0007); with
#   alpha 3, half of them (down to 0.026).
#
# ``n_step``, the length of the n-step return:
# - vector, frames, other: the paper's 3.
# - small_image: 1 (the MinAtar paper's DQN), measured with the other defaults (bench
#   minatar, distributed, 480 s each, one seed, 2-core machine, nothing else running;
#   mean epsilon-0.1 evaluation from 200 s on, greedy in brackets): n 3 / n 1:
#   Freeway-v0 3.2 (3.2) / 22.7 (23.8): with 3, every run (alpha 7 and 3, uniform
#   replay, lr 2.5e-4, Adam eps 1.5e-4) peaked at 9-17 by 50-200K env steps and fell
#   to 0-3 (one was back at 10 at its last). SpaceInvaders-v0 23.0 (29.5) / 24.8
#   (31.8); over 30 min its windows rose 3-5 points (bench notes of issue 17).
#   Asterix-v0: with 3, 0.5 over 30 min (alpha 7); with 1, one run of four learned (4.1
#   (5.6), best 7.2 at 500K env steps); the others (seed 0 for 900 s, seeds 1 and 2 for
#   480 s) stayed at 0.3-1.0: n 1 does not fix Asterix. Breakout-v0
#   learns faster with 3 (10.6 (14.7) / 7.7 (12.2); the paper's 10 at 143 s / 269 s),
#   the one game where 1 is behind; with 1, seeds 0-2 all reach 10 within 480 s (269,
#   448, 472 s). A likely reason (not isolated): the return sums the behaviour's next
#   steps uncorrected, and Ape-X's copies explore at rates up to 0.4, where a MinAtar
#   step is a whole move (no frame skip) that can end the episode (Asterix) or throw
#   the chicken back (Freeway).
#
# ``updates_per_step``, the replay ratio (learner updates per env step; each update
# samples a batch of 128):
# - vector, frames, other: 0.25, 32 sampled transitions per env step (the MinAtar
#   paper's batch 32 every step); measured on CartPole only (LearnConfig below).
# - small_image: 0.0625 (first 0.125, then halved again, both below). A MinAtar
#   learner on 2 cores is CPU-bound (250-290 updates/s whatever the ratio), so
#   halving the ratio doubles the env steps actors may take
#   (1,000-1,150 -> 1,700-2,100/s). Measured at lr 1e-3 (bench minatar,
#   distributed, 480 s, one seed, 2-core machine, nothing else running; mean
#   epsilon-0.1 evaluation from 200 s on, greedy in brackets), 0.25 / 0.125:
#   SpaceInvaders-v0 24.8 (31.8) / 28.1 (41.2), final 30.6 / 40.0; Freeway-v0 22.7
#   (23.8) / 33.8 (37.4), final 17.4 / 39.6 (the late drift gone in this run);
#   Breakout-v0 7.7 (12.2) / 10.0 (16.8), the paper's 10 at 269 s / 280 s.
# Both together (lr 2.5e-4, ratio 0.125) for 30 min on SpaceInvaders-v0: the paper's 45
# at 738 s / 1.4M env steps, windows 0-600 / 600-1200 / 1200-1800 s 30.7 / 37.1 / 38.1
# against 23.5 / 25.2 / 26.6 before (lr 1e-3, ratio 0.25) and SB3 DQN's 22.0 / 27.6 /
# 29.3 (the paper's settings, same bench). Breakout-v0 seeds 0-2 reach the paper's 10 at
# 267 s, 361 s (seed 1's second run; its first had not within 480 s, best 9.3) and 363 s.
# 30 min each at lr 2.5e-4 and ratio 0.125 (same bench, one seed, nothing else running), windows
# 0-600 / 600-1200 / 1200-1800 s: Asterix-v0 5.8 / 12.5 / 15.4, the paper's 16.5 at
# 1,089 s / 1.95M env steps, best 19.9; Freeway-v0 28.3 / 42.6 / 46.0, best 50.2 (the
# paper's 50.5 missed by 0.3), final 49.5; Seaquest-v0 0.9 / 3.2 / 8.4, best 13.8 of the
# paper's 20, taking off only after ~1.9M env steps. Seaquest's dense layer still dies
# slowly at this rate (31% of units dead on random-play states at 50K env steps, 91% at
# 3.3M; Asterix 9% -> 56%, Freeway 27% -> 73%). Recycling them (ReDo, --recycle-every
# 1000 at tau 0.1, the paper's DQN setting; 30 min, same bench) kept the layer alive
# (0-2% dead at the end) but Seaquest learned nothing (0.8 / 0.8 / 0.8, best 1.5) while
# its mean Q rose to 10 (3.6-6 without): the dying layer is not what holds Seaquest
# back, so recycling stays off by default.
# Halving the replay ratio again, to 0.0625 (same bench, until 5M env steps or 30
# min; one seed; nothing else running): the learner stays at 228-265 updates/s, so
# actors take 3,650-4,240 env steps/s and the paper's 5M fit in about 23 min.
# Seaquest-v0 reaches the paper's 20 at 1,238 s / 4.5M env steps (best 23.5; windows
# 0-600 / 600-1200 / 1200-1373 s 3.6 / 10.9 / 16.0, against 0.9 / 3.2 / 8.4 and best
# 13.8 at 0.125), its dense layer 12% -> 58% dead over 5M (91% by 3.3M at 0.125).
# Freeway-v0 reaches 50.5 at 652 s / 2.4M (at 0.125 seeds 0-2: 0.3 short, 1,407 s,
# 1,612 s); windows 38.1 / 48.1 / 51.0. Breakout-v0 is unchanged within noise: windows
# 0-200 / 200-400 / 400-600 s 6.2 / 8.5 / 10.3 against 5.7 / 8.7 / 10.7 (seed 0 at
# 0.125), 10 at 384 s (267-363 s at 0.125). SpaceInvaders-v0 reaches 45 at 278 s /
# 1.05M (738 s at 0.125); windows 37.7 / 48.2 / 47.8 (to 1,333 s) against 30.7 / 37.1 /
# 38.1. Asterix-v0 reaches 16.5 at 481 s / 1.15M (1,089 s / 1.95M at 0.125); windows
# 8.1 / 16.8 / 17.4, best 22.8 (another day's machine, whose learner took 1.35-2.2x the
# CPU per update of the runs above: 133 updates/s, 2,120 env steps/s). On that machine
# Breakout-v0 seed 2 reaches 10 at 413 s / 950K; seed 1 reached best 9.4 by 1.2M in 600 s,
# and 10 at 515 s / 1.05M in a second run of 1,200 s (best 14.4).
DEFAULTS_BY_FAMILY: dict[str, dict[str, float | int]] = {
    "vector": {"lr": 2.5e-3, "eps_alpha": 7.0, "n_step": 3, "updates_per_step": 0.25},
    "small_image": {"lr": 2.5e-4, "eps_alpha": 3.0, "n_step": 1, "updates_per_step": 0.0625},
    "frames": {"lr": 6.25e-5, "eps_alpha": 7.0, "n_step": 3, "updates_per_step": 0.25},
    "other": {"lr": 2.5e-3, "eps_alpha": 7.0, "n_step": 3, "updates_per_step": 0.25},
}


@dataclasses.dataclass
class LearnConfig:
    """DQN and Ape-X hyperparameters (defaults tuned for CartPole-v1; the learning
    rate, exploration exponent and n-step length per observation family:
    ``DEFAULTS_BY_FAMILY``)."""

    # Measured: env steps to solve CartPole with these defaults in one deterministic
    # process (greedy eval of 20 episodes every 5000 env steps, seeds 0-5): lr 2.5e-3:
    # 5K 10K 15K 20K >40K >40K (median 17.5K); lr 1e-3: 10K 25K 40K >40K >40K >40K.
    # With lr 1e-3 (3 seeds each), target updates every 100 or 250 updates instead of
    # 500 solved 1/3 and 0/3; batch 256 at 0.125 updates/step 1/3; a 64x64 MLP without
    # dueling head 0/3.
    lr: float | None = field(None, help=(
        "Adam learning rate (none: by observation family, 2.5e-3 for vectors, 2.5e-4 for "
        "MinAtar-size images, 6.25e-5 for 84x84 frames)"))
    gamma: float = field(0.99, help="discount")
    n_step: int | None = field(None, help=(
        "n-step return length (none: by observation family, 1 for MinAtar-size images, 3 otherwise)"))
    batch_size: int = field(128, help="learner batch size")
    target_update: int = field(500, help="learner updates between target network updates")
    tau: float = field(1.0, help="Polyak coefficient of target updates (1.0 = hard copy)")
    adam_eps: float = field(1e-8, help=(
        "Adam's epsilon (Rainbow: 1.5e-4): the gradient size below which Adam's steps shrink "
        "instead of being normalized to --lr"))
    recycle_every: int = field(0, help=(
        "learner updates between recyclings of dormant ReLU units (ReDo, Sokar et al. 2023: "
        "fresh incoming, zero outgoing weights); 0 = off, the paper's DQN setting 1000"))
    recycle_tau: float = field(0.1, help=(
        "ReDo's dormancy threshold: a unit's mean activation on the batch over its layer's mean"))
    double_q: bool = field(True, help="double Q-learning")
    dueling: bool = field(True, help="dueling head")
    hidden: str = field("128,128", help="MLP hidden sizes for vector observations, comma separated")
    updates_per_step: float | None = field(None, help=(
        "learner updates per env step (replay ratio / batch size); actors throttle to hold it "
        "(none: by observation family, 0.0625 for MinAtar-size images, 0.25 otherwise)"))
    learning_starts: int = field(1000, help="env steps before learning starts")
    push_every: int = field(8, help="learner updates between parameter publications")
    pull_every: int = field(64, help="actor env steps between parameter pulls")
    eps: float = field(0.4, help="Ape-X base exploration rate")
    eps_alpha: float | None = field(None, help=(
        "Ape-X exploration exponent (none: by observation family, 3 for MinAtar-size images, "
        "the paper's 7 otherwise)"))
    # Measured like --lr (lr 1e-3, seeds 0-2): per env copy 10K 25K >50K env steps to
    # solve, per actor process 35K 35K >50K.
    eps_per_env: bool = field(True, help=(
        "spread the eps_i schedule over all env copies (else one rate per actor process)"))

    def validate(self) -> None:
        for name in ("n_step", "batch_size", "target_update", "push_every", "pull_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{flag(name)} must be >= 1, got {getattr(self, name)}")
        if self.learning_starts < 0:
            raise ValueError(f"{flag('learning_starts')} must be >= 0, got {self.learning_starts}")
        for name in ("lr", "updates_per_step"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{flag(name)} must be > 0, got {getattr(self, name)}")
        for name in ("gamma", "eps"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{flag(name)} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"{flag('tau')} must be in (0, 1], got {self.tau}")
        if not self.adam_eps > 0:
            raise ValueError(f"{flag('adam_eps')} must be > 0, got {self.adam_eps}")
        if self.recycle_every < 0:
            raise ValueError(f"{flag('recycle_every')} must be >= 0 (0 = off), got {self.recycle_every}")
        if not 0.0 <= self.recycle_tau < 1.0:
            raise ValueError(f"{flag('recycle_tau')} must be in [0, 1), got {self.recycle_tau}")
        if self.eps_alpha is not None and self.eps_alpha < 0:
            raise ValueError(f"{flag('eps_alpha')} must be >= 0, got {self.eps_alpha}")
        self.hidden_sizes()

    def hidden_sizes(self) -> tuple[int, ...]:
        return layer_sizes(self.hidden, name="hidden")

    def apex_config(self):
        from algorithms.apex import ApexConfig

        for name in ("eps_alpha", "n_step"):
            if getattr(self, name) is None:
                raise ValueError(f"{flag(name)} is unset: the job fills it from the env's observations "
                                 "(experiments.roles.apex_parts.env_defaults); set it to build Ape-X parts directly")
        return ApexConfig(n_step=self.n_step, batch_size=self.batch_size,
                          learning_starts=self.learning_starts, push_every=self.push_every,
                          pull_every=self.pull_every, eps=self.eps, eps_alpha=self.eps_alpha,
                          eps_per_env=self.eps_per_env)

    def dqn_config(self):
        from algorithms.dqn import DQNConfig

        if self.lr is None:
            raise ValueError(f"{flag('lr')} is unset: the job fills it from the env's observations "
                             "(experiments.roles.apex_parts.env_defaults); set it to build a DQN directly")
        return DQNConfig(gamma=self.gamma, lr=self.lr, double_q=self.double_q,
                         target_update_interval=self.target_update, tau=self.tau, adam_eps=self.adam_eps,
                         recycle_every=self.recycle_every, recycle_tau=self.recycle_tau)


@dataclasses.dataclass
class ApexJobConfig:
    """Ape-X DQN (Horgan et al. 2018) on one machine or, under torchrun, a cluster."""

    # What the checkpoint's state is shaped by: --resume may not change these
    # (experiments.runtime.resume). The shard count of a sharded replay is checked
    # against the checkpoint's parts instead (roles.apex_parts.check_resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "env_id", "hidden", "dueling", "replay_capacity", "replay_placement", "share_frames")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=1_000_000, eval_every=5000))
    env: EnvConfig = section(EnvConfig)
    replay: ReplayConfig = section(ReplayConfig)
    learn: LearnConfig = section(LearnConfig)
    num_actors: int = field(0, help=(
        "actors of a local run (0: one per CPU core, at least 2); under torchrun the world size decides"))

    def validate(self) -> None:
        if self.num_actors < 0:
            raise ValueError(f"{flag('num_actors')} must be >= 0, got {self.num_actors}")
        if self.learn.batch_size > self.replay.replay_capacity:
            raise ValueError(f"{flag('batch_size')} {self.learn.batch_size} exceeds "
                             f"{flag('replay_capacity')} {self.replay.replay_capacity}")
        if self.run.serial and self.replay.replay_placement != "learner":
            raise ValueError(f"{flag('serial')} keeps the replay in its one process: "
                             "use --replay-placement learner")


def job():
    from experiments.roles import apex as roles

    return roles.JOB


def run(config: ApexJobConfig, *, parts: Parts | None = None, quiet: bool = False,
        started: float | None = None) -> dict[str, Any]:
    """Run the job (serial, a local world, or this rank under torchrun); returns the
    learner's summary (``{}`` on other ranks under torchrun). With
    ``config.run.resume = DIR`` the run in DIR goes on with its saved config; each field
    of ``config`` that differs from ``ApexJobConfig()`` overrides it
    (``experiments.runtime.resume``)."""
    return run_job(job(), config, parts=parts, quiet=quiet, started=started)


def format_summary(summary: dict[str, Any]) -> str:
    from experiments.roles import apex as roles
    from experiments.runtime.summary import format_summary as box

    return box(summary, roles.describe(summary), title="Ape-X DQN")


def main(argv: Sequence[str] | None = None) -> int:
    # The job itself, not job(): its roles import torch, and a Ctrl-C then is a stop too.
    return main_for(job, ApexJobConfig, format_summary, list(argv) if argv is not None else None)


if __name__ == "__main__":
    sys.exit(main())
