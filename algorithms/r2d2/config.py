"""R2D2's hyper-parameters (:mod:`algorithms.r2d2.r2d2`).

Defaults are the paper's (Kapturowski et al. 2019, Table 2) where they concern the
learner: n-step 5, discount 0.997, value rescaling with epsilon 1e-3, priority mix
eta 0.9, Adam at 1e-4 with epsilon 1e-3, a target network copied every 2500 updates,
burn-in 40 then 40 trained steps, sequences starting every 40 steps, an LSTM of 512
units under a dueling head. The paper's sequences are 80 long with the n-step
targets of the last steps cut short; here a sequence carries ``n_step`` more steps
so that every trained step has its full n-step target (``sequence_length`` =
``burn_in + unroll + n_step``). Replay's exponents (priority 0.9, importance 0.6)
belong to the replay buffer, not to this config. One option departs from it: burn-in
mends a stale stored state, and a sequence that starts an episode has none (its state
is the zero one the actor had), so ``train_episode_starts`` trains it from its first
step. Under the paper's rule an episode's first ``burn_in`` steps are never trained
on, which on Atari's thousands of steps costs little, and no sequence is kept from an
episode shorter than ``burn_in + 1`` steps (MinAtar Breakout's first ones take about
6). Off by default: on BreakoutNoTrail it learned no better in one 30-minute run and
cost the learner 25-40% more CPU an update (``experiments/tuning.md``, "R2D2").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from algorithms.params import RUN_BUDGET, Cnn, check_cnn, internal, param


@dataclass
class R2D2Config:
    """R2D2 learner hyper-parameters; checked when built (ValueError naming the field).

    Also the Ape-X job's ``r2d2`` section (``--algorithm r2d2``): the fields with help
    are R2D2's own flags there; the :func:`~algorithms.params.internal` ones the job
    derives from its ``learn`` section (:class:`algorithms.r2d2.R2D2Builder`), which
    already declares them."""

    # Derived by the Ape-X job from learn (gamma, n_step, lr, adam_eps, target_update,
    # hidden, cnn, dueling): the discount, the n-step length, Adam's rate and epsilon, the
    # updates between target copies, the MLP torso's sizes, the frames torso, the dueling head.
    gamma: float = internal(0.997)
    n_step: int = internal(5)
    burn_in: int = param(40, help="R2D2: steps at a sequence's start that only warm up the LSTM from its stored state")
    unroll: int = param(40, help="R2D2: steps after the burn-in that are trained on")
    period: int = param(40, help="R2D2: steps between the starts of consecutive sequences of an episode")
    lr: float = internal(1e-4)
    lr_anneal_steps: int | None = param(0, help=(
        "R2D2: anneal the learning rate linearly to 0 over this many env steps (0: constant; none: by "
        "observation family, the run's --max-env-steps for small images such as MinAtar's, else 0; the "
        "learner counts them as --updates-per-step updates each)"))
    # Derived by the Ape-X job from lr_anneal_steps: the updates the rate reaches 0 at
    # (None: constant), so that a resumed learner goes on from its update count.
    lr_anneal_updates: int | None = internal(None)
    adam_eps: float = internal(1e-3)
    max_grad_norm: float | None = param(40.0, help="R2D2: clip the global gradient norm to this (none: no clipping)")
    target_update_interval: int = internal(2500)
    rescale_eps: float = param(1e-3, help=(
        "R2D2: epsilon of the value rescaling h(x) = sign(x)(sqrt(|x|+1)-1) + eps x"))
    priority_eta: float = param(0.9, help="R2D2: sequence priority: eta * max |TD| + (1 - eta) * mean |TD|")
    priority_eps: float = internal(1e-6)  # added to each sequence priority so none is exactly 0
    train_episode_starts: bool = param(False, help=(
        "R2D2: a sequence that starts an episode (its stored state is the exact zero state, nothing to burn in) "
        "is trained from its first step, and kept from 2 steps (the paper's: after --burn-in, like the others); "
        "for episodes not much longer than --burn-in"))
    lstm_size: int = param(512, help="R2D2: units of the LSTM between the torso and the head")
    last_action_reward: bool = param(False, help=(
        "R2D2: the LSTM also takes the previous step's action (one-hot) and reward (tanh), as the paper's network"))
    hidden: tuple[int, ...] = internal((64, 64))
    cnn: Cnn = internal("nature")
    dueling: bool = internal(True)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def sequence_length(self) -> int:
        """Steps in a replayed sequence: burn-in, trained steps, and their n-step tails."""
        return self.burn_in + self.unroll + self.n_step

    @property
    def min_sequence_steps(self) -> int:
        """Valid steps a sequence needs to train one step: the burn-in, the step, its
        successor (the adder's ``min_valid``)."""
        return self.burn_in + 2

    @property
    def min_start_steps(self) -> int:
        """Valid steps a sequence that starts an episode needs to train one step."""
        return 2 if self.train_episode_starts else self.min_sequence_steps

    def validate(self) -> None:
        check_cnn(self.cnn)
        for name in ("n_step", "unroll", "period", "target_update_interval", "lstm_size"):
            _int(name, getattr(self, name), low=1)
        _int("burn_in", self.burn_in, low=0)
        if self.lr_anneal_steps is not None:  # None: the job fills it (DEFAULTS_BY_FAMILY)
            _int("lr_anneal_steps", self.lr_anneal_steps, low=0)
        if self.lr_anneal_updates is not None:
            _int("lr_anneal_updates", self.lr_anneal_updates, low=1)
        if self.period > self.sequence_length:
            raise ValueError(f"period ({self.period}) must be <= sequence_length "
                             f"({self.sequence_length} = burn_in + unroll + n_step): steps between "
                             "sequences would never be replayed")
        for name in ("gamma", "priority_eta"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        for name in ("lr", "adam_eps", "rescale_eps"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if not (math.isfinite(self.priority_eps) and self.priority_eps >= 0):
            raise ValueError(f"priority_eps must be a finite number >= 0, got {self.priority_eps}")
        if self.max_grad_norm is not None and not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"max_grad_norm must be a finite number > 0 or None, got {self.max_grad_norm}")
        if not isinstance(self.hidden, tuple) or not self.hidden or not all(
                isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in self.hidden):
            raise ValueError(f"hidden must be a non-empty tuple of positive ints, got {self.hidden!r}")


# The r2d2 section's fields the Ape-X job leaves unset (None), by observation family.
# Small images: the rate annealed to 0 over the run's --max-env-steps (as PPO's and
# IMPALA's MinAtar defaults): on BreakoutNoTrail it lifted the plateau a constant 1e-3
# learned to (experiments/tuning.md, "R2D2", "Annealing the learning rate"). Vectors
# solve StatelessCartPole at a constant rate; frames keep the paper's constant one.
DEFAULTS_BY_FAMILY: dict[str, dict[str, int]] = {
    "vector": {"lr_anneal_steps": 0},
    "small_image": {"lr_anneal_steps": RUN_BUDGET},
    "frames": {"lr_anneal_steps": 0},
    "other": {"lr_anneal_steps": 0},
}


def _int(name: str, value: object, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
