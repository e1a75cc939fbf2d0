"""MADDPG: critic inputs, target actors, Gumbel-softmax, modes, paths, agents, configs."""

import numpy as np
import pytest
import torch

from algorithms.agent_parallel import PER_MEMBER_MIN_BATCH
from algorithms.maddpg import MADDPG, AgentSpec, MADDPGConfig, clip_per_network
from algorithms.maddpg.gumbel import gumbel_softmax

DISCRETE = AgentSpec(obs_dim=4, action_dim=3, discrete=True)
CONT = AgentSpec(obs_dim=4, action_dim=2, discrete=False, low=(-2.0, -2.0), high=(2.0, 2.0))


def stacked_batch(n_agents=3, b=32, spec=DISCRETE, seed=0, ensemble=1):
    rng = np.random.default_rng(seed)
    if spec.discrete:
        action = rng.integers(0, spec.action_dim, (b, n_agents))
    else:
        action = rng.uniform(spec.low[0], spec.high[0], (b, n_agents, spec.action_dim)).astype(np.float32)
    batch = {"obs": rng.standard_normal((b, n_agents, spec.obs_dim)).astype(np.float32),
             "next_obs": rng.standard_normal((b, n_agents, spec.obs_dim)).astype(np.float32),
             "action": action, "reward": rng.standard_normal((b, n_agents)).astype(np.float32),
             "terminated": (rng.random((b, n_agents)) < 0.1).astype(np.float32)}
    if ensemble > 1:
        batch["policy_index"] = rng.integers(0, ensemble, (b, n_agents))
    return batch


def make(n=3, spec=DISCRETE, **kw):
    sees = kw.pop("critic_sees", None)
    return MADDPG(agents=[spec] * n, config=MADDPGConfig(seed=0, **kw), critic_sees=sees)


def test_critic_input_assembly_follows_critic_sees():
    algo = make(3, critic_sees=[[0], [0, 1], [2, 0, 1]])
    obs = [torch.full((2, 4), float(i)) for i in range(3)]
    acts = [torch.full((2, 3), 10.0 + i) for i in range(3)]
    x0, x1, x2 = (algo.critic_input(i, obs, acts) for i in range(3))
    torch.testing.assert_close(x0, torch.cat([obs[0], acts[0]], -1))
    torch.testing.assert_close(x1, torch.cat([obs[0], obs[1], acts[0], acts[1]], -1))
    torch.testing.assert_close(x2, torch.cat([obs[2], obs[0], obs[1], acts[2], acts[0], acts[1]], -1))
    assert [algo.critic_input_dim(i) for i in range(3)] == [7, 14, 21]
    assert not algo.use_stacked_path  # partial views need the per-agent path
    algo.update(stacked_batch())  # and the critics accept those inputs


def test_default_critics_see_everyone_and_share_the_input():
    algo = make(3)
    obs = [torch.randn(2, 4) for _ in range(3)]
    acts = [torch.randn(2, 3) for _ in range(3)]
    inputs = algo.critic_inputs(obs, acts)
    assert inputs[0] is inputs[1] is inputs[2]
    assert inputs[0].shape == (2, 3 * (4 + 3))


@pytest.mark.parametrize("spec", [DISCRETE, CONT], ids=["discrete", "continuous"])
def test_critic_target_uses_target_actors_not_online_ones(spec):
    algo = make(3, spec=spec, gamma=0.9)
    algo.use_stacked_path = False
    data = algo.preprocess(stacked_batch(spec=spec))
    datas = [data] * 3

    def target():
        algo.generator.manual_seed(7)  # same Gumbel draws each time
        with torch.no_grad():
            return torch.stack(algo.critic_target(datas))

    before = target()
    with torch.no_grad():
        for actor in algo.actors:
            for p in actor.parameters():
                p.add_(torch.randn_like(p))
    algo.refresh()
    torch.testing.assert_close(target(), before)  # online actors do not enter the target
    with torch.no_grad():
        for p in algo.target_actors[1].parameters():
            p.add_(torch.randn_like(p))
    algo.refresh()
    assert not torch.allclose(target(), before)  # target actors do
    # and the value matches the formula with target actors + target critics
    algo.generator.manual_seed(7)
    with torch.no_grad():
        nxt = [algo.to_action(i, algo.target_actors[i](data["next_obs"][i]), sample=True) for i in range(3)]
        x = algo.critic_input(0, data["next_obs"], nxt)
        expected = data["reward"][0] + 0.9 * (1 - data["terminated"][0]) * algo.target_critics[0](x).squeeze(-1)
    torch.testing.assert_close(target()[0], expected)


def test_gumbel_softmax_straight_through():
    logits = torch.randn(64, 5, requires_grad=True)
    g = torch.Generator().manual_seed(0)
    y = gumbel_softmax(logits, generator=g)
    assert torch.all((y == 0) | (y == 1)) and torch.all(y.sum(-1) == 1)  # forward is one-hot
    (y * torch.arange(5.0)).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0  # gradient flows
    soft = gumbel_softmax(logits.detach(), hard=False, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(soft.sum(-1), torch.ones(64))
    assert torch.equal(gumbel_softmax(logits, noise=False).argmax(-1), logits.argmax(-1))
    with pytest.raises(ValueError, match="temperature"):
        gumbel_softmax(logits, temperature=0.0)


def test_discrete_actor_gets_gradient_through_the_critic():
    algo = make(2)
    before = [p.clone() for p in algo.actors[0].parameters()]
    algo.update(stacked_batch(2))
    assert any(not torch.equal(a, b) for a, b in zip(before, algo.actors[0].parameters()))


@pytest.mark.parametrize("spec", [DISCRETE, CONT], ids=["discrete", "continuous"])
def test_all_modes_give_identical_actions_and_updates(spec):
    def flat(algo):
        return torch.cat([p.detach().flatten().clone() for m in algo.actors + algo.critics for p in m.parameters()])

    results = {}
    for mode in ["loop", "threads", "jit_fork", "batched"]:
        algo = make(3, spec=spec, mode=mode)
        lr = max(algo.config.lrs())
        obs = np.random.default_rng(1).standard_normal((5, 3, 4)).astype(np.float32)
        greedy = algo.act(obs, explore=False)
        before = flat(algo)
        metrics = algo.update(stacked_batch(spec=spec))
        results[mode] = (greedy, metrics["critic_loss"], metrics["actor_loss"], before, flat(algo))
        algo.close()
    ref = results["loop"]
    torch.testing.assert_close(ref[3], results["batched"][3])  # same initial weights
    # Adam's first step moves a weight by lr * g / (|g| + 1e-8), which turns a difference d
    # in g into one of up to lr * 1e-8 / (|g| + 1e-8)^2 * d. Where the reference's step is
    # over 0.9 lr (|g| > 9e-8) that is under 1e4 d, and the modes agree to 1e-5. Below it, g
    # is zero but for rounding (batched mode computes the actor loss's critic input as a
    # correction to the shared product, W x + W_i (a_i - a_buf_i): same math, other
    # rounding), the factor reaches 1e6 and a CPU's rounding decides the step: there only
    # the step's bound, lr, holds, and such weights must stay rare (0.1-0.3% here).
    ref_step = (ref[4] - ref[3]).abs() / lr
    firm = (ref_step > 0.9) | (ref_step == 0)
    assert (~firm).float().mean() < 0.01
    for mode, (greedy, c, a, before, params) in results.items():
        np.testing.assert_allclose(greedy, ref[0], rtol=1e-5, atol=1e-6, err_msg=mode)
        assert c == pytest.approx(ref[1], rel=1e-5, abs=1e-6), mode
        assert a == pytest.approx(ref[2], rel=1e-5, abs=1e-6), mode
        torch.testing.assert_close(params[firm], ref[4][firm], rtol=1e-5, atol=1e-5, msg=mode)
        assert ((params - before)[~firm].abs() <= lr * (1 + 1e-5)).all(), mode


def test_batched_update_on_large_batches_matches_loop():
    # 3 agents at PER_MEMBER_MIN_BATCH rows: batched mode runs actors and critics member
    # by member on the stacked leaves (agent_parallel.runs_per_member) and must learn as loop does.
    results = {}
    for mode in ["loop", "batched"]:
        algo = make(3, mode=mode)
        metrics = algo.update(stacked_batch(b=PER_MEMBER_MIN_BATCH))
        params = torch.cat([p.flatten() for m in algo.actors + algo.critics for p in m.parameters()])
        results[mode] = (metrics["critic_loss"], metrics["actor_loss"], params)
    (c, a, params), (rc, ra, rparams) = results["batched"], results["loop"]
    assert c == pytest.approx(rc, rel=1e-5, abs=1e-6)
    assert a == pytest.approx(ra, rel=1e-5, abs=1e-6)
    torch.testing.assert_close(params, rparams, rtol=1e-5, atol=1e-5)


def test_stacked_path_equals_per_agent_path():
    fast, slow = make(3, spec=CONT), make(3, spec=CONT)
    slow.use_stacked_path = False
    assert fast.use_stacked_path
    batch = stacked_batch(spec=CONT)
    m_fast, m_slow = fast.update(batch), slow.update(batch)
    for key in m_slow:
        assert m_fast[key] == pytest.approx(m_slow[key], rel=1e-5, abs=1e-6), key
    for a, b in zip(fast.actors + fast.target_critics, slow.actors + slow.target_critics):
        for p, q in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)  # rounding: see the test above
    obs = np.random.default_rng(2).standard_normal((4, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(fast.act(obs, explore=False), slow.act(obs, explore=False), rtol=1e-5, atol=1e-7)


def test_heterogeneous_agents_act_and_learn():
    agents = [CONT, AgentSpec(obs_dim=6, action_dim=3, discrete=True), AgentSpec(obs_dim=2, action_dim=1, discrete=False)]
    algo = MADDPG(agents=agents, config=MADDPGConfig(seed=0, mode="batched"))
    assert not algo.homogeneous and not algo.use_stacked_path
    e, b = 4, 16
    rng = np.random.default_rng(0)
    actions = algo.act([rng.standard_normal((e, a.obs_dim)) for a in agents])
    assert [a.shape for a in actions] == [(e, 2), (e,), (e, 1)]
    assert (np.abs(actions[0]) <= 2).all() and (np.abs(actions[2]) <= 1).all()
    batch = {}
    for i, a in enumerate(agents):
        batch[f"obs_{i}"] = rng.standard_normal((b, a.obs_dim))
        batch[f"next_obs_{i}"] = rng.standard_normal((b, a.obs_dim))
        batch[f"action_{i}"] = rng.integers(0, 3, b) if a.discrete else rng.uniform(-1, 1, (b, a.action_dim))
        batch[f"reward_{i}"] = rng.standard_normal(b)
    batch["terminated"] = np.zeros(b)
    before = [p.clone() for p in algo.actors[1].parameters()]
    metrics = algo.update(batch)
    assert np.isfinite(metrics["critic_loss"]) and {"actor_loss/0", "actor_loss/2"} <= set(metrics)
    assert any(not torch.equal(x, y) for x, y in zip(before, algo.actors[1].parameters()))


def test_policy_ensembles():
    algo = make(2, ensemble_size=3)
    assert len(algo.actors) == 6
    obs = np.zeros((5, 2, 4), np.float32)
    algo.act(obs)
    assert algo.active_policies.shape == (5, 2) and algo.active_policies.max() < 3
    batch = stacked_batch(2, ensemble=3)
    metrics = algo.update(batch)
    assert {f"actor_loss/{i}.{k}" for i in range(2) for k in range(3)} <= set(metrics)
    before = [p.clone() for p in algo.actors[1].parameters()]  # agent 0, sub-policy 1
    metrics = algo.update([batch, batch], sub_policies=[0, 2])
    assert set(k for k in metrics if k.startswith("actor_loss/")) == {"actor_loss/0.0", "actor_loss/1.2"}
    assert all(torch.equal(x, y) for x, y in zip(before, algo.actors[1].parameters()))  # untrained slot
    with pytest.raises(KeyError, match="policy_index"):
        algo.update({k: v for k, v in batch.items() if k != "policy_index"})
    with pytest.raises(ValueError, match="sub_policies"):
        algo.update(batch, sub_policies=[0, 3])


def test_clip_per_network_matches_clip_grad_norm():
    torch.manual_seed(0)
    groups = [[torch.randn(3, requires_grad=True), torch.randn(2, requires_grad=True)] for _ in range(3)]
    for g, scale in zip(groups, (0.1, 5.0, 50.0)):
        for p in g:
            p.grad = torch.randn_like(p) * scale
    expected = []
    for g in groups:
        copies = [p.detach().clone().requires_grad_() for p in g]
        for c, p in zip(copies, g):
            c.grad = p.grad.clone()
        torch.nn.utils.clip_grad_norm_(copies, 1.0)
        expected += [c.grad for c in copies]
    clip_per_network(groups, 1.0)
    for p, e in zip([p for g in groups for p in g], expected):
        torch.testing.assert_close(p.grad, e)


def test_state_dict_round_trip():
    a, b = make(2), make(2)
    a.update(stacked_batch(2))
    b.load_state_dict(a.state_dict())
    obs = np.random.default_rng(0).standard_normal((3, 2, 4)).astype(np.float32)
    np.testing.assert_array_equal(a.act(obs, explore=False), b.act(obs, explore=False))
    assert b.updates == 1


@pytest.mark.parametrize("kwargs, match", [
    ({"gamma": 2.0}, "gamma"), ({"tau": 0.0}, "tau"), ({"ensemble_size": 0}, "ensemble_size"),
    ({"mode": "gpu"}, "mode"), ({"hidden": (0,)}, "hidden"), ({"ensemble_buffers": "pooled"}, "ensemble_buffers"),
    ({"gumbel_temperature": 0.0}, "gumbel_temperature"), ({"batched_impl": "einsum"}, "batched_impl"),
])
def test_invalid_config_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MADDPG(agents=[DISCRETE], config=MADDPGConfig(**kwargs))


def test_invalid_construction_rejected():
    with pytest.raises(ValueError, match="include agent 1"):
        MADDPG(agents=[DISCRETE] * 2, critic_sees=[[0], [0]])
    with pytest.raises(ValueError, match="distinct"):
        MADDPG(agents=[DISCRETE] * 2, critic_sees=[[0, 0], [1]])
    with pytest.raises(ValueError, match="one entry per agent"):
        MADDPG(agents=[DISCRETE] * 2, critic_sees=[[0]])
    with pytest.raises(ValueError, match="actors"):
        MADDPG(agents=[DISCRETE] * 2, actors=[torch.nn.Linear(4, 3)])
    with pytest.raises(TypeError, match="AgentSpec"):
        MADDPG(agents=[])
    with pytest.raises(ValueError, match="low < high"):
        AgentSpec(obs_dim=2, action_dim=1, discrete=False, low=(1.0,), high=(0.0,))
    with pytest.raises(ValueError, match="discrete"):
        AgentSpec(obs_dim=2, action_dim=1, discrete=True)
    algo = make(2)
    with pytest.raises(ValueError, match="stacked obs"):
        algo.act(np.zeros((3, 5, 4)))
    with pytest.raises(ValueError, match="n_agents"):
        algo.update({**stacked_batch(2), "reward": np.zeros((32, 3))})


def test_stored_stacked_weights_match_loop_on_per_agent_batches():
    """Batched mode steps stacked leaves; per-agent batches (ragged sizes) and
    clipping must still give the loop mode's parameters."""
    algos = {mode: make(3, spec=CONT, mode=mode, grad_clip=0.1) for mode in ("loop", "batched")}
    assert algos["batched"].actor_eval.stacked_leaves is not None
    assert algos["loop"].actor_eval.stacked_leaves is None
    batches = [stacked_batch(spec=CONT, b=8 + 4 * i, seed=i) for i in range(3)]
    for algo in algos.values():
        algo.update(batches)
        algo.update(stacked_batch(spec=CONT))
    nets = {mode: [p for m in a.actors + a.critics + a.target_actors + a.target_critics for p in m.parameters()]
            for mode, a in algos.items()}
    for p, q in zip(nets["batched"], nets["loop"]):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)  # rounding, as in the modes test


def test_sample_gumbel_matches_the_gumbel_law():
    from algorithms.maddpg.gumbel import sample_gumbel

    g = sample_gumbel(torch.Size([200_000]), device=torch.device("cpu"), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(g).all()
    assert g.mean().item() == pytest.approx(0.5772, abs=0.01)  # Euler-Mascheroni constant
    assert g.var().item() == pytest.approx(torch.pi**2 / 6, rel=0.02)
    # Gumbel-max: argmax(logits + g) samples softmax(logits)
    logits = torch.tensor([0.0, 1.0, 2.0])
    noise = sample_gumbel(torch.Size([100_000, 3]), device=torch.device("cpu"),
                          generator=torch.Generator().manual_seed(1))
    freq = torch.bincount((logits + noise).argmax(-1), minlength=3).float() / 100_000
    torch.testing.assert_close(freq, torch.softmax(logits, 0), atol=0.01, rtol=0)


@pytest.mark.parametrize("stacked", [True, False], ids=["stacked", "per_agent"])
@pytest.mark.parametrize("objective", ["own", "team"])
def test_actor_objective_decides_which_critics_teach_an_actor(objective, stacked):
    """"own": actor 1 learns from critic 1 only; "team": from every critic, so
    perturbing critic 0 changes actor 1's step only under the team objective."""
    def actor1_after_update(perturb: bool) -> torch.Tensor:
        algo = make(3, spec=CONT, actor_objective=objective)
        algo.use_stacked_path = stacked
        if perturb:
            with torch.no_grad():
                for p in algo.critics[0].parameters():
                    p.add_(0.5)
            algo.refresh()
        algo.update(stacked_batch(spec=CONT))
        return torch.cat([p.flatten() for p in algo.actors[1].parameters()])

    base, moved = actor1_after_update(False), actor1_after_update(True)
    assert torch.equal(base, moved) == (objective == "own")


def test_team_objective_stacked_path_equals_per_agent_path():
    fast, slow = make(3, spec=CONT, actor_objective="team"), make(3, spec=CONT, actor_objective="team")
    slow.use_stacked_path = False
    batch = stacked_batch(spec=CONT)
    m_fast, m_slow = fast.update(batch), slow.update(batch)
    for key in m_slow:
        assert m_fast[key] == pytest.approx(m_slow[key], rel=1e-5, abs=1e-6), key
    for a, b in zip(fast.actors, slow.actors):
        for p, q in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)


def test_team_objective_on_per_agent_batches_and_discrete_actions():
    algo = make(3, actor_objective="team")
    batches = [stacked_batch(seed=i) for i in range(3)]
    before = [p.clone() for m in algo.actors for p in m.parameters()]
    metrics = algo.update(batches)
    assert all(np.isfinite(v) for v in metrics.values())
    after = [p for m in algo.actors for p in m.parameters()]
    assert all(not torch.equal(a, b) for a, b in zip(before[::2], after[::2]))


def test_team_objective_rejects_ensembles():
    with pytest.raises(ValueError, match="actor_objective team needs ensemble_size 1"):
        make(2, actor_objective="team", ensemble_size=2)
    with pytest.raises(ValueError, match="actor_objective"):
        make(2, actor_objective="everyone")


def _clipped_grads(algo: MADDPG, batch) -> dict[bool, list[torch.Tensor]]:
    """The gradients each optimizer steps with, keyed by "is the critic optimizer"."""
    grads: dict[bool, list[torch.Tensor]] = {}

    def capture(optimizer, args, kwargs):
        grads[optimizer is algo.critic_opt] = [p.grad.clone() for g in optimizer.param_groups for p in g["params"]]

    for opt in (algo.actor_opt, algo.critic_opt):
        opt.register_step_pre_hook(capture)
    algo.update(batch)
    return grads


def _agent_norms(grads: list[torch.Tensor], stacked_leaves: bool, n: int = 3) -> torch.Tensor:
    if stacked_leaves:  # row i of every leaf is agent i
        return torch.stack([sum(g[i].pow(2).sum() for g in grads) for i in range(n)]).sqrt()
    k = len(grads) // n  # per-agent parameter lists, agent by agent
    return torch.stack([sum(g.pow(2).sum() for g in grads[i * k:(i + 1) * k]) for i in range(n)]).sqrt()


@pytest.mark.parametrize("stacked, ragged", [(True, False), (False, False), (False, True)],
                         ids=["stacked", "per_agent", "unstackable_actors"])
def test_grad_clip_scope_role_clips_one_norm_over_all_agents(stacked, ragged):
    """"role" scales every agent's gradient by one factor (torch's clip_grad_norm_ over
    the role's joint parameters); "network" scales each agent's alone."""
    from algorithms.nets import mlp

    norms = {}
    for scope in ("network", "role"):
        # Actors of different widths cannot share stacked leaves: per-network parameter lists.
        actors = [mlp(4, 2, hidden=(8 * (i + 1),)) for i in range(3)] if ragged else None
        algo = MADDPG(agents=[CONT] * 3, actors=actors,
                      config=MADDPGConfig(seed=0, grad_clip=1e-3, grad_clip_scope=scope))
        algo.use_stacked_path = stacked
        grads = _clipped_grads(algo, stacked_batch(spec=CONT))
        leaves = {True: algo._critic_leaves is not None, False: algo._actor_leaves is not None}
        norms[scope] = {critic: _agent_norms(grads[critic], leaves[critic]) for critic in (True, False)}
    for critic in (True, False):
        torch.testing.assert_close(norms["network"][critic], torch.full((3,), 1e-3), rtol=1e-3, atol=0)
        role = norms["role"][critic]
        assert role.pow(2).sum().sqrt() == pytest.approx(1e-3, rel=1e-3)
        assert role.max() < 1e-3 * 0.999  # every agent shares the budget


def test_grad_clip_scope_rejects_unknown():
    with pytest.raises(ValueError, match="grad_clip_scope"):
        make(2, grad_clip_scope="everything")
