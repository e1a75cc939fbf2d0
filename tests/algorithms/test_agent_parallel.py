"""All agent-parallel evaluation modes compute the same function, with gradients."""

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from algorithms.agent_parallel import (
    FEATURE_MAJOR_MIN_BATCH,
    PER_MEMBER_MAX_NETWORKS,
    PER_MEMBER_MIN_BATCH,
    ParallelModules,
    quiet_torchscript,
    runs_per_member,
)
from algorithms.nets import mlp

MODES = ["loop", "threads", "jit_fork", "batched"]


def _nets(seed=0):
    torch.manual_seed(seed)
    homo = [mlp(10, 4, hidden=(16, 16)) for _ in range(4)]
    hetero = [mlp(7, 3, hidden=(8,)), mlp(7, 3, hidden=(8,)), mlp(5, 2, hidden=(16, 16), activation=nn.Tanh)]
    return homo + hetero


def _inputs():
    g = torch.Generator().manual_seed(1)
    return [torch.randn(6, 10, generator=g) for _ in range(4)] + [
        torch.randn(6, 7, generator=g), torch.randn(6, 7, generator=g), torch.randn(6, 5, generator=g)]


@pytest.mark.parametrize("impl", ["bmm", "vmap"])
@pytest.mark.parametrize("mode", MODES)
def test_modes_match_loop_outputs_and_gradients(mode, impl):
    nets, xs = _nets(), _inputs()
    ref = [m(x) for m, x in zip(nets, xs)]
    sum(r.square().sum() for r in ref).backward()
    ref_grads = [p.grad.clone() for m in nets for p in m.parameters()]
    for m in nets:
        m.zero_grad(set_to_none=True)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # jit_fork must not leak TorchScript deprecation warnings
        par = ParallelModules(modules=nets, mode=mode, batched_impl=impl)
        out = par(xs)
    try:
        for a, b in zip(out, ref):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        sum(o.square().sum() for o in out).backward()
        grads = [p.grad for m in nets for p in m.parameters()]
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        with torch.no_grad():  # gradient-free calls agree too
            for a, b in zip(par(xs), ref):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    finally:
        par.close()


@pytest.mark.parametrize("mode", MODES)
def test_call_stacked_and_shared_input(mode):
    torch.manual_seed(0)
    nets = [mlp(5, 2, hidden=(8,)) for _ in range(3)]
    x = torch.randn(4, 5)
    par = ParallelModules(modules=nets, mode=mode)
    try:
        ref = torch.stack([m(x) for m in nets])
        torch.testing.assert_close(par.call_stacked(x.expand(3, 4, 5)), ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.stack(par([x, x, x])), ref, rtol=1e-5, atol=1e-6)
        with pytest.raises(ValueError, match="rows"):
            par.call_stacked(torch.randn(2, 4, 5))
    finally:
        par.close()


def test_auto_picks_batched_for_shared_structure_and_loop_otherwise():
    assert ParallelModules(modules=[mlp(3, 2), mlp(3, 2)]).mode == "batched"
    assert ParallelModules(modules=[mlp(3, 2), mlp(4, 2)]).mode == "loop"


def test_runs_per_member_only_for_few_members_and_many_rows():
    assert runs_per_member(3, PER_MEMBER_MIN_BATCH)
    assert runs_per_member(PER_MEMBER_MAX_NETWORKS - 1, 4 * PER_MEMBER_MIN_BATCH)
    assert not runs_per_member(PER_MEMBER_MAX_NETWORKS, PER_MEMBER_MIN_BATCH)  # many members: stacked
    assert not runs_per_member(3, PER_MEMBER_MIN_BATCH - 1)  # fewer rows: stacked
    assert not runs_per_member(3, 1)


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("n", [3, PER_MEMBER_MAX_NETWORKS])
def test_large_shared_calls_match_loop(n, replace):
    # call_shared on both sides of the per-member rule: outputs and leaf gradients
    # (including those reaching the replacing values) equal loop mode's.
    torch.manual_seed(0)
    width, rows = 2, PER_MEMBER_MIN_BATCH
    nets = [mlp(3 + n * width, 1, hidden=(8, 8)) for _ in range(n)]
    x = torch.randn(rows, 3 + n * width)
    values = torch.randn(n, rows, width, requires_grad=True)
    kw = {"replace": (3, values)} if replace else {}
    loop = ParallelModules(modules=nets, mode="loop")
    ref = loop.call_shared(x, **kw)
    ref.square().sum().backward()
    ref_grads = [torch.stack([p.grad for p in column]) for column in zip(*(m.parameters() for m in nets))]
    ref_values_grad, values.grad = values.grad, None
    par = ParallelModules(modules=nets, mode="batched", store_stacked=True)
    out = par.call_shared(x, **kw)
    torch.testing.assert_close(out, ref.detach(), rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    for leaf, want in zip(par.stacked_leaves, ref_grads):
        torch.testing.assert_close(leaf.grad, want, rtol=1e-4, atol=1e-4)
    if replace:
        torch.testing.assert_close(values.grad, ref_values_grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [2, PER_MEMBER_MAX_NETWORKS])
def test_large_calls_match_loop_on_per_member_and_stacked_paths(n):
    # Below PER_MEMBER_MAX_NETWORKS members a call of PER_MEMBER_MIN_BATCH rows runs
    # member by member on leaf row views; at n it stays one stacked product. Either way
    # outputs and the gradients landing on the stacked leaves equal loop mode's.
    torch.manual_seed(0)
    nets = [mlp(6, 3, hidden=(8, 8)) for _ in range(n)]
    x = torch.randn(n, PER_MEMBER_MIN_BATCH, 6)
    ref = torch.stack([m(xi) for m, xi in zip(nets, x)])
    ref.square().sum().backward()
    ref_grads = [torch.stack([p.grad for p in column]) for column in zip(*(m.parameters() for m in nets))]
    ref = ref.detach()
    par = ParallelModules(modules=nets, mode="batched", store_stacked=True)
    with torch.no_grad():
        torch.testing.assert_close(par.call_stacked(x), ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(torch.stack(par(list(x))), ref, rtol=1e-5, atol=1e-5)
    out = par.call_stacked(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    for leaf, want in zip(par.stacked_leaves, ref_grads):
        torch.testing.assert_close(leaf.grad, want, rtol=1e-4, atol=1e-4)


def test_weight_cache_sees_in_place_writes_and_refresh():
    torch.manual_seed(0)
    nets = [mlp(3, 2, hidden=(4,)) for _ in range(2)]
    par = ParallelModules(modules=nets, mode="batched", cache_weights=True)
    x = [torch.randn(5, 3), torch.randn(5, 3)]
    with torch.no_grad():
        par(x)
        nets[0][0].weight.add_(1.0)  # bumps the version counter
        torch.testing.assert_close(par(x)[0], nets[0](x[0]))
        opt = torch.optim.Adam(nets[1].parameters(), lr=0.5, fused=True)
    nets[1](x[1]).sum().backward()
    opt.step()  # fused: no version bump, so the owner refreshes
    par.refresh()
    with torch.no_grad():
        torch.testing.assert_close(par(x)[1], nets[1](x[1]))


def test_ragged_batches_and_unbatched_inputs():
    torch.manual_seed(0)
    nets = [mlp(3, 2) for _ in range(2)]
    par = ParallelModules(modules=nets, mode="batched")
    ragged = [torch.randn(2, 3), torch.randn(5, 3)]
    for a, m, x in zip(par(ragged), nets, ragged):
        torch.testing.assert_close(a, m(x))
    single = [torch.randn(3), torch.randn(3)]
    for a, m, x in zip(par(single), nets, single):
        torch.testing.assert_close(a, m(x))


def test_vmap_handles_non_sequential_modules():
    class Twin(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

        def forward(self, x):
            return self.a(x) * torch.sigmoid(self.b(x))

    torch.manual_seed(0)
    nets = [Twin() for _ in range(3)]
    xs = [torch.randn(4, 3) for _ in range(3)]
    par = ParallelModules(modules=nets, mode="batched")  # not bmm-able: vmap path
    for a, m, x in zip(par(xs), nets, xs):
        torch.testing.assert_close(a, m(x), rtol=1e-5, atol=1e-6)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="mode"):
        ParallelModules(modules=[mlp(2, 2)], mode="gpu")
    with pytest.raises(ValueError, match="batched_impl"):
        ParallelModules(modules=[mlp(2, 2)], batched_impl="einsum")
    with pytest.raises(TypeError, match="nn.Module"):
        ParallelModules(modules=[])
    with pytest.raises(ValueError, match="inputs"):
        ParallelModules(modules=[mlp(2, 2)], mode="loop")([torch.zeros(1, 2)] * 2)

    class Unscriptable(nn.Module):
        def forward(self, x):
            return torch.from_numpy(np.tanh(x.numpy()))  # numpy calls do not script

    with pytest.raises(TypeError, match="jit_fork"):
        ParallelModules(modules=[Unscriptable()], mode="jit_fork")


def test_quiet_torchscript_only_silences_deprecations():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_torchscript():
            warnings.warn("`torch.jit.script` is deprecated. Please switch", DeprecationWarning, stacklevel=1)
            warnings.warn("something else", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something else"]


def test_store_stacked_leaves_share_storage_and_take_the_gradients():
    torch.manual_seed(0)
    nets = [mlp(10, 4, hidden=(16, 16)) for _ in range(3)]
    ref_nets = [mlp(10, 4, hidden=(16, 16)) for _ in range(3)]
    for a, b in zip(ref_nets, nets):
        a.load_state_dict(b.state_dict())
    par = ParallelModules(modules=nets, mode="batched", store_stacked=True)
    leaves = par.stacked_leaves
    assert leaves is not None and all(leaf.is_leaf and leaf.shape[0] == 3 for leaf in leaves)
    with torch.no_grad():
        nets[1][0].weight.add_(1.0)  # a per-agent write lands in the stacked storage
        ref_nets[1][0].weight.add_(1.0)
    torch.testing.assert_close(leaves[0][1], ref_nets[1][0].weight)
    xs = [torch.randn(5, 10) for _ in range(3)]
    out = par(xs)
    ref = [m(x) for m, x in zip(ref_nets, xs)]
    for a, b in zip(out, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    sum(o.square().sum() for o in out).backward()
    sum(r.square().sum() for r in ref).backward()
    for k, leaf in enumerate(leaves):  # row i of leaf k is net i's k-th parameter gradient
        expected = torch.stack([list(m.parameters())[k].grad for m in ref_nets])
        torch.testing.assert_close(leaf.grad, expected, rtol=1e-5, atol=1e-6)
    # ragged batch sizes run member by member, still through the leaves
    for leaf in leaves:
        leaf.grad = None
    ragged = [torch.randn(2, 10), torch.randn(3, 10), torch.randn(4, 10)]
    sum(o.sum() for o in par(ragged)).backward()
    assert all(leaf.grad is not None and leaf.grad[2].abs().sum() > 0 for leaf in leaves)
    # other modes and mixed structures ignore the request
    assert ParallelModules(modules=nets, mode="loop", store_stacked=True).stacked_leaves is None
    assert ParallelModules(modules=_nets(), mode="batched", store_stacked=True).stacked_leaves is None


@pytest.mark.parametrize("mode", ["loop", "threads", "batched"])
@pytest.mark.parametrize("replace", [False, True], ids=["plain", "replace"])
@pytest.mark.parametrize("b", [1, 5, FEATURE_MAJOR_MIN_BATCH + 8])  # rows-major and feature-major
def test_call_shared_matches_explicit_inputs_with_gradients(mode, replace, b):
    """Network i on x with (optionally) its own column block replaced by values[i]:
    outputs and gradients (into the networks and into ``values``) equal explicit calls."""
    n, start, width, dim = 3, 4, 2, 12  # columns 4..9 hold three 2-wide blocks
    torch.manual_seed(0)
    nets = [mlp(dim, 1, hidden=(16, 16)) for _ in range(n)]
    ref_nets = [mlp(dim, 1, hidden=(16, 16)) for _ in range(n)]
    for a, c in zip(ref_nets, nets):
        a.load_state_dict(c.state_dict())
    par = ParallelModules(modules=nets, mode=mode, store_stacked=True)
    x = torch.randn(b, dim)
    values = torch.randn(n, b, width, requires_grad=True)
    ref_values = values.detach().clone().requires_grad_(True)
    inputs = []
    for i in range(n):
        xi = x.clone()
        if replace:
            cols = slice(start + i * width, start + (i + 1) * width)
            xi = torch.cat([xi[:, :cols.start], ref_values[i], xi[:, cols.stop:]], -1)
        inputs.append(xi)
    ref = torch.stack([m(xi) for m, xi in zip(ref_nets, inputs)])
    out = par.call_shared(x, replace=(start, values) if replace else None)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    (out.square().sum() + out.sum()).backward()
    (ref.square().sum() + ref.sum()).backward()
    if replace:
        torch.testing.assert_close(values.grad, ref_values.grad, rtol=1e-5, atol=1e-6)
    grads = par.stacked_leaves or [p for m in nets for p in m.parameters()]
    expected = [torch.stack([list(m.parameters())[k].grad for m in ref_nets]) for k in range(6)]
    if par.stacked_leaves is None:
        expected = [p.grad for m in ref_nets for p in m.parameters()]
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g.grad, e, rtol=1e-5, atol=1e-6)


def test_one_adam_over_stacked_rows_equals_one_adam_per_network():
    """Adam is elementwise, so one (fused) optimizer over (n, ...) stacked leaves steps
    each row exactly as a separate optimizer per network would."""
    torch.manual_seed(0)
    n = 4
    stacked = [torch.nn.Parameter(torch.randn(n, 8, 6)), torch.nn.Parameter(torch.randn(n, 8))]
    rows = [[torch.nn.Parameter(leaf.detach()[i].clone()) for leaf in stacked] for i in range(n)]
    try:
        joint = torch.optim.Adam(stacked, lr=1e-2, fused=True)
    except (RuntimeError, ValueError):
        joint = torch.optim.Adam(stacked, lr=1e-2)
    separate = [torch.optim.Adam(ps, lr=1e-2) for ps in rows]
    for step in range(5):
        grads = [torch.randn_like(leaf) * (10.0 ** -step) for leaf in stacked]
        for leaf, g in zip(stacked, grads):
            leaf.grad = g.clone()
        joint.step()
        for i, (ps, opt) in enumerate(zip(rows, separate)):
            for p, g in zip(ps, grads):
                p.grad = g[i].clone()
            opt.step()
    for i in range(n):
        for leaf, p in zip(stacked, rows[i]):
            torch.testing.assert_close(leaf.detach()[i], p.detach(), rtol=1e-6, atol=1e-7)


def test_clip_stacked_equals_clip_grad_norm_per_network():
    """Row i of every stacked leaf is network i's: clipping per row equals
    ``clip_grad_norm_`` over each network's own parameters."""
    from algorithms.maddpg import clip_stacked

    torch.manual_seed(0)
    nets = [mlp(6, 2, hidden=(8,)) for _ in range(3)]
    for k, net in enumerate(nets):  # network 0 below the norm, 1 and 2 above it
        for p in net.parameters():
            p.grad = torch.randn_like(p) * (0.01 if k == 0 else 3.0)
    leaves = [torch.nn.Parameter(torch.stack([list(m.parameters())[j].detach() for m in nets]))
              for j in range(4)]
    for j, leaf in enumerate(leaves):
        leaf.grad = torch.stack([list(m.parameters())[j].grad for m in nets])
    clip_stacked(leaves, 0.5)
    for net in nets:
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
    for j, leaf in enumerate(leaves):
        torch.testing.assert_close(leaf.grad, torch.stack([list(m.parameters())[j].grad for m in nets]),
                                   rtol=1e-5, atol=1e-7)


def _graph_names(out: torch.Tensor) -> set[str]:
    seen, names, stack = set(), set(), [out.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(type(fn).__name__)
        stack.extend(next_fn for next_fn, _ in fn.next_functions)
    return names


@pytest.mark.parametrize("b", [5, FEATURE_MAJOR_MIN_BATCH + 8])
def test_call_shared_graph_has_no_rebased_views(b):
    """The activation after the shared first product runs on the product, not on a
    per-network view of it: an in-place op on a view makes autograd copy the whole
    product back (CopySlices) in every backward."""
    torch.manual_seed(0)
    par = ParallelModules(modules=[mlp(12, 1, hidden=(16, 16)) for _ in range(3)], mode="batched",
                          store_stacked=True)
    names = _graph_names(par.call_shared(torch.randn(b, 12)))
    assert "CopySlices" not in names and "AsStridedBackward0" not in names, names


@pytest.mark.parametrize("shared", [False, True], ids=["stacked", "shared"])
def test_gradient_free_calls_reuse_scratch_but_never_return_it(shared):
    """Without gradients, hidden activations go to reused per-thread buffers: a second
    call must not overwrite the first call's result, and results equal the gradient path."""
    torch.manual_seed(0)
    n, b = 3, FEATURE_MAJOR_MIN_BATCH + 8
    par = ParallelModules(modules=[mlp(12, 4, hidden=(16, 16)) for _ in range(n)], mode="batched",
                          store_stacked=True)
    xs = [torch.randn(b, 12) if shared else torch.randn(n, b, 12) for _ in range(2)]
    call = par.call_shared if shared else par.call_stacked
    with torch.no_grad():
        first = call(xs[0])
        kept = first.clone()
        second = call(xs[1])
        again = call(xs[0])
    torch.testing.assert_close(first, kept, rtol=0, atol=0)
    assert first.data_ptr() != second.data_ptr()
    torch.testing.assert_close(again, kept, rtol=0, atol=0)
    torch.testing.assert_close(second, call(xs[1]).detach(), rtol=1e-6, atol=1e-6)  # with gradients
    single = ParallelModules(modules=[mlp(12, 4, hidden=()) for _ in range(n)], mode="batched", store_stacked=True)
    with torch.no_grad():  # one Linear: its only product is the result, never scratch
        one = single.call_shared(xs[0]) if shared else single.call_stacked(xs[0])
        other = single.call_shared(xs[1]) if shared else single.call_stacked(xs[1])
    assert one.data_ptr() != other.data_ptr()
