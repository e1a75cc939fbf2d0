"""Compiled kernels behind ``stream_copy`` and the frame check (imported on first use).

Module-level, so numba caches them on disk (:mod:`rlpar.buffers.jit`): compiling the
copy took about 0.9 s, paid by every process on its first frame-sized insert.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from rlpar.buffers.jit import jit

_VECTOR = 16  # bytes per streaming store (SSE2 width: every x86-64 has it)


def _emit_copy(builder, dst, src, n):
    """IR for ``dst[:n] = src[:n]`` with streaming stores. Head and tail (up to the
    first 16-byte aligned destination address, which aligned streaming stores need,
    and the last partial vector) are plain copies."""
    i8, i64 = ir.IntType(8), ir.IntType(64)
    i8p = i8.as_pointer()
    vec = ir.VectorType(i64, _VECTOR // 8)
    size_t = dst.type

    def plain(offset, count):
        cgutils.raw_memcpy(
            builder,
            builder.inttoptr(builder.add(dst, offset), i8p),
            builder.inttoptr(builder.add(src, offset), i8p),
            count,
            1,
        )

    head = builder.and_(builder.sub(ir.Constant(size_t, 0), dst), ir.Constant(size_t, _VECTOR - 1))
    head = builder.select(builder.icmp_unsigned("<", n, head), n, head)
    plain(ir.Constant(size_t, 0), head)
    count = builder.udiv(builder.sub(n, head), ir.Constant(size_t, _VECTOR))
    vec_ptr = vec.as_pointer()
    d = builder.inttoptr(builder.add(dst, head), vec_ptr)
    s = builder.inttoptr(builder.add(src, head), vec_ptr)
    nontemporal = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
    with cgutils.for_range(builder, count) as loop:
        value = builder.load(builder.gep(s, [loop.index]), align=1)
        store = builder.store(value, builder.gep(d, [loop.index]), align=_VECTOR)
        store.set_metadata("nontemporal", nontemporal)
    done = builder.add(head, builder.mul(count, ir.Constant(size_t, _VECTOR)))
    plain(done, builder.sub(n, done))


@intrinsic
def _copy(typingctx, dst_addr, src_addr, nbytes):
    sig = types.void(types.uintp, types.uintp, types.intp)

    def codegen(context, builder, signature, args):
        _emit_copy(builder, *args)
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


@jit
def stream_copy_bytes(dst, src):
    """``dst[:] = src`` for equal-length contiguous uint8 arrays, streaming stores."""
    _copy(dst.ctypes.data, src.ctypes.data, dst.shape[0])
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


@jit
def rows_differ(a, b, out):
    """``out[r] = a[r] != b[r]`` (any byte) for equal-shape 2-D uint8 arrays with
    contiguous rows. libc's memcmp: a byte loop over numba's strided rows did not
    vectorize (4x slower)."""
    for r in range(a.shape[0]):
        out[r] = _memcmp(a[r].ctypes.data, b[r].ctypes.data, a.shape[1]) != 0
