"""Atomic checkpoints of state dicts, loaded with ``torch.load(weights_only=True)``.

A checkpoint is ``<directory>/ckpt-<step:012d>.pt``: written to a temporary file in
the same directory, flushed and fsynced, renamed over its final name and the
directory fsynced, so a crash at any point leaves either the old set of checkpoints
or the new one, never a half file under a checkpoint's name. The newest ``keep``
are kept.

Loading never unpickles code: ``weights_only=True`` admits tensors, Python scalars,
strings, bytes and containers, but not numpy arrays. Numpy arrays (and numpy
scalars) are therefore saved as a byte tensor plus dtype and shape, and come back
as numpy arrays sharing the loaded tensor's memory (no copy either way). Anything
else a weights-only load would refuse is refused at save time, naming where it is
in the state, not discovered when a job tries to resume.

Every checkpoint carries a header (format version, ``kind``, ``step``, creation
time, torch version, ``meta``) so that a loader refuses another job's checkpoint,
or one saved for another layout, with :class:`~rlpar.errors.CheckpointMismatch`.
What a loaded state holds is checked by the object it is loaded into (its
``load_state_dict``, with :mod:`rlpar.state`): :class:`~rlpar.errors.StateError`.

A checkpoint may have **parts**, written by other processes for the same step (e.g.
each replay shard its own): ``ckpt-<step:012d>.<part>.pt``, each atomic, with its own
header. A checkpoint is *complete* when its main file and every part the loader
needs exist; :func:`load_checkpoint` (``parts=``) skips incomplete ones, logging why,
and refuses parts of another layout (names it does not expect) with
CheckpointMismatch. Write the parts first and the main file last, so that a crash
in between leaves only an incomplete checkpoint that a loader skips.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import socket
import threading
import time
import zipfile
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlpar.errors import CheckpointError, CheckpointMismatch
from rlpar.state import StatePath, generator_state, mapping, sequence

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_HEADER = "rlpar_checkpoint"
_ARRAY = "__rlpar_ndarray__"  # marks an encoded numpy array (reserved as a state key)
_FINAL = re.compile(r"ckpt-(\d{12})\.pt")
_PART = re.compile(r"ckpt-(\d{12})\.(?P<part>[A-Za-z0-9_-]+)\.pt")
_PART_NAME = re.compile(r"[A-Za-z0-9_-]+")
_TEMP = re.compile(r"\.ckpt-\d{12}(\.[A-Za-z0-9_-]+)?\.pt\.(?P<host>.+)\.(?P<pid>\d+)\.tmp")
_PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray)
_TORCH = (torch.dtype, torch.device, torch.Size)
_crc_lock = threading.Lock()  # the CRC switch is process-wide torch state


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


# --------------------------------------------------------------------- encoding


def _encode(value: Any, where: str) -> Any:
    """``value`` with numpy arrays/scalars as tagged byte tensors; raises TypeError for
    anything ``torch.load(weights_only=True)`` would refuse."""
    # Exact types: a subclass (np.float64 is a float, an IntEnum an int) pickles by
    # its class, which a weights-only load refuses.
    if type(value) in _PLAIN or type(value) in _TORCH:
        return value
    if type(value) in (torch.Tensor, torch.nn.Parameter):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        return _encode_array(value, where)
    if isinstance(value, Mapping):
        if _ARRAY in value:
            raise ValueError(f"{where}: the key {_ARRAY!r} is reserved by rlpar.checkpoint")
        items = []
        for key, item in value.items():
            if not isinstance(key, (str, int, float, bool, type(None))):
                raise TypeError(
                    f"{where}: key {key!r} of type {type(key).__name__} cannot be saved "
                    "under weights_only; use str or int keys"
                )
            items.append((key, _encode(item, f"{where}[{key!r}]")))
        out = OrderedDict(items) if isinstance(value, OrderedDict) else dict(items)
        metadata = getattr(value, "_metadata", None)  # nn.Module.state_dict's versions
        if isinstance(out, OrderedDict) and metadata is not None:
            out._metadata = _encode(metadata, f"{where}._metadata")
        return out
    if type(value) in (list, tuple, set):
        return type(value)(_encode(v, f"{where}[{i}]") for i, v in enumerate(value))
    hint = "; convert it with ._asdict()" if isinstance(value, tuple) else ""
    raise TypeError(
        f"{where}: a {type(value).__module__}.{type(value).__qualname__} cannot be loaded with "
        f"torch.load(weights_only=True){hint}; save tensors, numpy arrays, numbers, strings "
        "and lists/tuples/dicts of them"
    )


def _encode_array(value: np.ndarray | np.generic, where: str) -> dict[str, Any]:
    array = np.asarray(value)
    if array.dtype.hasobject or array.dtype.names is not None:
        raise TypeError(
            f"{where}: numpy arrays of dtype {array.dtype} (objects or records) cannot be "
            "saved under weights_only"
        )
    flat = np.ascontiguousarray(array).reshape(-1)
    if not flat.flags.writeable:
        flat = flat.copy()  # torch.from_numpy warns about read-only memory
    return {
        _ARRAY: torch.from_numpy(flat.view(np.uint8)),
        "dtype": array.dtype.str,
        "shape": list(array.shape),
        "scalar": isinstance(value, np.generic),
    }


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and _ARRAY in value:
        raw = value[_ARRAY].cpu().numpy()
        array = raw.view(np.dtype(value["dtype"])).reshape(value["shape"])
        return array[()] if value["scalar"] else array
    if isinstance(value, dict):  # OrderedDict included, with its _metadata
        out = type(value)((k, _decode(v)) for k, v in value.items())
        if hasattr(value, "_metadata"):
            out._metadata = value._metadata
        return out
    if type(value) in (list, tuple, set):
        return type(value)(_decode(v) for v in value)
    return value


def _plain_meta(value: Any, where: str) -> Any:
    """JSON-like ``meta`` with tuples as lists, so that saved and expected compare equal."""
    if type(value) in (type(None), bool, int, float, str):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain_meta(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: _plain_meta(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise TypeError(
        f"{where} must hold only None, bool, int, float, str, lists and str-keyed dicts; "
        f"got {type(value).__name__}"
    )


# ------------------------------------------------------------------ save, load


def _check_step(step: Any, kind: str) -> None:
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"kind must be a non-empty string, got {kind!r}")
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")


def _check_part(part: Any) -> str:
    if not isinstance(part, str) or not _PART_NAME.fullmatch(part):
        raise ValueError(f"a part name must be letters, digits, '-' or '_', got {part!r}")
    return part


def _payload(state: Any, *, kind: str, step: int, meta: Mapping[str, Any] | None) -> dict[str, Any]:
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping, got {type(state).__name__}")
    if meta is not None and not isinstance(meta, Mapping):
        raise TypeError(f"meta must be a mapping or None, got {type(meta).__name__}")
    header = {
        "format": FORMAT_VERSION,
        "kind": kind,
        "step": int(step),
        "created": time.time(),
        "torch": str(torch.__version__),  # a str subclass would not load
        "meta": _plain_meta({} if meta is None else meta, "meta"),
    }
    return {_HEADER: header, "state": _encode(state, "state")}


def _write_atomically(final: Path, payload: Any) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    temp = final.parent / f".{final.name}.{socket.gethostname()}.{os.getpid()}.tmp"
    try:
        with open(temp, "wb") as f:
            _save_without_crc(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    _fsync_directory(final.parent)  # the rename itself survives a power loss


def save_checkpoint(
    directory: str | os.PathLike,
    state: Mapping[str, Any],
    *,
    kind: str,
    step: int,
    keep: int = 3,
    meta: Mapping[str, Any] | None = None,
    parts: Sequence[str] = (),
) -> Path:
    """Write ``state`` as ``directory/ckpt-<step>.pt`` atomically; keep the newest ``keep``
    complete checkpoints (``parts``: the part names each needs, see :func:`save_part`;
    their files go with their checkpoint).

    ``kind`` names what is saved (e.g. the job), ``meta`` how (e.g. a layout); both go
    into the header that :func:`load_checkpoint` checks. One writer per directory.
    """
    _check_step(step, kind)
    if isinstance(keep, bool) or not isinstance(keep, (int, np.integer)) or keep < 1:
        raise ValueError(f"keep must be an int >= 1, got {keep!r}")
    parts = [_check_part(p) for p in parts]
    payload = _payload(state, kind=kind, step=step, meta=meta)
    directory = Path(directory)
    final = directory / f"ckpt-{int(step):012d}.pt"
    _write_atomically(final, payload)
    _prune(directory, keep=int(keep), parts=parts)
    _remove_stale_temps(directory)
    return final


def save_part(
    directory: str | os.PathLike,
    state: Mapping[str, Any],
    *,
    kind: str,
    step: int,
    part: str,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write one part of checkpoint ``step`` as ``directory/ckpt-<step>.<part>.pt``,
    atomically (each part has one writer; the main file's writer prunes old parts)."""
    _check_step(step, kind)
    final = Path(directory) / f"ckpt-{int(step):012d}.{_check_part(part)}.pt"
    _write_atomically(final, _payload(state, kind=kind, step=step, meta=meta))
    return final


def part_path(checkpoint: str | os.PathLike, part: str) -> Path:
    """The file of ``part`` of the checkpoint whose main file is ``checkpoint``."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(f"{checkpoint.name[:-3]}.{_check_part(part)}.pt")


def _parts_of(directory: Path) -> dict[int, dict[str, Path]]:
    found: dict[int, dict[str, Path]] = {}
    for path in directory.iterdir():
        match = _PART.fullmatch(path.name)
        if match and zipfile.is_zipfile(path):
            found.setdefault(int(match.group(1)), {})[match["part"]] = path
    return found


def _prune(directory: Path, *, keep: int, parts: Sequence[str]) -> None:
    """Keep the newest ``keep`` complete checkpoints and anything newer (an incomplete
    checkpoint newer than them may still be completed); older files go, parts too."""
    complete = list_checkpoints(directory, parts=parts)
    if len(complete) <= keep:
        return
    oldest_kept = int(_FINAL.fullmatch(complete[-keep].name).group(1))
    for path in directory.iterdir():
        match = _FINAL.fullmatch(path.name) or _PART.fullmatch(path.name)
        if match and int(match.group(1)) < oldest_kept:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _missing_parts(path: Path, found: Mapping[str, Path], parts: Sequence[str]) -> list[str]:
    """The parts of checkpoint ``path`` that are not there; CheckpointMismatch when it
    has parts of another layout (names not in ``parts``; a loader that asks for no
    parts ignores them)."""
    if parts and set(found) - set(parts):
        raise CheckpointMismatch(str(path), "parts", sorted(parts), sorted(found))
    return [p for p in parts if p not in found]


def list_checkpoints(directory: str | os.PathLike, *, parts: Sequence[str] = ()) -> list[Path]:
    """Complete checkpoints in ``directory`` (main file and every one of ``parts``),
    oldest step first (temporary, truncated and incomplete ones are left out)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    have = _parts_of(directory) if parts else {}
    for path in directory.iterdir():
        match = _FINAL.fullmatch(path.name)
        # A torch checkpoint is a zip archive: a truncated one has lost its end record.
        if match and zipfile.is_zipfile(path):
            step = int(match.group(1))
            if not parts or not [p for p in parts if p not in have.get(step, {})]:
                found.append((step, path))
    return [path for _, path in sorted(found)]


def latest_checkpoint(directory: str | os.PathLike, *, parts: Sequence[str] = ()) -> Path | None:
    """The newest complete checkpoint in ``directory``, or None. Incomplete ones newer
    than it are skipped with a logged reason; parts of another layout raise
    CheckpointMismatch."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    parts = [_check_part(p) for p in parts]
    have = _parts_of(directory)
    mains = sorted(((int(m.group(1)), directory / m.string) for m in
                    (_FINAL.fullmatch(p.name) for p in directory.iterdir()) if m), reverse=True)
    for step, path in mains:
        if not zipfile.is_zipfile(path):
            log.warning("skipping checkpoint %s: truncated (not a complete archive)", path)
            continue
        missing = _missing_parts(path, have.get(step, {}), parts)
        if missing:
            log.warning("skipping checkpoint %s: incomplete, part(s) %s missing", path, missing)
            continue
        return path
    return None


def load_checkpoint(
    path_or_dir: str | os.PathLike,
    *,
    kind: str,
    map_location: Any = "cpu",
    expect_meta: Mapping[str, Any] | None = None,
    parts: Sequence[str] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(state, header)`` of a checkpoint file, or of the newest complete one in a
    directory (``parts``: the part names a complete one has; load them with
    :func:`load_part`).

    Raises FileNotFoundError when there is none, CheckpointError when the file cannot
    be read, CheckpointMismatch when its ``kind`` or a key of ``expect_meta`` differs,
    or when its parts are of another layout.
    """
    path = Path(path_or_dir)
    if path.is_dir():
        latest = latest_checkpoint(path, parts=parts)
        if latest is None:
            with_parts = f", complete with parts {', '.join(parts)}," if parts else ""
            raise FileNotFoundError(f"no checkpoint (ckpt-<step>.pt{with_parts}) in {path}")
        path = latest
    elif not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    return _read(path, kind=kind, map_location=map_location, expect_meta=expect_meta)


def load_part(
    checkpoint: str | os.PathLike,
    part: str,
    *,
    kind: str,
    map_location: Any = "cpu",
    expect_meta: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(state, header)`` of ``part`` of the checkpoint whose main file is
    ``checkpoint``; its step must be the checkpoint's (CheckpointMismatch)."""
    path = part_path(checkpoint, part)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint part {path} does not exist")
    state, header = _read(path, kind=kind, map_location=map_location, expect_meta=expect_meta)
    step = int(_FINAL.fullmatch(Path(checkpoint).name).group(1))
    if header["step"] != step:
        raise CheckpointMismatch(str(path), "step", step, header["step"])
    return state, header


def _read(path: Path, *, kind: str, map_location: Any,
          expect_meta: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        # Memory-mapped: a replay's arrays are copied from the file's pages into the
        # buffer on restore, not read into memory first (a 1M-transition Atari replay
        # would need its 7 GB twice).
        payload = torch.load(path, map_location=map_location, weights_only=True, mmap=True)
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {path} cannot be read (corrupt, truncated, or not written by "
            f"rlpar.checkpoint): {type(exc).__name__}: {exc}"
        ) from exc
    header = payload.get(_HEADER) if isinstance(payload, dict) else None
    if not isinstance(header, dict) or "state" not in payload:
        raise CheckpointError(f"{path} is not an rlpar checkpoint (it has no {_HEADER!r} header)")
    if header.get("format") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format {header.get('format')!r}; this rlpar reads "
            f"format {FORMAT_VERSION}"
        )
    if header["kind"] != kind:
        raise CheckpointMismatch(str(path), "kind", kind, header["kind"])
    saved_meta = header["meta"]
    for key, expected in (expect_meta or {}).items():
        expected = _plain_meta(expected, f"expect_meta[{key!r}]")
        found = saved_meta.get(key, _MISSING)
        if found != expected:
            raise CheckpointMismatch(str(path), f"meta[{key!r}]", expected, found)
    return _decode(payload["state"]), header


def _save_without_crc(payload: Any, f: Any) -> None:
    """``torch.save`` without the CRC32 of each record: it took three quarters of the
    time of saving a 5 GB replay buffer, and ``torch.load`` never checks it (a
    truncated file is still caught: it has lost the zip archive's end record)."""
    with _crc_lock:
        crc = torch.serialization.get_crc32_options()
        torch.serialization.set_crc32_options(False)
        try:
            torch.save(payload, f)
        finally:
            torch.serialization.set_crc32_options(crc)


def _fsync_directory(directory: Path) -> None:
    if os.name != "posix":  # directories cannot be opened for fsync elsewhere
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_stale_temps(directory: Path) -> None:
    """Temporary files left by a writer on this host that died mid-save."""
    host = socket.gethostname()
    for path in directory.iterdir():
        match = _TEMP.fullmatch(path.name)
        if match and match["host"] == host and not _alive(int(match["pid"])):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


# ------------------------------------------------------------------------- RNG


def rng_state(numpy_generators: Mapping[str, np.random.Generator] | None = None) -> dict[str, Any]:
    """The state of Python's ``random``, numpy's global RNG, torch's CPU RNG, CUDA's
    RNGs (when CUDA is in use in this process) and of each named numpy Generator."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(legacy=False),
        "torch": torch.get_rng_state(),
    }
    # Only when initialized: reading it would otherwise start CUDA in a CPU-only role.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    generators = {}
    for name, generator in (numpy_generators or {}).items():
        if not isinstance(generator, np.random.Generator):
            raise TypeError(
                f"numpy_generators[{name!r}] must be a numpy Generator, got "
                f"{type(generator).__name__}"
            )
        generators[name] = generator.bit_generator.state
    state["generators"] = generators
    return state


def restore_rng_state(
    state: Mapping[str, Any],
    numpy_generators: Mapping[str, np.random.Generator] | None = None,
) -> None:
    """Put back what :func:`rng_state` captured. CUDA states are restored for the
    devices present (none on a CPU-only resume of a GPU run). Every state is tried on
    a scratch generator first: StateError, and no RNG changed, if one is not a state."""
    where = StatePath("restore_rng_state")
    state = mapping(state, where, required=("python", "numpy", "torch"), optional=("cuda", "generators"))
    for key, scratch in (("python", random.Random().setstate),
                         ("numpy", np.random.RandomState().set_state),
                         ("torch", torch.Generator().set_state)):
        try:
            scratch(state[key])
        except Exception as exc:  # TypeError, ValueError, RuntimeError, depending on the library
            raise where[key].error(f"is not a {key} RNG state ({type(exc).__name__}: {exc})") from None
    cuda = sequence(state.get("cuda", []), where["cuda"])
    for i, cuda_state in enumerate(cuda):
        if not isinstance(cuda_state, torch.Tensor) or cuda_state.dtype != torch.uint8:
            raise where["cuda"][i].error("must be a uint8 tensor (a CUDA RNG state)")
    saved = mapping(state.get("generators", {}), where["generators"], optional=None)
    generators = {}
    for name, generator in (numpy_generators or {}).items():
        if name not in saved:
            raise where["generators"].error(
                f"has no state for numpy generator {name!r}; saved: {sorted(saved)}")
        generators[name] = generator_state(saved[name], where["generators"][name], generator)
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu())
    if torch.cuda.is_available():
        for device, cuda_state in enumerate(cuda[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state.cpu(), device)
    for name, generator in (numpy_generators or {}).items():
        generator.bit_generator.state = generators[name]
