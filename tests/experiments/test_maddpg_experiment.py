"""experiments.maddpg on the job runtime: learns the built-in cooperative task; any
PettingZoo parallel env by id (mpe2 short names, module:factory, the user's
factory) with per-agent and per-team curves; team critics; the user's subclass and
actor networks; CLI errors; a launcher's world of learner and actors."""

import functools
import glob
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from algorithms.maddpg import MADDPG
from envs.multiagent import CooperativeEnv
from experiments.maddpg import (
    LearnConfig,
    MADDPGJobConfig,
    MultiAgentEnvConfig,
    ReplayConfig,
    main,
    run,
)
from experiments.runtime import Parts, RunConfig
from experiments.runtime.cli import parse_config
from experiments.runtime.multiagent import critic_sees, env_factory, evaluate, teams_of

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--max-env-steps", "400", "--num-envs", "4", "--env-workers", "0", "--batch-size", "16",
         "--learning-starts", "100", "--updates-per-step", "0.05", "--eval-every", "200",
         "--eval-episodes", "2", "--status-every", "0", "--serial"]


class Kept(MADDPG):
    """Keeps its newest instance, so a test can look at what the job built and trained."""

    newest = None

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        Kept.newest = self


def small_config(env_id="cooperative", *, steps=400, log_dir="none", **env):
    return MADDPGJobConfig(
        run=RunConfig(max_env_steps=steps, eval_every=200, eval_episodes=2, status_every=0.0, log_dir=log_dir,
                      serial=True),
        env=MultiAgentEnvConfig(env_id=env_id, num_envs=4, env_workers=0, **env),
        replay=ReplayConfig(replay_capacity=5000),
        learn=LearnConfig(batch_size=16, learning_starts=100, updates_per_step=0.05))


def learn(config, **fields):
    for name, value in fields.items():
        setattr(config.learn, name, value)
    return config


def scalar_tags(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir)
    events.Reload()
    return set(events.Tags()["scalars"])


@pytest.mark.timeout(180)
def test_short_run_beats_random_on_the_cooperative_env():
    config = small_config(steps=3000, n_agents=2, continuous=True)
    config.env.num_envs = 8
    config.run.eval_every = 1500
    learn(config, batch_size=128, learning_starts=500, updates_per_step=1 / 8)
    summary = run(config, parts=Parts(algorithm=Kept), quiet=True)
    algo = Kept.newest
    assert summary["updates"] > 300 and summary["episodes"] >= 100 and summary["env_steps"] == 3000
    assert summary["evaluations"] == 1 and summary["stop_reason"] == "env step budget"
    env_fn = env_factory(config.env)
    trained = evaluate(algo, env_fn, episodes=20)
    random = evaluate(algo, env_fn, episodes=20, random_policy=True)
    # Random play scores about -78 (2 agents x 25 steps); 3000 steps of MADDPG reach about -60.
    assert trained["team_return"] > random["team_return"] + 8.0, (trained, random)
    assert trained["landmark_distance"] < random["landmark_distance"]


@pytest.mark.timeout(120)
def test_heterogeneous_agents_ensembles_subprocess_envs_and_run_directory(tmp_path, capsys):
    config = small_config("cooperative_hetero", steps=600, log_dir=str(tmp_path), n_agents=3, continuous=False)
    config.env.env_workers = 1
    config.run.status_every = 0.01
    config.replay.ensemble_buffers = "separate"
    learn(config, batch_size=16, updates_per_step=0.05, ensemble_size=2)
    summary = run(config, parts=Parts(algorithm=Kept))
    algo = Kept.newest
    assert not algo.homogeneous and [a.obs_dim for a in algo.agents] == [12, 8, 12]
    assert summary["updates"] > 0 and summary["episodes"] >= 4
    assert np.isfinite(summary["team_return_last100"]["agent"])
    assert "env_steps=" in capsys.readouterr().out  # status lines were printed
    (run_dir,) = glob.glob(str(tmp_path / "maddpg-*"))
    assert summary["run_dir"] == run_dir
    with open(os.path.join(run_dir, "summary.json")) as f:
        assert json.load(f)["updates"] == summary["updates"]
    with open(os.path.join(run_dir, "config.json")) as f:
        assert json.load(f)["replay"]["ensemble_buffers"] == "separate"
    assert {"charts/episodic_return", "charts/SPS", "losses/critic_loss", "eval/return"} <= scalar_tags(run_dir)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id, agents, teams", [
    ("simple_adversary", ["adversary_0", "agent_0", "agent_1"], ["adversary", "agent"]),
    ("simple_tag", ["adversary_0", "adversary_1", "adversary_2", "agent_0"], ["adversary", "agent"]),
])
def test_mpe_envs_by_short_name_write_per_agent_and_per_team_curves(env_id, agents, teams, tmp_path, capsys):
    pytest.importorskip("mpe2")
    assert main(["--env-id", env_id, "--log-dir", str(tmp_path), *SMALL]) == 0
    out = capsys.readouterr().out
    assert f"MADDPG on {env_id}" in out and "[maddpg]" not in out
    (run_dir,) = glob.glob(str(tmp_path / "maddpg-*"))
    tags = scalar_tags(run_dir)
    assert {f"agents/{a}/episodic_return" for a in agents} <= tags
    assert {f"teams/{t}/episodic_return" for t in teams} <= tags
    assert {"charts/episodic_return", "charts/episodic_length", "eval/return"} <= tags
    # The MPE measure that fits the env is a curve too (each evaluation's), not only the summary's.
    assert ("eval/tags_per_episode" in tags) == (env_id == "simple_tag")
    assert "eval/landmark_distance" not in tags  # not a cooperative env: NaN, not logged
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["agents"] == agents and list(summary["team_return_last100"]) == teams
    assert summary["env_steps"] == 400 and summary["evaluations"] == 1  # at 200; the budget stops at 400


def test_teams_are_name_prefixes_and_team_critics_see_their_team():
    names = ["leadadversary_0", "adversary_0", "adversary_1", "agent_0", "agent_1", "speaker"]
    assert teams_of(names) == {"leadadversary": [0], "adversary": [1, 2], "agent": [3, 4], "speaker": [5]}
    assert critic_sees(names, "team") == [(0,), (1, 2), (1, 2), (3, 4), (3, 4), (5,)]
    assert critic_sees(names, "all") is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("observes, widths", [("all", [43, 43, 43]), ("team", [13, 30, 30])])
def test_critic_observes_sets_each_critics_input(observes, widths):
    """simple_adversary: the adversary observes 8, the agents 10; 5 discrete actions each.
    all: 8+5 + 2*(10+5) = 43 for every critic; team: 13 for the adversary, 30 for the agents."""
    pytest.importorskip("mpe2")
    config = learn(small_config("simple_adversary", steps=200), critic_observes=observes, batch_size=16)
    summary = run(config, parts=Parts(algorithm=Kept), quiet=True)
    algo = Kept.newest
    assert summary["critic_inputs"] == widths and summary["updates"] > 0
    assert [critic[0].in_features for critic in algo.critics] == widths


class RecordingMADDPG(MADDPG):
    """A user's variant: scales the critic loss, and records that its hook ran."""

    calls = []

    def critic_loss(self, datas, y):
        RecordingMADDPG.calls.append(len(y))
        return 0.5 * super().critic_loss(datas, y)


@pytest.mark.timeout(120)
def test_user_subclass_and_actor_networks_run():
    built = []

    def actor(observation_space, action_space):
        built.append((observation_space.shape[0], int(action_space.n)))
        return torch.nn.Sequential(torch.nn.Linear(observation_space.shape[0], 16), torch.nn.Tanh(),
                                   torch.nn.Linear(16, int(action_space.n)))

    RecordingMADDPG.calls.clear()
    config = learn(small_config(n_agents=2, continuous=False), batch_size=16)
    summary = run(config, parts=Parts(algorithm=RecordingMADDPG, network=actor), quiet=True)
    assert summary["algorithm"].endswith("RecordingMADDPG")
    assert len(RecordingMADDPG.calls) == summary["updates"] > 0 and set(RecordingMADDPG.calls) == {2}
    # 2 agents (position, 2 landmarks, 1 other agent), in the learner's and the actor's copy
    assert built == [(8, 5), (8, 5)] * 2


def test_parts_that_do_not_fit_are_refused():
    with pytest.raises(TypeError, match="subclass of algorithms.maddpg.maddpg.MADDPG"):
        run(small_config(), parts=Parts(algorithm=dict))
    with pytest.raises(TypeError, match="actor must be a subclass of algorithms.maddpg.builder.MADDPGActor"):
        run(small_config(), parts=Parts(actor=object))
    with pytest.raises(TypeError, match="not a PettingZoo ParallelEnv"):
        run(small_config(), parts=Parts(env=lambda: object()))


@pytest.mark.timeout(120)
def test_module_factory_and_user_factory_envs(capsys):
    assert main(["--env-id", "envs.multiagent.cooperative:CooperativeEnv", "--n-agents", "3",
                 "--log-dir", "none", *SMALL, "--env-workers", "1"]) == 0
    assert "3 in 1 team(s)" in capsys.readouterr().out
    factory = functools.partial(CooperativeEnv, n_agents=2, continuous=True)
    config = small_config(steps=200, episode_steps=10)  # the factory takes max_steps: it reaches it
    summary = run(config, parts=Parts(env=factory), quiet=True)
    assert summary["agents"] == ["agent_0", "agent_1"] and summary["episodes"] == 200 // 10


@pytest.mark.parametrize("argv, message", [
    (["--env-id", "no_such_env"], "--env-id: unknown env id 'no_such_env'; known: "),
    (["--env-id", "envs.testing:CountingEnv"], "not a PettingZoo ParallelEnv"),
    (["--env-id", "no_such_module:make"], "cannot import module 'no_such_module'"),
    (["--env-id", "mpe2.simple_spread_v3:env"], "returned an AEC env"),
    (["--env-id", "simple_tag", "--n-agents", "4"], "--n-agents: the env of --env-id 'simple_tag' takes none"),
])
def test_envs_that_cannot_run_exit_2_naming_the_flag(argv, message, capsys):
    if "mpe2" in message or "simple" in " ".join(argv):
        pytest.importorskip("mpe2")
    assert main([*argv, "--log-dir", "none"]) == 2
    err = capsys.readouterr().err
    assert message in err
    if "unknown" in message:
        for name in ("simple_spread", "simple_adversary", "simple_tag", "cooperative"):
            assert name in err


def test_a_launcher_world_is_the_learner_and_actors():
    """Under torchrun MADDPG is the actor-learner program's world: rank 0 the learner,
    the others actors (it was one process, refusing a larger world)."""
    from experiments import maddpg

    config = small_config()
    config.run.serial = False
    assert maddpg.resolve(config, 3) == 3 and config.num_actors == 2
    assert maddpg.job().roles(config, 3) == ["learner", "actor 0", "actor 1"]
    config.learners = 2  # each learner samples its own replay shard, fed by actors i mod 2
    assert maddpg.resolve(config, 4) == 4 and config.num_actors == 2
    with pytest.raises(ValueError, match="--learners 2 needs at least 2 actors"):
        maddpg.resolve(config, 3)


def test_mpe_simple_spread_is_the_default():
    pytest.importorskip("mpe2")
    env = env_factory(MultiAgentEnvConfig())()
    assert env.possible_agents == ["agent_0", "agent_1", "agent_2"]
    env.close()


@pytest.mark.parametrize("argv, message", [
    (["--num-envs", "0"], "--num-envs"),
    (["--batch-size", "64", "--replay-capacity", "32"], "--batch-size 64 exceeds --replay-capacity"),
    (["--gamma", "1.5"], "--gamma"),
    (["--mode", "gpu"], "invalid choice"),
    (["--critic-observes", "some"], "invalid choice"),
    (["--ensemble-size", "0"], "--ensemble-size"),
    (["--actor-objective", "team", "--ensemble-size", "2"], "--actor-objective team needs --ensemble-size 1"),
    (["--hidden", "64,x"], "--hidden"),
    (["--updates-per-step", "0"], "--updates-per-step must be > 0"),
    (["--n-agents", "0"], "--n-agents"),
])
def test_invalid_cli_config_rejected(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(MADDPGJobConfig, argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_help_lists_the_shared_and_own_flags():
    from experiments.runtime.cli import build_parser

    text = build_parser(MADDPGJobConfig).format_help()
    for name in ("--env-id", "--num-envs", "--env-workers", "--max-env-steps", "--max-seconds", "--log-dir",
                 "--status-every", "--seed", "--device", "--torch-threads", "--serial", "--n-agents",
                 "--episode-steps", "--continuous", "--critic-observes {all,team}", "--replay-capacity"):
        assert name in text
    assert "--total-steps" not in text


def test_updates_per_step_above_one_per_vector_step():
    config = learn(small_config(steps=200, n_agents=2, continuous=True), batch_size=8, learning_starts=40,
                   updates_per_step=0.5)
    summary = run(config, quiet=True)
    # Two updates per vector step of 4 copies from learning_starts on: (200 - 40) / 2.
    assert summary["env_steps"] == 200 and summary["updates"] == 80


def test_status_every_0_prints_no_status_line(capsys):
    assert main(["--env-id", "cooperative", "--log-dir", "none", *SMALL]) == 0
    captured = capsys.readouterr()
    assert "[maddpg]" not in captured.out + captured.err and "MADDPG on cooperative" in captured.out


def test_actor_and_critic_learning_rates_override_lr():
    algo_config = parse_config(MADDPGJobConfig, ["--lr", "1e-2", "--critic-lr", "3e-3"]).algo_config()
    assert algo_config.lrs() == (1e-2, 3e-3)
    config = MADDPGJobConfig()
    config.learn.actor_reg, config.learn.gumbel_temperature = 0.0, 0.5
    config.replay.ensemble_buffers, config.run.seed = "separate", 7
    algo_config = config.algo_config()
    assert (algo_config.lrs()[0], algo_config.actor_reg, algo_config.gumbel_temperature) == (1e-2, 0.0, 0.5)
    assert (algo_config.ensemble_buffers, algo_config.seed) == ("separate", 7)
    assert config.learn.ensemble_buffers == "shared"  # the job's learn section (its config.json) keeps no copy


@pytest.mark.timeout(90)
def test_ctrl_c_ends_with_the_summary(tmp_path):
    # --serial: one process (no zygote importing torch again, no ranks). A Ctrl-C that
    # lands on a local world's launcher is the runtime's, the same for every job
    # (test_stop_signals); what is MADDPG's own here is its CLI and its summary.
    proc = subprocess.Popen([sys.executable, "-m", "experiments.maddpg", "--serial", "--env-id", "cooperative",
                             "--max-env-steps", "100000000", "--num-envs", "2", "--env-workers", "1",
                             "--batch-size", "16", "--learning-starts", "100", "--status-every", "0.1",
                             "--log-dir", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("[maddpg] ")  # running
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "stopped early      interrupted" in out
    (run_dir,) = glob.glob(str(tmp_path / "maddpg-*"))
    with open(os.path.join(run_dir, "summary.json")) as f:
        assert json.load(f)["interrupted"] is True


def test_a_seed_gives_the_same_run():
    """One process, synchronous env steps: the same seed repeats the run exactly."""
    first, second = (run(small_config(steps=300, continuous=False), quiet=True) for _ in range(2))
    assert first["updates"] > 0 and first["evaluations"] == 1
    for key in ("updates", "episodes", "train_return", "agent_return_last100"):
        assert first[key] == second[key], key
    # evals: (seconds, env steps, mean, std, version); only the wall-clock may differ
    assert [e[1:] for e in first["evals"]] == [e[1:] for e in second["evals"]]


def test_learns_on_cpu_unless_a_device_is_given():
    """MPE's small networks were 1.3x slower on a GPU."""
    from experiments.maddpg import MADDPGJobConfig
    from experiments.runtime.cli import parse_config

    assert parse_config(MADDPGJobConfig, []).run.device == "cpu"
    assert parse_config(MADDPGJobConfig, ["--device", "auto"]).run.device == "auto"
