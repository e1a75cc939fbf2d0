"""A process without the run secret attacking a running Ape-X job (issue 30.7), the two
ways the issue describes. Run as ``python tests/experiments/intruder.py STORE_PORT
RPC_PORT``; prints one JSON line: what each attempt got.

- ``join``: what worked before the secret: open the job's store, read the learner's
  name and RPC address by their fixed key names, and join as an RPC member (the
  agent rlpar uses for a rejoining rank).
- ``fake_eval`` / ``run_code``: skip the store altogether: point an RPC agent of our
  own at the learner's TensorPipe port (found with ``ss -ltn``) and call the
  coordinator's evaluation service with a fake return, or ``os.getpid``.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

from experiments.runtime.messages import EvalResult
from rlpar.distributed.rendezvous import rejoin_backend, rpc_init_method
from rlpar.distributed.rpc_dispatch import _dispatch, _sid

TIMEOUT = 5.0


class PointedStore(dist.Store):
    """Answers a TensorPipe agent's lookups with the learner's name (rank 0's default)
    and the address of the port found."""

    def __init__(self, rpc_port: int) -> None:
        super().__init__()
        self.address = f"uv://127.0.0.1:{rpc_port}".encode()
        self.values: dict[str, bytes] = {}

    def set(self, key, value):
        self.values[key] = value.encode() if isinstance(value, str) else bytes(value)

    def get(self, key):
        if key.endswith("names/0"):
            return b"rank0"
        if key.endswith("addrs/rank0"):
            return self.address
        return self.values[key]

    def add(self, key, amount):
        return amount

    def check(self, keys):
        return True

    def wait(self, keys, timeout=None):
        pass

    def compare_set(self, key, expected, desired):
        return desired

    def delete_key(self, key):
        return True

    def num_keys(self):
        return len(self.values)

    def set_timeout(self, timeout):
        pass


def _agent(store: dist.Store, timeout: float = TIMEOUT) -> None:
    options = rpc.TensorPipeRpcBackendOptions(init_method=rpc_init_method(store, 1, 2),
                                              rpc_timeout=timeout, _transports=["uv"])
    rpc.init_rpc("intruder", rank=1, world_size=2, rpc_backend_options=options,
                 backend=rejoin_backend())


def _outcome(call) -> str:
    try:
        return f"ok: {call()!r}"
    except Exception as exc:  # what the victim said, or why we could not ask
        return f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def main(store_port: int, rpc_port: int) -> dict:
    os.environ["TP_SOCKET_IFNAME"] = "lo"
    out = {}
    _agent(PointedStore(rpc_port))
    fake = EvalResult(env_steps=1, version=0, returns=[1e9], seed=0, policy={"w": torch.zeros(1)})
    out["fake_eval"] = _outcome(lambda: rpc.rpc_sync(
        "rank0", _dispatch, args=(_sid("apex", "coord/eval"), fake), timeout=TIMEOUT))
    out["run_code"] = _outcome(lambda: rpc.rpc_sync("rank0", os.getpid, timeout=TIMEOUT))
    rpc.shutdown(graceful=False)

    store = dist.TCPStore("127.0.0.1", store_port, 1, False, timedelta(seconds=TIMEOUT))
    fixed = {"world name": ("rlpar/", "world/name/0"), "eval service": ("rlpar/", "svc/apex/s/coord/eval"),
             "rpc name": ("rpc_prefix_0", "names/0"), "rpc address": ("rpc_prefix_0", "addrs/rank0")}
    out["found"] = sorted(what for what, (prefix, key) in fixed.items()
                          if dist.PrefixStore(prefix, store).check([key]))
    # The agent would wait for rank 0's name under torch's fixed key: it never comes.
    out["join"] = _outcome(lambda: _agent(store, timeout=2.0))
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))), flush=True)
    os._exit(0)  # skip teardown of a half-made RPC agent
