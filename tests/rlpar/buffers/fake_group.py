"""A fake RpcGroup for one-process tests of hosted and sharded buffers."""

import torch

from rlpar.errors import PeerUnavailable


class FakeGroup:
    """One member's view of a group whose services live in ``registry``; calls to a
    member in ``dead`` fail as an RPC to a killed process does."""

    def __init__(self, registry, members, me, dead):
        self.registry, self.members, self.current_member, self.dead = registry, members, me, dead

    def register(self, key, fn, *, replace=False):
        if key in self.registry and not replace:
            raise ValueError(f"key {key!r} is already registered")
        self.registry[key] = (self.current_member, fn)

    def call_async(self, key, *args, timeout=None, **kwargs):
        fut = torch.futures.Future()
        host, fn = self.registry[key]
        if host in self.dead:
            fut.set_exception(PeerUnavailable(f"peer {host!r} is unavailable"))
            return fut
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    def call(self, key, *args, timeout=None, **kwargs):
        return self.call_async(key, *args, timeout=timeout, **kwargs).wait()
