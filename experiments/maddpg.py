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
from typing import ClassVar

from algorithms.maddpg.spec import MADDPGConfig
from experiments.roles.maddpg_parts import (  # noqa: F401  (public, for scripts)
    MultiAgentEnvConfig,
    ReplayConfig,
    describe,
    env_factory,
    evaluate,
    teams_of,
)
from experiments.runtime import RunConfig, flag, section
from experiments.runtime.entry import JobEntry


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
