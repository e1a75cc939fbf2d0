"""Compiled kernels behind ``stream_copy`` and frame sharing (imported on first use).

Module-level, so numba caches them on disk (``tree_kernels._jit``): compiling the
copy took about 0.9 s, paid by every process on its first frame-sized insert.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from rlpar.buffers.tree_kernels import _jit

_VECTOR = 16  # bytes per streaming store (SSE2 width: every x86-64 has it)


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
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _fence(typingctx):
    """Streaming stores are weakly ordered: every kernel ends with a fence, before
    anyone reads the rows (once per kernel: a fence per row stalls on each row's
    stores draining)."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@_jit
def stream_copy_bytes(dst, src):
    """``dst[:] = src`` for equal-length contiguous uint8 arrays, streaming stores."""
    _copy(dst.ctypes.data, src.ctypes.data, dst.shape[0])
    _fence()


@_jit
def stream_copy_rows(dst, src):
    """``dst[:] = src`` for equal-shape 2-D uint8 arrays whose rows are contiguous
    (the rows themselves may be strided), streaming stores."""
    for r in range(dst.shape[0]):
        _copy(dst[r].ctypes.data, src[r].ctypes.data, dst.shape[1])
    _fence()


@_jit
def stream_copy_joined_rows(dst, a, b):
    """``dst[r] = a[r] + b[r]`` (bytes joined) for 2-D uint8 arrays with contiguous
    rows, streaming stores. One pass per row: writing the a-parts of all rows and
    then the b-parts would leave each row boundary's cache line half-written twice
    (rows need not be line-aligned), which streaming stores turn into slow
    partial-line writes."""
    n = a.shape[1]
    for r in range(dst.shape[0]):
        row = dst[r]
        _copy(row.ctypes.data, a[r].ctypes.data, n)
        _copy(row[n:].ctypes.data, b[r].ctypes.data, b.shape[1])
    _fence()


@intrinsic
def _memcmp(typingctx, a_addr, b_addr, nbytes):
    sig = types.intc(types.uintp, types.uintp, types.intp)

    def codegen(context, builder, signature, args):
        a, b, n = args
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.IntType(32), [i8p, i8p, n.type])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "memcmp")
        return builder.call(fn, [builder.inttoptr(a, i8p), builder.inttoptr(b, i8p), n])

    return sig, codegen


@_jit
def rows_differ(a, b, out):
    """``out[r] = a[r] != b[r]`` (any byte) for equal-shape 2-D uint8 arrays with
    contiguous rows. libc's memcmp: a byte loop over numba's strided rows did not
    vectorize (4x slower)."""
    for r in range(a.shape[0]):
        out[r] = _memcmp(a[r].ctypes.data, b[r].ctypes.data, a.shape[1]) != 0
