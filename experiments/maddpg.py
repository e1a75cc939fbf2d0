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

from algorithms.maddpg.spec import MADDPGConfig
from experiments.roles.maddpg_parts import describe, env_factory, evaluate, teams_of  # noqa: F401  (public)
from experiments.runtime import RunConfig, field, flag, section
from experiments.runtime.config import DEFAULT_ENV_STEP_TIMEOUT, check_step_timeout
from experiments.runtime.entry import JobEntry


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
    learn: MADDPGConfig = section(MADDPGConfig)

    def validate(self) -> None:
        if self.learn.batch_size > self.replay.replay_capacity:
            raise ValueError(f"{flag('batch_size')} {self.learn.batch_size} exceeds "
                             f"{flag('replay_capacity')} {self.replay.replay_capacity}")

    def algo_config(self) -> MADDPGConfig:
        """The algorithm's config: ``learn`` with the run's seed and the replay's layout."""
        return dataclasses.replace(self.learn, seed=self.run.seed, ensemble_buffers=self.replay.ensemble_buffers)


LearnConfig = MADDPGConfig  # the name the job's section had
ENTRY = JobEntry(title="MADDPG", config_cls=MADDPGJobConfig, roles="experiments.roles.maddpg", describe=describe)
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
