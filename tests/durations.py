"""Measured test durations, so that ``tests/conftest.py`` can start the slow tests
first on every pytest-xdist worker (the suite's wall time is bounded by CI's budget).

Refresh after adding or speeding up slow tests:

    python -m pytest -n 2 --dist worksteal --durations=0 -p no:cacheprovider > /tmp/durations.log
    python tests/durations.py /tmp/durations.log

Stale entries only cost balance, never correctness: a test missing here counts as fast.
"""

from __future__ import annotations

import json
import os
import re
import sys

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")
# Tests at least this slow are ordered; the rest keep pytest's order (their modules
# stay together, so module-scoped fixtures are set up once per worker).
SLOW_S = 1.0
_LINE = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+(\S+::\S.*?)\s*$")


def parse(lines: list[str]) -> dict[str, float]:
    """Seconds per test id (setup + call + teardown) from pytest's ``--durations=0``."""
    seconds: dict[str, float] = {}
    for line in lines:
        match = _LINE.match(line)
        if match:
            seconds[match.group(2)] = seconds.get(match.group(2), 0.0) + float(match.group(1))
    return seconds


def load(path: str = PATH) -> dict[str, float]:
    """The recorded durations; empty (no reordering) when the file is missing."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) for v in data.values()):
        raise ValueError(f"{path}: expected a JSON object of test id -> seconds")
    return data


def order(ids: list[str], seconds: dict[str, float], *, workers: int) -> list[int]:
    """Indices into ``ids`` in run order for ``workers`` xdist workers under
    ``--dist worksteal``, which hands each worker a contiguous share of the list
    (the first ``n // workers`` to the first) and lets an idle worker steal from the
    end of another's share. Each share gets slow tests of about equal total time
    (largest first, each to the share with the least so far), slowest first, then
    fast ones in pytest's order; what is stolen at the end is then fast."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    slow = sorted((i for i, name in enumerate(ids) if seconds.get(name, 0.0) >= SLOW_S),
                  key=lambda i: -seconds[ids[i]])
    fast = [i for i, name in enumerate(ids) if seconds.get(name, 0.0) < SLOW_S]
    sizes = [len(ids) // workers] * workers
    sizes[-1] += len(ids) - sum(sizes)
    shares: list[list[int]] = [[] for _ in range(workers)]
    totals = [0.0] * workers
    for i in slow:
        open_shares = [k for k in range(workers) if len(shares[k]) < sizes[k]]
        k = min(open_shares, key=lambda k: totals[k])
        shares[k].append(i)
        totals[k] += seconds[ids[i]]
    rest = iter(fast)
    for k in range(workers):
        shares[k].extend(next(rest) for _ in range(sizes[k] - len(shares[k])))
    return [i for share in shares for i in share]


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python tests/durations.py PYTEST_DURATIONS_LOG")
    with open(argv[0]) as f:
        seconds = parse(f.readlines())
    if not seconds:
        sys.exit(f"{argv[0]}: no '--durations=0' lines found")
    slow = {name: round(s, 1) for name, s in sorted(seconds.items()) if s >= SLOW_S}
    with open(PATH, "w") as f:
        json.dump(slow, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"{len(slow)} tests of >= {SLOW_S} s ({sum(slow.values()):.0f} s) written to {PATH}")


if __name__ == "__main__":
    main(sys.argv[1:])
