"""The run secret: what every rank of one run shares and no other process should know.

torch's c10d store and TensorPipe have no authentication, so any process that reaches
a rank's ports could read the store, join the world and run code in a rank. Every
rank of a run therefore holds a secret, from ``$RLPAR_RUN_SECRET``, and the World uses
it (:mod:`rlpar.distributed.sealed`) to hide and authenticate its store entries and to
authenticate every pickled RPC message. :func:`rlpar.distributed.launch` makes a fresh
one per launch; under torchrun the user sets the same value on every node.

It travels only in the environment: never on a command line (``ps`` shows those to
every user), in a file, in the store, or in a log. The environment of a process is
readable by its own user and root (``/proc/<pid>/environ``), so the secret keeps out
other users, not them (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets

SECRET_ENV = "RLPAR_RUN_SECRET"
# Set to 1 to run a torchrun world without a secret (the store and RPC open to every
# process that reaches their ports, as before the secret existed); warned about.
NO_SECRET_ENV = "RLPAR_ALLOW_NO_SECRET"
RECIPE = f"export {SECRET_ENV}=$(python -c 'import secrets; print(secrets.token_hex(16))')"

_MIN_HEX, _MAX_HEX = 32, 128  # 128 to 512 bits
_HEX = re.compile(r"[0-9a-fA-F]+")
log = logging.getLogger(__name__)


def new_secret() -> str:
    """A fresh secret: 128 random bits as 32 hex digits."""
    return secrets.token_hex(_MIN_HEX // 2)


def check_secret(value: object, *, origin: str = SECRET_ENV) -> str:
    """``value`` if it is a valid secret, else ValueError. The error never quotes the
    value: it may be a real secret with a typo, and errors end up in logs."""
    if not isinstance(value, str):
        raise ValueError(f"{origin} must be a string of hex digits, got a {type(value).__name__}")
    if not _HEX.fullmatch(value):
        raise ValueError(f"{origin} must be hex digits only (0-9, a-f); the value set has "
                         f"{'no characters' if not value else 'others'}. Make one with: {RECIPE}")
    if not _MIN_HEX <= len(value) <= _MAX_HEX:
        raise ValueError(f"{origin} must be {_MIN_HEX} to {_MAX_HEX} hex digits (128 to 512 bits); "
                         f"the value set has {len(value)}. Make one with: {RECIPE}")
    # A hand-typed value (all zeros, "abab...") is no secret. 32 random hex digits
    # show fewer than 8 distinct digits with a chance of about 1 in 25 million.
    if len(set(value.lower())) < 8:
        raise ValueError(f"{origin} uses fewer than 8 distinct hex digits: it does not look "
                         f"random. Make one with: {RECIPE}")
    return value


def secret_from_env(environ: dict[str, str] | None = None) -> str | None:
    """The run's secret from ``$RLPAR_RUN_SECRET`` (checked); None only when it is unset
    and ``$RLPAR_ALLOW_NO_SECRET=1`` (with a warning); else ValueError with the
    command that makes one."""
    environ = os.environ if environ is None else environ
    value = environ.get(SECRET_ENV)
    if value is not None:
        return check_secret(value)
    if environ.get(NO_SECRET_ENV) == "1":
        log.warning("%s=1 and no %s: the store and RPC of this world are open to every process "
                    "that reaches their ports (it can join and run code in the ranks)",
                    NO_SECRET_ENV, SECRET_ENV)
        return None
    raise ValueError(
        f"{SECRET_ENV} is not set. Every rank of a world launched by torchrun (or by hand) "
        f"needs the same secret in its environment, so that other processes that reach the "
        f"world's ports cannot join it. On every node, before torchrun: {RECIPE} "
        f"(the same value on every node; {NO_SECRET_ENV}=1 runs without one, unprotected)")


def derive(secret: str, purpose: str) -> bytes:
    """A 32-byte key for one ``purpose`` (store names, store values, RPC), so that no
    two uses share a key and none reveals the secret."""
    return hmac.digest(bytes.fromhex(secret), b"rlpar/" + purpose.encode(), hashlib.sha256)
