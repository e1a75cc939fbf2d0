"""Ape-X's hyper-parameters, also the Ape-X job's ``learn`` section
(``experiments/apex.py``; field help in metadata, :mod:`algorithms.params`): the DQN
learner's and its actors', of which TD3/DDPG (:mod:`algorithms.td3.config`) share
those their help names them for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from algorithms.params import Cnn, check_cnn, cnn_param, internal, param

# By observation family (``algorithms.nets.observation_family``, the rule that picks the
# default network), for DQN's fields the job leaves unset (None); how each was measured:
# experiments/tuning.md. DQN_DEFAULTS: every family's.
DEFAULTS_BY_FAMILY: dict[str, dict[str, float | int]] = {
    "vector": {"lr": 2.5e-3, "eps_alpha": 7.0, "n_step": 3, "updates_per_step": 0.25},
    "small_image": {"lr": 2.5e-4, "eps_alpha": 3.0, "n_step": 1, "updates_per_step": 0.0625},
    "frames": {"lr": 6.25e-5, "eps_alpha": 7.0, "n_step": 3, "updates_per_step": 0.25},
    "other": {"lr": 2.5e-3, "eps_alpha": 7.0, "n_step": 3, "updates_per_step": 0.25},
}
DQN_DEFAULTS: dict[str, float | int | tuple[int, ...]] = {"tau": 1.0, "hidden": (128, 128), "batch_size": 128,
                                                          "eps": 0.4}
# With --noisy, the noisy layers explore: epsilon-greedy is off unless --eps is given.
NOISY_DEFAULTS: dict[str, float] = {"eps": 0.0}
# The fields filled by algorithm (and, for DQN, observation family): None in the job's section.
BY_FAMILY = ("lr", "n_step", "batch_size", "tau", "hidden", "updates_per_step", "eps_alpha", "eps")


@dataclass
class ApexConfig:
    """Ape-X hyperparameters: its actors' and learner's, of the DQN learner and, where
    they say so, of TD3/DDPG. The defaults are DQN's on vector observations (tuned for
    CartPole-v1); the Ape-X job leaves ``BY_FAMILY`` None, filled by algorithm and
    observation family (:class:`algorithms.dqn.DQNBuilder` derives the
    :class:`~algorithms.dqn.DQNConfig` from it)."""

    # Measured: env steps to solve CartPole with these defaults in one deterministic
    # process (greedy eval of 20 episodes every 5000 env steps, seeds 0-5): lr 2.5e-3:
    # 5K 10K 15K 20K >40K >40K (median 17.5K); lr 1e-3: 10K 25K 40K >40K >40K >40K.
    # With lr 1e-3 (3 seeds each), target updates every 100 or 250 updates instead of
    # 500 solved 1/3 and 0/3; batch 256 at 0.125 updates/step 1/3; a 64x64 MLP without
    # dueling head 0/3.
    lr: float | None = param(2.5e-3, help=(
        "Adam learning rate (TD3/DDPG: the actor's; none: by algorithm and observation family, "
        "DQN 2.5e-3 for vectors, 2.5e-4 for MinAtar-size images, 6.25e-5 for 84x84 frames; TD3 3e-4)"))
    gamma: float = param(0.99, help="discount")
    n_step: int | None = param(3, help=(
        "n-step return length (none: TD3/DDPG 1; DQN by observation family, 1 for MinAtar-size images, "
        "3 otherwise)"))
    batch_size: int | None = param(128, help="learner batch size (none: 128 for DQN, 256 for TD3/DDPG)")
    target_update: int = param(500, help="DQN: learner updates between target network updates")
    tau: float | None = param(1.0, help=(
        "Polyak coefficient of target updates (none: 1.0, a hard copy every --target-update, for DQN; "
        "0.005 every update for TD3/DDPG)"))
    adam_eps: float = param(1e-8, help=(
        "Adam's epsilon (Rainbow: 1.5e-4): the gradient size below which Adam's steps shrink "
        "instead of being normalized to --lr"))
    recycle_every: int = param(0, help=(
        "learner updates between recyclings of dormant ReLU units (ReDo, Sokar et al. 2023: "
        "fresh incoming, zero outgoing weights); 0 = off, the paper's DQN setting 1000"))
    recycle_tau: float = param(0.1, help=(
        "ReDo's dormancy threshold: a unit's mean activation on the batch over its layer's mean"))
    fast: Literal["auto", "off", "eager", "compile"] = param("auto", help=(
        "how the learner's updates and the actors' forwards run on CPU (algorithms.fast): auto "
        "(= eager), off (plain eager), eager (denormals flushed, leaner forwards), compile "
        "(torch.compile; falls back to eager without a C++ compiler)"))
    double_q: bool = param(True, help="double Q-learning")
    dueling: bool = param(True, help="dueling head")
    hidden: tuple[int, ...] | None = param((128, 128), help=(
        "MLP hidden sizes for vector observations, comma separated (none: 128,128 for DQN, 256,256 "
        "for TD3/DDPG)"))
    cnn: Cnn = cnn_param()
    updates_per_step: float | None = param(0.25, help=(
        "batches learned per env step (replay ratio / batch size), over all learners: K learners "
        "update together on K batches, every K / this env steps; actors throttle to hold it "
        "(none: TD3/DDPG 0.125; DQN by observation family, 0.0625 for MinAtar-size images, 0.25 otherwise)"))
    learning_starts: int = param(1000, help="env steps before learning starts")
    push_every: int = param(8, help="learner updates between parameter publications")
    pull_every: int = param(64, help="actor env steps between parameter pulls")
    eps: float | None = param(0.4, help=(
        "DQN: Ape-X base exploration rate (none: 0.4, or 0 with --noisy, whose layers explore)"))
    eps_alpha: float | None = param(7.0, help=(
        "Ape-X exploration exponent (none: by observation family, 3 for MinAtar-size images, "
        "the paper's 7 otherwise)"))
    # Measured like --lr (lr 1e-3, seeds 0-2): per env copy 10K 25K >50K env steps to
    # solve, per actor process 35K 35K >50K. The paper's actors step one env each, and
    # with few vectorized actors (2 on a small box) a per-process schedule leaves only
    # eps = 0.4 and eps ~ 0.0007.
    eps_per_env: bool = param(True, help=(
        "spread the eps_i schedule over all env copies (else one rate per actor process)"))
    # The library's only: actor vector steps buffered before one add (with priorities).
    add_every: int = internal(16)

    def validate(self) -> None:
        from algorithms.fast import check_fast

        check_cnn(self.cnn)
        check_fast(self.fast)
        for name in ("n_step", "batch_size", "target_update", "push_every", "pull_every", "add_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts must be >= 0, got {self.learning_starts}")
        for name in ("lr", "updates_per_step", "adam_eps"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("gamma", "eps"):
            if getattr(self, name) is not None and not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.tau is not None and not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")
        if self.recycle_every < 0:
            raise ValueError(f"recycle_every must be >= 0 (0 = off), got {self.recycle_every}")
        if not 0.0 <= self.recycle_tau < 1.0:
            raise ValueError(f"recycle_tau must be in [0, 1), got {self.recycle_tau}")
        if self.eps_alpha is not None and self.eps_alpha < 0:
            raise ValueError(f"eps_alpha must be >= 0, got {self.eps_alpha}")
        if self.hidden is not None and (not self.hidden or any(
                isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.hidden)):
            raise ValueError(f"hidden must be a non-empty tuple of positive ints, got {self.hidden!r}")
