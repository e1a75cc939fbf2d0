"""``policy-best.pt`` is the network the best evaluation played and ``policy.pt`` is
labelled with what is true of it, in every job (issue 30).

An actor evaluates the version it last pulled, and its result reaches the lead
hundreds of updates later: the lead's parameters then are not what scored. So the
evaluator sends the evaluated parameters with its returns and seed, and
``experiments.evaluate RUN --policy best`` replays that evaluation exactly."""

import os
import time

import pytest
import torch
from jobs import a3c_config, apex_config

from experiments import a3c, apex, maddpg
from experiments.evaluate import evaluate_run, main
from experiments.runtime import Parts
from experiments.runtime.checkpoints import BEST_POLICY, POLICY, RunKeeper
from experiments.runtime.job import JobContext
from experiments.runtime.lead import start_lead
from experiments.runtime.messages import EvalResult


def load(run_dir, name):
    return torch.load(os.path.join(run_dir, name), weights_only=True)


def check_policy_files(summary, *, final_version):
    """policy-best.pt replays its recorded evaluation exactly, and that evaluation is
    the run's best; policy.pt holds its own version and env steps, and the last
    evaluation's return only if that evaluation was of its version."""
    run_dir, evals = summary["run_dir"], summary["evals"]  # rows: seconds, env steps, mean, std, version
    best = load(run_dir, BEST_POLICY)
    recorded = best["evaluation"]
    assert (best["version"], best["env_steps"]) == (recorded["version"], recorded["env_steps"])
    assert recorded["episodes"] == len(recorded["returns"]) and best["eval_return"] == recorded["mean"]
    (row,) = [e for e in evals if (e[1], e[4]) == (recorded["env_steps"], recorded["version"])]
    assert row[2] == recorded["mean"] == max(e[2] for e in evals)
    replay = evaluate_run(run_dir, which="best")  # the recorded seed and episodes by default
    assert (replay["seed"], replay["episodes"]) == (recorded["seed"], recorded["episodes"])
    assert replay["returns"] == recorded["returns"] and replay["matches_recorded"]

    final = load(run_dir, POLICY)
    assert (final["version"], final["env_steps"]) == (final_version, summary["env_steps"])
    last = evals[-1]
    if last[4] == final_version:
        assert final["evaluation"]["mean"] == final["eval_return"] == last[2]
        assert final["last_evaluation"] is None
        assert evaluate_run(run_dir, which="final")["matches_recorded"]
    else:
        assert final["evaluation"] is None and final["eval_return"] is None
        assert (final["last_evaluation"]["version"], final["last_evaluation"]["mean"]) == (last[4], last[2])
    return best, final


# ------------------------------------------------------------- the runtime alone


def lead(tmp_path):
    config = apex_config(str(tmp_path))
    ctx = JobContext(job="apex", config=config, parts=Parts(), run_dir=str(tmp_path / "run"),
                     started=time.time())
    os.makedirs(ctx.run_dir)
    coordinator = start_lead(ctx, num_sources=1, target=1e9, evaluator=0)
    return ctx, coordinator


def result(version, returns, *, env_steps=100):
    return EvalResult(env_steps=env_steps, version=version, returns=returns, seed=7 + env_steps,
                      policy={"w": torch.full((2,), float(version))})


@pytest.mark.timeout(60)
def test_the_best_file_holds_the_evaluated_network_not_the_leads_newer_one(tmp_path):
    ctx, coordinator = lead(tmp_path)
    current = {"w": torch.full((2,), 10.0)}  # the learner, at version 10 when results arrive
    keeper = RunKeeper(ctx, coordinator, snapshot=dict, policy=lambda: current)
    coordinator.eval_result(result(3, [5.0, 7.0], env_steps=300))
    keeper.poll()
    best = load(ctx.run_dir, BEST_POLICY)
    assert torch.equal(best["state"]["w"], torch.full((2,), 3.0))
    assert (best["version"], best["env_steps"]) == (3, 300)
    assert best["evaluation"] == {"mean": 6.0, "std": 1.0, "returns": [5.0, 7.0], "seed": 307,
                                  "episodes": 2, "version": 3, "env_steps": 300}
    coordinator.eval_result(result(7, [1.0, 1.0], env_steps=700))  # worse: the best file stays
    keeper.poll()
    assert load(ctx.run_dir, BEST_POLICY)["version"] == 3

    coordinator.env_steps = 1000
    keeper.finish(version=10)
    final = load(ctx.run_dir, POLICY)
    assert torch.equal(final["state"]["w"], current["w"])
    assert (final["version"], final["env_steps"], final["evaluation"], final["eval_return"]) == (
        10, 1000, None, None)  # version 7 was evaluated, not this one
    assert final["last_evaluation"]["version"] == 7 and final["last_evaluation"]["mean"] == 1.0
    coordinator.logger.close()


@pytest.mark.timeout(60)
def test_the_final_file_is_labelled_with_an_evaluation_of_its_own_version(tmp_path):
    ctx, coordinator = lead(tmp_path)
    keeper = RunKeeper(ctx, coordinator, snapshot=dict, policy=lambda: {"w": torch.full((2,), 10.0)})
    coordinator.eval_result(result(10, [4.0, 6.0]))
    keeper.finish(version=10)
    final = load(ctx.run_dir, POLICY)
    assert final["evaluation"]["version"] == 10 and final["eval_return"] == 5.0
    assert final["last_evaluation"] is None
    coordinator.logger.close()


def test_an_evaluation_without_the_evaluated_network_is_refused():
    with pytest.raises(ValueError, match="policy"):
        EvalResult(env_steps=0, version=0, returns=[1.0], seed=0, policy={})
    with pytest.raises(TypeError):
        EvalResult(env_steps=0, version=0, returns=[1.0])  # a job that sends no network


@pytest.mark.timeout(60)
def test_evaluations_of_an_old_checkpoint_resume_without_versions(tmp_path):
    ctx, coordinator = lead(tmp_path)
    state = coordinator.state_dict()
    state["evals"] = [[1.0, 100, 8.0, 0.5], [2.0, 200, 9.0, 0.0]]  # before versions were kept
    coordinator.load_state_dict(state)
    assert coordinator.evals == [(1.0, 100, 8.0, 0.5, -1), (2.0, 200, 9.0, 0.0, -1)]
    keeper = RunKeeper(ctx, coordinator, snapshot=dict, policy=lambda: {"w": torch.zeros(2)})
    coordinator.eval_result(result(4, [8.5, 8.5]))  # below the resumed best: not the best
    keeper.poll()
    assert coordinator.best_result is None and not os.path.exists(os.path.join(ctx.run_dir, BEST_POLICY))
    coordinator.eval_result(result(5, [9.5, 9.5]))
    keeper.poll()
    assert load(ctx.run_dir, BEST_POLICY)["version"] == 5
    assert coordinator.state_dict()["evals"][-1][1:] == [100, 9.5, 0.0, 5]
    coordinator.logger.close()


# ------------------------------------------------------------------------- jobs


@pytest.mark.timeout(120)
def test_apex_with_actors_keeps_the_network_its_evaluating_actor_played(tmp_path):
    # The last actor evaluates the version it pulled while the learner goes on updating.
    summary = apex.run(apex_config(str(tmp_path), max_env_steps=800, eval_every=250), quiet=True)
    assert summary["evaluations"] >= 2
    check_policy_files(summary, final_version=summary["updates"])


@pytest.mark.timeout(120)
def test_apex_serial_files_and_the_evaluate_command(tmp_path, capsys):
    summary = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=1000, eval_every=400),
                       quiet=True)
    best, _ = check_policy_files(summary, final_version=summary["updates"])
    assert main([summary["run_dir"], "--policy", "best"]) == 0
    out = capsys.readouterr().out
    assert f"over {best['evaluation']['episodes']} episodes from seed {best['evaluation']['seed']}" in out
    assert "over the same episodes: replayed exactly" in out
    assert main([summary["run_dir"], "--policy", "best", "--seed", "99"]) == 0
    assert "not the same set of episodes" in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_a3c_workers_and_lead_keep_the_pulled_network_it_evaluated(tmp_path):
    # Two worker ranks push gradients while the lead evaluates the version it pulled.
    summary = a3c.run(a3c_config(str(tmp_path), num_workers=2, max_env_steps=600, eval_every=200),
                      quiet=True)
    assert summary["evaluations"] >= 2
    check_policy_files(summary, final_version=summary["version"])


@pytest.mark.timeout(120)
def test_maddpg_keeps_the_actors_it_evaluated(tmp_path):
    from experiments.runtime.cli import parse_config

    config = parse_config(maddpg.MADDPGJobConfig, [
        "--env-id", "cooperative", "--max-env-steps", "400", "--num-envs", "2", "--env-workers", "0",
        "--learning-starts", "100", "--batch-size", "32", "--eval-every", "150", "--eval-episodes", "2",
        "--status-every", "0", "--log-dir", str(tmp_path)])
    summary = maddpg.run(config, quiet=True)
    assert summary["evaluations"] >= 2
    check_policy_files(summary, final_version=summary["updates"])


@pytest.mark.timeout(120)
def test_an_old_format_run_resumes_and_its_files_stay_honest(tmp_path):
    from rlpar.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint

    first = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=750, eval_every=350),
                     quiet=True)
    run_dir = first["run_dir"]
    # Make the run what an older rlpar wrote: evaluation rows of 4 fields, policy
    # files with a version and eval_return only.
    path = latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    state, header = load_checkpoint(path, kind="apex")
    state["coordinator"]["evals"] = [e[:4] for e in state["coordinator"]["evals"]]
    save_checkpoint(path.parent, state, kind="apex", step=header["step"], meta=header["meta"])
    for name in (BEST_POLICY, POLICY):
        old = load(run_dir, name)
        torch.save({"job": "apex", "state": old["state"], "version": old["version"],
                    "eval_return": old["eval_return"]}, os.path.join(run_dir, name))
    assert evaluate_run(run_dir, which="best")["recorded"] is None  # an old file still plays

    more = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=1500, eval_every=350,
                                resume=run_dir), quiet=True)
    assert [e[4] for e in more["evals"][:2]] == [-1, -1] and more["evaluations"] >= 3
    assert all(e[4] >= 0 for e in more["evals"][2:])
    new_best = max(e[2] for e in more["evals"][2:]) > max(e[2] for e in more["evals"][:2])
    best = load(run_dir, BEST_POLICY)
    if new_best:  # a new evaluation beat the old ones: its network, replayable
        assert best["evaluation"]["version"] >= 0
        assert evaluate_run(run_dir, which="best")["matches_recorded"]
    else:  # the old file stays, claiming no evaluation it cannot show
        assert "evaluation" not in best
    final = load(run_dir, POLICY)
    assert (final["version"], final["env_steps"]) == (more["updates"], more["env_steps"])
