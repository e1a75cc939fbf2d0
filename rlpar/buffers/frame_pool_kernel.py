"""Compiled kernels of :mod:`rlpar.buffers.frame_pool` (imported on first use).

A frame is found again by its hash: the table files slots in groups of ``WAYS``
entries (one cache line), a candidate's stored hash and then its bytes are
compared, so a collision costs a duplicate frame, never a wrong one. Groups, not
single entries: two frames that are looked up turn about (two envs' newest frames)
and share one entry would push each other out at every row, each stored again
every time. A full group replaces the entry filed longest ago: the frames still to be
looked up are the newest (the rows to come of each env), most live frames are
looked up no more. Module-level, so numba caches them on disk (:mod:`rlpar.buffers.jit`).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from rlpar.buffers.jit import jit
from rlpar.buffers.stream_kernel import _memcmp

_MUL = 0x9E3779B97F4A7C15  # 2**64 / golden ratio, odd
# Per-lane keys of the first 32-byte block and what each block adds to them: a block's
# contribution depends on where it is (frames whose 32-byte blocks trade places, a
# sprite moved by 32 bytes, hash apart).
_KEYS = (0x6A09E667F3BCC909, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1)
_KEY_STEP = 0x510E527FADE682D1
WAYS = 4  # table entries per group
SLOT_BITS = 40  # a table entry: the slot, and above it when it was filed (24 bits)
_SLOT = (1 << SLOT_BITS) - 1
_STAMP = (1 << 24) - 1


@intrinsic
def _hash(typingctx, addr, nbytes):
    """A 64-bit hash of ``nbytes`` bytes at ``addr``: 32-byte blocks (unaligned vector
    loads) xored with a key that moves on with each block, each 64-bit word's halves
    multiplied (one ``vpmuludq`` per four words) and summed with the word itself into
    two accumulators, as xxHash3 accumulates; the tail byte by byte; murmur3's
    finalizer. About 4x the speed of a multiply chain per word."""
    sig = types.uint64(types.uintp, types.intp)

    def codegen(context, builder, signature, args):
        a, n = args
        i8, i64 = ir.IntType(8), ir.IntType(64)
        vec = ir.VectorType(i64, 4)
        mul = ir.Constant(i64, _MUL)

        def splat(value):
            return ir.Constant(vec, [ir.Constant(i64, value)] * 4)

        def mix(h, w):
            h = builder.mul(builder.xor(h, w), mul)
            return builder.xor(h, builder.lshr(h, ir.Constant(i64, 29)))

        key = cgutils.alloca_once_value(builder, ir.Constant(vec, [ir.Constant(i64, k) for k in _KEYS]))
        accs = [cgutils.alloca_once_value(builder, splat(seed)) for seed in (1, 2)]
        step = ir.Constant(n.type, 32 * len(accs))
        blocks = builder.udiv(n, step)
        swap = ir.Constant(ir.VectorType(ir.IntType(32), 4), [ir.Constant(ir.IntType(32), i) for i in (1, 0, 3, 2)])
        with cgutils.for_range(builder, blocks) as loop:
            base = builder.add(a, builder.mul(loop.index, step))
            k = builder.load(key)
            for j, acc in enumerate(accs):
                ptr = builder.inttoptr(builder.add(base, ir.Constant(a.type, 32 * j)), vec.as_pointer())
                v = builder.load(ptr, align=1)
                x = builder.xor(v, k)
                # Both factors below 2**32: the backend multiplies with vpmuludq.
                prod = builder.mul(builder.and_(x, splat(0xFFFFFFFF)), builder.lshr(x, splat(32)))
                data = builder.shuffle_vector(v, v, swap)
                builder.store(builder.add(builder.load(acc), builder.add(prod, data)), acc)
                k = builder.add(k, splat(_KEY_STEP))
            builder.store(k, key)
        tail = cgutils.alloca_once_value(builder, n)  # intp: i64 on every 64-bit target
        done = builder.mul(blocks, step)
        with cgutils.for_range(builder, builder.sub(n, done)) as loop:  # the tail, byte by byte
            ptr = builder.inttoptr(builder.add(a, builder.add(done, loop.index)), i8.as_pointer())
            builder.store(mix(builder.load(tail), builder.zext(builder.load(ptr), i64)), tail)
        h = builder.load(tail)
        for acc in accs:
            v = builder.load(acc)
            for lane in range(4):
                h = mix(h, builder.extract_element(v, ir.Constant(ir.IntType(32), lane)))
        for shift, factor in ((33, 0xFF51AFD7ED558CCD), (33, 0xC4CEB9FE1A85EC53)):
            h = builder.mul(builder.xor(h, builder.lshr(h, ir.Constant(i64, shift))), ir.Constant(i64, factor))
        return builder.xor(h, builder.lshr(h, ir.Constant(i64, 33)))

    return sig, codegen


@intrinsic
def _memcpy(typingctx, dst_addr, src_addr, nbytes):
    """A plain copy, not a streaming one: the next rows of the frame's env compare
    against it (memcmp) within a few dozen rows, from the cache."""
    sig = types.void(types.uintp, types.uintp, types.intp)

    def codegen(context, builder, signature, args):
        dst, src, n = args
        i8p = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(dst, i8p), builder.inttoptr(src, i8p), n, 1)
        return context.get_dummy_value()

    return sig, codegen


@jit
def _release(slot, refcount, free, state):
    refcount[slot] -= 1
    if refcount[slot] == 0:
        free[state[1]] = slot
        state[1] += 1


@jit
def _intern(addr, frame_bytes, frames, refcount, hashes, free, table, state):
    """The slot holding the frame at ``addr``, with one more reference: an equal live
    frame if the table points at one, else a new slot (the most recently freed one,
    so the pages in use stay few), filed in the table."""
    h = _hash(addr, frame_bytes)
    group_mask = (table.shape[0] - 1) & ~(WAYS - 1)
    group = h & group_mask
    now = state[2] & _STAMP
    victim = -1
    oldest = -1
    for i in range(WAYS):
        entry = table[group + i]
        slot = entry & _SLOT
        if entry < 0 or refcount[slot] == 0 or (hashes[slot] & group_mask) != group:
            if oldest <= _STAMP:  # the first entry for no live frame of this group: take it
                victim = i
                oldest = _STAMP + 1
        elif hashes[slot] == h and _memcmp(frames[slot].ctypes.data, addr, frame_bytes) == 0:
            refcount[slot] += 1
            return slot
        else:
            age = (now - (entry >> SLOT_BITS)) & _STAMP
            if age > oldest:
                victim = i
                oldest = age
    if state[1] > 0:
        state[1] -= 1
        slot = free[state[1]]
    else:
        slot = state[0]
        state[0] += 1
    _memcpy(frames[slot].ctypes.data, addr, frame_bytes)
    hashes[slot] = h
    refcount[slot] = 1
    table[group + victim] = slot | (now << SLOT_BITS)
    state[2] += 1
    return slot


@jit
def intern_rows(refs, first, obs, nxt, frame_bytes, shift, steps, frames, refcount, hashes, free, table, state):
    """Transition ``r`` (rows of ``obs``/``nxt``: ``k`` frames of ``frame_bytes``
    each) into row ``(first + r) % len(refs)`` of ``refs``: the slots of obs's ``k``
    frames, then of nxt's newest ``t``, for the largest ``t <= shift`` with
    ``nxt[:k-t] == obs[t:]`` (``steps[r] = t``; slots past ``k + t`` are -1). The
    row's old references are released first. Returns the first row that fits no
    ``t`` (rows before it are written) or -1."""
    rows = refs.shape[0]
    obs_bytes = obs.shape[1]
    k = obs_bytes // frame_bytes
    for r in range(obs.shape[0]):
        o = obs[r].ctypes.data
        x = nxt[r].ctypes.data
        t = shift
        while t > 0 and _memcmp(o + t * frame_bytes, x, obs_bytes - t * frame_bytes) != 0:
            t -= 1
        if t == 0:
            return r
        row = refs[(first + r) % rows]
        for j in range(row.shape[0]):
            if row[j] >= 0:
                _release(row[j], refcount, free, state)
            row[j] = -1
        for j in range(k):
            row[j] = _intern(o + j * frame_bytes, frame_bytes, frames, refcount, hashes, free, table, state)
        for j in range(t):
            row[k + j] = _intern(x + (k - t + j) * frame_bytes, frame_bytes, frames, refcount, hashes, free,
                                 table, state)
        steps[r] = t
    return -1


@jit
def intern_stored(refs, first, stored, frame_bytes, k, steps, frames, refcount, hashes, free, table, state):
    """Rows of frames laid out as :class:`SharedFrames` gathers them (``k + shift``
    frames, the last ``shift - steps[r]`` unused) into rows ``first + r`` of ``refs``,
    which hold no references (all -1): a state saved before frames were pooled."""
    rows = refs.shape[0]
    for r in range(stored.shape[0]):
        row = refs[(first + r) % rows]
        base = stored[r].ctypes.data
        for j in range(k + steps[r]):
            row[j] = _intern(base + j * frame_bytes, frame_bytes, frames, refcount, hashes, free, table, state)


@jit
def file_frames(frames, refcount, hashes, table, high):
    """Hash every referenced slot below ``high`` into ``hashes`` and the table (a
    pool rebuilt from a saved state)."""
    frame_bytes = frames.shape[1]
    for slot in range(high):
        if refcount[slot] > 0:
            h = _hash(frames[slot].ctypes.data, frame_bytes)
            hashes[slot] = h
            group = h & (table.shape[0] - 1) & ~(WAYS - 1)
            for i in range(WAYS):  # the first free entry, else the group's last
                if table[group + i] < 0 or i == WAYS - 1:
                    table[group + i] = slot
                    break
