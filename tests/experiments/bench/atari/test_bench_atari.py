"""The Atari bench: its --quick and --cpu-smoke modes end to end (not measurements), the
protocol against envs.atari's defaults, CleanRL's script run unedited through its
hooks (a stand-in script and EnvPool here), flag errors; and each of ours learning a
few hundred Atari steps from the CLI, with a checkpoint and resume."""

import importlib.util
import inspect
import json
import os
import sys
import textwrap
import types

import numpy as np
import pytest

pytest.importorskip("ale_py")

from experiments.bench.atari import budget as bench_cli  # noqa: E402
from experiments.bench.atari import cleanrl, protocol  # noqa: E402

KEYS = {"bench", "env_id", "impl", "seed", "device", "budget_s", "protocol", "eval_acting", "eval_episodes",
        "training_reward_clip", "score", "reached_score_at_s", "reached_score_at_steps", "best_eval", "final_eval",
        "best_by_s", "env_steps", "env_steps_per_s", "updates", "updates_per_s", "eval_cpu_s",
        "snapshot_pause_s", "loadavg_start", "loadavg_end", "png", "curve", "peak_memory_mb"}


def records(capsys, *args):
    """The bench's JSON lines. Its main runs in this process (the CLI's parsing and the
    run loop; a process of its own would only add a Python and torch start): each run's
    trainer and evaluator are its child processes as ever."""
    assert bench_cli.main(list(args)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def check_run(record, impl):
    assert KEYS <= set(record), KEYS - set(record)
    assert "error" not in record, record
    assert record["impl"] == impl and record["protocol"] == protocol.PROTOCOL
    assert record["env_steps"] >= 300 and record["updates"] >= 1
    assert record["evaluations"] >= 1 and isinstance(record["final_eval"], float)
    assert record["peak_memory_mb"] > 50  # the trainer and its job's processes, PSS summed
    assert os.path.getsize(record["png"]) > 0


def test_quick_skips_what_is_missing(tmp_path, capsys, monkeypatch):
    # SB3 as on a tree without it, installed or not: its skip line is checked on every
    # machine. Ours runs end to end in the --cpu-smoke test below (one IMPALA run for
    # both: each costs the suite about 10 s of CPU).
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "stable_baselines3" else find_spec(name, *a))
    out = records(capsys, "--quick", "--impls", "sb3-ppo,cleanrl-ppo", "--out", str(tmp_path))
    by_impl = {r["impl"]: r for r in out}
    assert set(by_impl) == {"sb3-ppo", "cleanrl-ppo"}
    assert "no --cleanrl-script" in by_impl["cleanrl-ppo"]["skipped"]
    assert "make bench-deps" in by_impl["sb3-ppo"]["skipped"]
    with open(tmp_path / "results.jsonl") as f:
        assert [json.loads(line) for line in f] == out
    assert bench_cli.parse(["--quick"]).impl_list == ["rlpar-impala", "sb3-ppo", "cleanrl-ppo"]


@pytest.mark.timeout(240)
def test_cpu_smoke_runs_the_gpu_path_on_the_cpu(tmp_path, capsys):
    # --evaluate after: the evaluator starts once the trainer has exited (the during
    # path is every other bench test's)
    out = records(capsys, "--cpu-smoke", "--report-at", "1000", "--evaluate", "after", "--out", str(tmp_path))
    by_impl = {r["impl"]: r for r in out}
    assert set(by_impl) == set(bench_cli.GPU_IMPLS)
    if importlib.util.find_spec("rl_games") is None:
        assert "rl-games" in by_impl["rlgames-ppo"]["skipped"]
    ours = by_impl["rlpar-impala"]
    check_run(ours, "rlpar-impala")
    assert ours["eval_acting"] == protocol.POLICY and set(ours["best_by_s"]) == {"1000"}
    assert ours["device"] == "cpu" and ours["cpu_smoke"] and not ours["compile"]  # compile: cuda's default
    assert ours["num_actors"] == 1 and "--num-actors 1" in ours["flags"]
    assert ours["training_reward_clip"] == "+-1"  # the frames family's --reward-clip, as the peers' sign
    assert ours["evaluate"] == "after" and ours["eval_cpu_s_during_training"] == 0.0
    with open(tmp_path / "results.jsonl") as f:
        assert [json.loads(line) for line in f] == out


def test_the_gpu_run_compiles_where_a_job_can_and_fits_one_call():
    args = bench_cli.parse(["--device", "cuda"])
    assert args.impl_list == list(bench_cli.GPU_IMPLS) and args.compile
    assert "--fast compile" in bench_cli.job_flags("rlpar-impala", args)
    assert "--fast compile" not in bench_cli.job_flags("rlpar-ppo", args)  # PPO has no compile option
    assert len(args.impl_list) * (args.budget_s + 30) <= 8 * 60  # two runs and their evaluation tails
    assert not bench_cli.parse(["--device", "cuda", "--no-compile"]).compile
    assert not bench_cli.parse([]).compile


def test_the_protocol_is_envs_atari_s_defaults():
    from envs.atari import AtariEnv

    defaults = {name: p.default for name, p in inspect.signature(AtariEnv.__init__).parameters.items()}
    assert {name: defaults[name] for name in protocol.ENV_OPTIONS} == protocol.ENV_OPTIONS
    env = protocol.make_env("ALE/Pong-v5", clip_rewards=True)
    assert env.observation_space.shape == (4, 84, 84) and env.action_space.n == 6  # the minimal set
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert env.unwrapped.ale.getInt("max_num_frames_per_episode") == 108_000
    env.close()



@pytest.mark.parametrize("impl", ["rlpar-impala", "rlpar-apex"])
def test_the_evaluator_feeds_frames_as_the_jobs_acting_does(tmp_path, impl):
    """uint8 frames reach the Nature CNN as bytes, which it scales: the same scores as
    frames already scaled to [0, 1]. The evaluator once fed IMPALA and PPO float32 pixel
    values (0-255), which the network takes as scaled: saturated logits, one action
    played, -21 at every Pong evaluation while training went on."""
    import torch

    from experiments.bench.atari import ours

    _, scores = ours.policy(impl, "", "ALE/Pong-v5", run_dir=str(tmp_path))
    frames = np.random.default_rng(0).integers(0, 256, (2, 4, 84, 84), dtype=np.uint8)
    with torch.no_grad():
        from_bytes, from_scaled = scores(frames), scores(frames.astype(np.float32) / 255.0)
        from_pixel_values = scores(frames.astype(np.float32))
    torch.testing.assert_close(from_bytes, from_scaled, rtol=1e-4, atol=1e-5)  # float rounding of the scaling
    assert not torch.allclose(from_bytes, from_pixel_values)


FAKE_SCRIPT = '''
from dataclasses import dataclass

import envpool
import numpy as np
import torch
from torch import nn


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(nn.Flatten(), nn.Linear(4 * 84 * 84, 8), nn.ReLU())
        self.actor = nn.Linear(8, envs.single_action_space.n)


@dataclass
class Args:  # as CleanRL's: a dataclass needs its module in sys.modules (the evaluator loads it)
    env_id: str = "Pong-v5"


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--env-id")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--total-timesteps", type=int)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--update-epochs", type=int, default=4)
    args = parser.parse_args()
    envs = envpool.make(args.env_id, env_type="gym", num_envs=args.num_envs, episodic_life=True,
                        reward_clip=True)
    agent = Agent(types_ns(envs.action_space.n))
    optimizer = torch.optim.Adam(agent.parameters())
    obs = envs.reset()
    for iteration in range(1, 10**9):
        for step in range(args.num_steps):
            obs, reward, done, info = envs.step(np.zeros(args.num_envs, dtype=int))
        loss = agent.actor(agent.network(torch.as_tensor(obs).float() / 255.0)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


class FakeNewEnvPool:
    """EnvPool >= 0.9's ``env_type="gym"`` envs: gymnasium's spaces, reset with infos,
    five values a step (the pinned 1.2.5's), on the protocol env."""

    def __init__(self, n, kwargs):
        import gymnasium

        self.kwargs, self.steps = kwargs, 0
        self.envs = [protocol.make_env("ALE/Pong-v5") for _ in range(n)]
        self.action_space = gymnasium.spaces.Discrete(6)
        self.observation_space = gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8)

    def reset(self):
        return np.stack([env.reset(seed=i)[0] for i, env in enumerate(self.envs)]), {}

    def step(self, actions):
        self.steps += 1
        out = [env.step(int(a)) for env, a in zip(self.envs, actions)]
        truncated = np.full(len(out), self.steps % 5 == 0)
        return (np.stack([o[0] for o in out]), np.array([o[1] for o in out]), np.zeros(len(out), bool), truncated,
                {"terminated": np.zeros(len(out), bool)})


def test_the_old_gym_api_over_a_newer_envpool_is_what_the_script_calls(monkeypatch):
    import gymnasium

    fake_gym = types.ModuleType("gym")  # CI has no gym (the bench extra's): gymnasium's spaces stand in
    fake_gym.spaces = gymnasium.spaces
    monkeypatch.setitem(sys.modules, "gym", fake_gym)
    env = FakeNewEnvPool(2, {})
    assert cleanrl._new_api(env) and not cleanrl._new_api(FakeEnvPool(1, {}))
    old = cleanrl.OldGymApi(env)
    assert old.action_space.n == 6 and old.observation_space.shape == (4, 84, 84)
    assert old.reset().shape == (2, 4, 84, 84)  # the observations alone
    for t in range(1, 6):
        obs, reward, done, info = old.step(np.zeros(2, int))
        assert done.tolist() == [t == 5] * 2 and "terminated" in info  # done: terminated or truncated
    assert old.kwargs == {}  # the rest is the env's own


class FakeEnvPool:
    """The old gym vector API of EnvPool's ``env_type="gym"``, on the protocol env."""

    def __init__(self, n, kwargs):
        self.kwargs = kwargs
        self.envs = [protocol.make_env("ALE/Pong-v5") for _ in range(n)]

    def reset(self):
        return np.stack([env.reset(seed=i)[0] for i, env in enumerate(self.envs)])

    def step(self, actions):
        out = [env.step(int(a)) for env, a in zip(self.envs, actions)]
        return np.stack([o[0] for o in out]), np.array([o[1] for o in out]), np.zeros(len(out), bool), {}


@pytest.mark.parametrize("envpool_api", ["0.8", "1.2"])
def test_cleanrl_script_runs_unedited_under_the_protocol_budget_and_snapshots(tmp_path, monkeypatch, envpool_api):
    if envpool_api == "1.2":  # the pinned EnvPool: the script gets the old API (and gym's spaces)
        import gymnasium

        monkeypatch.setitem(sys.modules, "gym", types.SimpleNamespace(spaces=gymnasium.spaces))
    envpool_cls = FakeEnvPool if envpool_api == "0.8" else FakeNewEnvPool
    script = tmp_path / "ppo_atari_envpool.py"
    script.write_text(textwrap.dedent(FAKE_SCRIPT).replace(
        "types_ns(envs.action_space.n)", "__import__('types').SimpleNamespace(single_action_space="
        "__import__('types').SimpleNamespace(n=6))"))
    made = []
    fake = types.ModuleType("envpool")

    def make(task_id, **kwargs):
        made.append((task_id, kwargs))
        return envpool_cls(kwargs["num_envs"], kwargs)

    fake.make = make
    monkeypatch.setitem(sys.modules, "envpool", fake)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    import time

    figures = cleanrl.train(str(script), "ALE/Pong-v5", run_dir=str(run_dir), seed=3, started=time.time(),
                            budget_s=120.0, max_env_steps=96, eval_every=32, quick=True)
    (task_id, kwargs), = made
    assert task_id == "Pong-v5"
    # The protocol overrides the script's episodic_life=True; the seed is the run's.
    assert {**kwargs} == {"env_type": "gym", "num_envs": 2, **cleanrl.ENVPOOL_PROTOCOL, "seed": 3}
    assert figures["env_steps"] == 96 and figures["updates"] == 2  # stopped at the cap mid-rollout 3
    snaps = sorted(os.listdir(run_dir / "snapshots"))
    assert snaps == ["snap-000000000032.pt", "snap-000000000064.pt", "snap-000000000096-final.pt",
                     "snap-000000000096.pt"]
    monkeypatch.setattr(sys, "argv", sys.argv)
    load, scores = cleanrl.policy(str(script), "ALE/Pong-v5")
    import torch

    load(torch.load(run_dir / "snapshots" / snaps[-2], weights_only=True)["state"])
    assert scores(np.zeros((3, 4, 84, 84), np.uint8)).shape == (3, 6)


@pytest.mark.parametrize("args, named", [
    (["--impls", "rlpar-apex,dopamine"], "dopamine"),
    (["--env-id", "PongNoFrameskip-v4"], "ALE v5"),
    (["--env-id", "ALE/NoSuchGame-v5"], "no_such_game"),
    (["--flags", "sb3-ppo=--lr 1"], "sb3-ppo"),
    (["--flags", "rlpar-impala=--no-such-flag"], "--no-such-flag"),
    (["--report-at", "60,-1"], "--report-at"),
    (["--quick", "--cpu-smoke"], "--cpu-smoke"),
    (["--eval-episodes", "0"], "--eval-episodes"),
])
def test_bad_selection_exits_2_naming_it(tmp_path, capsys, args, named):
    with pytest.raises(SystemExit) as exit_:
        bench_cli.main([*args, "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "results.jsonl").exists()


def test_the_report_at_the_budget_holds_the_final_snapshot(tmp_path):
    rows = [{"env_steps": 100, "wall_s": 1800.0, "final": False, "return": 7.5, "cut": 0},
            {"env_steps": 200, "wall_s": 3600.35, "final": True, "return": 15.3, "cut": 0}]
    (tmp_path / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = bench_cli.summarize(bench_cli.wc.read_curve(str(tmp_path), budget_s=3600.0), score=18.0,
                                  report_at=(1800.0, 3600.0))
    assert summary["best_by_s"] == {"1800": 7.5, "3600": 15.3}
    assert summary["final_eval"] == 15.3 and summary["final_written_s"] == 3600.35
    assert summary["reached_score_at_s"] is None
