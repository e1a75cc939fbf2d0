"""DQN math against hand-computed values on tiny batches."""


import numpy as np
import pytest
import torch
from torch import nn

from algorithms.dqn import DQN, DQNConfig
from algorithms.nets import DuelingHead, nature_cnn, q_network

# Observations are one-hot state ids, so Q(s, .) is column s of a bias-free linear layer.
ONLINE = [[1.0, 5.0, 0.0], [2.0, 4.0, 0.0]]  # Q_online(s, a) = ONLINE[a][s]
TARGET = [[10.0, 7.0, 0.0], [20.0, 3.0, 0.0]]


def table_dqn(**config) -> DQN:
    net = nn.Linear(3, 2, bias=False)
    dqn = DQN(network=net, num_actions=2, config=DQNConfig(**config))
    with torch.no_grad():
        dqn.network.weight.copy_(torch.tensor(ONLINE))
        dqn.target_network.weight.copy_(torch.tensor(TARGET))
    return dqn


def onehot(*ids):
    return np.eye(3, dtype=np.float32)[list(ids)]


def batch(**over):
    b = {
        "obs": onehot(0, 1),
        "action": np.array([1, 0]),
        "reward": np.array([1.0, 2.0], dtype=np.float32),
        "next_obs": onehot(1, 0),
        "terminated": np.array([0.0, 0.0], dtype=np.float32),
    }
    b.update(over)
    return b


def test_double_q_target_uses_online_argmax_and_target_value():
    dqn = table_dqn(gamma=0.5, double_q=True)
    y = dqn.target(dqn.preprocess(batch()))
    # next state 1: online argmax = action 0 (5 > 4) -> target Q = 7; next state 0: argmax 1 -> 20
    np.testing.assert_allclose(y.numpy(), [1 + 0.5 * 7, 2 + 0.5 * 20])


def test_vanilla_target_uses_target_max():
    dqn = table_dqn(gamma=0.5, double_q=False)
    y = dqn.target(dqn.preprocess(batch()))
    np.testing.assert_allclose(y.numpy(), [1 + 0.5 * 7, 2 + 0.5 * 20])
    y = dqn.target(dqn.preprocess(batch(next_obs=onehot(1, 1))))
    # next state 1 under target: max(7, 3) = 7 either way; double picks a=0 too
    np.testing.assert_allclose(y.numpy(), [1 + 0.5 * 7, 2 + 0.5 * 7])


def test_double_and_vanilla_differ_where_argmaxes_differ():
    dqn = table_dqn(gamma=1.0, double_q=True)
    with torch.no_grad():
        dqn.target_network.weight.copy_(torch.tensor([[10.0, 1.0, 0.0], [20.0, 3.0, 0.0]]))
    b = batch(next_obs=onehot(1, 1))
    double = dqn.target(dqn.preprocess(b))  # online argmax at state 1 is a=0 -> target 1
    dqn.config.double_q = False
    vanilla = dqn.target(dqn.preprocess(b))  # max of target at state 1 is 3
    np.testing.assert_allclose(double.numpy(), [2.0, 3.0])
    np.testing.assert_allclose(vanilla.numpy(), [4.0, 5.0])


def test_n_step_discount_and_terminated_mask():
    dqn = table_dqn(gamma=0.9)
    b = batch(discount=np.array([0.9**3, 0.9**2], dtype=np.float32),
              terminated=np.array([0.0, 1.0], dtype=np.float32))
    y = dqn.target(dqn.preprocess(b))
    np.testing.assert_allclose(y.numpy(), [1 + 0.9**3 * 7, 2.0], rtol=1e-6)


def test_loss_weights_huber_and_priorities():
    dqn = table_dqn(gamma=0.5, huber_delta=1.0, priority_eps=1e-3)
    tensors = dqn.preprocess(batch(weights=np.array([0.5, 2.0], dtype=np.float32)))
    target = dqn.target(tensors)  # [4.5, 12]
    loss, td, q_taken = dqn.compute_loss(tensors, target)
    np.testing.assert_allclose(q_taken.detach().numpy(), [2.0, 5.0])  # Q(s0,a1)=2, Q(s1,a0)=5
    np.testing.assert_allclose(td.numpy(), [2.5, 7.0])
    huber = np.array([2.5 - 0.5, 7.0 - 0.5])  # |d| - delta/2 beyond delta
    assert float(loss.detach()) == pytest.approx(np.mean(huber * [0.5, 2.0]))
    np.testing.assert_allclose(dqn.priorities(td), [2.501, 7.001])


def test_squared_loss_when_huber_disabled():
    dqn = table_dqn(gamma=0.5, huber_delta=None)
    tensors = dqn.preprocess(batch())
    loss, _, _ = dqn.compute_loss(tensors, dqn.target(tensors))
    assert float(loss.detach()) == pytest.approx(np.mean(0.5 * np.array([2.5, 7.0]) ** 2))


def test_learn_returns_metrics_and_priorities_beside_them_and_moves_towards_target():
    dqn = table_dqn(gamma=0.5, lr=0.1, target_update_interval=1000)
    b = batch()
    before = dqn.q_values(b["obs"]).numpy()[[0, 1], [1, 0]]
    metrics, priorities = dqn.learn(b)
    assert set(metrics) >= {"loss", "q_mean", "td_abs_mean", "grad_norm"}
    assert "priorities" not in metrics and all(isinstance(v, float) for v in metrics.values())
    assert priorities.shape == (2,) and priorities.dtype == np.float64
    np.testing.assert_allclose(priorities, [2.5, 7.0], rtol=1e-5)
    after = dqn.q_values(b["obs"]).numpy()[[0, 1], [1, 0]]
    assert np.all(after > before)  # both targets are above the current estimates
    assert dqn.updates == 1


def test_gradient_clipping_bounds_the_step():
    dqn = table_dqn(gamma=0.5, huber_delta=None, max_grad_norm=1e-3, lr=1.0)
    dqn.optimizer = torch.optim.SGD(dqn.network.parameters(), lr=1.0)
    w0 = dqn.network.weight.detach().clone()
    dqn.update(batch())
    assert float((dqn.network.weight.detach() - w0).norm()) == pytest.approx(1e-3, rel=1e-3)


def test_hard_target_update_on_schedule():
    dqn = table_dqn(target_update_interval=2, tau=1.0, lr=0.1)
    dqn.update(batch())
    assert not torch.equal(dqn.network.weight, dqn.target_network.weight)
    dqn.update(batch())
    assert torch.equal(dqn.network.weight, dqn.target_network.weight)


def test_polyak_target_update():
    dqn = table_dqn(target_update_interval=1, tau=0.25)
    online, target = torch.tensor(ONLINE), torch.tensor(TARGET)
    dqn.postprocess()  # updates == 0 is on schedule
    np.testing.assert_allclose(dqn.target_network.weight.detach().numpy(),
                               (0.25 * online + 0.75 * target).numpy(), rtol=1e-6)


def test_act_greedy_and_epsilon():
    dqn = table_dqn()
    np.testing.assert_array_equal(dqn.act(onehot(0, 1, 0), explore=False), [1, 0, 1])
    dqn.epsilon = 1.0
    actions = dqn.act(onehot(*([0] * 400)))
    assert 120 < (actions == 0).sum() < 280  # uniform, not greedy (greedy is always 1)


def test_state_dict_round_trip():
    a, b = table_dqn(lr=0.1), table_dqn(lr=0.1)
    a.update(batch())
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.network.weight, b.network.weight) and b.updates == 1


def test_dueling_head_is_mean_centred():
    head = DuelingHead(5, 4)
    x = torch.randn(7, 5)
    q = head(x)
    assert q.shape == (7, 4)
    torch.testing.assert_close(q.mean(dim=-1, keepdim=True), head.value(x))
    assert DuelingHead(5, 4, hidden=8)(x).shape == (7, 4)


def test_q_network_shapes():
    assert q_network((4,), 2, hidden=(16, 16))(torch.zeros(3, 4)).shape == (3, 2)
    assert q_network((4, 84, 84), 6)(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 6)
    assert nature_cnn(4)(torch.zeros(1, 4, 84, 84)).shape == (1, 512)
    with pytest.raises(ValueError, match="shape"):
        q_network((2, 3), 2)


@pytest.mark.parametrize("field, value", [("gamma", 1.5), ("lr", 0.0), ("tau", 0.0),
                                          ("target_update_interval", 0), ("max_grad_norm", -1.0),
                                          ("adam_eps", 0.0), ("recycle_every", -1),
                                          ("recycle_tau", 1.0)])
def test_invalid_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        DQN(network=nn.Linear(3, 2), num_actions=2, config=DQNConfig(**{field: value}))


def test_rejects_non_module_network():
    with pytest.raises(TypeError, match="network"):
        DQN(network=lambda x: x, num_actions=2)


class MSEDQN(DQN):
    """A user idea: plain squared error instead of Huber, by overriding one hook."""

    def compute_loss(self, batch, target):
        q = self.network(batch["obs"]).gather(-1, batch["action"].long().view(-1, 1)).squeeze(-1)
        td = target - q
        return (batch["weights"] * td.pow(2)).mean(), td.detach(), q


def test_subclass_overrides_one_hook():
    dqn = MSEDQN(network=nn.Linear(3, 2, bias=False), num_actions=2, config=DQNConfig(gamma=0.5))
    with torch.no_grad():
        dqn.network.weight.copy_(torch.tensor(ONLINE))
        dqn.target_network.weight.copy_(torch.tensor(TARGET))
    metrics = dqn.update(batch(weights=np.ones(2, dtype=np.float32)))
    assert metrics["loss"] == pytest.approx(np.mean(np.array([2.5, 7.0]) ** 2))


def test_act_with_one_epsilon_per_observation():
    dqn = table_dqn()
    dqn.epsilon = np.array([0.0, 1.0])
    obs = onehot(0, 0)
    actions = np.array([dqn.act(obs) for _ in range(300)])
    assert np.all(actions[:, 0] == 1)  # eps 0: always greedy
    assert 60 < (actions[:, 1] == 0).sum() < 240  # eps 1: uniform
    restored = table_dqn()
    restored.load_state_dict(dqn.state_dict())
    np.testing.assert_array_equal(restored.epsilon, [0.0, 1.0])


def test_adam_eps_reaches_the_optimizer():
    dqn = DQN(network=nn.Linear(3, 2), num_actions=2, config=DQNConfig(adam_eps=1.5e-4))
    assert [group["eps"] for group in dqn.optimizer.param_groups] == [1.5e-4]


def _dying_dqn(recycle_every: int) -> DQN:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 2))
    dqn = DQN(network=net, num_actions=2, config=DQNConfig(recycle_every=recycle_every, recycle_tau=0.0))
    with torch.no_grad():  # six units off for every input, in both networks
        dqn.network[0].bias[:6] = -100.0
        dqn.target_network[0].bias[:6] = -100.0
    return dqn


def test_recycling_on_schedule_revives_dead_units_and_reports_it():
    dqn = _dying_dqn(recycle_every=3)
    for _ in range(2):
        metrics = dqn.update(batch())
        assert metrics["recycled_units"] == 0.0
    metrics = dqn.update(batch())  # update 3: recycles on this batch's observations
    assert metrics["recycled_units"] >= 6 and metrics["dormant_share"] >= 6 / 16
    assert (dqn.network[0].bias[:6] > -1).all()
    assert (dqn.target_network[0].bias[:6] == -100).all()  # the target waits for its sync
    restored = _dying_dqn(recycle_every=3)
    restored.load_state_dict(dqn.state_dict())
    assert restored.recycler.recycled == dqn.recycler.recycled


def test_recycling_off_by_default_adds_no_metrics():
    dqn = _dying_dqn(recycle_every=0)
    assert dqn.recycler is None
    metrics = dqn.update(batch())
    assert "recycled_units" not in metrics and (dqn.network[0].bias[:6] == -100).all()


def test_recycling_refuses_a_network_it_cannot_recycle_at_construction():
    with pytest.raises(ValueError, match="no layer of Linear can be recycled"):
        DQN(network=nn.Linear(3, 2), num_actions=2, config=DQNConfig(recycle_every=10))


def frames_batch(size=8, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.integers(0, 256, (size, 4, 84, 84), dtype=np.uint8),
            "next_obs": rng.integers(0, 256, (size, 4, 84, 84), dtype=np.uint8),
            "action": rng.integers(0, 3, size), "reward": rng.random(size).astype(np.float32),
            "terminated": np.zeros(size, dtype=np.float32)}


def small_cnn_dqn(seed=0, cls=DQN, **config):
    torch.manual_seed(seed)
    net = q_network((4, 84, 84), 3, hidden=(8,), dueling=True, n_atoms=1, noisy=False, noisy_sigma0=0.5,
                    cnn="small")
    return cls(network=net, num_actions=3, config=DQNConfig(lr=1e-3, **config), seed=seed)


def test_augment_shift_trains_on_moved_frames_and_repeats_by_seed():
    seen = []

    class Watching(DQN):
        def compute_loss(self, batch, target):
            seen.append(batch["obs"].clone())
            return super().compute_loss(batch, target)

    b = frames_batch()
    runs = []
    for _ in range(2):
        dqn = small_cnn_dqn(cls=Watching, augment="shift", shift_pad=4)
        runs.append([dqn.update(b)["loss"] for _ in range(3)])
    assert runs[0] == runs[1]
    scaled = torch.from_numpy(b["obs"]).float() / 255.0
    assert seen[0].dtype == torch.float32 and not torch.equal(seen[0], scaled)
    assert not torch.equal(seen[0], seen[1])  # fresh shifts every update
    # Off, the loss sees the frames as they are.
    seen.clear()
    small_cnn_dqn(cls=Watching).update(b)
    assert torch.equal(seen[0], torch.from_numpy(b["obs"]))


@pytest.mark.parametrize(("config", "match"), [
    ({"augment": "crop"}, "augment must be one of none, shift, got 'crop'"),
    ({"augment": "shift", "shift_pad": 0}, "shift_pad must be an int >= 1, got 0"),
])
def test_bad_augment_settings_are_named(config, match):
    with pytest.raises(ValueError, match=match):
        DQNConfig(**config).validate()


class Untied(DQN):
    @property
    def hard_copy_every_update(self):
        return False


def test_a_hard_copy_every_update_is_one_network_and_learns_as_the_copying_one():
    tied, copying = small_cnn_dqn(target_update_interval=1), small_cnn_dqn(cls=Untied, target_update_interval=1)
    assert tied.target_network is tied.network and copying.target_network is not copying.network
    for i in range(4):
        b = frames_batch(seed=i)
        a, c = tied.learn(b), copying.learn(b)
        # The same arithmetic but one forward fewer: equal up to float rounding.
        np.testing.assert_allclose(a.priorities, c.priorities, rtol=1e-4, atol=1e-5)
    for p, q in zip(tied.network.parameters(), copying.network.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    # Soft updates, or a later copy, keep a target of their own.
    soft = small_cnn_dqn(target_update_interval=1, tau=0.5)
    assert soft.target_network is not soft.network
    later = small_cnn_dqn(target_update_interval=2)
    assert later.target_network is not later.network
    # Noisy layers: the target draws noise of its own, so it stays a network of its own.
    net = q_network((4, 84, 84), 3, hidden=(8,), dueling=True, n_atoms=1, noisy=True, noisy_sigma0=0.5, cnn="small")
    noisy = DQN(network=net, num_actions=3, config=DQNConfig(noisy=True, target_update_interval=1))
    assert noisy.target_network is not noisy.network


def test_one_network_resumed_from_a_checkpoint_with_a_target_keeps_the_online_weights():
    copying = small_cnn_dqn(target_update_interval=100)
    copying.learn(frames_batch())  # online and target now differ
    tied = small_cnn_dqn(seed=1, target_update_interval=1)
    tied.load_state_dict(copying.state_dict())
    for p, q in zip(tied.network.parameters(), copying.network.parameters()):
        assert torch.equal(p, q)
    assert tied.target_network is tied.network


def test_the_builder_refuses_shifts_of_observations_that_are_no_images():
    import gymnasium as gym

    from algorithms.builder import EnvSpec
    from algorithms.dqn import DQNBuilder
    from algorithms.dqn.config import ApexConfig

    learn = ApexConfig(**DQNBuilder.defaults("vector"))
    vector = EnvSpec(observation_space=gym.spaces.Box(-1, 1, (4,)), action_space=gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match=r"--augment shift: random shifts need images of shape \(C, H, W\), "
                                         r"got observations of shape \(4,\)"):
        DQNBuilder(learn=learn, spec=vector, dqn=DQNConfig(augment="shift"))
    frames = EnvSpec(observation_space=gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8),
                     action_space=gym.spaces.Discrete(6))
    built = DQNBuilder(learn=learn, spec=frames, dqn=DQNConfig(augment="shift", shift_pad=2))
    assert (built.dqn.augment, built.dqn.shift_pad) == ("shift", 2)
