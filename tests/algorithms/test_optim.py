import copy
import subprocess
import sys

import pytest
import torch
from torch import nn

from algorithms.optim import EagerAdam, EagerRAdam, EagerRMSprop, clip_grad_norm, linear_lr


def pair(name):
    """Ours and torch's optimizer of the same kind over two identical nets."""
    torch.manual_seed(0)
    ours_net = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    ref_net = copy.deepcopy(ours_net)
    if name == "adam":
        ours = EagerAdam(ours_net.parameters(), lr=0.05, eps=1e-6)
        ref = torch.optim.Adam(ref_net.parameters(), lr=0.05, eps=1e-6)
    elif name == "radam":
        ours = EagerRAdam(ours_net.parameters(), lr=0.05, betas=(0.8, 0.99), eps=1e-6)
        ref = torch.optim.RAdam(ref_net.parameters(), lr=0.05, betas=(0.8, 0.99), eps=1e-6)
    else:
        ours = EagerRMSprop(ours_net.parameters(), lr=0.01, alpha=0.95, eps=1e-5)
        ref = torch.optim.RMSprop(ref_net.parameters(), lr=0.01, alpha=0.95, eps=1e-5)
    return (ours_net, ours), (ref_net, ref)


def train(pairs, steps, *, drop_bias_at=None):
    for step in range(steps):
        x = torch.randn(16, 3)
        for net, opt in pairs:
            opt.zero_grad()
            net(x).pow(2).mean().backward()
            if step == drop_bias_at:  # a parameter without a gradient is left alone
                net[2].bias.grad = None
            opt.step()


@pytest.mark.parametrize("name", ["adam", "radam", "rmsprop"])
def test_matches_torch_including_parameters_without_grad(name):
    ours, ref = pair(name)
    # RAdam: steps 1-5 are momentum steps, the rectified ones start at the sixth.
    train([ours, ref], 12, drop_bias_at=3)
    for a, b in zip(ours[0].parameters(), ref[0].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert float(ours[1].state[ours[0][2].bias]["step"]) == 11
    assert float(ours[1].state[ours[0][2].weight]["step"]) == 12


@pytest.mark.parametrize("name", ["adam", "radam", "rmsprop"])
def test_state_dict_round_trip_continues_exactly_and_loads_torch_state(name):
    ours, ref = pair(name)
    train([ours, ref], 5)
    twin_net = copy.deepcopy(ours[0])
    cls = type(ours[1])
    twin = cls(twin_net.parameters(), lr=1.0)
    # deepcopy stands for torch.save/torch.load: a state dict holds references.
    twin.load_state_dict(copy.deepcopy(ours[1].state_dict()))
    # torch's own optimizer state loads too: the state layout is torch's.
    from_torch_net = copy.deepcopy(ref[0])
    from_torch = cls(from_torch_net.parameters(), lr=1.0)
    from_torch.load_state_dict(copy.deepcopy(ref[1].state_dict()))
    train([ours, (twin_net, twin), (from_torch_net, from_torch)], 3)
    for a, b, c in zip(ours[0].parameters(), twin_net.parameters(), from_torch_net.parameters(),
                       strict=True):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c, rtol=0, atol=1e-6)


def test_lr_schedulers_drive_the_eager_optimizers():
    net = nn.Linear(2, 1)
    opt = EagerAdam(net.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.5, total_iters=2)
    net(torch.ones(2)).sum().backward()
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.75e-2)


def test_bad_hyperparameters_are_named():
    params = list(nn.Linear(2, 1).parameters())
    with pytest.raises(ValueError, match="lr"):
        EagerAdam(params, lr=-1.0)
    with pytest.raises(ValueError, match=r"betas\[1\]"):
        EagerAdam(params, lr=0.1, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="alpha"):
        EagerRMSprop(params, lr=0.1, alpha=1.5)
    with pytest.raises(ValueError, match="empty parameter list"):
        EagerAdam([], lr=0.1)


def test_sparse_gradients_are_refused():
    emb = nn.Embedding(4, 2, sparse=True)
    opt = EagerAdam(emb.parameters(), lr=0.1)
    emb(torch.tensor([1])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()


def test_eager_optimizers_never_import_dynamo():
    code = ("import sys, torch; from algorithms.optim import EagerAdam, EagerRAdam, EagerRMSprop\n"
            "for cls in (EagerAdam, EagerRAdam, EagerRMSprop):\n"
            "    m = torch.nn.Linear(2, 1); opt = cls(m.parameters(), lr=0.1)\n"
            "    opt.zero_grad(); m(torch.ones(2)).sum().backward(); opt.step()\n"
            "    opt.load_state_dict(opt.state_dict())\n"
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_clip_grad_norm_matches_torch():
    grads = [torch.tensor([3.0, 4.0]), torch.tensor([12.0])]
    norm = clip_grad_norm(grads, 6.5)
    assert float(norm) == pytest.approx(13.0)
    assert float(torch.linalg.vector_norm(torch.cat(grads))) == pytest.approx(6.5, rel=1e-5)
    assert float(clip_grad_norm([torch.ones(4)], None)) == pytest.approx(2.0)


def test_step_hooks_run_and_may_replace_arguments():
    net = nn.Linear(2, 1)
    opt = EagerRMSprop(net.parameters(), lr=0.1)
    seen = []
    opt.register_step_pre_hook(lambda o, args, kwargs: seen.append(("pre", args[0] is o)))
    opt.register_step_post_hook(lambda o, args, kwargs: seen.append(("post", args[0] is o)))
    net(torch.ones(2)).sum().backward()
    assert opt.step(lambda: torch.tensor(3.0)) == 3.0
    assert seen == [("pre", True), ("post", True)]
    bad = EagerRMSprop(net.parameters(), lr=0.1)
    bad.register_step_pre_hook(lambda o, args, kwargs: "nonsense")
    with pytest.raises(RuntimeError, match="pre-hook"):
        bad.step()


def test_linear_lr_anneals_every_group_to_zero_and_holds_there():
    net = nn.Linear(2, 2)
    optimizer = EagerAdam([{"params": [net.weight]}, {"params": [net.bias], "lr": 9.0}], lr=1.0)
    rates = [linear_lr(optimizer, lr=2e-3, step=step, anneal_steps=4) for step in (0, 1, 4, 7)]
    assert rates == pytest.approx([2e-3, 1.5e-3, 0.0, 0.0])
    assert [g["lr"] for g in optimizer.param_groups] == [0.0, 0.0]
    assert linear_lr(optimizer, lr=2e-3, step=100, anneal_steps=None) == 2e-3  # None: constant
    assert [g["lr"] for g in optimizer.param_groups] == [2e-3, 2e-3]


@pytest.mark.parametrize("name", ["adam", "radam", "rmsprop"])
def test_a_step_is_a_new_version_of_every_parameter_it_writes(name):
    """Caches keyed on parameter versions (algorithms.fast) must see each step: the
    fused kernels write without counting one."""
    (net, opt), _ = pair(name)
    before = [p._version for p in net.parameters()]
    train([(net, opt)], 1)
    assert all(p._version > v for p, v in zip(net.parameters(), before))
