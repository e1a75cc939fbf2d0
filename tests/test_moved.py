"""The flat layout's old module paths (before each agent got its folder, issue 47):
each still imports with the names it had, or raises an ImportError naming its new
place (algorithms/_moved.py)."""

import importlib
import subprocess
import sys

import pytest

from algorithms._moved import MOVED

# The public names each old module defined (or listed in __all__), as of the flat layout.
OLD_NAMES = {
    "algorithms.a2c": ["A2C", "A2CConfig", "make_optimizer"],
    "algorithms.a2c_config": ["A2CConfig"],
    "algorithms.a3c": ["A3C", "run_worker"],
    "algorithms.apex": ["actor_epsilon", "exploration_rates", "ApexConfig", "ApexActor", "ActingScores",
                        "ApexDPGActor", "ApexLearner", "DQNApex", "evaluate"],
    "algorithms.ddpg": ["DDPGConfig", "DDPG", "action_scale", "polyak_update"],
    "algorithms.continuous": ["polyak_update", "action_scale", "seeded", "adam", "q_value", "weighted_mean"],
    "algorithms.dqn": ["DQNConfig", "DQN"],
    "algorithms.gumbel": ["sample_gumbel", "gumbel_softmax"],
    "algorithms.impala": ["IMPALA", "IMPALAConfig"],
    "algorithms.impala_checks": ["check_batch", "check_state", "explained_variance"],
    "algorithms.impala_config": ["IMPALAConfig"],
    "algorithms.maddpg": ["CRITIC_AUTO_MAX_PARAMS", "MADDPG", "clip_stacked", "clip_per_network"],
    "algorithms.maddpg_spec": ["FIELDS", "AgentSpec", "MADDPGConfig", "check_critic_sees", "split_agents"],
    "algorithms.maddpg_stacked": ["can_stack", "is_stacked_batch", "stacked_update", "stacked_act"],
    "algorithms.ppo": ["PPO", "PPOConfig", "GradHook", "MeanHook", "clipped_surrogate_loss", "value_loss",
                       "normalize", "ROLLOUT", "SAMPLE_KEYS"],
    "algorithms.ppo_config": ["PPOConfig"],
    "algorithms.pqn": ["PQN", "PQNConfig", "linear_schedule", "pqn_network", "GradHook", "ROLLOUT_KEYS"],
    "algorithms.pqn_config": ["PQNConfig"],
    "algorithms.pqn_runner": ["PQNRunner"],
    "algorithms.td3": ["TD3Config", "TD3", "reinitialized"],
    "algorithms.unroll": ["STEP_KEYS", "UNROLL_KEYS", "UnrollAdder", "collate_unrolls"],
    "experiments.builders": [],
    "experiments.builders.dqn": ["DQNBuilder"],
    "experiments.builders.impala": ["IMPALABuilder"],
    "experiments.builders.ppo": ["PPOBuilder"],
    "experiments.builders.pqn": ["PQNBuilder"],  # and its PQNRunner, now PQNSyncRunner
    "experiments.builders.td3": ["TD3Builder"],
    "experiments.roles.a3c": ["restartable", "rank_main", "serial_main"],
    "experiments.roles.a3c_parts": ["ENV_DEFAULTS_BY_FAMILY", "ServerConfig", "fill_defaults", "describe", "resolve",
                                    "check", "env_defaults"],
    # MADDPG's own program, folded into the actor-learner program (its check and
    # describe hooks went to experiments.maddpg, its ReplayConfig and Trainer are gone)
    "experiments.roles.maddpg": ["load_policy", "rank_main", "serial_main"],
    "experiments.roles.maddpg_parts": ["MultiAgentEnvConfig", "env_factory", "team_of", "teams_of", "critic_sees",
                                       "agent_specs", "evaluate", "MEASURES"],
    # roles/: one package per program
    "experiments.roles.program": ["Program", "Setup", "role_of", "pacing", "report_every"],
    "experiments.roles.actor": ["ActorShell", "run_actor"],
    "experiments.roles.learner": ["LearnerLoop", "PARAMS", "run_learner"],
    "experiments.roles.learners": ["join", "Lockstep", "GROUP"],
    "experiments.roles.learner_shards": ["LearnerShards"],
    "experiments.roles.paths": ["DataPath", "data_path", "LearnerReplay", "ActorShards"],
    "experiments.roles.data": ["REPLAY", "QUEUE", "LearnerData", "local_replay"],
    "experiments.roles.sync": ["make_job"],
    "experiments.roles.sync_lead": ["Lead", "SYNC"],
    "experiments.roles.sync_member": ["SyncProgram", "SyncSetup", "Member"],
}


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_an_old_module_path_imports_with_its_names_or_names_its_new_place(old):
    if old not in MOVED:
        module = importlib.import_module(old)
        assert not [name for name in OLD_NAMES[old] if not hasattr(module, name)]
        return
    new = MOVED[old]
    with pytest.raises(ImportError, match=f"{old} has moved to {new}"):
        importlib.import_module(old)
    module = importlib.import_module(new)
    assert not [name for name in OLD_NAMES[old] if not hasattr(module, name)]


def test_every_moved_path_is_an_old_one():
    assert set(MOVED) <= set(OLD_NAMES)


def test_a_name_that_left_a_module_names_its_new_place():
    with pytest.raises(ImportError, match=r"algorithms\.adders\.UnrollItems has moved to "
                                          r"algorithms\.impala\.unroll\.UnrollItems"):
        from algorithms.adders import UnrollItems  # noqa: F401
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        importlib.import_module("algorithms.adders").Nothing  # noqa: B018
    from algorithms.impala import UnrollItems  # noqa: F401


@pytest.mark.parametrize("old", ["algorithms.apex", "experiments.builders.dqn"])
def test_an_old_path_names_its_new_place_as_a_fresh_interpreters_first_import(old):
    done = subprocess.run([sys.executable, "-c", f"import {old}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and f"{old} has moved to {MOVED[old]}" in done.stderr, done.stderr
