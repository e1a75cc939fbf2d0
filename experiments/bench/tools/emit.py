"""One JSON line per result: how every benchmark reports."""

from __future__ import annotations

import json
import os
from typing import Any

RESULTS = "results.jsonl"


def emit(record: dict[str, Any], *, results_dir: str | None = None) -> None:
    """Print ``record`` as one JSON line (flushed, so a parent reading the pipe sees it
    at once) and, with ``results_dir``, append it to ``<results_dir>/results.jsonl``."""
    line = json.dumps(record)
    print(line, flush=True)
    if results_dir is not None:
        with open(os.path.join(results_dir, RESULTS), "a") as f:
            f.write(line + "\n")
