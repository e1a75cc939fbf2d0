"""MADDPG on MPE simple_spread under a fixed env-step budget: random policy, rlpar, TorchRL.

``python -m experiments.bench.multiagent.maddpg_spread [--quick] [--steps N] [--seeds 0 1 2]`` (also
``python -m experiments.bench.multiagent.maddpg_mpe --env simple_spread``; that bench covers the
competitive envs, per team)

For each seed and implementation: train for ``--steps`` env steps (summed over
env copies), then evaluate the greedy policy on 50 fixed-seed episodes with the
same code for both: team return (sum over agents of the episode return), mean
per-step sum over landmarks of the closest agent's distance, and colliding
agent pairs per episode. The uniform-random policy on the same episodes is the
floor. Both learners use continuous actions (TorchRL's MADDPG components are
continuous: deterministic actor + DDPG loss) and the paper's hyperparameters
(Lowe et al. 2017: lr 1e-2, gamma 0.95, tau 0.01, batch 1024, 2x64 MLPs) and
the same number of env copies. Budget: the paper updates every 100 env steps over
1.5M steps (15k updates); 3 seeds x 2 learners must fit in ~30 minutes on a
2-core box, which allows 30k steps per run, where that period gives ~270 updates
and nothing measurable is learned. So TorchRL makes one critic and one actor step
per vector step of the 8 copies (its collector yields 8 frames per batch;
``--peer-update-every 8``, ~3.4k updates), and rlpar, whose update costs a third
of TorchRL's wall-clock, spends part of that on two updates per vector step
(``--update-every 4``, ~6.8k updates) and still finishes first.

rlpar's bench settings (``RLPAR_FLAGS``): ``--actor-objective team
--grad-clip-scope role``. Runs are chaotic: the same seed moves by +-2 after a
1e-7 change in rounding, so one seed decides nothing and every figure below is a
3-seed mean (seeds 0-2, 30k steps, greedy team return, higher is better;
``--impls rlpar --update-every U --ours-flags=F``):

- paper objective (actor i ascends Q_i, others' actions from replay), per-network
  clipping, U=8: -59.9 +- 0.7;
- team objective (every critic sees every current action, actors ascend their
  sum, as TorchRL's DDPGLoss on a centralized critic does) + one clipping norm per
  role (TorchRL clips all agents' parameters together), U=8: -58.0 and -57.0 in
  two 3-seed runs; adding TorchRL's online (not target) next actions: -57.6, so
  rlpar keeps the target actors MADDPG prescribes;
- team + role clipping, U=4: -53.6 (-55.1, -53.5, -52.3) in ~160 s per run.

TorchRL at U=8 scored -55.8 +- 2.5 in ~190 s per run (previous session).
The 30k-step sweep of the paper objective at U=8 (lr, tau, noise, actor penalty,
clipping; one seed each) is in ``MADDPGConfig``'s docstring; with this noise it
found nothing.
One JSON line per run, then one aggregate line per implementation.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import statistics
import time
from typing import Any

import torch

from algorithms.maddpg import MADDPG
from experiments.bench.tools.emit import emit
from experiments.maddpg import MADDPGJobConfig, MultiAgentEnvConfig, env_factory, evaluate, run
from experiments.runtime import Parts, RunConfig
from experiments.runtime.cli import leaves, parse_config

# Default budget: 3 seeds x 2 implementations in about 20 minutes on a 2-core box.
STEPS = 30_000
UPDATE_EVERY = 4  # rlpar: two updates per vector step of 8 copies
PEER_UPDATE_EVERY = 8  # TorchRL: one per collected batch of 8 frames
# Extra experiments.maddpg flags for rlpar by default (the module docstring has the
# 3-seed comparison that chose them).
RLPAR_FLAGS = "--actor-objective team --grad-clip-scope role"
# Sections the bench sets itself (all of run and env) and its own learning fields;
# --ours-flags may not touch them.
_BENCH_SECTIONS = ("run", "env")
_BENCH_FIELDS = ("batch_size", "replay_capacity", "learning_starts", "updates_per_step")


def _bench_owned(config: MADDPGJobConfig) -> list[str]:
    """The bench-owned fields ``config`` sets to other than their defaults."""
    default = MADDPGJobConfig()
    given = {f.name: getattr(owner, f.name) for owner, f, _ in leaves(config)}
    owned = [f.name for owner, f, _ in leaves(default)
             if f.name in _BENCH_FIELDS or owner is default.run or owner is default.env]
    base = {f.name: getattr(owner, f.name) for owner, f, _ in leaves(default)}
    return [name for name in owned if given[name] != base[name]]


def ours_config(flags: str) -> MADDPGJobConfig:
    """``experiments.maddpg`` flags -> its config; exits 2 on a bad flag, raises on a bench-owned one."""
    config = parse_config(MADDPGJobConfig, shlex.split(flags))
    owned = _bench_owned(config)
    if owned:
        raise ValueError(f"--ours-flags may not set {owned}: the bench sets them for both learners")
    return config


def spread_env(*, continuous: bool) -> MultiAgentEnvConfig:
    """The bench's env: MPE simple_spread, 3 agents, 25-step episodes."""
    return MultiAgentEnvConfig(env_id="simple_spread", n_agents=3, episode_steps=25, continuous=continuous)


class KeptMADDPG(MADDPG):
    """MADDPG that keeps the first instance a run makes, the learner's (``--serial``
    makes it before the actor's acting copy): the job runs in this process, and the
    bench evaluates what it trained with the same code as the peer's policy."""

    learner: MADDPG | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if KeptMADDPG.learner is None:
            KeptMADDPG.learner = self


def run_rlpar(*, seed: int, steps: int, continuous: bool, num_envs: int, learning_starts: int,
              batch_size: int, eval_episodes: int, update_every: int, ours_flags: str = "") -> dict[str, Any]:
    config = ours_config(ours_flags)
    config.env = dataclasses.replace(spread_env(continuous=continuous), num_envs=num_envs, env_workers=1)
    # No evaluation inside the run (eval_every = the budget: the stop comes first);
    # the bench evaluates the final policy below.
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
    result = evaluate(algo, env_factory(config.env), episodes=eval_episodes)
    result.pop("returns")
    return result | {"train_wall_s": round(wall, 1), "updates": summary["updates"], "mode": summary["mode"]}


def update_period(update_every: int, num_envs: int) -> int:
    """``update_every`` env steps rounded to a whole number of vector steps, or, below
    one vector step, to a divisor of ``num_envs`` (that many updates per vector step)."""
    if update_every >= num_envs:
        return num_envs * round(update_every / num_envs)
    per_step = round(num_envs / update_every)
    while num_envs % per_step:
        per_step -= 1
    return num_envs // per_step


def run_random(*, seed: int, eval_episodes: int) -> dict[str, Any]:
    """The uniform-random joint policy on the same evaluation episodes (the floor)."""
    result = evaluate(_NoPolicy(3), env_factory(spread_env(continuous=True)), episodes=eval_episodes,
                      random_policy=True)
    result.pop("returns")
    return result | {"train_wall_s": 0.0, "updates": 0, "mode": "random"}


class _NoPolicy:
    """``evaluate`` needs ``n_agents`` only when it samples random actions."""

    def __init__(self, n_agents: int) -> None:
        self.n_agents = n_agents


def torchrl_unavailable(continuous: bool) -> str | None:
    """Why the TorchRL peer cannot run, or None."""
    if not continuous:
        return "TorchRL's MADDPG pieces (deterministic actor + DDPGLoss) need continuous actions"
    try:
        import tensordict  # noqa: F401
        import torchrl  # noqa: F401
        from mpe2 import simple_spread_v3  # noqa: F401
    except ImportError as exc:
        return f"not installed: {exc}"
    return None


class _TorchRLPolicy:
    """Adapts a TorchRL multi-agent actor to ``evaluate``'s ``act(obs)`` interface."""

    def __init__(self, policy: Any, n_agents: int) -> None:
        self.policy, self.n_agents = policy, n_agents

    @torch.no_grad()
    def act(self, obs: Any, *, explore: bool = False) -> Any:
        from tensordict import TensorDict

        td = TensorDict({("agent", "observation"): torch.as_tensor(obs, dtype=torch.float32)},
                        batch_size=[len(obs)])
        return self.policy(td).get(("agent", "action")).numpy()


def ready_batches(collector: Any, replay: Any, *, learning_starts: int, batch_size: int):
    """TorchRL's collection loop for the peers: every collected batch goes into
    ``replay``; yields after each one once learning may start."""
    collected = 0
    for data in collector:
        collected += data.numel()
        replay.extend(data.reshape(-1))
        if collected >= learning_starts and len(replay) >= batch_size:
            yield


def run_torchrl(*, seed: int, steps: int, continuous: bool, num_envs: int, learning_starts: int,
                batch_size: int, eval_episodes: int, update_every: int,
                grad_clip: float | None = 0.5) -> dict[str, Any]:
    """TorchRL's MADDPG recipe (MultiAgentMLP actors, centralized MultiAgentMLP critics,
    DDPGLoss with target critic, SoftUpdate), same hyperparameters and budget.
    Note TorchRL's DDPGLoss feeds every agent's *current* actor action to the critic
    in the actor loss, where the paper uses the buffer's actions for the others."""
    import logging
    from functools import partial

    from mpe2 import simple_spread_v3
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
    torch.manual_seed(seed)
    env_fn = partial(simple_spread_v3.parallel_env, N=3, max_cycles=25, continuous_actions=True)

    def make_env():
        return PettingZooWrapper(env=env_fn(), use_mask=False, categorical_actions=True)

    env = SerialEnv(num_envs, make_env)
    env.set_seed(seed)
    n = 3
    action_spec = env.full_action_spec_unbatched[("agent", "action")]
    obs_dim = env.full_observation_spec_unbatched[("agent", "observation")].shape[-1]
    act_dim = action_spec.shape[-1]
    actor_net = MultiAgentMLP(n_agent_inputs=obs_dim, n_agent_outputs=act_dim, n_agents=n, centralized=False,
                              share_params=False, depth=2, num_cells=64, activation_class=nn.ReLU)
    policy = ProbabilisticActor(
        module=TensorDictModule(actor_net, in_keys=[("agent", "observation")], out_keys=[("agent", "param")]),
        spec=action_spec, in_keys=[("agent", "param")], out_keys=[("agent", "action")],
        distribution_class=TanhDelta,
        distribution_kwargs={"low": action_spec.space.low, "high": action_spec.space.high},
        return_log_prob=False)
    sigma = 0.1 * float((action_spec.space.high - action_spec.space.low).mean() / 2)
    explore = TensorDictSequential(policy, AdditiveGaussianModule(
        spec=action_spec, annealing_num_steps=1, action_key=("agent", "action"), sigma_init=sigma, sigma_end=sigma))
    critic_net = MultiAgentMLP(n_agent_inputs=obs_dim + act_dim, n_agent_outputs=1, n_agents=n, centralized=True,
                               share_params=False, depth=2, num_cells=64, activation_class=nn.ReLU)
    critic = TensorDictSequential(
        TensorDictModule(lambda o, a: torch.cat([o, a], -1), in_keys=[("agent", "observation"), ("agent", "action")],
                         out_keys=[("agent", "obs_action")]),
        TensorDictModule(critic_net, in_keys=[("agent", "obs_action")], out_keys=[("agent", "state_action_value")]))
    loss = DDPGLoss(actor_network=policy, value_network=critic, delay_value=True, loss_function="l2")
    loss.set_keys(state_action_value=("agent", "state_action_value"), reward=("agent", "reward"),
                  done=("agent", "done"), terminated=("agent", "terminated"))
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.95)
    updater = SoftUpdate(loss, tau=0.01)
    actor_opt = torch.optim.Adam(loss.actor_network_params.flatten_keys().values(), lr=1e-2)
    critic_opt = torch.optim.Adam(loss.value_network_params.flatten_keys().values(), lr=1e-2)
    params = {"actor": list(loss.actor_network_params.flatten_keys().values()),
              "critic": list(loss.value_network_params.flatten_keys().values())}
    # The replay ratio rule of rlpar's train loop: one update per update_every env steps;
    # below one vector step, several updates per collected batch.
    frames = max(update_every, num_envs)
    updates_per_batch = frames // update_every
    collector = Collector(env, explore, frames_per_batch=frames, total_frames=steps)
    replay = ReplayBuffer(storage=LazyTensorStorage(max(steps, batch_size)), sampler=RandomSampler(),
                          batch_size=batch_size)
    start = time.perf_counter()
    updates = 0
    for _ in ready_batches(collector, replay, learning_starts=learning_starts, batch_size=batch_size):
        for _ in range(updates_per_batch):
            sample = replay.sample()
            for name, opt, key in (("critic", critic_opt, "loss_value"), ("actor", actor_opt, "loss_actor")):
                losses = loss(sample)
                opt.zero_grad()
                losses[key].backward()
                if grad_clip is not None:
                    nn.utils.clip_grad_norm_(params[name], grad_clip)
                opt.step()
            updater.step()
            updates += 1
    wall = time.perf_counter() - start
    collector.shutdown()  # also closes the env
    if not env.is_closed:
        env.close()
    result = evaluate(_TorchRLPolicy(policy, n), env_fn, episodes=eval_episodes)
    return result | {"train_wall_s": round(wall, 1), "updates": updates, "mode": "torchrl"}


def _line(impl: str, seed: int, steps: int, continuous: bool, result: dict[str, Any]) -> dict[str, Any]:
    return {"bench": "maddpg_spread", "impl": impl, "seed": seed, "env_steps": steps,
            "actions": "continuous" if continuous else "discrete",
            **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()}}


def add_run_flags(parser: argparse.ArgumentParser, *, steps: int, ours_flags: str, impls: list[str],
                  default_impls: list[str]) -> None:
    """The flags this bench and :mod:`.maddpg_mpe` share."""
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--steps", type=int, default=steps, help="env-step budget per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--update-every", type=int, default=UPDATE_EVERY,
                        help="rlpar: env steps (over all copies) per update, rounded to whole vector "
                             "steps or, below one, to a divisor of --num-envs; the paper's 100 learns "
                             "nothing measurable in a budget this small")
    parser.add_argument("--peer-update-every", type=int, default=PEER_UPDATE_EVERY,
                        help="the same for TorchRL")
    parser.add_argument("--peer-grad-clip", type=float, default=0.5,
                        help="TorchRL's gradient-norm clip over each role's (group's) networks (<= 0: none)")
    parser.add_argument("--ours-flags", default=ours_flags,
                        help="extra experiments.maddpg flags for rlpar, e.g. --ours-flags=\"--lr 3e-3\"")
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--impls", nargs="+", default=default_impls, choices=impls)


def parse_run_flags(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse, apply ``--quick`` and check the shared flags (errors name them)."""
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.batch_size, args.eval_episodes = 600, [0], 32, 2
    if args.steps < 100 or args.num_envs < 1 or args.update_every < 1 or args.peer_update_every < 1:
        parser.error("--steps must be >= 100, --num-envs, --update-every and --peer-update-every >= 1")
    if "rlpar" in args.impls:
        try:
            ours_config(args.ours_flags)
        except ValueError as exc:
            parser.error(str(exc))
    torch.set_num_threads(1)
    return args


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    impls = ["random", "rlpar", "torchrl"]
    add_run_flags(parser, steps=STEPS, ours_flags=RLPAR_FLAGS, impls=impls, default_impls=impls)
    parser.add_argument("--discrete", action="store_true", help="discrete actions (rlpar only: Gumbel-softmax)")
    args = parse_run_flags(parser, argv)
    continuous = not args.discrete
    learning_starts = min(25_600, args.steps // 10)
    common = dict(steps=args.steps, continuous=continuous, num_envs=args.num_envs,
                  learning_starts=learning_starts, batch_size=args.batch_size, eval_episodes=args.eval_episodes,
                  update_every=update_period(args.update_every, args.num_envs))
    own = {"rlpar": {"ours_flags": args.ours_flags},
           "torchrl": {"update_every": update_period(args.peer_update_every, args.num_envs),
                       "grad_clip": args.peer_grad_clip if args.peer_grad_clip > 0 else None}}
    runners: dict[str, Any] = {}
    for impl in args.impls:
        if impl == "torchrl":
            why = torchrl_unavailable(continuous)
            if why:
                emit({"bench": "maddpg_spread", "impl": "torchrl", "skipped": why})
                continue
            runners[impl] = run_torchrl
        elif impl == "random":
            runners[impl] = lambda *, seed, eval_episodes, **_: run_random(seed=seed, eval_episodes=eval_episodes)
        else:
            runners[impl] = run_rlpar
    results: dict[str, list[dict[str, Any]]] = {}
    # Seed-major, so a run cut short still holds both learners on the same seeds.
    # The evaluation episodes are fixed (same env seeds for every run), so the
    # random policy needs one pass.
    for n_seed, seed in enumerate(args.seeds):
        for impl, runner in runners.items():
            if impl == "random" and n_seed > 0:
                continue
            result = runner(seed=seed, **(common | own.get(impl, {})))
            line = _line(impl, seed, 0 if impl == "random" else args.steps, continuous, result)
            if impl != "random":
                line["update_every"] = (common | own.get(impl, {}))["update_every"]
            if impl == "rlpar":
                line["ours_flags"] = args.ours_flags
            if impl == "torchrl":
                line["grad_clip"] = own["torchrl"]["grad_clip"]
            results.setdefault(impl, []).append(line)
            emit(line)
    for impl, lines in results.items():
        agg = {"bench": "maddpg_spread", "impl": impl, "aggregate": True, "seeds": len(lines),
               "env_steps": lines[0]["env_steps"]}
        agg |= {k: lines[0][k] for k in ("update_every", "ours_flags") if k in lines[0]}
        for key in ("team_return", "landmark_distance", "collisions_per_episode", "train_wall_s"):
            values = [x[key] for x in lines]
            agg[f"{key}_mean"] = round(statistics.fmean(values), 4)
            agg[f"{key}_std"] = round(statistics.pstdev(values), 4)
        if "random" in results and impl != "random":
            agg["team_return_minus_random"] = round(
                agg["team_return_mean"] - statistics.fmean(x["team_return"] for x in results["random"]), 4)
        if "torchrl" in results and impl == "rlpar":
            peer = statistics.fmean(x["team_return"] for x in results["torchrl"])
            agg["team_return_minus_peer"] = round(agg["team_return_mean"] - peer, 4)
            agg["wall_ratio_vs_peer"] = round(agg["train_wall_s_mean"] / statistics.fmean(
                x["train_wall_s"] for x in results["torchrl"]), 3)
        emit(agg)


if __name__ == "__main__":
    main()
