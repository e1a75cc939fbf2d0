"""MADDPG on MPE, per team, under a fixed env-step budget: random policy, rlpar, TorchRL.

``python -m experiments.bench.multiagent.maddpg_mpe --env simple_adversary|simple_tag [--quick] [--steps N] [--seeds 0 1 2]``

``--env simple_spread`` (cooperative, one team) runs ``experiments.bench.multiagent.maddpg_spread``
with the remaining flags. On the competitive envs the agents form teams by name
(``adversary_*`` against ``agent_*``: one adversary and two good agents on
simple_adversary, three adversaries chasing one good agent past two obstacles on
simple_tag) and every figure is per team: the sum over the team's agents of their
episode returns, averaged over ``--eval-episodes`` fixed-seed greedy episodes.

For each seed, every implementation trains for ``--steps`` env steps (summed over
the ``--num-envs`` copies; same seeds), continuous actions, 25-step episodes, the
paper's hyperparameters (Lowe et al. 2017: lr 1e-2, gamma 0.95, tau 0.01, batch
1024, 2x64 MLPs, critics that see every agent's observation and action):

- ``random``: the uniform-random joint policy (the floor; evaluated once);
- ``rlpar``: the ``experiments.maddpg`` job in this process with ``--ours-flags``
  (default: none, the paper's objective: actor i ascends Q_i with the others'
  actions from replay); reproduce a run with ``python -m experiments.maddpg --env-id
  ENV --continuous --episode-steps 25 --num-envs 8 --max-env-steps N --seed S
  --batch-size 1024 --learning-starts N/10 --updates-per-step 0.25``;
- ``torchrl``: written here from TorchRL's parts: ``PettingZooWrapper`` with a
  ``group_map`` of the same teams, per group a ``MultiAgentMLP`` deterministic
  actor (``TanhDelta``, additive Gaussian exploration) and a critic per agent
  (``MultiAgentMLP``, one network per agent) on all groups' observations and
  actions, one ``DDPGLoss`` + ``SoftUpdate`` per group. The next actions of the
  other groups in a group's target come from their current actors (TorchRL's
  DDPGLoss does the same for a group's own next actions; the paper uses target
  actors).

Competitive returns move together (one team's gain is the other's loss), so the
number that shows a team learned is that team against random opponents: each
learned implementation is also evaluated with one team learned and every other
team random (``team_returns_vs_random``, one evaluation per team: cheap), to
compare with the random policy's own return.

One JSON line per run, then one aggregate line per implementation with the mean
and population std over seeds per team.
"""

from __future__ import annotations

import argparse
import importlib
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from experiments.bench.multiagent.maddpg_spread import (
    KeptMADDPG,
    add_run_flags,
    ours_config,
    parse_run_flags,
    ready_batches,
    update_period,
)
from experiments.bench.tools.emit import emit
from experiments.maddpg import MultiAgentEnvConfig, run, teams_of
from experiments.runtime import Parts, RunConfig

COMPETITIVE = {"simple_adversary": "simple_adversary_v3", "simple_tag": "simple_tag_v3"}
ENVS = ("simple_spread", *COMPETITIVE)
EPISODE_STEPS = 25
STEPS = 30_000
UPDATE_EVERY = 4  # as maddpg_spread: its docstring has the measurements
PEER_UPDATE_EVERY = 8
IMPLS = ("random", "rlpar", "torchrl")

# A joint policy for evaluation: per-agent observations (E, obs_i) -> per-agent actions (E, act_i).
JointPolicy = Callable[[list[np.ndarray]], list[np.ndarray]]


def mpe_env_fn(env: str) -> Callable[[], Any]:
    """A zero-argument factory of the bench's ParallelEnv (continuous, 25-step episodes)."""
    module = importlib.import_module(f"mpe2.{COMPETITIVE[env]}")
    return partial(module.parallel_env, max_cycles=EPISODE_STEPS, continuous_actions=True)


def evaluate_teams(policy: JointPolicy | None, env_fn: Callable[[], Any], *, episodes: int,
                   random_teams: Sequence[str] = (), seed: int = 10_000) -> dict[str, float]:
    """Mean per-team return (sum over the team's agents) over ``episodes`` episodes
    run side by side from seeds ``seed, seed+1, ...``. Agents of ``random_teams``
    (every agent when ``policy`` is None) sample uniform actions from their own
    seeded action spaces, so the random baseline is the same in every call."""
    from envs.multiagent import ParallelEnvAdapter

    envs = [ParallelEnvAdapter(env_fn(), stack=False) for _ in range(episodes)]
    try:
        agents = envs[0].agents
        teams = teams_of(agents)
        unknown = set(random_teams) - set(teams)
        if unknown:
            raise ValueError(f"random_teams {sorted(unknown)} are not teams of this env ({sorted(teams)})")
        randomized = [policy is None or any(i in teams[t] for t in random_teams) for i in range(len(agents))]
        obs = [env.reset(seed=seed + j)[0] for j, env in enumerate(envs)]
        spaces = [[env.env.action_space(a) for a in agents] for env in envs]
        for j, per_agent in enumerate(spaces):
            for i, space in enumerate(per_agent):
                space.seed(seed + 1000 * j + i)
        returns = np.zeros((episodes, len(agents)))
        alive = np.ones(episodes, dtype=bool)
        while alive.any():
            learned = None if all(randomized) else policy([np.stack([o[i] for o in obs]) for i in range(len(agents))])
            for j, env in enumerate(envs):
                if not alive[j]:
                    continue
                act = [spaces[j][i].sample() if randomized[i] else learned[i][j] for i in range(len(agents))]
                obs[j], rew, term, trunc, _ = env.step(act)
                returns[j] += rew
                alive[j] = not (term | trunc).all()
    finally:
        for env in envs:
            env.close()
    return {team: float(returns[:, members].sum(axis=1).mean()) for team, members in teams.items()}


def evaluate_all(policy: JointPolicy | None, env_fn: Callable[[], Any], *, episodes: int) -> dict[str, Any]:
    """``team_returns`` (every team plays ``policy``) and ``team_returns_vs_random``
    (each team plays ``policy`` against random others: its own return)."""
    both = evaluate_teams(policy, env_fn, episodes=episodes)
    teams = list(both)
    vs_random = both if policy is None else {
        team: evaluate_teams(policy, env_fn, episodes=episodes, random_teams=[t for t in teams if t != team])[team]
        for team in teams}
    return {"team_returns": both, "team_returns_vs_random": vs_random}


# ---------------------------------------------------------------------- rlpar


def run_rlpar(*, env: str, seed: int, steps: int, num_envs: int, learning_starts: int, batch_size: int,
              eval_episodes: int, update_every: int, ours_flags: str = "") -> dict[str, Any]:
    """``experiments.maddpg`` in this process with the bench's settings and ``ours_flags``."""
    config = ours_config(ours_flags)
    config.env = MultiAgentEnvConfig(env_id=env, num_envs=num_envs, env_workers=1, episode_steps=EPISODE_STEPS,
                                     continuous=True)
    # --serial: the learner and its actor in this process, which evaluates the learner's MADDPG.
    config.run = RunConfig(seed=seed, max_env_steps=steps, max_seconds=math.inf, eval_every=steps,
                           status_every=0.0, device="cpu", log_dir="none", torch_threads=1, serial=True)
    config.replay.replay_capacity = max(steps, batch_size)
    config.learn.batch_size, config.learn.learning_starts = batch_size, learning_starts
    config.learn.updates_per_step = 1.0 / update_every
    start = time.perf_counter()
    summary = run(config, parts=Parts(algorithm=KeptMADDPG), quiet=True)
    wall = time.perf_counter() - start
    algo, KeptMADDPG.learner = KeptMADDPG.learner, None

    def policy(obs: list[np.ndarray]) -> list[np.ndarray]:
        return algo.act(obs, explore=False)

    return evaluate_all(policy, mpe_env_fn(env), episodes=eval_episodes) | {
        "wall_s": round(wall, 1), "updates": summary["updates"], "mode": summary["mode"],
        "update_every": update_every, "ours_flags": ours_flags}


# -------------------------------------------------------------------- TorchRL


def torchrl_unavailable() -> str | None:
    """Why the TorchRL peer cannot run, or None."""
    try:
        import tensordict  # noqa: F401
        import torchrl  # noqa: F401
    except ImportError as exc:
        return f"not installed: {exc}"
    return None


def _joint_input(n_agents: int, *tensors: torch.Tensor) -> torch.Tensor:
    """Every group's ``(B, n_g, d)`` observations then actions, flattened into one
    ``(B, D)`` joint vector, repeated for each of ``n_agents`` critics -> ``(B, n, D)``."""
    joint = torch.cat([t.flatten(-2) for t in tensors], -1)
    return joint.unsqueeze(-2).expand(*joint.shape[:-1], n_agents, joint.shape[-1])


def run_torchrl(*, env: str, seed: int, steps: int, num_envs: int, learning_starts: int, batch_size: int,
                eval_episodes: int, update_every: int, grad_clip: float | None = 0.5,
                hidden: int = 64, lr: float = 1e-2, gamma: float = 0.95, tau: float = 0.01) -> dict[str, Any]:
    """TorchRL MADDPG with one loss per agent group (see the module docstring)."""
    import logging

    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torch import nn
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.data.replay_buffers.samplers import RandomSampler
    from torchrl.envs import SerialEnv
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper
    from torchrl.modules import AdditiveGaussianModule, MultiAgentMLP, ProbabilisticActor, TanhDelta
    from torchrl.objectives import DDPGLoss, SoftUpdate, ValueEstimators

    logging.getLogger("torchrl").setLevel(logging.WARNING)  # torchrl sets its level on import
    # Two notices per run that say nothing about this bench: the PettingZoo version
    # TorchRL was tested with, and the collector's future default for policy transforms.
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested", category=UserWarning)
    warnings.filterwarnings("ignore", message="The env passed to Collector is missing transforms",
                            category=FutureWarning)
    torch.manual_seed(seed)
    env_fn = mpe_env_fn(env)
    probe = env_fn()
    agents = list(probe.possible_agents)
    probe.close()
    group_map = {team: [agents[i] for i in members] for team, members in teams_of(agents).items()}
    groups = list(group_map)
    venv = SerialEnv(num_envs, lambda: PettingZooWrapper(env=env_fn(), use_mask=False, group_map=group_map,
                                                         categorical_actions=True))
    venv.set_seed(seed)
    obs_spec, act_spec = venv.full_observation_spec_unbatched, venv.full_action_spec_unbatched
    dims = {g: (obs_spec[g, "observation"].shape[-1], act_spec[g, "action"].shape[-1]) for g in groups}
    joint_dim = sum(len(group_map[g]) * (o + a) for g, (o, a) in dims.items())
    joint_keys = [(g, "observation") for g in groups] + [(g, "action") for g in groups]
    policies, explore, losses, updaters, opts, params = {}, [], {}, {}, {}, {}
    for g in groups:
        n_g, (obs_dim, act_dim), spec = len(group_map[g]), dims[g], act_spec[g, "action"]
        actor_net = MultiAgentMLP(n_agent_inputs=obs_dim, n_agent_outputs=act_dim, n_agents=n_g, centralized=False,
                                  share_params=False, depth=2, num_cells=hidden, activation_class=nn.ReLU)
        policies[g] = ProbabilisticActor(
            module=TensorDictModule(actor_net, in_keys=[(g, "observation")], out_keys=[(g, "param")]),
            spec=spec, in_keys=[(g, "param")], out_keys=[(g, "action")], distribution_class=TanhDelta,
            distribution_kwargs={"low": spec.space.low, "high": spec.space.high}, return_log_prob=False)
        sigma = 0.1 * float((spec.space.high - spec.space.low).mean() / 2)
        explore += [policies[g], AdditiveGaussianModule(spec=spec, annealing_num_steps=1, action_key=(g, "action"),
                                                        sigma_init=sigma, sigma_end=sigma)]
        # One critic per agent (centralized=False, share_params=False) on the joint input.
        critic_net = MultiAgentMLP(n_agent_inputs=joint_dim, n_agent_outputs=1, n_agents=n_g, centralized=False,
                                   share_params=False, depth=2, num_cells=hidden, activation_class=nn.ReLU)
        critic = TensorDictSequential(
            TensorDictModule(partial(_joint_input, n_g), in_keys=joint_keys, out_keys=[(g, "joint")]),
            TensorDictModule(critic_net, in_keys=[(g, "joint")], out_keys=[(g, "state_action_value")]))
        loss = DDPGLoss(actor_network=policies[g], value_network=critic, delay_value=True, loss_function="l2")
        loss.set_keys(state_action_value=(g, "state_action_value"), reward=(g, "reward"), done=(g, "done"),
                      terminated=(g, "terminated"), priority=(g, "td_error"))
        loss.make_value_estimator(ValueEstimators.TD0, gamma=gamma)
        losses[g], updaters[g] = loss, SoftUpdate(loss, tau=tau)
        params[g] = {"actor": list(loss.actor_network_params.flatten_keys().values()),
                     "critic": list(loss.value_network_params.flatten_keys().values())}
        opts[g] = {role: torch.optim.Adam(ps, lr=lr) for role, ps in params[g].items()}
    frames = max(update_every, num_envs)
    updates_per_batch = frames // update_every
    collector = Collector(venv, TensorDictSequential(*explore), frames_per_batch=frames, total_frames=steps)
    replay = ReplayBuffer(storage=LazyTensorStorage(max(steps, batch_size)), sampler=RandomSampler(),
                          batch_size=batch_size)
    start = time.perf_counter()
    updates = 0
    for _ in ready_batches(collector, replay, learning_starts=learning_starts, batch_size=batch_size):
        for _ in range(updates_per_batch):
            sample = replay.sample()
            with torch.no_grad():  # every group's next actions, for the other groups' critics
                for g in groups:
                    policies[g](sample["next"])
            for g in groups:
                for role in ("critic", "actor"):
                    value = losses[g].loss_value(sample)[0] if role == "critic" else losses[g].loss_actor(sample)[0]
                    opts[g][role].zero_grad()
                    value.backward()
                    if grad_clip is not None:
                        nn.utils.clip_grad_norm_(params[g][role], grad_clip)
                    opts[g][role].step()
                updaters[g].step()
            updates += 1
    wall = time.perf_counter() - start
    collector.shutdown()  # also closes the env
    if not venv.is_closed:
        venv.close()
    index = {a: i for i, a in enumerate(agents)}

    @torch.no_grad()
    def policy(obs: list[np.ndarray]) -> list[np.ndarray]:
        td = TensorDict({(g, "observation"): torch.as_tensor(np.stack([obs[index[a]] for a in members], 1),
                                                             dtype=torch.float32)
                         for g, members in group_map.items()}, batch_size=[len(obs[0])])
        out: list[np.ndarray] = [np.empty(0)] * len(agents)
        for g, members in group_map.items():
            actions = policies[g](td).get((g, "action")).numpy()
            for k, a in enumerate(members):
                out[index[a]] = actions[:, k]
        return out

    return evaluate_all(policy, env_fn, episodes=eval_episodes) | {
        "wall_s": round(wall, 1), "updates": updates, "mode": "torchrl", "update_every": update_every,
        "grad_clip": grad_clip}


# ----------------------------------------------------------------------- main


def aggregate(env: str, impl: str, lines: list[dict[str, Any]],
              random_line: dict[str, Any] | None) -> dict[str, Any]:
    """Mean and population std over seeds, per team, of both evaluations."""
    agg: dict[str, Any] = {"bench": "maddpg_mpe", "env": env, "impl": impl, "aggregate": True,
                           "seeds": len(lines), "steps": lines[0]["steps"]}
    for key in ("team_returns", "team_returns_vs_random"):
        teams = lines[0][key]
        agg[f"{key}_mean"] = {t: round(statistics.fmean(x[key][t] for x in lines), 4) for t in teams}
        agg[f"{key}_std"] = {t: round(statistics.pstdev(x[key][t] for x in lines), 4) for t in teams}
    agg["wall_s_mean"] = round(statistics.fmean(x["wall_s"] for x in lines), 1)
    if random_line is not None and impl != "random":
        agg["vs_random_minus_random"] = {t: round(v - random_line["team_returns"][t], 4)
                                         for t, v in agg["team_returns_vs_random_mean"].items()}
    return agg


def _rounded(result: dict[str, Any]) -> dict[str, Any]:
    def r(v: Any) -> Any:
        if isinstance(v, float):
            return round(v, 4)
        return {k: r(x) for k, x in v.items()} if isinstance(v, dict) else v
    return {k: r(v) for k, v in result.items()}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    picker = argparse.ArgumentParser(add_help=False)
    picker.add_argument("--env", choices=ENVS, default="simple_adversary")
    known, rest = picker.parse_known_args(argv)
    if known.env == "simple_spread":
        from experiments.bench.multiagent import maddpg_spread

        maddpg_spread.main(rest)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=ENVS, default="simple_adversary",
                        help="simple_spread runs experiments.bench.multiagent.maddpg_spread with the other flags")
    add_run_flags(parser, steps=STEPS, ours_flags="", impls=list(IMPLS), default_impls=list(IMPLS))
    args = parse_run_flags(parser, argv)
    common = dict(env=args.env, steps=args.steps, num_envs=args.num_envs, learning_starts=min(25_600, args.steps // 10),
                  batch_size=args.batch_size, eval_episodes=args.eval_episodes)
    runners: dict[str, Callable[..., dict[str, Any]]] = {}
    for impl in args.impls:
        if impl == "torchrl":
            why = torchrl_unavailable()
            if why:
                emit({"bench": "maddpg_mpe", "env": args.env, "impl": "torchrl", "skipped": why})
                continue
            runners[impl] = partial(run_torchrl, **common,
                                    update_every=update_period(args.peer_update_every, args.num_envs),
                                    grad_clip=args.peer_grad_clip if args.peer_grad_clip > 0 else None)
        elif impl == "rlpar":
            runners[impl] = partial(run_rlpar, **common, update_every=update_period(args.update_every, args.num_envs),
                                    ours_flags=args.ours_flags)
        else:
            runners[impl] = lambda *, seed: evaluate_all(None, mpe_env_fn(args.env), episodes=args.eval_episodes) \
                | {"wall_s": 0.0, "updates": 0, "mode": "random"}
    results: dict[str, list[dict[str, Any]]] = {}
    # Seed-major, so a run cut short still holds every learner on the same seeds; the
    # evaluation episodes are fixed, so the random policy needs one pass.
    for n_seed, seed in enumerate(args.seeds):
        for impl, runner in runners.items():
            if impl == "random" and n_seed > 0:
                continue
            line = {"bench": "maddpg_mpe", "env": args.env, "impl": impl, "seed": seed,
                    "steps": 0 if impl == "random" else args.steps, **_rounded(runner(seed=seed))}
            results.setdefault(impl, []).append(line)
            emit(line)
    random_line = results["random"][0] if "random" in results else None
    for impl, lines in results.items():
        emit(aggregate(args.env, impl, lines, random_line))


if __name__ == "__main__":
    main()
