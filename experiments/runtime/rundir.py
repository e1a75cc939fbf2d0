"""The run directory: ``<log_dir>/<job>-<YYYYmmdd>-<HHMMSS>-<id>/``.

It holds the resolved ``config.json`` (re-run it with ``--config``), the TensorBoard
event files, ``summary.json``, ``checkpoints/`` and, for a run made with the user's
parts, ``parts.json`` (:data:`experiments.runtime.parts.PARTS_FILE`). The short random id keeps two
launches in the same second apart; the directory is created exclusively, so two
runs can never share one.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from typing import Any

from experiments.runtime.cli import save_config


class RunDir:
    """Paths of one run; ``None`` paths when the run writes nothing (``--log-dir none``)."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    @classmethod
    def create(cls, root: str, job: str) -> RunDir:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        os.makedirs(root, exist_ok=True)
        for _ in range(16):
            path = os.path.join(root, f"{job}-{stamp}-{secrets.token_hex(3)}")
            try:
                os.mkdir(path)
            except FileExistsError:
                continue
            return cls(path)
        raise RuntimeError(f"could not create a fresh run directory under {root!r}")

    @classmethod
    def for_elastic(cls, root: str, job: str, run_id: str, *, restart: int) -> RunDir:
        """Under ``torchrun --max-restarts N`` every restart of the world runs this
        again: the first attempt (``restart`` 0) creates the directory and notes it
        under the launcher's run id, restarts find it there and go on in it. Only a
        restart reads the note: torchrun's run id is ``none`` unless ``--rdzv-id`` is
        given, so a second launch in the same log dir finds the first one's note and
        must not write into that finished run."""
        os.makedirs(root, exist_ok=True)
        note = os.path.join(root, f".torchrun-{job}-{run_id}")
        if restart > 0:
            try:
                with open(note) as f:
                    path = f.read().strip()
                if os.path.isdir(path):
                    return cls(path)
            except OSError:
                pass  # this node never noted one (rank 0 moved here): a fresh directory
        run_dir = cls.create(root, job)
        with open(note + ".tmp", "w") as f:
            f.write(run_dir.path)
        os.replace(note + ".tmp", note)
        return run_dir

    def has_checkpoint(self) -> bool:
        """Whether a checkpoint's main file is there (its parts, e.g. replay shards',
        are checked when it is loaded: an incomplete one is skipped then)."""
        from rlpar.checkpoint import list_checkpoints

        directory = self.checkpoints
        return bool(directory and list_checkpoints(directory))

    @property
    def checkpoints(self) -> str | None:
        return None if self.path is None else os.path.join(self.path, "checkpoints")

    def write_config(self, config: Any) -> None:
        if self.path is not None:
            save_config(config, os.path.join(self.path, "config.json"))

    def write_summary(self, summary: dict[str, Any]) -> None:
        if self.path is None:
            return
        tmp = os.path.join(self.path, "summary.json.tmp")
        with open(tmp, "w") as f:
            json.dump(_jsonable(summary), f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, os.path.join(self.path, "summary.json"))


def _jsonable(value: Any) -> Any:
    """Summaries hold NaN for 'not measured'; JSON has no NaN, so it becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return _jsonable(value.item())
    return value
