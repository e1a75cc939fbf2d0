"""``--eval-every`` and ``--eval-episodes`` left out: by observation family. 84x84
frames evaluate 10 episodes every 100K env steps (the Atari bench's snapshots and
protocol); every other family keeps the job's own, which the flags' help names."""

import pytest

from experiments import a2c, a3c, apex, impala, ppo, pqn
from experiments.runtime.config import FRAMES_EVALUATION, RunConfig
from experiments.runtime.job import check_command

OWN = {apex: 5000, ppo: 5000, impala: 10_000, pqn: 10_000, a2c: 10_000, a3c: 10_000}


@pytest.mark.parametrize("module", list(OWN), ids=lambda m: m.__name__.split(".")[-1])
def test_frames_evaluate_every_100k_env_steps_and_other_families_at_the_jobs_own(module):
    for env_id, every, episodes in (("ALE/Pong-v5", 100_000, 10), ("CartPole-v1", OWN[module], 20),
                                    ("MinAtar/Breakout-v0", OWN[module], 20)):
        config, _ = check_command(module.job, module.ENTRY.config_cls, ["--env-id", env_id])
        assert (config.run.eval_every, config.run.eval_episodes) == (every, episodes), env_id
    given, _ = check_command(module.job, module.ENTRY.config_cls,
                             ["--env-id", "ALE/Pong-v5", "--eval-every", "5000", "--eval-episodes", "3"])
    assert (given.run.eval_every, given.run.eval_episodes) == (5000, 3)  # the flags win


def test_the_help_names_every_jobs_values():
    import dataclasses

    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(RunConfig)}
    assert f"{FRAMES_EVALUATION['eval_every'] // 1000}K for 84x84 frames" in helps["eval_every"]
    assert f"{FRAMES_EVALUATION['eval_episodes']} for 84x84 frames" in helps["eval_episodes"]
    names = {apex: "Ape-X", ppo: "PPO", impala: "IMPALA", pqn: "PQN", a2c: "A2C", a3c: "A3C"}
    for module, every in OWN.items():
        # "5K for Ape-X and PPO, 10K for IMPALA, PQN, ...": the job's name after its value
        text = helps["eval_every"].split(f"{every // 1000}K for ", 1)[1].split("K for ")[0]
        assert names[module] in text, (module.__name__, helps["eval_every"])


@pytest.mark.parametrize("value", [0, -5])
def test_a_bad_value_is_refused_naming_the_flag(value):
    with pytest.raises(ValueError, match="--eval-every must be >= 1"):
        RunConfig(eval_every=value).validate()
