"""MADDPG on any PettingZoo parallel env: ``python -m experiments.maddpg``.

Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive
Environments" (NeurIPS, arXiv:1706.02275). One process acts for all env copies at
once (one batched forward per agent group) while the copies step in
``--env-workers`` subprocesses, and learns ``--updates-per-step`` updates per env
step from a local replay buffer; the defaults are the paper's (batch 1024, one
update per 100 env steps, 25-step episodes). MADDPG runs in one process: under
torchrun it needs ``--nproc-per-node 1`` (a larger world is refused).

Envs (``--env-id``): an mpe2 scenario by short name (``simple_spread``,
``simple_adversary``, ``simple_tag``, ``simple_push``, ``simple_reference``,
``simple_speaker_listener``, ...), ``module:factory`` (any callable that returns a
PettingZoo ParallelEnv) or the built-in ``cooperative`` / ``cooperative_hetero``;
``--n-agents``, ``--episode-steps`` and ``--continuous`` reach the env when its
factory takes them (``N``/``n_agents``, ``max_cycles``/``max_steps``,
``continuous_actions``/``continuous``). Agents form teams by name
(``adversary_0`` -> ``adversary``); ``--critic-observes team`` shows each critic
only its own team's observations and actions.

Python API: ``run(MADDPGJobConfig(...), parts=Parts(env=factory,
algorithm=MyMADDPG, network=actor_factory))``. ``network(observation_space,
action_space)`` builds one agent's actor (raw outputs: logits for Discrete
actions, pre-tanh values for a Box); the critics are MLPs of ``--hidden``.

TensorBoard (``--log-dir``, per run directory): ``charts/episodic_return`` (team
return: the sum over agents), ``charts/episodic_length``, ``charts/SPS``,
``losses/*``, ``eval/return`` (greedy, every ``--eval-every`` env steps), and
``agents/<agent>/episodic_return``, ``teams/<team>/episodic_return``.

Policy ensembles with ``--ensemble-buffers separate`` keep one replay sub-buffer
per (agent, sub-policy); each update trains sub-policy ``updates % K`` of every
agent on batches from those sub-buffers. ``shared`` keeps one buffer and trains
all sub-policies each update.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from experiments.roles.maddpg_parts import env_factory, evaluate, teams_of  # noqa: F401  (public, for scripts)
from experiments.runtime import Parts, RunConfig, field, flag, layer_sizes, section
from experiments.runtime.config import DEFAULT_ENV_STEP_TIMEOUT, check_step_timeout
from experiments.runtime.job import main_for, run_job

Mode = Literal["auto", "jit_fork", "threads", "batched", "loop"]


def _at_least(config: Any, names: Sequence[str], low: int) -> None:
    for name in names:
        value = getattr(config, name)
        if value is not None and value < low:
            raise ValueError(f"{flag(name)} must be >= {low}, got {value}")


@dataclasses.dataclass
class MultiAgentEnvConfig:
    """The PettingZoo parallel env, as copies stepped side by side."""

    env_id: str = field("simple_spread", help=(
        "PettingZoo parallel env: an mpe2 scenario by short name (simple_spread, simple_adversary, "
        "simple_tag, simple_push, simple_reference, simple_speaker_listener, ...), 'module:factory' "
        "(a callable returning a ParallelEnv), or the built-in cooperative / cooperative_hetero"))
    num_envs: int = field(8, help="env copies stepped side by side (one batched forward per step)")
    env_workers: int = field(2, help=(
        "subprocesses stepping the env copies, each a share of them (at most one per copy); 0: in this "
        "process. A worker killed by a signal (e.g. the OOM killer) is replaced, the episodes it cut "
        "dropped (dropped_episodes), and counted (env_worker_restarts), at most --max-restarts times "
        "per worker; an env that raises or hangs ends the run naming it"))
    env_step_timeout: float | None = field(None, allow_inf=True, help=(
        "seconds an env step or reset may take in an env worker before the run stops with an error "
        f"naming the env and its worker; none: {DEFAULT_ENV_STEP_TIMEOUT:g} with --env-workers >= 1; "
        "inf: no limit. An env in this process (--env-workers 0) cannot be interrupted"))
    n_agents: int | None = field(None, help=(
        "number of agents, for envs that take N (simple_spread, simple_adversary) or n_agents "
        "(cooperative); none: the env's default"))
    episode_steps: int | None = field(None, help=(
        "episode length, for envs that take max_cycles (MPE) or max_steps (cooperative); "
        "none: the env's default"))
    continuous: bool | None = field(None, help=(
        "continuous (Box) actions, for envs that take continuous_actions (MPE) or continuous; "
        "unset: the env's default"))

    def validate(self) -> None:
        _at_least(self, ("num_envs", "n_agents", "episode_steps"), 1)
        _at_least(self, ("env_workers",), 0)
        check_step_timeout(self.env_step_timeout, self.env_workers)
        if not self.env_id.strip():
            raise ValueError(f"{flag('env_id')} may not be empty")


@dataclasses.dataclass
class ReplayConfig:
    """The uniform replay (one buffer, or one per agent and sub-policy)."""

    replay_capacity: int = field(1_000_000, help="replay capacity (transitions)")
    ensemble_buffers: Literal["shared", "separate"] = field("shared", help=(
        "with --ensemble-size > 1: one buffer for all sub-policies, or one per (agent, sub-policy) "
        "as in the paper"))

    def validate(self) -> None:
        _at_least(self, ("replay_capacity",), 1)


@dataclasses.dataclass
class LearnConfig:
    """MADDPG hyperparameters (defaults: the paper's appendix)."""

    lr: float = field(1e-2, help="Adam learning rate of actors and critics")
    actor_lr: float | None = field(None, help="actor learning rate (none: --lr)")
    critic_lr: float | None = field(None, help="critic learning rate (none: --lr)")
    gamma: float = field(0.95, help="discount")
    tau: float = field(0.01, help="Polyak coefficient of the target networks")
    batch_size: int = field(1024, help="batch size of each update")
    learning_starts: int = field(25_600, help="env steps before learning starts")
    # The paper's 1 per 100 env steps for its 1.5M-step runs. In a 30k-step budget on
    # simple_spread one update per 8 env steps scored -59.3 (seed 0) and one per 4
    # -63.2, also with lower actor lr (-60.0 at 1e-3, -63.5 at 3e-3): more updates did
    # not help (experiments/bench/multiagent/maddpg_spread.py docstring has the commands).
    updates_per_step: float = field(0.01, help=(
        "updates per env step (all copies together); above 1/--num-envs several per vector step"))
    hidden: str = field("64,64", help="MLP hidden sizes of actors and critics, comma separated")
    grad_clip: float | None = field(0.5, help="gradient-norm clip (none: no clipping)")
    grad_clip_scope: Literal["network", "role"] = field("network", help=(
        "network: clip each agent's network alone; role: one norm over all actors (critics)"))
    noise: Literal["gaussian", "ou"] = field("gaussian", help="exploration noise of continuous actions")
    noise_scale: float = field(0.1, help="exploration noise scale (continuous actions)")
    actor_reg: float = field(1e-3, help="penalty on the actors' raw outputs")
    gumbel_temperature: float = field(1.0, help="Gumbel-softmax temperature (discrete actions)")
    ensemble_size: int = field(1, help="sub-policies per agent (policy ensembles, paper section 4.3)")
    actor_objective: Literal["own", "team"] = field("own", help=(
        "own: the paper's (actor i ascends Q_i, others' actions from replay); "
        "team: every actor ascends the sum of all critics on current actions"))
    critic_observes: Literal["all", "team"] = field("all", help=(
        "all: every critic sees every agent's observation and action (the paper); team: a critic "
        "sees only its own team's agents (teams: agent names up to the last _<digits>)"))
    mode: Mode = field("auto", help=(
        "how the agents' networks run: auto, jit_fork, threads, batched (stacked), loop"))

    def validate(self) -> None:
        _at_least(self, ("batch_size", "ensemble_size"), 1)
        _at_least(self, ("learning_starts",), 0)
        for name in ("lr", "actor_lr", "critic_lr", "updates_per_step", "gumbel_temperature", "grad_clip"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{flag(name)} must be > 0, got {value}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"{flag('gamma')} must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"{flag('tau')} must be in (0, 1], got {self.tau}")
        for name in ("noise_scale", "actor_reg"):
            if getattr(self, name) < 0:
                raise ValueError(f"{flag(name)} must be >= 0, got {getattr(self, name)}")
        if self.actor_objective == "team" and self.ensemble_size > 1:
            raise ValueError(f"{flag('actor_objective')} team needs {flag('ensemble_size')} 1 (a team "
                             "objective over sub-policies drawn per episode is not defined)")
        self.hidden_sizes()

    def hidden_sizes(self) -> tuple[int, ...]:
        return layer_sizes(self.hidden, name="hidden")

    def algo_config(self, *, seed: int | None = None, ensemble_buffers: str = "shared"):
        from algorithms.maddpg import MADDPGConfig

        return MADDPGConfig(gamma=self.gamma, tau=self.tau,
                            actor_lr=self.lr if self.actor_lr is None else self.actor_lr,
                            critic_lr=self.lr if self.critic_lr is None else self.critic_lr,
                            hidden=self.hidden_sizes(), grad_clip=self.grad_clip,
                            grad_clip_scope=self.grad_clip_scope, noise=self.noise,
                            actor_reg=self.actor_reg, gumbel_temperature=self.gumbel_temperature,
                            noise_scale=self.noise_scale, ensemble_size=self.ensemble_size,
                            ensemble_buffers=ensemble_buffers, actor_objective=self.actor_objective,
                            mode=self.mode, seed=seed)


@dataclasses.dataclass
class MADDPGJobConfig:
    """MADDPG (Lowe et al. 2017) on a PettingZoo parallel env, in one process."""

    # What the checkpoint's state (networks per agent and sub-policy, replay buffers)
    # is shaped by: --resume may not change these (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "env_id", "n_agents", "continuous", "hidden", "ensemble_size", "ensemble_buffers",
        "critic_observes", "replay_capacity")

    # Learning on CPU unless --device says otherwise: MPE's small networks made 1.3x fewer
    # updates/s on a GPU (an H100 machine, the cooperative env: 23 against 31; docs/gpu.md,
    # "A3C and MADDPG learn on the CPU").
    run: RunConfig = section(lambda: RunConfig(max_env_steps=1_000_000, eval_every=25_000,
                                               eval_episodes=10, device="cpu"))
    env: MultiAgentEnvConfig = section(MultiAgentEnvConfig)
    replay: ReplayConfig = section(ReplayConfig)
    learn: LearnConfig = section(LearnConfig)

    def validate(self) -> None:
        if self.learn.batch_size > self.replay.replay_capacity:
            raise ValueError(f"{flag('batch_size')} {self.learn.batch_size} exceeds "
                             f"{flag('replay_capacity')} {self.replay.replay_capacity}")

    def algo_config(self):
        """The algorithm's config (``algorithms.maddpg.spec.MADDPGConfig``)."""
        return self.learn.algo_config(seed=self.run.seed, ensemble_buffers=self.replay.ensemble_buffers)


def job():
    from experiments.roles import maddpg as roles

    return roles.JOB


def run(config: MADDPGJobConfig, *, parts: Parts | None = None, quiet: bool = False,
        started: float | None = None) -> dict[str, Any]:
    """Run the job in this process; returns its summary (also in the run
    directory's ``summary.json``). ValueError naming a flag, or TypeError naming a
    part, before anything starts. With ``config.run.resume = DIR`` the run in DIR goes
    on with its saved config; each field of ``config`` that differs from
    ``MADDPGJobConfig()`` overrides it (``experiments.runtime.resume``)."""
    return run_job(job(), config, parts=parts, quiet=quiet, started=started)


def format_summary(summary: dict[str, Any]) -> str:
    from experiments.roles import maddpg as roles
    from experiments.runtime.summary import format_summary as box

    return box(summary, roles.describe(summary), title="MADDPG")


def main(argv: Sequence[str] | None = None) -> int:
    # The job itself, not job(): its roles import torch, and a Ctrl-C then is a stop too.
    return main_for(job, MADDPGJobConfig, format_summary, list(argv) if argv is not None else None)


if __name__ == "__main__":
    sys.exit(main())
