"""One JSON line per result: how every benchmark reports."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
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


def read_lines(file: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSON-lines file, as
    :func:`emit` and the benches' evaluators write them; ValueError naming the file and
    line of one that is not a JSON object."""
    with open(file) as f:
        for number, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{file}:{number}: not a JSON line ({exc.msg})") from None
            if not isinstance(line, dict):
                raise ValueError(f"{file}:{number}: a results line is a JSON object, got {type(line).__name__}")
            yield number, line
