"""Evaluate many agents' networks at once, in one of four interchangeable modes.

``ParallelModules(modules=[net_0, ..., net_n], mode=...)`` maps a list of inputs
(one per network) to a list of outputs. Every mode computes the same function of
the same parameters (tests check equality), and gradients reach each network's
own parameters in every mode, so the same object serves acting and learning:

- ``loop``: one call after another in this thread (the reference).
- ``threads``: a thread pool, one task per network (torch ops drop the GIL).
- ``jit_fork``: the networks are TorchScript-scripted into one module whose
  ``forward`` launches each with ``torch.jit.fork`` and joins with ``wait``, so
  the fan-out runs on torch's inter-op pool without the GIL (Machin's approach).
  TorchScript is deprecated in recent torch: exactly those deprecation warnings
  are silenced (see ``quiet_torchscript``); scripting happens once, here.
- ``batched``: networks with identical structure are stacked and run as one
  batched computation. ``batched_impl="bmm"`` (default) handles ``nn.Sequential``
  stacks of ``nn.Linear`` and elementwise activations with ``torch.baddbmm`` over
  stacked weights; any other module (or ``batched_impl="vmap"``) goes through
  ``torch.func.functional_call`` under ``torch.vmap``. Heterogeneous agents are
  grouped by structure; a group of one runs as a plain call, and a group that
  ``vmap`` cannot handle falls back to ``loop`` (with one warning). With stored
  stacking, a call with few members and many rows runs member by member on row
  views of the stacked weights (``PER_MEMBER_MAX_NETWORKS``, ``PER_MEMBER_MIN_BATCH``).

``auto`` picks ``batched`` when at least two networks share a structure and
``loop`` otherwise; ``auto_max_params`` (for networks used only in gradient
steps, such as MADDPG's critics) also picks ``loop`` when a network has more
parameters than that, because the stacked copy of the weights is remade on
every step and for big networks costs more than the calls it saves. This follows
``experiments/bench/multiagent/inference.py`` (CPU, 2-core box, every mode with the
same 2 intra-op threads, each in its own process): at 8-16 agents batched acting
at batch 1 is 10-18x faster than ``threads`` and 3-6x faster than ``loop``, and a
MADDPG update at batch 1024, hidden 64, with stored stacking (``call_shared``) is
3.3x faster than ``threads``; at hidden 256 and batch 1024 every mode runs near the
box's matmul peak and batched leads by 1.1-1.7x. For a single network nothing
beats a plain call. No CUDA measurement exists yet.

With ``store_stacked=True`` (batched bmm mode, one structure) the weights live
stacked: one ``(n, ...)`` leaf Parameter per layer parameter (``stacked_leaves``),
and each module's Parameters become views of its row. Batched calls then use the
leaves with no copy, gradients land on the leaves (the owner optimizes those), and
per-module reads and in-place writes still see the shared numbers. MADDPG uses this
for homogeneous agents.

Otherwise stacked weights are rebuilt on every call that needs gradients (``torch.stack``
is differentiable, so the per-agent parameters get their gradients). With
``cache_weights=True`` calls without gradients reuse them until ``refresh()`` or
until a parameter's in-place version counter moves; fused optimizers do NOT move
that counter, so an owner that steps one (MADDPG) must call ``refresh()`` after
each step. The default (no cache) is always current.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import torch
from torch import nn

EvalMode = Literal["auto", "jit_fork", "threads", "batched", "loop"]
MODES = ("auto", "jit_fork", "threads", "batched", "loop")
BatchedImpl = Literal["bmm", "vmap"]

# Below this many rows per network, batched calls keep rows-major activations: at
# batch 1 a (n, out, in) @ (n, in, 1) product was ~4x slower than (n, 1, in) @ (n, in, out)
# (act, 8 agents, hidden 256, 1 thread: 0.83 vs 0.20 ms; batch 8: 1.05 vs 0.37; batch 64: level).
FEATURE_MAJOR_MIN_BATCH = 32

# Batched calls on stored stacked weights (``call_stacked``, ``call_shared``) with fewer
# members than PER_MEMBER_MAX_NETWORKS and at least PER_MEMBER_MIN_BATCH rows run member
# by member on row views of the leaves (``unbind``: no weight copies, and autograd
# stacks the gradients into the leaves): few members' stacked activations (3 MB per
# layer at 3 agents, hidden 256, batch 1024) leave the 2 MB L2, one member's 1 MB stays.
# experiments/bench/multiagent/inference.py, MADDPG batched against loop at batch 1024,
# 2 / 1 intra-op threads, stacked: update at 3 agents, hidden 256 0.83x / 0.98x, act
# 0.80x / 1.03x; with this path 1.04x / 1.04x and 1.06x / 1.01x; 3 agents, hidden 64:
# update 1.02x / 1.17x -> 1.20x / 1.13x, act 0.95x / 1.09x -> 1.07x / 1.08x. At 8 agents
# stacked wins (update 1.18x / 1.08x, act 1.07x / 0.99x at hidden 256); batch 1 gains
# 1.2-4.6x from stacking. 32-1023 rows and 4-7 members are unmeasured: stacked there.
PER_MEMBER_MAX_NETWORKS = 8
PER_MEMBER_MIN_BATCH = 1024

# Elementwise activations: applying one instance to stacked activations equals
# applying each agent's own instance to its slice.
_ELEMENTWISE = (
    nn.ReLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Softplus,
    nn.Identity, nn.Hardtanh, nn.ReLU6, nn.Mish, nn.Softsign, nn.SELU, nn.CELU, nn.Tanhshrink,
)


@contextlib.contextmanager
def quiet_torchscript() -> Iterator[None]:
    """Silence only torch's "TorchScript is deprecated" warnings, nothing else."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r".*torch\.jit\.\w+.* is deprecated", category=DeprecationWarning
        )
        warnings.filterwarnings("ignore", message=r".*TorchScript.*deprecated", category=DeprecationWarning)
        yield


class _Forked(nn.Module):
    """Scripted as a whole: forks every member network and waits for all."""

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        futures = torch.jit.annotate(list[torch.jit.Future[torch.Tensor]], [])
        for i, member in enumerate(self.members):
            futures.append(torch.jit.fork(member, xs[i]))
        outs = torch.jit.annotate(list[torch.Tensor], [])
        for future in futures:
            outs.append(torch.jit.wait(future))
        return outs


def _activate(layer: nn.Module, x: torch.Tensor, owned: bool) -> torch.Tensor:
    """``layer(x)``; a ReLU on a product this call made runs in place. Stacked
    activations are n times one network's (8 MB at 8 agents, hidden 256, batch 1024),
    and a fresh output costs page faults and a memory pass: act at 16 agents, hidden
    256, batch 1024 took 21 instead of 33 ms. Safe for autograd: the product's
    backward does not read its output, and ReLU's backward reads only its result."""
    if owned and type(layer) is nn.ReLU:
        return torch.relu_(x)
    return layer(x)


def _structure(module: nn.Module) -> tuple:
    """Modules with equal structure keys can be stacked."""
    params = tuple((name, tuple(p.shape), p.dtype, p.device) for name, p in module.named_parameters())
    buffers = tuple((name, tuple(b.shape), b.dtype) for name, b in module.named_buffers())
    layout = tuple((name, type(m).__name__, repr(m)) for name, m in module.named_modules())
    return (type(module), params, buffers, layout)


def _bmm_layers(module: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """The layer list if ``module`` is a Linear/elementwise Sequential, else None."""
    if not isinstance(module, nn.Sequential):
        return None
    layers = []
    for layer in module:
        if isinstance(layer, nn.Linear):
            layers.append(("linear", layer))
        elif isinstance(layer, _ELEMENTWISE):
            layers.append(("act", layer))
        else:
            return None
    return layers


class _Group:
    """Networks with one structure, run as one stacked computation."""

    def __init__(self, indices: list[int], modules: list[nn.Module], impl: BatchedImpl, cache: bool) -> None:
        self.indices = indices
        self.cache = cache
        self.modules = modules
        layers = _bmm_layers(modules[0])
        self.impl: str = "bmm" if impl == "bmm" and layers is not None else "vmap"
        self.layers = layers
        self.params = [list(m.parameters()) for m in modules]
        self._cache: tuple[tuple[int, ...], list[torch.Tensor]] | None = None
        self.failed = False
        self.leaves: list[nn.Parameter] | None = None
        self._scratch_local = threading.local()
        if self.impl == "vmap":
            self.names = [name for name, _ in modules[0].named_parameters()]
            self.buffer_names = [name for name, _ in modules[0].named_buffers()]
            self.base = modules[0]

    def store_stacked(self) -> list[nn.Parameter]:
        """Make one stacked leaf per parameter the storage of all members: each member's
        Parameter becomes a view of row i, so per-agent reads and in-place writes
        (load_state_dict, tests) see the same numbers, and the batched forward uses the
        leaves directly with no per-call ``torch.stack``. Gradients then land on the
        leaves, so whoever optimizes must step the leaves, not the member Parameters."""
        if self.leaves is None:
            leaves = []
            for column in zip(*self.params):
                leaf = nn.Parameter(torch.stack([p.detach() for p in column]),
                                    requires_grad=column[0].requires_grad)
                for i, p in enumerate(column):
                    p.data = leaf.detach()[i]
                leaves.append(leaf)
            self.leaves = leaves
        return self.leaves

    def call_one(self, j: int, x: torch.Tensor) -> torch.Tensor:
        """Member j alone; with stored stacking its weights are rows of the leaves, so
        gradients still reach the leaves (ragged inputs that cannot be stacked)."""
        if self.leaves is None:
            return self.modules[j](x)
        names = [name for name, _ in self.modules[j].named_parameters()]
        return torch.func.functional_call(self.modules[j], {n: leaf[j] for n, leaf in zip(names, self.leaves)}, (x,))

    def refresh(self, reload_params: bool) -> None:
        if reload_params:
            self.params = [list(m.parameters()) for m in self.modules]
        self._cache = None

    def _stacked(self) -> list[torch.Tensor]:
        """Per-parameter tensors stacked over agents (bmm layout for Linear weights)."""
        if self.leaves is not None:
            return self._bmm_layout(self.leaves) if self.impl == "bmm" else list(self.leaves)
        grad = torch.is_grad_enabled() and any(p.requires_grad for p in self.params[0])
        keep = self.cache and not grad
        if keep:
            key = tuple(p._version for ps in self.params for p in ps)
            if self._cache is not None and self._cache[0] == key:
                return self._cache[1]
        stacked = [torch.stack(column) for column in zip(*self.params)]
        if self.impl == "bmm":
            stacked = self._bmm_layout(stacked)
        if keep:
            self._cache = (key, stacked)
        return stacked

    def _bmm_layout(self, stacked: list[torch.Tensor]) -> list[torch.Tensor]:
        out, k = [], 0
        for kind, layer in self.layers:
            if kind != "linear":
                continue
            out.append(stacked[k].transpose(1, 2))  # (n, in, out) for x @ W^T
            k += 1
            if layer.bias is not None:
                out.append(stacked[k].unsqueeze(1))  # (n, 1, out) broadcasts over batch
                k += 1
            else:
                out.append(None)
        return out

    def shares_first_layer(self) -> bool:
        """Whether ``call_shared`` can fold the members' first layers into one product."""
        return self.impl == "bmm" and self.leaves is not None and self.layers[0][0] == "linear"

    def call_shared(self, x: torch.Tensor, replace: tuple[int, torch.Tensor] | None = None) -> torch.Tensor:
        """Every member on the same input ``x`` ``(B, in)`` -> ``(n, B, out)``.

        The first layer of all members is ONE ``(n * h, in) @ (in, B)`` product on a
        free view of the stacked leaf, instead of n products over an expanded
        ``(n, B, in)`` copy (the copy and the small-GEMM inefficiency dominate
        centralized critics, whose input grows with the number of agents).
        ``replace=(start, values)`` with ``values`` ``(n, B, w)``: member i sees columns
        ``start + i*w ... start + (i+1)*w`` of ``x`` replaced by ``values[i]``, computed as
        ``W x + W[:, cols_i] (values_i - x[:, cols_i])``; gradients then reach ``values``
        through a ``w``-wide product only, not through the whole input."""
        # Feature-major activations (n, features, B): every product then reads the
        # leaves in their stored (n, out, in) layout and writes contiguous outputs, so
        # neither the weights (or their gradients) nor the activations get transposed
        # copies on the way.
        if runs_per_member(len(self.indices), x.shape[0]):
            return self._shared_per_member(x, replace)
        leaves = iter(self.leaves)
        weight = next(leaves)
        bias = next(leaves) if self.layers[0][1].bias is not None else None
        n, h, d = weight.shape
        flat = weight.reshape(n * h, d)  # first layer: one product over the shared x for all members
        rows = x.shape[0]
        few = rows < FEATURE_MAJOR_MIN_BATCH
        # Few rows: feature-major products would be (n, out, in) @ (n, in, B) matrix-vector
        # bmm calls, the slow shape (see FEATURE_MAJOR_MIN_BATCH); stay rows-major. A
        # 3-agent hidden-256 update at batch 1 on 1 thread took 2.77 ms this way against
        # 2.35 ms in loop mode, which never goes feature-major.
        if few:
            out = torch.mm(x, flat.t()) if bias is None else torch.addmm(bias.reshape(1, n * h), x, flat.t())
        else:  # scratch only if a later product consumes it (it must not be returned)
            later = any(kind == "linear" for kind, _ in self.layers[1:])
            scratch = self._scratch(0, (n * h, rows), x) if later else None
            out = (torch.mm(flat, x.t(), out=scratch) if bias is None
                   else torch.addmm(bias.reshape(n * h, 1), flat, x.t(), out=scratch))
        start = 1
        if replace is None and len(self.layers) > 1 and self.layers[1][0] == "act":
            # The activation after the first Linear runs on the product itself, before the
            # per-member view: an in-place op on a view makes autograd rebase the whole
            # product (CopySlices), two extra (n, h, B) copies in every backward.
            out = _activate(self.layers[1][1], out, True)
            start = 2
        if few:
            out = out.view(rows, n, h).transpose(0, 1)
            if replace is not None:
                out = self._replaced(out, weight, x, *replace, rows_major=True)
            return self._rows_major(out, start=start)
        out = out.view(n, h, rows)
        if replace is not None:
            out = self._replaced(out, weight, x, *replace)
        return self._feature_major(out, leaves, start=start)

    def _scratch(self, slot: int, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor | None:
        """A reusable buffer for an intermediate activation of a gradient-free call, or
        None when gradients are on (autograd keeps activations alive). Fresh stacked
        activations are big (8 MB at 8 agents, hidden 256, batch 1024) and the allocator
        hands them back to the OS: acting at that size took ~4000 page faults per call
        and 21 ms against loop mode's 14 ms (1 intra-op thread). Per thread, so
        concurrent callers never share one; intermediates only, never a returned tensor."""
        if torch.is_grad_enabled():
            return None
        store = self._scratch_local.__dict__
        key = (slot, like.dtype, like.device)
        buf = store.get(key)
        if buf is None or buf.shape != shape or buf.is_inference() != torch.is_inference_mode_enabled():
            buf = store[key] = torch.empty(shape, dtype=like.dtype, device=like.device)
        return buf

    def _feature_major(self, x: torch.Tensor, leaves: Iterator[nn.Parameter], *, start: int = 0) -> torch.Tensor:
        """``self.layers[start:]`` on feature-major input ``(n, in, B)`` with the stored
        leaves (``(n, out, in)``: no transposed copies) -> ``(n, B, out)``; ``start > 0``:
        ``x`` is the output of layer ``start - 1``, a product made here."""
        owned = start > 0  # x is a product made here (not the caller's input)
        last = max(i for i, (kind, _) in enumerate(self.layers) if kind == "linear")
        slot = 1
        for index, (kind, layer) in enumerate(self.layers[start:], start):
            if kind == "act":
                x = _activate(layer, x, owned)
                continue
            weight = next(leaves)
            bias = next(leaves) if layer.bias is not None else None
            # Ping-pong scratch for hidden layers (no gradients); the last product is returned.
            out = None if index == last else self._scratch(slot, (x.shape[0], weight.shape[1], x.shape[2]), x)
            slot = 3 - slot
            x = (torch.bmm(weight, x, out=out) if bias is None
                 else torch.baddbmm(bias.unsqueeze(2), weight, x, out=out))
            owned = True
        return x.transpose(1, 2)

    @staticmethod
    def _replaced(out: torch.Tensor, weight: torch.Tensor, x: torch.Tensor, start: int,
                  values: torch.Tensor, *, rows_major: bool = False) -> torch.Tensor:
        """``out`` (n, h, B), or (n, B, h) if ``rows_major``, plus member i's first-layer
        columns times (values_i - x's)."""
        n, h, _ = weight.shape
        width = values.shape[-1]
        cols = weight[:, :, start:start + n * width].reshape(n, h, n, width)
        own = torch.diagonal(cols, dim1=0, dim2=2).permute(2, 0, 1)  # (n, h, w): member i's block i
        given = x[:, start:start + n * width].reshape(x.shape[0], n, width).transpose(0, 1)  # (n, B, w)
        if rows_major:
            return torch.baddbmm(out, values - given, own.transpose(1, 2))
        return torch.baddbmm(out, own, (values - given).transpose(1, 2))

    def _rows_major(self, x: torch.Tensor, *, start: int = 0) -> torch.Tensor:
        """``self.layers[start:]`` on stacked ``(n, B, in)`` input with bmm-layout weights
        -> ``(n, B, out)``; ``start > 0``: ``x`` is the output of layer ``start - 1``, a
        product made here."""
        stacked = self._stacked()
        k = 2 * sum(kind == "linear" for kind, _ in self.layers[:start])  # (weight, bias) slots used
        owned = start > 0  # x is the caller's input until the first product
        for kind, layer in self.layers[start:]:
            if kind == "act":
                x = _activate(layer, x, owned)
                continue
            weight, bias = stacked[k], stacked[k + 1]
            k += 2
            x = torch.bmm(x, weight) if bias is None else torch.baddbmm(bias, x, weight)
            owned = True
        return x

    def _per_member(self, x: torch.Tensor) -> torch.Tensor:
        """Stacked ``(n, B, in)`` -> ``(n, B, out)`` one member after another on row views
        of the stored leaves (no weight copies). ``unbind`` once per leaf: its backward
        stacks the members' gradients into the leaf's in one op."""
        rows = [leaf.unbind(0) for leaf in self.leaves]
        return torch.stack([self._member(x[j], iter([r[j] for r in rows]), start=0) for j in range(x.shape[0])])

    def _member(self, h: torch.Tensor, params: Iterator[torch.Tensor], *, start: int) -> torch.Tensor:
        """``self.layers[start:]`` of one member on ``h`` ``(B, in)`` with its parameter
        rows ``params``; ``start > 0``: ``h`` is a product made here."""
        owned = start > 0
        for kind, layer in self.layers[start:]:
            if kind == "act":
                h = _activate(layer, h, owned)
                continue
            weight = next(params)
            bias = next(params) if layer.bias is not None else None
            h = torch.mm(h, weight.t()) if bias is None else torch.addmm(bias, h, weight.t())
            owned = True
        return h

    def _shared_per_member(self, x: torch.Tensor, replace: tuple[int, torch.Tensor] | None) -> torch.Tensor:
        """``call_shared`` member by member (see PER_MEMBER_MAX_NETWORKS): each first layer
        reads the shared ``x`` with no expanded copy; ``replace``
        as a first-layer correction, ``W_j x + W_j[:, cols_j] (values_j - x[:, cols_j])``."""
        rows = [leaf.unbind(0) for leaf in self.leaves]
        outs = []
        for j in range(len(self.indices)):
            params = iter([r[j] for r in rows])
            weight = next(params)
            bias = next(params) if self.layers[0][1].bias is not None else None
            h = torch.mm(x, weight.t()) if bias is None else torch.addmm(bias, x, weight.t())
            if replace is not None:
                begin, values = replace
                cols = slice(begin + j * values.shape[-1], begin + (j + 1) * values.shape[-1])
                h = torch.addmm(h, values[j] - x[:, cols], weight[:, cols].t())
            outs.append(self._member(h, params, start=1))
        return torch.stack(outs)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "bmm" and self.leaves is not None and runs_per_member(x.shape[0], x.shape[1]):
            return self._per_member(x)
        if self.impl == "bmm" and self.leaves is not None and x.shape[1] >= FEATURE_MAJOR_MIN_BATCH:
            return self._feature_major(x.transpose(1, 2), iter(self.leaves))
        if self.impl == "bmm":
            return self._rows_major(x)
        stacked = self._stacked()
        params = dict(zip(self.names, stacked))
        buffers = {name: torch.stack([dict(m.named_buffers())[name] for m in self.modules])
                   for name in self.buffer_names}

        def one(p: dict, b: dict, xi: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(self.base, (p, b), (xi,))

        return torch.vmap(one)(params, buffers, x)


def runs_per_member(members: int, rows: int) -> bool:
    """Whether a stored-stacked batched call of ``members`` networks on ``rows`` rows
    runs member by member (see PER_MEMBER_MAX_NETWORKS) instead of as one stacked product."""
    return members < PER_MEMBER_MAX_NETWORKS and rows >= PER_MEMBER_MIN_BATCH


class ParallelModules:
    """Runs ``modules[i](inputs[i])`` for every i in the selected ``mode``."""

    def __init__(
        self,
        *,
        modules: Sequence[nn.Module],
        mode: EvalMode = "auto",
        batched_impl: BatchedImpl = "bmm",
        max_threads: int | None = None,
        cache_weights: bool = False,
        auto_max_params: int | None = None,
        store_stacked: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if batched_impl not in ("bmm", "vmap"):
            raise ValueError(f"batched_impl must be 'bmm' or 'vmap', got {batched_impl!r}")
        modules = list(modules)
        if not modules or not all(isinstance(m, nn.Module) for m in modules):
            raise TypeError("modules must be a non-empty sequence of nn.Module")
        if max_threads is not None and max_threads < 1:
            raise ValueError(f"max_threads must be >= 1, got {max_threads}")
        self.modules = modules
        self.batched_impl = batched_impl
        by_structure: dict[tuple, list[int]] = {}
        for i, m in enumerate(modules):
            by_structure.setdefault(_structure(m), []).append(i)
        self.structure_groups = list(by_structure.values())
        if mode == "auto":
            stackable = any(len(g) > 1 for g in self.structure_groups)
            largest = max(sum(p.numel() for p in m.parameters()) for m in modules)
            too_big = auto_max_params is not None and largest > auto_max_params
            mode = "batched" if stackable and not too_big else "loop"
        self.mode: str = mode
        self._max_threads = max_threads or min(len(modules), os.cpu_count() or 1)
        self._pool: ThreadPoolExecutor | None = None
        self._groups: list[_Group] = []
        self._scripted: torch.jit.ScriptModule | None = None
        # Set only when ``store_stacked`` took effect (batched bmm, one structure).
        self.stacked_leaves: list[nn.Parameter] | None = None
        if mode == "batched":
            self._groups = [_Group(g, [modules[i] for i in g], batched_impl, cache_weights) for g in self.structure_groups]
            if store_stacked and len(self._groups) == 1 and len(modules) > 1 and self._groups[0].impl == "bmm":
                self.stacked_leaves = self._groups[0].store_stacked()
        elif mode == "jit_fork":
            try:
                with quiet_torchscript():
                    self._scripted = torch.jit.script(_Forked(modules))
            except Exception as exc:  # scripting errors come in many types
                raise TypeError(f"mode 'jit_fork' needs TorchScript-scriptable modules: {exc}") from exc

    def __len__(self) -> int:
        return len(self.modules)

    def refresh(self, *, reload_params: bool = False) -> None:
        """Drop cached stacked weights; ``reload_params`` also re-reads the modules'
        Parameter objects (needed only after a Parameter was replaced)."""
        for group in self._groups:
            group.refresh(reload_params)

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if len(inputs) != len(self.modules):
            raise ValueError(f"expected {len(self.modules)} inputs, got {len(inputs)}")
        if self.mode == "loop":
            return [m(x) for m, x in zip(self.modules, inputs)]
        if self.mode == "threads":
            return self._threads(inputs)
        if self.mode == "jit_fork":
            return self._scripted(list(inputs))
        return self._batched(inputs)

    def call_stacked(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` stacked over networks ``(n, B, in)`` -> outputs stacked ``(n, B, out)``.

        In ``batched`` mode with one structure this is a single stacked computation
        with no split or re-stack; otherwise it splits, calls, and stacks."""
        if x.shape[0] != len(self.modules):
            raise ValueError(f"stacked input has {x.shape[0]} rows, expected {len(self.modules)}")
        if self.mode == "batched" and len(self._groups) == 1 and len(self.modules) > 1 \
                and not self._groups[0].failed:
            return self._groups[0](x)
        return torch.stack(self(list(x.unbind(0))))

    def call_shared(self, x: torch.Tensor, *, replace: tuple[int, torch.Tensor] | None = None) -> torch.Tensor:
        """Every network on the same input ``x`` ``(B, in)`` -> ``(n, B, out)``.

        ``replace=(start, values)``, ``values`` ``(n, B, w)``: network i sees columns
        ``start + i*w`` to ``start + (i+1)*w`` of ``x`` replaced by ``values[i]`` (how
        MADDPG's actor loss puts each agent's own action into the critic input). With
        stored stacked leaves in ``batched`` mode the first layers of all networks are
        one matrix product over ``x`` (see ``_Group.call_shared``); other modes build
        each network's input and call it."""
        n = len(self.modules)
        if self.mode == "batched" and len(self._groups) == 1 and n > 1 and self._groups[0].shares_first_layer():
            return self._groups[0].call_shared(x, replace)
        inputs = x.unsqueeze(0).expand(n, *x.shape)
        if replace is not None:
            start, values = replace
            width = values.shape[-1]
            mine = torch.zeros(n, 1, n * width, dtype=torch.bool, device=x.device)
            for i in range(n):
                mine[i, 0, i * width:(i + 1) * width] = True
            spread = values.repeat(1, 1, n)  # (n, B, n*w): block i of row i is values[i]
            block = torch.where(mine, spread, inputs[:, :, start:start + n * width])
            inputs = torch.cat([inputs[:, :, :start], block, inputs[:, :, start + n * width:]], -1)
        return self.call_stacked(inputs)

    def _threads(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._max_threads, thread_name_prefix="agents")
        grad = torch.is_grad_enabled()  # grad mode is thread-local: carry the caller's

        def run(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
            with torch.set_grad_enabled(grad):
                return m(x)

        futures = [self._pool.submit(run, m, x) for m, x in zip(self.modules, inputs)]
        return [f.result() for f in futures]

    def _batched(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        outs: list[torch.Tensor | None] = [None] * len(self.modules)
        for group in self._groups:
            idx = group.indices
            if len(idx) == 1 or group.failed:
                for i in idx:
                    outs[i] = self.modules[i](inputs[i])
                continue
            xs = [inputs[i] for i in idx]
            first = xs[0]
            if all(x is first for x in xs):
                stacked = first.unsqueeze(0).expand(len(idx), *first.shape)
            elif all(x.shape == first.shape for x in xs):
                stacked = torch.stack(xs)
            else:  # ragged batch sizes cannot be stacked
                for j, i in enumerate(idx):
                    outs[i] = group.call_one(j, inputs[i])
                continue
            squeeze = stacked.dim() == 2  # unbatched per-agent inputs
            if squeeze:
                stacked = stacked.unsqueeze(1)
            try:
                result = group(stacked)
            except RuntimeError as exc:
                if group.impl != "vmap":
                    raise
                warnings.warn(f"vmap cannot batch {type(group.modules[0]).__name__}; "
                              f"falling back to a loop for agents {idx}: {exc}", stacklevel=2)
                group.failed = True
                for i in idx:
                    outs[i] = self.modules[i](inputs[i])
                continue
            if squeeze:
                result = result.squeeze(1)
            for j, i in enumerate(idx):
                outs[i] = result[j]
        return outs  # type: ignore[return-value]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
