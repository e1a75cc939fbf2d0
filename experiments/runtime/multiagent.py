"""A multi-agent job's env (MADDPG's): its env section, the PettingZoo env by
``--env-id`` (or the user's factory) with the env flags it takes, the agents' teams
and what each critic sees, and the greedy evaluation with the MPE measures of the
MADDPG paper, and the summary lines on them. (Was ``experiments.roles.maddpg_parts``;
the job's hooks are in ``experiments.maddpg``.)"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from experiments.runtime.cli import field, flag
from experiments.runtime.config import DEFAULT_ENV_STEP_TIMEOUT, check_step_timeout
from experiments.runtime.envs import env_name

# Env flag -> the keyword names an env factory may take it by, in order of preference.
ENV_KWARGS = {
    "n_agents": ("N", "n_agents"),
    "episode_steps": ("max_cycles", "max_steps"),
    "continuous": ("continuous_actions", "continuous"),
}


# ------------------------------------------------------------------------ env


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


def env_factory(env: Any, user_env: Callable[[], Any] | None = None):
    """A picklable zero-argument factory of the job's ParallelEnv: ``env`` is the
    config's env section. The env flags that are set go to the factory under the
    keyword it takes; ValueError naming the flag when it takes none of them (or
    naming ``--env-id`` for an id that cannot be resolved)."""
    from envs.multiagent.registry import EnvEntry, ParallelEnvFactory, keyword_params, lookup

    source = env_name(env.env_id, user_env)
    if user_env is not None:
        entry = EnvEntry(user_env, keyword_params(user_env))
    else:
        try:
            entry = lookup(env.env_id)
        except ValueError as exc:
            raise ValueError(f"{flag('env_id')}: {exc}") from None
    kwargs = []
    for name, keywords in ENV_KWARGS.items():
        value = getattr(env, name)
        if value is None:
            continue
        taken = [k for k in keywords if entry.params is not None and k in entry.params]
        if not taken:
            takes = "only **kwargs" if entry.params is None else ", ".join(sorted(entry.params)) or "nothing"
            raise ValueError(f"{flag(name)}: the env of {source} takes none of {', '.join(keywords)} "
                             f"(its keywords: {takes}); leave {flag(name)} unset")
        kwargs.append((taken[0], value))
    return ParallelEnvFactory(entry.factory, tuple(kwargs), source=source)


def team_of(agent: str) -> str:
    """An agent's team: its name up to the last ``_<digits>`` (``adversary_0`` ->
    ``adversary``), else the whole name."""
    match = re.fullmatch(r"(.+)_\d+", agent)
    return match.group(1) if match else agent


def teams_of(agents: Sequence[str]) -> dict[str, list[int]]:
    """Team -> member indices, teams in order of their first agent."""
    teams: dict[str, list[int]] = {}
    for i, agent in enumerate(agents):
        teams.setdefault(team_of(agent), []).append(i)
    return teams


def critic_sees(agents: Sequence[str], observes: str) -> list[tuple[int, ...]] | None:
    """Each critic's agents for ``--critic-observes`` (None: all, the algorithm's default)."""
    if observes == "all":
        return None
    teams = teams_of(agents)
    return [tuple(teams[team_of(agent)]) for agent in agents]


def agent_specs(agents: Sequence[str], obs_spaces: Sequence[Any], act_spaces: Sequence[Any]) -> list:
    from algorithms.maddpg import AgentSpec

    return [AgentSpec.from_spaces(o, a, name=name) for name, o, a in zip(agents, obs_spaces, act_spaces)]


def check_parallel_env(env: MultiAgentEnvConfig, user_env: Callable[[], Any] | None) -> None:
    """ValueError unless the env id resolves, the env flags reach it, and the env it
    builds is a ParallelEnv whose agents MADDPG can drive (a user's factory's own errors
    pass as they are)."""
    from envs.multiagent import ParallelEnvAdapter
    from envs.multiagent.registry import NotParallelEnv

    try:
        made = env_factory(env, user_env)()
    except NotParallelEnv as exc:  # the message names where the env came from
        if user_env is not None:
            raise
        raise ValueError(str(exc)) from None
    except TypeError as exc:  # e.g. a module:factory that needs arguments
        if user_env is not None:
            raise
        raise ValueError(f"{flag('env_id')} {env.env_id!r}: calling its factory failed: {exc}") from None
    try:
        adapter = ParallelEnvAdapter(made)
        agent_specs(adapter.agents, adapter.agent_observation_spaces, adapter.agent_action_spaces)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{env_name(env.env_id, user_env)}: {exc}") from None
    finally:
        made.close()


# ----------------------------------------------------------------- evaluation


def _layout(env: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None] | None:
    """Agent and landmark positions, agent radii (for contacts; None where unknown)
    and which agents are adversaries (None: no agent is) of one env: MPE's world, the
    built-in env's arrays, else None. In an MPE world whose agents do not collide
    (simple_adversary) contacts mean nothing: no radii."""
    world = getattr(getattr(env, "unwrapped", env), "world", None)
    if world is not None:  # MPE
        agents = np.array([a.state.p_pos for a in world.agents])
        landmarks = np.array([lm.state.p_pos for lm in world.landmarks]).reshape(-1, agents.shape[-1])
        radii = np.array([a.size for a in world.agents]) if all(a.collide for a in world.agents) else None
        adversary = np.array([bool(getattr(a, "adversary", False)) for a in world.agents])
        return agents, landmarks, radii, adversary if adversary.any() else None
    if hasattr(env, "pos") and hasattr(env, "landmarks"):
        return np.asarray(env.pos), np.asarray(env.landmarks), None, None
    return None


def _contacts(agents: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """``[i, j]``: agents i and j touch (MPE's ``is_collision``: closer than their radii's sum)."""
    gap = np.linalg.norm(agents[:, None] - agents[None], axis=-1)
    return gap < radii[:, None] + radii[None]


def evaluate(algo: Any, env_fn: Callable[[], Any], *, episodes: int = 10, seed: int = 10_000,
             explore: bool = False, random_policy: bool = False) -> dict[str, Any]:
    """Run ``episodes`` whole episodes side by side. Returns ``returns`` (each
    episode's team return: the sum over agents), their mean ``team_return``, and the
    measures that fit the env (each NaN where it does not, or where the env has no
    positions or radii). A cooperative env (no adversaries, simple_spread): the mean
    per-step sum over landmarks of the distance to the closest agent
    (``landmark_distance``) and colliding agent pairs per episode
    (``collisions_per_episode``), the MADDPG paper's measures of cooperative
    navigation. An env of adversaries chasing good agents that collide (simple_tag,
    simple_world_comm): adversary-good contacts per episode (``tags_per_episode``,
    each contact counted every step it lasts: the paper's predator-prey measure and
    MPE's ``benchmark_data``); their landmarks are obstacles, not targets.
    ``random_policy`` samples uniform actions instead (the baseline). Training's
    ensemble draws are left as they were."""
    from envs.multiagent import ParallelEnvAdapter

    envs = [ParallelEnvAdapter(env_fn()) for _ in range(episodes)]
    saved = getattr(algo, "active_policies", None)
    if saved is not None:
        algo.active_policies = None  # drawn afresh for the evaluation's rows
    try:
        obs = [env.reset(seed=seed + j)[0] for j, env in enumerate(envs)]
        for j, env in enumerate(envs):
            env.action_space.seed(seed + j)
        team = np.zeros(episodes)
        dist, collisions, tags, steps = 0.0, 0.0, 0.0, 0
        measured = sized = tagged = True
        alive = np.ones(episodes, dtype=bool)
        while alive.any():
            stacked = envs[0].stacked
            joint = np.stack(obs) if stacked else [np.stack([o[i] for o in obs]) for i in range(algo.n_agents)]
            actions = None if random_policy else algo.act(joint, explore=explore)
            for j, env in enumerate(envs):
                if not alive[j]:
                    continue
                if random_policy:
                    act = env.action_space.sample()
                else:
                    act = actions[j] if stacked else [a[j] for a in actions]
                obs[j], rew, term, trunc, _ = env.step(act)
                team[j] += rew.sum()
                steps += 1
                layout = _layout(env.env)
                agents, landmarks, radii, adversary = layout if layout is not None else (None,) * 4
                cooperative = layout is not None and adversary is None
                measured = measured and cooperative and len(landmarks) > 0
                sized = sized and cooperative and radii is not None
                tagged = tagged and adversary is not None and radii is not None and not adversary.all()
                if measured:
                    dist += np.linalg.norm(landmarks[:, None] - agents[None], axis=-1).min(axis=1).sum()
                if sized:
                    collisions += np.triu(_contacts(agents, radii), 1).sum()
                if tagged:
                    tags += _contacts(agents, radii)[adversary][:, ~adversary].sum()
                alive[j] = not (term | trunc).all()
    finally:
        for env in envs:
            env.close()
        if saved is not None:
            algo.active_policies = saved
    return {"returns": [float(r) for r in team], "team_return": float(team.mean()),
            "landmark_distance": dist / max(steps, 1) if measured else float("nan"),
            "collisions_per_episode": collisions / episodes if sized else float("nan"),
            "tags_per_episode": tags / episodes if tagged else float("nan")}


# The evaluation's measures besides the returns (see evaluate): the summary's.
MEASURES = ("landmark_distance", "collisions_per_episode", "tags_per_episode")


def final_measures(env_fn: Callable[[], Any], algo: Any, *, episodes: int, seed: int) -> dict[str, float]:
    """The summary's :data:`MEASURES` of the trained ``algo``: a greedy evaluation of
    ``episodes`` episodes (fixed seeds, as every run's: the numbers compare runs)."""
    result = evaluate(algo, env_fn, episodes=episodes, seed=seed)
    return {key: result[key] for key in MEASURES}


def _num(value: Any, fmt: str) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, fmt)


def describe_teams(summary: dict[str, Any]) -> list[str]:
    """A multi-agent job's summary lines: its agents and teams, the final evaluation's
    :data:`MEASURES` that fit its env, its networks and its env workers' restarts."""
    teams = summary["teams"]
    lines = [f"agents             {len(summary['agents'])} in {len(teams)} team(s); critics observe "
             f"{summary['critic_observes']} (input sizes {', '.join(map(str, summary['critic_inputs']))})"]
    for team, members in teams.items():
        value = summary["team_return_last100"].get(team)
        lines.append(f"  team {team:<12} {len(members)} agent(s), last 100 mean return {_num(value, '.2f')}")
    if math.isfinite(summary.get("landmark_distance", math.nan)) or \
            math.isfinite(summary.get("collisions_per_episode", math.nan)):
        lines.append(f"final eval         landmark distance {_num(summary['landmark_distance'], '.3f')}, "
                     f"collisions {_num(summary['collisions_per_episode'], '.2f')} per episode")
    if math.isfinite(summary.get("tags_per_episode", math.nan)):
        lines.append(f"final eval         {summary['tags_per_episode']:.2f} adversary-good contacts per episode")
    lines.append(f"networks           {summary['mode']}")
    if summary.get("env_worker_restarts"):
        lines.append(f"env workers        {summary['env_worker_restarts']} restart(s), "
                     f"{summary.get('dropped_episodes', 0)} cut episode(s) dropped")
    return lines
