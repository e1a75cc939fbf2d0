"""The ``fast`` option (algorithms.fast): the fast and compiled paths learn what the plain
one does, within float rounding; compiling falls back cleanly; the option reaches the
algorithms from the job configs; denormals are flushed in updates, and only there."""

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces

import algorithms.fast as fast
from algorithms.adders import NStepAdder
from algorithms.dqn import DQN, DQNConfig
from algorithms.fast import FastForward, denormals_flushed, flush_denormals, resolve_fast
from algorithms.nets import ChannelsLast, q_network
from rlpar.buffers import NStepAssembler

MINATAR = (10, 10, 4)


def batches(shape, count, n=32, seed=0, actions=6):
    rng = np.random.default_rng(seed)
    make = (lambda: rng.random((n, *shape)) < 0.1) if len(shape) == 3 else \
        (lambda: rng.normal(size=(n, *shape)).astype(np.float32))
    return [{"obs": make(), "next_obs": make(), "action": rng.integers(actions, size=n),
             "reward": rng.normal(size=n).astype(np.float32), "terminated": rng.random(n) < 0.1,
             "weights": rng.uniform(0.3, 1.0, size=n).astype(np.float32)} for _ in range(count)]


def dqn(mode, shape=MINATAR, actions=6, **config):
    torch.manual_seed(0)
    net = q_network(shape, actions, hidden=(16, 16))
    return DQN(network=net, num_actions=actions, seed=0,
               config=DQNConfig(fast=mode, lr=1e-3, target_update_interval=5, **config))


def max_param_diff(a, b):
    return max(float((p - q).abs().max()) for p, q in zip(a.network.parameters(), b.network.parameters()))


# Tolerance of fast against plain: "eager" convolves an NCHW copy instead of a
# channels-last view, so oneDNN sums the 3x3xC products in another order (float32
# rounding, ~1e-7 relative per output); Adam turns each gradient into a step of at
# most ~lr, so after 20 steps at lr 1e-3 such differences stay orders below 1e-5.
# A real difference (a wrong target, a skipped step) moves weights by ~lr = 1e-3.
TOL = 1e-5


def test_fast_update_learns_what_the_plain_one_does():
    plain, quick = dqn("off"), dqn("eager")
    for batch in batches(MINATAR, 20):
        a, b = plain.learn(batch), quick.learn(batch)
        np.testing.assert_allclose(a.priorities, b.priorities, rtol=1e-4, atol=1e-5)
    assert plain.fast == "off" and quick.fast == "eager"
    assert max_param_diff(plain, quick) < TOL
    assert max_param_diff(plain, dqn("off")) > 1e-4  # they did learn


def test_tied_acting_copy_gives_the_priorities_of_three_forwards():
    plain, quick = dqn("off"), dqn("auto")
    plain.tie_target()
    quick.tie_target()
    for batch in batches(MINATAR, 3, n=64):
        np.testing.assert_allclose(quick.initial_priorities(batch), plain.initial_priorities(batch),
                                   rtol=1e-4, atol=1e-5)
        q = quick.q_values(batch["obs"])
        assert torch.allclose(q, plain.q_values(batch["obs"]), atol=1e-5)

    class OwnTarget(DQN):  # a changed target hook is still what the priorities use
        def target(self, batch):
            return super().target(batch) + 1.0

    torch.manual_seed(0)
    own = OwnTarget(network=q_network(MINATAR, 6, hidden=(16, 16)), num_actions=6, seed=0,
                    config=DQNConfig(fast="eager"))
    own.tie_target()
    batch = batches(MINATAR, 1)[0]
    assert not own._one_forward_priorities()
    assert not np.allclose(own.initial_priorities(batch), plain.initial_priorities(batch), atol=0.1)


def test_flush_denormals_is_scoped_to_the_update():
    seen = []

    class Probe(DQN):
        def compute_loss(self, batch, target):
            seen.append(denormals_flushed())
            return super().compute_loss(batch, target)

    for mode, flushed in (("eager", True), ("off", False)):
        torch.manual_seed(0)
        probe = Probe(network=q_network((4,), 2, hidden=(8,)), num_actions=2, config=DQNConfig(fast=mode))
        probe.update(batches((4,), 1, actions=2)[0])
        assert seen.pop() is flushed
        assert not denormals_flushed()  # as it was before the update
    with flush_denormals():
        assert denormals_flushed()
        with flush_denormals():
            pass
        assert denormals_flushed()  # an inner scope leaves the outer one's setting
    assert not denormals_flushed()


@pytest.mark.parametrize("mode", ["eager", "off"])
def test_update_on_subnormal_adam_moments(mode):
    """The anomaly's mechanism (algorithms.fast): the first moments of weights without
    gradient (here: of an input that is always 0) sit at a few ulp for good, since
    0.9 * 3 ulp rounds back to 3 ulp, and every step pays a microcode assist per such
    element; the fast update reads them as zero instead."""
    learner = dqn(mode, shape=(4,), actions=2)
    data = batches((4,), 2, actions=2)
    for batch in data:
        batch["obs"][:, 0] = batch["next_obs"][:, 0] = 0.0
    learner.update(data[0])
    first = next(m for m in learner.network.modules() if isinstance(m, torch.nn.Linear)).weight
    moment = learner.optimizer.state[first]["exp_avg"]
    three_ulp = torch.tensor(3 * 1.4e-45)
    assert 0 < float(three_ulp) < torch.finfo(torch.float32).tiny
    moment[:, 0] = three_ulp
    learner.update(data[1])
    if mode == "off":
        assert torch.equal(moment[:, 0], three_ulp.expand(moment.shape[0]))  # stuck
    else:
        assert torch.equal(moment[:, 0], torch.zeros(moment.shape[0]))


def test_auto_is_eager_and_compile_falls_back_without_a_compiler(monkeypatch):
    assert resolve_fast("auto") == "eager" and resolve_fast("off") == "off"
    monkeypatch.setattr(fast, "compiler_available", lambda: False)
    monkeypatch.setattr(fast, "_warned", set())
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler"):
        learner = dqn("compile", shape=(4,), actions=2)
    assert learner.fast == "eager"
    learner.update(batches((4,), 1, actions=2)[0])  # and it learns
    monkeypatch.setattr(fast, "compiler_available", lambda: True)
    assert resolve_fast("compile") == "compile"


def test_a_failing_compile_runs_eager(monkeypatch):
    def broken(module, **kwargs):
        def call(x):
            raise RuntimeError("InvalidCxxCompiler: no working C++ compiler found")
        return call

    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(fast, "_warned", set())
    net = q_network((4,), 2, hidden=(8,))
    forward = FastForward(net, "compile")
    x = torch.randn(5, 4)
    with pytest.warns(RuntimeWarning, match="runs as 'eager'"):
        out = forward(x)
    assert torch.equal(out, net(x)) and forward.mode == "eager"


@pytest.mark.skipif(not fast.compiler_available(), reason="no C++ compiler for inductor")
@pytest.mark.timeout(240)
def test_compiled_update_learns_what_the_plain_one_does():
    """Inductor fuses the elementwise work around the matmuls: sums in another
    order, so the same tolerance as eager's (see TOL)."""
    plain, compiled = dqn("off", shape=(4,), actions=2), dqn("compile", shape=(4,), actions=2)
    assert compiled.fast == "compile"
    for batch in batches((4,), 8, n=16, actions=2):
        a, b = plain.learn(batch), compiled.learn(batch)
        np.testing.assert_allclose(a.priorities, b.priorities, rtol=1e-4, atol=1e-5)
    assert max_param_diff(plain, compiled) < TOL


def test_fast_forward_keeps_hooks_and_layout():
    net = q_network(MINATAR, 6, hidden=(16, 16))
    calls = []
    net[1].register_forward_hook(lambda m, i, o: calls.append(1))
    x = torch.rand(3, *MINATAR) < 0.2
    plain = net(x)
    forward = FastForward(net, "eager")
    assert next(m for m in net.modules() if isinstance(m, ChannelsLast)).contiguous
    assert torch.allclose(forward(x), plain, atol=1e-5) and len(calls) == 2
    with pytest.raises(ValueError, match="resolved mode"):
        FastForward(net, "auto")
    pqn_net = q_network(MINATAR, 6, dueling=False, layer_norm=True)  # ChannelNorm: channels innermost
    FastForward(pqn_net, "eager")
    assert not next(m for m in pqn_net.modules() if isinstance(m, ChannelsLast)).contiguous


@pytest.mark.parametrize("make", [
    lambda: DQNConfig(fast="fastest").validate(),
    lambda: __import__("algorithms.pqn.config", fromlist=["x"]).PQNConfig(fast="fastest").validate(),
    lambda: __import__("algorithms.td3.ddpg", fromlist=["x"]).DDPGConfig(fast="fastest").validate(),
    lambda: __import__("algorithms.impala.config", fromlist=["x"]).IMPALAConfig(fast="fastest"),
    lambda: __import__("algorithms.ppo.config", fromlist=["x"]).PPOConfig(fast="fastest"),
])
def test_bad_values_are_named(make):
    with pytest.raises(ValueError, match=r"fast must be one of \['auto', 'off', 'eager', 'compile'\], got 'fastest'"):
        make()


def test_the_option_reaches_the_algorithms_from_the_job_configs():
    from algorithms.builder import EnvSpec
    from algorithms.dqn import DQNBuilder
    from algorithms.td3 import TD3Builder
    from experiments.apex import ApexJobConfig, LearnConfig, fill_learn
    from experiments.impala import LearnConfig as ImpalaLearn
    from experiments.runtime.cli import parse_config, validate

    config = parse_config(ApexJobConfig, ["--fast", "off"])
    assert config.learn.fast == "off"
    learn = fill_learn(config.learn, algorithm="dqn", family="vector")
    spec = EnvSpec(spaces.Box(-1, 1, (4,)), spaces.Discrete(2))
    builder = DQNBuilder(learn=learn, spec=spec)
    assert builder.make_algorithm(device="cpu", seed=0).fast == "off"  # learner and actors alike
    with pytest.raises(SystemExit):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parse_config(ApexJobConfig, ["--fast", "fastest"])
    bad = ApexJobConfig()
    bad.learn.fast = "fastest"
    with pytest.raises(ValueError, match="--fast must be one of"):
        validate(bad)
    continuous = fill_learn(dataclasses.replace(LearnConfig(), fast="eager"), algorithm="td3", family="vector")
    td3 = TD3Builder(algorithm_name="td3", learn=continuous, continuous=config.continuous,
                     spec=EnvSpec(spaces.Box(-1, 1, (3,)), spaces.Box(-1, 1, (1,))))
    assert td3.config(seed=0).fast == "eager" and td3.make_algorithm(device="cpu", seed=0).fast == "eager"
    from algorithms.impala import IMPALABuilder

    learn = ImpalaLearn(lr=1e-3, lr_anneal_steps=0, unroll_length=2, batch_size=1, entropy_coef=0.01, fast="off")
    assert IMPALABuilder(learn=learn, num_envs=1, spec=None).config.fast == "off"
    with pytest.raises(ValueError, match="fast must be one of"):
        ImpalaLearn(fast="fastest")


def test_one_step_adder_rows_are_the_assemblers():
    rng = np.random.default_rng(0)
    envs = 6
    adder, assembler = NStepAdder(num_envs=envs, n=1, gamma=0.97), NStepAssembler(num_envs=envs, n=1, gamma=0.97)
    for t in range(200):
        step = {"obs": rng.random((envs, 3, 2)) < 0.5, "action": rng.integers(4, size=envs),
                "reward": rng.normal(size=envs), "next_obs": rng.random((envs, 3, 2)) < 0.5,
                "terminated": rng.random(envs) < 0.2, "truncated": rng.random(envs) < 0.1,
                "cut": (rng.random(envs) < 0.1) if t % 3 == 0 else None}
        got = adder.add(**step, reset_obs=step["next_obs"], extras={})
        want = assembler.step(**step)
        if not len(want["reward"]):
            assert got == []
            continue
        (row,) = got
        for key, value in want.items():
            assert row[key].dtype == value.dtype and np.array_equal(row[key], value), (t, key)


def test_zero_grad_sets_none_and_keeps_the_profiler_range():
    net = q_network((4,), 2, hidden=(8,))
    learner = DQN(network=net, num_actions=2)
    learner.update(batches((4,), 1, actions=2)[0])
    assert all(p.grad is not None for p in net.parameters())
    learner.optimizer.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net(torch.randn(2, 4)).sum().backward()
    with torch.profiler.profile() as prof:
        learner.optimizer.zero_grad()
    assert any("zero_grad" in e.name for e in prof.events())


@pytest.mark.parametrize("rows", [1, 8, 16, 17, 64])
def test_acting_forward_equals_the_modules_and_follows_parameter_changes(rows):
    """Small no-grad batches (acting) run the dueling head as one folded dense layer and
    the big dense layer against a cached transpose; both follow every way parameters
    change (an optimizer step, load_state_dict, a replaced Parameter). Tolerance:
    float32 rounding of sums taken in another order (1e-5 on Q values of order 1)."""
    from algorithms.fast import FastForward

    torch.manual_seed(1)
    net = q_network(MINATAR, 6, dueling=True)
    fast = FastForward(net, "eager")
    obs = torch.as_tensor(np.random.default_rng(0).random((rows, *MINATAR)) < 0.2)

    def check():
        with torch.no_grad():
            torch.testing.assert_close(fast(obs), net(obs), rtol=1e-5, atol=1e-5)

    check()
    from algorithms.optim import EagerAdam, EagerRAdam, EagerRMSprop

    head = net[1]
    # torch's optimizers, and the algorithms' own, whose fused kernels count no version.
    for make in (lambda p: torch.optim.SGD(p, lr=0.5), lambda p: EagerAdam(p, lr=0.05),
                 lambda p: EagerRAdam(p, lr=0.05), lambda p: EagerRMSprop(p, lr=0.05)):
        optimizer = make(net.parameters())
        for _ in range(2):
            optimizer.zero_grad()
            net(obs).pow(2).mean().backward()  # with gradients: the streams as written, both get one
            assert head.value.weight.grad is not None and head.advantage.weight.grad is not None
            optimizer.step()
            check()
    other = q_network(MINATAR, 6, dueling=True)
    net.load_state_dict(other.state_dict())
    check()
    head.advantage.weight = torch.nn.Parameter(torch.randn_like(head.advantage.weight))
    net[0][4].weight = torch.nn.Parameter(torch.randn_like(net[0][4].weight) * 0.01)
    check()
    calls = []
    handle = head.value.register_forward_hook(lambda *a: calls.append(1))
    check()
    assert calls  # a stream with a hook runs as a module
    handle.remove()


@pytest.mark.parametrize("make", ["impala", "ppo"])
def test_actor_critic_acting_equals_the_models_and_follows_a_replaced_network(make):
    """IMPALA and PPO act through algorithms.actor_critic.ActingForward: an actor's few
    MinAtar rows take the small-batch kernels, with the model's values (1e-5: float32
    sums in another order) and its log-probabilities (Categorical's rule, 1e-6)."""
    from torch.distributions import Categorical

    from algorithms.impala import IMPALA, IMPALAConfig
    from algorithms.ppo import PPO, PPOConfig

    space, actions = spaces.Box(0, 1, MINATAR, bool), spaces.Discrete(6)
    torch.manual_seed(0)
    agent = (IMPALA(observation_space=space, action_space=actions, config=IMPALAConfig(), device="cpu")
             if make == "impala" else PPO(observation_space=space, action_space=actions, config=PPOConfig(),
                                          device="cpu"))
    obs = np.random.default_rng(0).random((8, *MINATAR)) < 0.2
    x = torch.as_tensor(obs, dtype=torch.float32)
    with torch.no_grad():
        policy_out, value = agent.model(x)
        torch.testing.assert_close(agent._acting.policy(x), policy_out, rtol=1e-5, atol=1e-5)
        fast_out, fast_value = agent._acting(x)
        torch.testing.assert_close(fast_value, value, rtol=1e-5, atol=1e-5)
        sampled = torch.as_tensor(np.arange(8) % 6)
        torch.testing.assert_close(agent.head.log_prob(fast_out, None, sampled),
                                   Categorical(logits=fast_out).log_prob(sampled), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(agent.act(obs, explore=False), policy_out.argmax(-1).numpy())
    assert set(agent._acting._forwards) == {"body"}  # MinAtar's shared torso ran fast
    agent.model.shared.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(400, 128))  # a user's
    with torch.no_grad():
        torch.testing.assert_close(agent._acting.policy(x), agent.model(x)[0], rtol=1e-5, atol=1e-5)
    # Separate actor and critic networks (vectors) go through it too.
    box = spaces.Box(-1, 1, (3,))
    mlp = (IMPALA(observation_space=box, action_space=actions, config=IMPALAConfig(), device="cpu")
           if make == "impala" else PPO(observation_space=box, action_space=actions, config=PPOConfig(),
                                        device="cpu"))
    v = torch.randn(4, 3)
    with torch.no_grad():
        torch.testing.assert_close(mlp._acting(v), mlp.model(v))
    assert set(mlp._acting._forwards) == {"actor", "critic"}
    calls = []
    handle = mlp.model.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        mlp._acting(v)
    assert calls  # a hook on the model itself still runs
    handle.remove()
