"""IMPALA's hyper-parameters (:mod:`algorithms.impala.impala`), in a module of their own
as A2C's are: the default networks (:mod:`algorithms.actor_critic`) read the network
fields, and the learner the rest."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from algorithms.a2c.config import A2CConfig, _choice, _in_unit
from algorithms.params import RUN_BUDGET, Cnn, check_cnn, cnn_param, internal, param


@dataclass
class IMPALAConfig:
    """IMPALA hyper-parameters.

    The loss is the paper's (Espeholt et al. 2018, section 4.2 and Table G.1):
    V-trace with ``rho_bar = c_bar = 1``, baseline weight 0.5 on half the squared
    error, entropy bonus 0.01, global gradient-norm clipping at 40, and every term
    *summed* over the batch's ``T x B`` steps (``loss_reduction="sum"``, as the
    paper's and TorchBeast's code do; the clipping threshold and RMSProp's epsilon
    of 0.01 are sized for that scale). ``"mean"`` divides by ``T x B``.

    Optimizer: the paper's RMSProp (decay 0.99, epsilon 0.01, no momentum) at lr 2e-3
    rather than its 6e-4 (tuned for Atari frames). Measured in one process with
    ``experiments.bench.learning.impala_loop`` (2-core machine, one torch thread): on
    CartPole-v1 with 4 unrolls of 20 steps x 4 envs per batch, env steps to a greedy
    mean of 475 over 20 episodes, median of 8 seeds (all solved): RMSProp 2e-3 10.2K
    (0.8 CPU s), Adam 3e-3 13.9K (1.6 s), RMSProp 6e-4 33.9K (2.7 s, two seeds over
    85K); with 3-5 seeds Adam 1e-3 needed 78K, and ``loss_reduction="mean"`` with it
    218K. On MinAtar Breakout-v0 (2 unrolls of 20 x 8 envs, one seed, 180 s, about
    2M env steps) RMSProp 2e-3 reached a greedy return of 11.4 (best 12.2), 6e-4 5.2
    (best 6.0). After the first solve CartPole's greedy return keeps oscillating
    (200-500 over the next 100K steps at either rate, 3 seeds), as policy gradients
    do there: a job should keep its best evaluated policy. ``optimizer_eps=None`` is
    0.01 for RMSProp, torch's 1e-8 for Adam.

    The network fields (``hidden`` ... ``action_transform``) mean what they mean in
    :class:`~algorithms.a2c.config.A2CConfig`: IMPALA builds A2C's default networks
    and policy heads (:meth:`network_config`).
    """

    # The job's flags, in its --help order. Those the job fills "by observation
    # family" are None in its section (experiments.impala) until the env is known.
    lr: float | None = param(2e-3, help="learning rate (none: by observation family, 2e-3; 6e-4 for frames)")
    lr_anneal_steps: int | None = param(0, help=(
        "anneal the learning rate linearly to 0 over this many env steps, all learners together "
        "(0: constant; none: by observation family, over the run's --max-env-steps for MinAtar, else 0)"))
    optimizer: Literal["rmsprop", "adam"] = param("rmsprop", help="optimizer (the paper's RMSProp, eps 0.01)")
    gamma: float = param(0.99, help="discount")
    unroll_length: int | None = param(20, help="steps per unroll an actor sends (none: by family, 20; 5 for MinAtar and frames)")
    batch_size: int | None = param(2, help="unrolls per learner update (none: by family, 2)")
    rho_bar: float = param(1.0, help="V-trace: clip of the importance weights in the value targets")
    c_bar: float = param(1.0, help="V-trace: clip of the trace-cutting weights")
    entropy_coef: float | None = param(0.01, help="entropy bonus weight (none: by family, 0.01; 0.05 for MinAtar)")
    value_coef: float = param(0.5, help="baseline loss weight")
    max_grad_norm: float | None = param(40.0, help="clip the summed loss's gradient to this norm ('none': no clip)")
    hidden: tuple[int, ...] = param((64, 64), help="MLP hidden sizes for vector observations, comma separated")
    cnn: Cnn = cnn_param()
    push_every: int = param(1, help="learner updates between parameter publications")
    pull_every: int = param(0, help="actor env steps between parameter pulls (0: one unroll's, every unroll)")
    # How updates and acting run on CPU (algorithms.fast); IMPALA's one forward per
    # update already covers obs and next obs.
    fast: Literal["auto", "off", "eager", "compile"] = param("auto", help=(
        "how updates and acting run on CPU (algorithms.fast): auto (= eager), off, eager (denormals "
        "flushed), compile (falls back to eager without a C++ compiler)"))
    # The library's only. lr_anneal_updates: what the algorithm anneals over (None:
    # constant); a job's builder derives it from lr_anneal_steps.
    pg_rho_bar: float | None = internal(None)  # None: rho_bar
    vtrace_lambda: float = internal(1.0)
    loss_reduction: Literal["sum", "mean"] = internal("sum")
    lr_anneal_updates: int | None = internal(None)
    # Rewards clamped to +-this in the loss (None: as given; the paper's Atari: 1). A job
    # clips in its env section instead (--reward-clip, 1 for frames), where the episode
    # returns still count the game's.
    reward_clip: float | None = internal(None)
    optimizer_eps: float | None = internal(None)  # None: 0.01 for RMSProp (the paper's), 1e-8 for Adam
    rmsprop_alpha: float = internal(0.99)
    activation: Literal["tanh", "relu"] = internal("tanh")
    shared_network: bool = internal(False)
    log_std_init: float = internal(0.0)
    state_dependent_std: bool = internal(False)
    action_transform: Literal["clip", "tanh"] = internal("clip")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_cnn(self.cnn)
        for name in ("unroll_length", "batch_size", "push_every"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        for name in ("lr_anneal_steps", "pull_every"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        _in_unit("gamma", self.gamma)
        _in_unit("vtrace_lambda", self.vtrace_lambda)
        _in_unit("rmsprop_alpha", self.rmsprop_alpha)
        _choice("optimizer", self.optimizer, ("rmsprop", "adam"))
        _choice("loss_reduction", self.loss_reduction, ("sum", "mean"))
        from algorithms.fast import check_fast

        check_fast(self.fast)
        for name in ("rho_bar", "c_bar", "pg_rho_bar"):
            value = getattr(self, name)
            if value is not None and (math.isnan(value) or value <= 0):
                raise ValueError(f"{name} must be > 0 (inf: no clipping), got {value}")
        for name in ("value_coef", "entropy_coef"):
            value = getattr(self, name)
            if value is None and name == "entropy_coef":  # filled by the job (require)
                continue
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        for name in ("lr", "optimizer_eps", "max_grad_norm", "reward_clip"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0{'' if name == 'lr' else ' or None'}, "
                                 f"got {value}")
        anneal = self.lr_anneal_updates
        if anneal is not None and (isinstance(anneal, bool) or not isinstance(anneal, int) or anneal < 1):
            raise ValueError(f"lr_anneal_updates must be an int >= 1 or None, got {anneal!r}")
        self.network_config()  # the network fields, checked by A2CConfig's rules

    @property
    def eps(self) -> float:
        """The optimizer's epsilon: ``optimizer_eps`` or the optimizer's default."""
        if self.optimizer_eps is not None:
            return self.optimizer_eps
        return 0.01 if self.optimizer == "rmsprop" else 1e-8

    def network_config(self) -> A2CConfig:
        """An :class:`A2CConfig` carrying the network fields, which is what
        :func:`~algorithms.actor_critic.default_actor_critic` and
        :func:`~algorithms.actor_critic.make_head` read."""
        return A2CConfig(hidden=self.hidden, cnn=self.cnn, activation=self.activation,
                         shared_network=self.shared_network, log_std_init=self.log_std_init,
                         state_dependent_std=self.state_dependent_std,
                         action_transform=self.action_transform)


# Filled by a job from the env's observation family (None until then).
BY_FAMILY = ("lr", "lr_anneal_steps", "unroll_length", "batch_size", "entropy_coef")


# By observation family (the rule that picks the default network), for the fields left
# unset. Measured in one process (algorithms/impala/impala.py's learner, 4 actors x 4 envs x
# unrolls of 20 per batch, greedy evaluation of 20 episodes every 2,500 env steps; the
# V-trace/IMPALA issue's notes): CartPole-v1 with RMSProp 2e-3 solved in a median 9.0K
# env steps over 8 seeds (the paper's 6e-4: 33.9K, two seeds over 85K; Adam 3e-3:
# 13.9K); MinAtar Breakout (one seed, 180 s) greedy 11.4 at 2e-3 against 5.2 at 6e-4.
# MinAtar's unrolls of 5 (A3C's n-step there, 4x the updates per env step of 20), an
# entropy bonus of 0.05 (Breakout left its plateau 8x sooner) and the rate annealed to 0
# over the run's --max-env-steps (the paper's linear decay; SpaceInvaders' epsilon-0.1
# return rose past SB3 PPO's): experiments/tuning.md ("IMPALA on MinAtar").
DEFAULTS_BY_FAMILY: dict[str, dict[str, float | int]] = {
    "vector": {"lr": 2e-3, "lr_anneal_steps": 0, "unroll_length": 20, "batch_size": 2, "entropy_coef": 0.01},
    "small_image": {"lr": 2e-3, "lr_anneal_steps": RUN_BUDGET, "unroll_length": 5, "batch_size": 2,
                    "entropy_coef": 0.05},
    # The paper's rate and entropy bonus, with MinAtar's unrolls of 5 in batches of 2: on
    # Pong (2 cores, 60 minutes) the paper's unrolls of 20 in batches of 4 made 2,901
    # updates and never left a random policy's level; 5 x 2 made 13 updates/s with the
    # small CNN, left it after about 1M env steps and reached -3.6 (experiments/tuning.md,
    # "IMPALA on Pong").
    "frames": {"lr": 6e-4, "lr_anneal_steps": 0, "unroll_length": 5, "batch_size": 2, "entropy_coef": 0.01},
    "other": {"lr": 2e-3, "lr_anneal_steps": 0, "unroll_length": 20, "batch_size": 2, "entropy_coef": 0.01},
}
