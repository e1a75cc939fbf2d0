"""Multi-Agent DDPG (Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed
Cooperative-Competitive Environments", arXiv 1706.02275).

Each agent i has an actor ``mu_i(o_i)`` on its own observation and a centralized
critic ``Q_i(o_j..., a_j...)`` over the agents listed in ``critic_sees[i]``
(default: all of them). The critic regresses onto
``r_i + gamma (1 - d_i) Q'_i(o'..., mu'_j(o'_j)...)`` where the next actions come
from the *target* actors; the actor ascends ``Q_i`` with its own action replaced
by ``mu_i(o_i)`` and the other agents' actions taken from the replay buffer.
With ``actor_objective="team"`` (cooperative tasks) every critic instead sees all
agents' current actions ``mu_j(o_j)`` and the actors ascend ``sum_i Q_i`` together,
so each actor learns from every critic its action feeds.

Discrete actions go through the straight-through Gumbel-softmax (one-hot forward,
soft gradient); continuous actions are ``tanh``-squashed to [-1, 1] and scaled to
the Box only when acting. Critic input = ``cat(obs of seen agents in order,
actions of seen agents in order)``; discrete actions enter it one-hot,
continuous ones normalized to [-1, 1].

Policy ensembles (paper, section 4.3): with ``ensemble_size = K`` every agent has
K sub-policies ("slots", actor index ``i * K + k``); each env copy runs one
sub-policy per agent, drawn at the start of each episode (``new_episodes``), and
the transition records it in ``policy_index``. The critic target uses, for each
agent, the target of the sub-policy recorded in the transition. Replay: with
``ensemble_buffers="shared"`` all sub-policies learn from one buffer on every
update; with ``"separate"`` (the paper's D_i^(k)) the caller keeps one sub-buffer
per (agent, sub-policy), passes per-agent batches and ``sub_policies`` naming the
sub-policy each agent trains on this step (``algorithms.maddpg.builder.MADDPGLearner`` does this).

All per-agent forward passes run through ``ParallelModules`` in the configured
mode. Per-agent losses are summed and back-propagated once (the losses touch
disjoint networks, so the gradients equal separate updates); one optimizer per
role holds all agents' parameters (Adam is elementwise, so this equals one
optimizer per agent), and gradient clipping is per network (or, with
``grad_clip_scope="role"``, one norm over all agents' networks of a role). No network is ever
updated by two tasks at once.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from algorithms.agent_parallel import ParallelModules
from algorithms.base import Algorithm, GradHook, as_tensor, no_grad_for, reduce_gradients
from algorithms.maddpg.gumbel import gumbel_softmax
from algorithms.maddpg.spec import FIELDS, AgentSpec, MADDPGConfig, check_critic_sees, split_agents
from algorithms.maddpg.stacked import can_stack, is_stacked_batch, stacked_act, stacked_update
from algorithms.nets import mlp
from algorithms.noise import ActionNoise, make_noise
from algorithms.optim import EagerAdam
from rlpar.state import StatePath, integer, mapping, torch_loader

CRITIC_AUTO_MAX_PARAMS = 65_536


class MADDPG(Algorithm):
    """Centralized critics, decentralized actors; see the module docstring."""

    def __init__(
        self,
        *,
        agents: Sequence[AgentSpec],
        config: MADDPGConfig | None = None,
        critic_sees: Sequence[Sequence[int]] | None = None,
        actors: Sequence[nn.Module] | None = None,
        critics: Sequence[nn.Module] | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config if config is not None else MADDPGConfig()
        config.validate()
        self.agents = list(agents)
        if not self.agents or not all(isinstance(a, AgentSpec) for a in self.agents):
            raise TypeError("agents must be a non-empty sequence of AgentSpec")
        n, k = len(self.agents), config.ensemble_size
        self.n_agents, self.ensemble_size = n, k
        self.homogeneous = all(a.same_shape(self.agents[0]) for a in self.agents)
        self.critic_sees = check_critic_sees(critic_sees, n)
        self.device = torch.device(device)
        if config.seed is not None:
            torch.manual_seed(config.seed)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(config.seed if config.seed is not None else int(torch.seed() % 2**62))
        self.rng = np.random.default_rng(config.seed)

        if actors is None:
            actors = [mlp(a.obs_dim, a.action_dim, hidden=config.hidden) for a in self.agents for _ in range(k)]
        if critics is None:
            critics = [mlp(self.critic_input_dim(i), 1, hidden=config.hidden) for i in range(n)]
        if len(actors) != n * k:
            raise ValueError(f"need n_agents * ensemble_size = {n * k} actors, got {len(actors)}")
        if len(critics) != n:
            raise ValueError(f"need one critic per agent ({n}), got {len(critics)}")
        self.actors = [m.to(self.device) for m in actors]
        self.critics = [m.to(self.device) for m in critics]
        self.target_actors = [copy.deepcopy(m).requires_grad_(False) for m in self.actors]
        self.target_critics = [copy.deepcopy(m).requires_grad_(False) for m in self.critics]
        # Homogeneous agents without ensembles keep each role's weights stored stacked
        # (one (n_agents, ...) leaf per layer parameter, the per-agent modules hold views):
        # the batched forward/backward then has no per-step stacking copy, and Adam,
        # clipping and Polyak averaging touch a handful of stacked tensors. Other
        # cases cache stacked copies for gradient-free calls, refreshed after writes.
        stack = self.homogeneous and k == 1
        par = dict(mode=config.mode, batched_impl=config.batched_impl, cache_weights=True, store_stacked=stack)
        self.actor_eval = ParallelModules(modules=self.actors, **par)
        self.target_actor_eval = ParallelModules(modules=self.target_actors, **par)
        # Without stored stacking, stacked critic weights are re-copied every step:
        # past ~64k parameters per critic the copy costs more than the calls it saves
        # (experiments/bench/multiagent/inference.py, update rows).
        par_critic = par if stack else par | {"auto_max_params": CRITIC_AUTO_MAX_PARAMS}
        self.critic_eval = ParallelModules(modules=self.critics, **par_critic)
        self.target_critic_eval = ParallelModules(modules=self.target_critics, **par_critic)
        self.mode = self.actor_eval.mode
        self.critic_mode = self.critic_eval.mode
        self.actor_params = [list(m.parameters()) for m in self.actors]
        self.critic_params = [list(m.parameters()) for m in self.critics]
        # What the optimizers step: the stacked leaves where they exist (gradients land
        # there), else every agent's own parameters. One optimizer per role: Adam is
        # elementwise, so this equals per-agent optimizers, in a few multi-tensor kernels.
        self._actor_leaves = self.actor_eval.stacked_leaves
        self._critic_leaves = self.critic_eval.stacked_leaves
        self.actor_opt = _adam(self._actor_leaves or [p for ps in self.actor_params for p in ps],
                              lr=config.lrs()[0])
        self.critic_opt = _adam(self._critic_leaves or [p for ps in self.critic_params for p in ps],
                                lr=config.lrs()[1])
        sources, targets = [], []
        for online, target, params, nets in (
                (self.actor_eval, self.target_actor_eval, self.actor_params, self.target_actors),
                (self.critic_eval, self.target_critic_eval, self.critic_params, self.target_critics)):
            if online.stacked_leaves is not None and target.stacked_leaves is not None:
                sources += online.stacked_leaves
                targets += target.stacked_leaves
            else:
                sources += [p for ps in params for p in ps]
                targets += [p for m in nets for p in m.parameters()]
        self._polyak_targets, self._polyak_sources = targets, sources
        self._centers = [torch.as_tensor((np.add(a.low, a.high) / 2), dtype=torch.float32, device=self.device)
                         if not a.discrete else None for a in self.agents]
        self._halves = [torch.as_tensor((np.subtract(a.high, a.low) / 2), dtype=torch.float32, device=self.device)
                        if not a.discrete else None for a in self.agents]
        self.noise: list[ActionNoise | None] = [None] * n
        self.active_policies: np.ndarray | None = None  # (num_envs, n_agents) sub-policy per env copy
        self.updates = 0
        self.grad_hook: GradHook | None = None  # set by a learner group (algorithms.base.GradHook)
        # Fixed-op-count path for homogeneous agents (see maddpg_stacked); set False
        # to force the per-agent path.
        self.use_stacked_path = can_stack(self, MADDPG)

    @property
    def critic_trainables(self) -> list[list[torch.Tensor]]:
        """The tensors that receive critic gradients (stacked leaves or per-agent)."""
        return [self._critic_leaves] if self._critic_leaves is not None else self.critic_params

    # ----- shapes and assembly -----------------------------------------------------
    def critic_input_dim(self, i: int) -> int:
        seen = self.critic_sees[i]
        return sum(self.agents[j].obs_dim + self.agents[j].action_dim for j in seen)

    def critic_input(self, i: int, obs: Sequence[torch.Tensor], actions: Sequence[torch.Tensor]) -> torch.Tensor:
        """Critic i's input: observations then actions of ``critic_sees[i]``, in order."""
        seen = self.critic_sees[i]
        return torch.cat([obs[j] for j in seen] + [actions[j] for j in seen], dim=-1)

    def critic_inputs(self, obs: Sequence[torch.Tensor], actions: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """All critics' inputs; critics that see the same agents share one tensor."""
        made: dict[tuple[int, ...], torch.Tensor] = {}
        out = []
        for i in range(self.n_agents):
            seen = self.critic_sees[i]
            if seen not in made:
                made[seen] = self.critic_input(i, obs, actions)
            out.append(made[seen])
        return out

    def to_action(self, i: int, raw: torch.Tensor, *, sample: bool) -> torch.Tensor:
        """Agent i's network output -> the action the critic sees (one-hot or [-1, 1])."""
        if self.agents[i].discrete:
            return gumbel_softmax(raw, temperature=self.config.gumbel_temperature, hard=True,
                                  noise=sample, generator=self.generator)
        return torch.tanh(raw)

    # ----- acting -----------------------------------------------------------------
    def new_episodes(self, mask: np.ndarray | None = None) -> None:
        """Draw sub-policies and restart noise for env copies whose episode starts."""
        if self.active_policies is not None:
            rows = np.ones(len(self.active_policies), bool) if mask is None else np.asarray(mask, bool)
            self.active_policies[rows] = self.rng.integers(0, self.ensemble_size, (int(rows.sum()), self.n_agents))
        for noise in self.noise:
            if noise is not None:
                noise.reset(mask)

    def _agent_obs(self, obs: Any) -> tuple[list[torch.Tensor], bool]:
        if isinstance(obs, list | tuple):
            return [as_tensor(o, self.device).float() for o in obs], False
        t = as_tensor(obs, self.device).float()
        if t.dim() != 3 or t.shape[1] != self.n_agents:
            raise ValueError(f"stacked obs must be (num_envs, {self.n_agents}, obs_dim), got {tuple(t.shape)}")
        return list(t.unbind(1)), True

    @torch.no_grad()
    def act(self, obs: Any, *, explore: bool = True) -> Any:
        """Joint action for a batch of env copies.

        ``obs`` stacked ``(E, n_agents, obs_dim)`` gives stacked actions (``(E, n)``
        ints if discrete, ``(E, n, A)`` floats in the Box if continuous); a list of
        per-agent ``(E, obs_dim_i)`` arrays gives a list of per-agent actions.
        """
        if self.use_stacked_path and not isinstance(obs, list | tuple):
            t = as_tensor(obs, self.device).float()
            if t.dim() == 3 and t.shape[1] == self.n_agents:
                return stacked_act(self, t, explore=explore)
        per_agent, stacked = self._agent_obs(obs)
        num_envs = per_agent[0].shape[0]
        k = self.ensemble_size
        raws = self.actor_eval([per_agent[s // k] for s in range(self.n_agents * k)])
        if k > 1:
            if self.active_policies is None or len(self.active_policies) != num_envs:
                self.active_policies = self.rng.integers(0, k, (num_envs, self.n_agents))
            index = torch.as_tensor(self.active_policies, device=self.device)
            raws = [self._pick(raws[i * k:(i + 1) * k], index[:, i]) for i in range(self.n_agents)]
        actions = [self._env_action(i, raw, explore) for i, raw in enumerate(raws)]
        if stacked:
            return np.stack(actions, axis=1)
        return actions

    @staticmethod
    def _pick(outputs: Sequence[torch.Tensor], index: torch.Tensor) -> torch.Tensor:
        """Row b of the result is ``outputs[index[b]][b]``."""
        stacked = torch.stack(list(outputs))  # (K, B, A)
        rows = torch.arange(stacked.shape[1], device=stacked.device)
        return stacked[index.long(), rows]

    def _env_action(self, i: int, raw: torch.Tensor, explore: bool) -> np.ndarray:
        spec = self.agents[i]
        if spec.discrete:
            if explore:
                return gumbel_softmax(raw, noise=True, generator=self.generator).argmax(-1).cpu().numpy()
            return raw.argmax(-1).cpu().numpy()
        action = torch.tanh(raw).cpu().numpy()
        if explore and self.config.noise_scale > 0:
            noise = self.noise[i]
            if noise is None or noise.shape != action.shape:
                seed = None if self.config.seed is None else self.config.seed + i
                noise = self.noise[i] = make_noise(self.config.noise, shape=action.shape,
                                                   scale=self.config.noise_scale, seed=seed)
            action = np.clip(action + noise.sample(), -1.0, 1.0)
        center, half = self._centers[i].cpu().numpy(), self._halves[i].cpu().numpy()
        return (center + half * action).astype(np.float32)

    # ----- learning (template method and hooks) -------------------------------------
    def update(self, batch: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
               sub_policies: Sequence[int] | None = None) -> dict[str, float]:
        """One step for every agent. ``batch``: one joint batch for all critics, or a
        list with one joint batch per agent (per-agent sub-buffers). ``sub_policies``:
        the sub-policy each agent trains (default: all of them)."""
        if sub_policies is None and self.use_stacked_path and is_stacked_batch(batch, self.n_agents):
            return stacked_update(self, batch)
        datas = self._per_critic(batch)
        slots = self._train_slots(sub_policies)
        with torch.no_grad():
            y = self.critic_target(datas)
        critic_losses = self.critic_loss(datas, y)
        self.optimize(self.critic_opt, critic_losses.sum(), self.critic_params)
        actor_losses = self.actor_loss(datas, slots)
        self.optimize(self.actor_opt, actor_losses.sum(), [self.actor_params[s] for s in slots])
        self.soft_update()
        self.updates += 1
        c, a = critic_losses.detach().cpu().tolist(), actor_losses.detach().cpu().tolist()
        metrics = {"critic_loss": float(np.mean(c)), "actor_loss": float(np.mean(a)),
                   "q_target_mean": float(torch.stack([t.mean() for t in y]).mean())}
        metrics |= {f"critic_loss/{i}": v for i, v in enumerate(c)}
        for slot, value in zip(slots, a):
            i, k = divmod(slot, self.ensemble_size)
            metrics[f"actor_loss/{i}" if self.ensemble_size == 1 else f"actor_loss/{i}.{k}"] = value
        return metrics

    def _per_critic(self, batch: Any) -> list[dict[str, Any]]:
        if isinstance(batch, Mapping):
            data = self.preprocess(batch)
            return [data] * self.n_agents
        if len(batch) != self.n_agents:
            raise ValueError(f"a list of batches needs one per agent ({self.n_agents}), got {len(batch)}")
        return [self.preprocess(b) for b in batch]

    def _train_slots(self, sub_policies: Sequence[int] | None) -> list[int]:
        k = self.ensemble_size
        if sub_policies is None:
            return list(range(self.n_agents * k))
        if len(sub_policies) != self.n_agents or not all(0 <= int(p) < k for p in sub_policies):
            raise ValueError(f"sub_policies needs {self.n_agents} entries in [0, {k}), got {list(sub_policies)}")
        return [i * k + int(p) for i, p in enumerate(sub_policies)]

    def preprocess(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """Per-agent tensors: obs/next_obs/action (critic form) lists, reward/terminated lists."""
        n = self.n_agents
        data: dict[str, Any] = {}
        for field in FIELDS:
            value = batch[field] if field in batch and not isinstance(batch[field], list | tuple) else None
            parts = split_agents({field: as_tensor(value, self.device)} if value is not None else batch, n, field)
            data[field] = [as_tensor(p, self.device) for p in parts]
        data["action"] = [self._critic_action(i, a) for i, a in enumerate(data["action"])]
        for field in ("obs", "next_obs"):
            data[field] = [o.float() for o in data[field]]
        data["reward"] = [r.float().reshape(-1) for r in data["reward"]]
        data["terminated"] = [t.float().reshape(-1) for t in data["terminated"]]
        if self.ensemble_size > 1:
            if "policy_index" not in batch:
                raise KeyError("batch lacks 'policy_index', required with ensemble_size > 1")
            data["policy_index"] = as_tensor(batch["policy_index"], self.device).long()
        return data

    def _critic_action(self, i: int, action: torch.Tensor) -> torch.Tensor:
        spec = self.agents[i]
        if spec.discrete:
            if action.dim() == 2 and action.shape[-1] == spec.action_dim and action.is_floating_point():
                return action  # already one-hot / relaxed
            return F.one_hot(action.long().reshape(-1), spec.action_dim).float()
        return (action.float().reshape(-1, spec.action_dim) - self._centers[i]) / self._halves[i]

    def target_actions(self, data: Mapping[str, Any]) -> list[torch.Tensor]:
        """Next actions of every agent from the TARGET actors (the sub-policy the
        transition recorded, with ensembles)."""
        k = self.ensemble_size
        nxt = data["next_obs"]
        raws = self.target_actor_eval([nxt[s // k] for s in range(self.n_agents * k)])
        if k > 1:
            raws = [self._pick(raws[i * k:(i + 1) * k], data["policy_index"][:, i]) for i in range(self.n_agents)]
        return [self.to_action(i, raw, sample=True) for i, raw in enumerate(raws)]

    def critic_target(self, datas: Sequence[Mapping[str, Any]]) -> list[torch.Tensor]:
        """``y_i = r_i + gamma (1 - d_i) Q'_i(x', a')`` with ``a'`` from the target actors."""
        if all(d is datas[0] for d in datas):
            next_actions = [self.target_actions(datas[0])] * self.n_agents
            inputs = self.critic_inputs(datas[0]["next_obs"], next_actions[0])
        else:
            next_actions = [self.target_actions(d) for d in datas]
            inputs = [self.critic_input(i, d["next_obs"], a) for i, (d, a) in enumerate(zip(datas, next_actions))]
        next_q = self.target_critic_eval(inputs)
        gamma = self.config.gamma
        return [d["reward"][i] + gamma * (1.0 - d["terminated"][i]) * q.squeeze(-1)
                for i, (d, q) in enumerate(zip(datas, next_q))]

    def critic_loss(self, datas: Sequence[Mapping[str, Any]], y: Sequence[torch.Tensor]) -> torch.Tensor:
        """Per-agent mean squared TD errors, shape ``(n_agents,)``."""
        if all(d is datas[0] for d in datas):
            inputs = self.critic_inputs(datas[0]["obs"], datas[0]["action"])
        else:
            inputs = [self.critic_input(i, d["obs"], d["action"]) for i, d in enumerate(datas)]
        q = self.critic_eval(inputs)
        return torch.stack([F.mse_loss(qi.squeeze(-1), yi) for qi, yi in zip(q, y)])

    def actor_loss(self, datas: Sequence[Mapping[str, Any]], slots: Sequence[int]) -> torch.Tensor:
        """Per-slot ``-Q_i(..., mu_i^(k)(o_i), ...)`` plus a small penalty on the raw
        outputs (the reference implementation's regularizer), shape ``(len(slots),)``."""
        k = self.ensemble_size
        if self.config.actor_objective == "team":
            return self._team_actor_loss(datas)
        raws = self.actor_eval([datas[s // k]["obs"][s // k] for s in range(self.n_agents * k)])
        losses = []
        for round_ in range(k):  # one critic pass per sub-policy index
            chosen = [s for s in slots if s % k == round_]
            if not chosen:
                continue
            inputs = []
            for i in range(self.n_agents):
                slot = i * k + round_
                actions = list(datas[i]["action"])
                if slot in chosen:
                    actions[i] = self.to_action(i, raws[slot], sample=True)
                inputs.append(self.critic_input(i, datas[i]["obs"], actions))
            with no_grad_for(self.critic_trainables):
                q = self.critic_eval(inputs)
            for slot in chosen:
                i = slot // k
                reg = self.config.actor_reg * raws[slot].pow(2).mean()
                losses.append((slot, -q[i].mean() + reg))
        losses.sort(key=lambda pair: pair[0])
        return torch.stack([loss for _, loss in losses])

    def _team_actor_loss(self, datas: Sequence[Mapping[str, Any]]) -> torch.Tensor:
        """Per-agent ``-Q_i(o, mu(o))`` with every agent's current action in every
        critic (``actor_objective="team"``; no ensembles). Their sum, which ``update``
        back-propagates, is the team objective: actor j gets the gradient of every
        critic its action feeds."""
        n = self.n_agents
        shared = all(d is datas[0] for d in datas)
        # One joint batch: the actors run once. Per-agent batches: critic i needs every
        # actor on batch i's observations.
        raws_per = [self.actor_eval(list(d["obs"])) for d in (datas[:1] if shared else datas)]
        actions_per = [[self.to_action(j, raw, sample=True) for j, raw in enumerate(raws)] for raws in raws_per]
        if shared:
            inputs = self.critic_inputs(datas[0]["obs"], actions_per[0])
        else:
            inputs = [self.critic_input(i, d["obs"], actions_per[i]) for i, d in enumerate(datas)]
        with no_grad_for(self.critic_trainables):
            q = self.critic_eval(inputs)
        own_raws = [raws_per[0 if shared else i][i] for i in range(n)]
        return torch.stack([-q[i].mean() + self.config.actor_reg * own_raws[i].pow(2).mean() for i in range(n)])

    def optimize(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                 param_groups: Sequence[Sequence[torch.Tensor]]) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        leaves = self._stacked_leaves_of(optimizer)
        # A learner group's mean (--learners K): before clipping, so every member clips alike.
        reduce_gradients(self.grad_hook, leaves if leaves is not None else [p for ps in param_groups for p in ps])
        clip, per_network = self.config.grad_clip, self.config.grad_clip_scope == "network"
        if leaves is not None:  # every agent trains (no ensembles here): clip per row
            if clip is not None:
                if per_network:
                    clip_stacked(leaves, clip)
                else:
                    clip_per_network([leaves], clip)  # one norm over the role
            optimizer.step()
            self.refresh()
            return
        owned = sum(len(g["params"]) for g in optimizer.param_groups)
        if sum(len(ps) for ps in param_groups) < owned:
            # Stacked (batched) weights give every stacked network a gradient, zeros
            # for the untrained ones; Adam's momentum would still move those.
            trained = {id(p) for ps in param_groups for p in ps}
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if id(p) not in trained:
                        p.grad = None
        if clip is not None:
            clip_per_network(param_groups if per_network else [[p for ps in param_groups for p in ps]], clip)
        optimizer.step()
        self.refresh()  # fused optimizers write without bumping version counters

    def _stacked_leaves_of(self, optimizer: torch.optim.Optimizer) -> list[torch.Tensor] | None:
        if optimizer is self.actor_opt:
            return self._actor_leaves
        if optimizer is self.critic_opt:
            return self._critic_leaves
        return None

    def soft_update(self) -> None:
        with torch.no_grad():
            torch._foreach_lerp_(self._polyak_targets, self._polyak_sources, self.config.tau)
        self.refresh()

    def refresh(self) -> None:
        """Drop cached stacked weights; call after writing parameters out of band."""
        for ev in (self.actor_eval, self.target_actor_eval, self.critic_eval, self.target_critic_eval):
            ev.refresh()

    def initial_priorities(self, batch: Mapping[str, Any]) -> np.ndarray:
        """Priority 1 for every new transition: MADDPG samples its replay uniformly
        (with priority exponent 0 the priorities are never read)."""
        return np.ones(len(batch["reward"]), dtype=np.float64)

    # ----- state --------------------------------------------------------------------
    def policy_state(self) -> dict[str, torch.Tensor]:
        """The acting networks as one flat dict of tensors (``actor<slot>.<param>``): what
        the learner publishes to the actors and ``policy.pt`` holds."""
        return {f"actor{i}.{k}": v for i, actor in enumerate(self.actors) for k, v in actor.state_dict().items()}

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        """Load :meth:`policy_state` into the actors (an actor's pull, a saved policy)."""
        for i, actor in enumerate(self.actors):
            prefix = f"actor{i}."
            actor.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
        self.refresh()

    def state_dict(self) -> dict[str, Any]:
        nets = {name: [m.state_dict() for m in getattr(self, name)]
                for name in ("actors", "critics", "target_actors", "target_critics")}
        return nets | {"actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                       "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit
        (one network per agent in each list)."""
        where = StatePath.of(self)
        nets, opts = ("actors", "critics", "target_actors", "target_critics"), ("actor_opt", "critic_opt")
        state = mapping(state, where, required=(*nets, *opts, "updates"))
        load = torch_loader(state, where, modules={n: list(getattr(self, n)) for n in nets},
                            optimizers={n: getattr(self, n) for n in opts})
        updates = integer(state["updates"], where["updates"])
        load()
        self.refresh()
        self.updates = updates

    def close(self) -> None:
        for ev in (self.actor_eval, self.target_actor_eval, self.critic_eval, self.target_critic_eval):
            ev.close()


def _adam(params: list[torch.Tensor], *, lr: float) -> torch.optim.Optimizer:
    """torch's fused Adam kernel without torch.optim's per-step Python
    (``algorithms.optim.EagerAdam``, as DQN and A2C use): a batch-1 update at 3
    agents, hidden 64 took 3.6-3.7 ms against 3.9-4.3 ms with ``torch.optim.Adam``."""
    return EagerAdam(params, lr=lr)


@torch.no_grad()
def clip_stacked(leaves: Sequence[torch.Tensor], max_norm: float) -> None:
    """``clip_grad_norm_`` per network when row i of every leaf belongs to network i."""
    grads = [p.grad for p in leaves if p.grad is not None]
    if not grads:
        return
    # One fused reduction per leaf: g.pow(2) made a full-size temporary per leaf, and at
    # batch 1 those passes made a 3-agent hidden-256 update slower than loop mode's.
    total = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads]).pow(2).sum(0).sqrt()
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))


@torch.no_grad()
def clip_per_network(param_groups: Sequence[Sequence[torch.Tensor]], max_norm: float) -> None:
    """``clip_grad_norm_`` applied to each group separately, in a few batched ops."""
    grads, owner = [], []
    for g, params in enumerate(param_groups):
        for p in params:
            if p.grad is not None:
                grads.append(p.grad)
                owner.append(g)
    if not grads:
        return
    norms = torch.stack(torch._foreach_norm(grads))
    index = torch.as_tensor(owner, device=norms.device)
    total = torch.zeros(len(param_groups), device=norms.device, dtype=norms.dtype)
    total = total.index_add_(0, index, norms.pow(2)).sqrt()
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(grads, list(coef[index].unbind()))
