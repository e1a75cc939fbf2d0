"""What the run secret guards: the world's store entries and its pickled RPC messages.

**Store.** A prefix of the secret on every key would not hide anything: TCPStore
answers ``list_keys()`` to any client, which would read the prefix off the names.
:class:`SealedStore` therefore stores every key under a keyed hash of its name and
every value sealed: encrypted and authenticated with keys derived from the secret
(HMAC-SHA256 as a synthetic IV, as in SIV mode, RFC 5297, and SHAKE-256 of key and IV
as the keystream; only the standard library). A client without the secret sees
opaque names and bytes; an entry it writes fails authentication where a rank reads
it. Sealing is deterministic per (name, value), which keeps ``compare_set`` exact.
Counters (``add``) stay plain integers: the store does the arithmetic, so no secret
can be in them; what they give a stranger is a way to break a barrier, not to join.
Every key of the world goes through it: TensorPipe's and gloo's rendezvous (they are
handed this store), the World's names and groups, RpcGroup's services and barriers.

**RPC.** TensorPipe runs whatever a connection to a rank's port sends, store or not:
a process that finds the port (``ss -ltn``) can make its own agent and call any
picklable function in a rank. :func:`seal_rpc` makes torch's RPC pickler append an
HMAC-SHA256 of every pickled payload (requests, replies, exceptions) and refuse one
without a valid tag before unpickling it: the caller gets an error, the rank goes on.
Tensors travel beside the pickle and are not covered: they are data, not code, and
swapping them needs a man in the middle (docs/security.md, for what stays open).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading

import torch.distributed as dist

from rlpar.distributed.secret import derive

_IV = 16  # bytes of synthetic IV in front of every sealed value
_TAG = 32  # bytes of HMAC-SHA256 behind every pickled RPC payload
_COUNTER = re.compile(rb"-?\d{1,20}")  # what TCPStore's add() leaves as a value
# Every SealedStore ever made, kept for the life of the process: C++ (a PrefixStore,
# TensorPipe, gloo) holds only the C++ half of a Python store, and once the Python
# object is collected each call through it fails ("pure virtual function").
_kept: list[SealedStore] = []


class ForgedEntry(RuntimeError):
    """A store entry that this run's secret did not seal."""


def _bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class SealedStore(dist.Store):
    """``inner`` with every key hashed and every value sealed under ``secret`` (None
    only with ``_keys``: :meth:`clone` hands over the derived keys, not the secret).

    Only the operations torch's RPC, gloo and rlpar use; C++ callers (TensorPipe,
    gloo) reach them through torch's Python-store trampoline."""

    def __init__(self, inner: dist.Store, secret: str | None, *, _keys: tuple | None = None) -> None:
        super().__init__()
        self._inner = inner
        self._keys = _keys or tuple(derive(secret, use) for use in ("store names", "store mac",
                                                                   "store encryption"))
        self._names, self._mac, self._enc = self._keys
        super().set_timeout(inner.timeout)
        _kept.append(self)

    def _name(self, key: str) -> str:
        return hmac.digest(self._names, key.encode(), hashlib.sha256).hex()[:32]

    def _keystream(self, iv: bytes, n: int) -> int:
        return int.from_bytes(hashlib.shake_256(self._enc + iv).digest(n), "big")

    def _iv(self, name: str, plain: bytes) -> bytes:
        # The name is in the MAC: a sealed value moved to another key does not open.
        return hmac.digest(self._mac, name.encode() + b"\0" + plain, hashlib.sha256)[:_IV]

    def _seal(self, name: str, value) -> bytes:
        plain = _bytes(value)
        iv = self._iv(name, plain)
        cipher = int.from_bytes(plain, "big") ^ self._keystream(iv, len(plain))
        return iv + cipher.to_bytes(len(plain), "big")

    def _open(self, name: str, blob) -> bytes:
        blob = _bytes(blob)
        if _COUNTER.fullmatch(blob):
            return blob  # an add() counter (a sealed value is never all digits)
        iv, cipher = blob[:_IV], blob[_IV:]
        n = len(cipher)
        plain = (int.from_bytes(cipher, "big") ^ self._keystream(iv, n)).to_bytes(n, "big")
        if len(iv) != _IV or not hmac.compare_digest(iv, self._iv(name, plain)):
            raise ForgedEntry("a store entry of this world was not written with its run secret "
                              "(another process wrote it, or a rank has a different RLPAR_RUN_SECRET)")
        return plain

    def set(self, key, value) -> None:
        name = self._name(key)
        self._inner.set(name, self._seal(name, value))

    def get(self, key) -> bytes:
        name = self._name(key)
        return self._open(name, self._inner.get(name))

    def add(self, key, amount) -> int:
        return self._inner.add(self._name(key), amount)

    def compare_set(self, key, expected, desired) -> bytes:
        name = self._name(key)
        expected = _bytes(expected)
        # Empty means "absent" to the store; sealing is deterministic, so a sealed
        # expected value equals the stored one exactly when the plain values are equal.
        sealed_expected = self._seal(name, expected) if expected else b""
        return self._open(name, self._inner.compare_set(name, sealed_expected, self._seal(name, desired)))

    def delete_key(self, key) -> bool:
        return self._inner.delete_key(self._name(key))

    def check(self, keys) -> bool:
        return self._inner.check([self._name(k) for k in keys])

    def wait(self, keys, timeout=None) -> None:
        names = [self._name(k) for k in keys]
        if timeout is None:
            self._inner.wait(names)
        else:
            self._inner.wait(names, timeout)

    def num_keys(self) -> int:
        return self._inner.num_keys()

    def set_timeout(self, timeout) -> None:
        super().set_timeout(timeout)
        self._inner.set_timeout(timeout)

    def clone(self) -> SealedStore:
        # A second connection to the same store (torch's process groups may ask).
        return SealedStore(self._inner.clone(), None, _keys=self._keys)

    # torch's trampoline looks these two up by their C++ names (a PrefixStore over
    # this store calls them so); the rest by their Python names.
    deleteKey = delete_key
    getNumKeys = num_keys


# ---------------------------------------------------------------------- RPC

_rpc_key: bytes | None = None
_installed = False
_install_lock = threading.Lock()


def seal_rpc(secret: str | None) -> None:
    """Tag every pickled RPC payload of this process with ``secret`` and accept only
    payloads tagged with it; None: plain torch RPC (no secret, or no World)."""
    global _rpc_key
    _install()
    _rpc_key = None if secret is None else derive(secret, "rpc")


def _install() -> None:
    # Wrap the methods of torch's one pickler instance: api.py, the C++ handler (through
    # internal.serialize/deserialize, which look the instance up per call) and RRef
    # fetches all use it, so nothing pickled by RPC escapes the tag.
    global _installed
    from torch.distributed.rpc import internal

    with _install_lock:
        if _installed:
            return
        pickler = internal._internal_rpc_pickler
        serialize, deserialize = pickler.serialize, pickler.deserialize

        def sealed_serialize(obj):
            data, tensors = serialize(obj)
            key = _rpc_key
            return (data if key is None else data + hmac.digest(key, data, hashlib.sha256)), tensors

        def sealed_deserialize(binary_data, tensor_table):
            key = _rpc_key
            if key is not None:
                data, tag = binary_data[:-_TAG], binary_data[-_TAG:]
                if len(binary_data) < _TAG or not hmac.compare_digest(
                        bytes(tag), hmac.digest(key, data, hashlib.sha256)):
                    raise PermissionError("rlpar refused an RPC message that is not signed with "
                                          "this run's secret (RLPAR_RUN_SECRET)")
                binary_data = data
            return deserialize(binary_data, tensor_table)

        pickler.serialize, pickler.deserialize = sealed_serialize, sealed_deserialize
        _installed = True
