"""Copies into replay storage with non-temporal (streaming) stores.

A row written into a replay ring is read back only when some later sample happens
to pick it, long after it left every cache. An ordinary store first reads the
destination line into the cache (read-for-ownership) and then evicts something
useful to make room; a non-temporal store writes the line straight to memory. For
frame-sized rows (a chunk of 64 Atari transitions is 3.6 MB) that removes a third
of the memory traffic of an insert: about 1.8x more transitions/s on the 2-core
benchmark machine (``python -m experiments.bench.replay --cases atari``).

Small copies keep plain numpy assignment: below ``STREAM_MIN_BYTES`` the call
overhead and the cache bypass (a small batch may well be read soon) cost more
than they save. Compiled lazily with numba, like the tree kernels.
"""

from __future__ import annotations

import numpy as np

STREAM_MIN_BYTES = 1 << 18
_VECTOR = 16  # bytes per streaming store (SSE2 width: every x86-64 has it)

_kernel = None


def stream_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src``; large C-contiguous same-dtype copies bypass the cache."""
    if (
        dst.nbytes < STREAM_MIN_BYTES
        or dst.dtype != src.dtype
        or dst.shape != src.shape
        or not dst.flags.c_contiguous
        or not src.flags.c_contiguous
        or not dst.flags.writeable
    ):
        dst[...] = src
        return
    global _kernel
    if _kernel is None:
        _kernel = _compile()
    _kernel(dst.reshape(-1).view(np.uint8), src.reshape(-1).view(np.uint8))


def _compile():
    """Build the numba kernel (imports numba and llvmlite only when first needed)."""
    import numba
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def _copy(typingctx, dst_addr, src_addr, nbytes):
        sig = types.void(types.uintp, types.uintp, types.intp)

        def codegen(context, builder, signature, args):
            dst, src, n = args
            i8p = ir.IntType(8).as_pointer()
            vec_ptr = ir.VectorType(ir.IntType(64), _VECTOR // 8).as_pointer()
            size_t = dst.type
            # Head: plain copy up to the first 16-byte aligned destination address
            # (aligned streaming stores fault on unaligned addresses).
            mask = ir.Constant(size_t, _VECTOR - 1)
            head = builder.and_(builder.sub(ir.Constant(size_t, 0), dst), mask)
            head = builder.select(builder.icmp_unsigned("<", n, head), n, head)
            cgutils.raw_memcpy(
                builder, builder.inttoptr(dst, i8p), builder.inttoptr(src, i8p), head, 1
            )
            body_dst = builder.add(dst, head)
            body_src = builder.add(src, head)
            rest = builder.sub(n, head)
            count = builder.udiv(rest, ir.Constant(size_t, _VECTOR))
            d = builder.inttoptr(body_dst, vec_ptr)
            s = builder.inttoptr(body_src, vec_ptr)
            nontemporal = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
            with cgutils.for_range(builder, count) as loop:
                value = builder.load(builder.gep(s, [loop.index]), align=1)
                store = builder.store(value, builder.gep(d, [loop.index]), align=_VECTOR)
                store.set_metadata("nontemporal", nontemporal)
            done = builder.mul(count, ir.Constant(size_t, _VECTOR))
            tail = builder.sub(rest, done)
            cgutils.raw_memcpy(
                builder,
                builder.inttoptr(builder.add(body_dst, done), i8p),
                builder.inttoptr(builder.add(body_src, done), i8p),
                tail,
                1,
            )
            # Streaming stores are weakly ordered: fence before anyone reads the rows.
            builder.fence("seq_cst")
            return context.get_dummy_value()

        return sig, codegen

    @numba.njit(nogil=True)
    def kernel(dst, src):
        _copy(dst.ctypes.data, src.ctypes.data, dst.shape[0])

    return kernel
