"""Slurm's description of a job step, as a world: its compressed host lists, tasks per
node and a deterministic store port. No torch import (the job runtime reads it first).

``srun`` without torchrun starts one process per task and tells each, in its
environment, SLURM_PROCID (the rank), SLURM_NTASKS (the world size), SLURM_LOCALID
(the rank on its node) and the step's nodes in Slurm's compressed host list syntax
(``node[01-03,07],gpu5``); rank 0 runs on the step's first node, which hosts the
world's store (:func:`rlpar.distributed.launcher_env.from_environ`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

# MASTER_PORT when the environment gives none: PORT_BASE + SLURM_JOB_ID % PORT_SPAN, so
# every task of a step computes the same port without talking, and two jobs sharing a
# node differ unless their ids are PORT_SPAN apart. 15000-29999: below Linux's
# ephemeral ports (32768-60999), where an outgoing connection could already hold it.
PORT_BASE = 15000
PORT_SPAN = 15000

_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_HOST_CHARS = re.compile(r"[A-Za-z0-9._-]*")
_COUNT = re.compile(r"(\d+)(?:\(x(\d+)\))?")


def hostlist(text: str) -> list[str]:
    """The hosts of a Slurm host list, in order: ``node[01-03,07],gpu5`` is node01,
    node02, node03, node07, gpu5 (a range keeps the zero padding of its first number;
    several bracket groups in one name expand as Slurm does, the last fastest).
    ValueError naming the problem for anything else."""
    if not isinstance(text, str):
        raise TypeError(f"a host list is a string, got {text!r}")
    return [host for item in _split_top(text) for host in _expand(item, text)]


def first_host(text: str) -> str:
    """The first host of a Slurm host list (the whole list is checked)."""
    hosts = hostlist(text)
    return hosts[0]


def _split_top(text: str) -> list[str]:
    """The comma-separated names of a host list (commas inside brackets are ranges)."""
    if not text:
        raise ValueError("empty host list")
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            if depth:
                raise ValueError(f"host list {text!r}: nested '[' at position {i}")
            depth = 1
        elif char == "]":
            if not depth:
                raise ValueError(f"host list {text!r}: ']' without '[' at position {i}")
            depth = 0
        elif char == "," and not depth:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"host list {text!r}: '[' is never closed")
    items.append(text[start:])
    for item in items:
        if not item:
            raise ValueError(f"host list {text!r}: an empty host name (two commas, or one at an end)")
    return items


def _expand(item: str, text: str) -> Iterator[str]:
    open_ = item.find("[")
    if open_ < 0:
        _check_name(item, text)
        yield item
        return
    close = item.index("]", open_)  # balanced: checked by _split_top
    prefix, body, rest = item[:open_], item[open_ + 1:close], item[close + 1:]
    _check_name(prefix, text)
    numbers = _numbers(body, text)
    tails = list(_expand(rest, text)) if rest else [""]
    for number in numbers:
        for tail in tails:
            yield prefix + number + tail


def _numbers(body: str, text: str) -> list[str]:
    if not body:
        raise ValueError(f"host list {text!r}: empty brackets '[]'")
    out = []
    for part in body.split(","):
        match = _RANGE.fullmatch(part)
        if match is None:
            raise ValueError(f"host list {text!r}: {part!r} is not a number or a range like 01-03")
        low, high = match[1], match[2]
        if high is None:
            out.append(low)
            continue
        if int(high) < int(low):
            raise ValueError(f"host list {text!r}: range {part!r} runs backwards")
        out.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return out


def _check_name(part: str, text: str) -> None:
    if not _HOST_CHARS.fullmatch(part):
        bad = next(c for c in part if not _HOST_CHARS.fullmatch(c))
        raise ValueError(f"host list {text!r}: {bad!r} cannot be part of a host name")


def tasks_per_node(text: str) -> list[int]:
    """Slurm's tasks per node (SLURM_STEP_TASKS_PER_NODE): ``2(x3),1`` is [2, 2, 2, 1]."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"empty tasks-per-node list {text!r}")
    counts = []
    for part in text.split(","):
        match = _COUNT.fullmatch(part)
        if match is None:
            raise ValueError(f"tasks per node {text!r}: {part!r} is not N or N(xM)")
        counts.extend([int(match[1])] * int(match[2] or 1))
    return counts


def default_port(job_id: str) -> int:
    """The store's port of a step when MASTER_PORT is not set: see :data:`PORT_BASE`."""
    if not job_id.isdigit():
        raise ValueError(f"SLURM_JOB_ID must be a number, got {job_id!r}")
    return PORT_BASE + int(job_id) % PORT_SPAN


def is_task(environ: Mapping[str, str]) -> bool:
    """Whether this process is a task of an ``srun`` step. Not only SLURM_PROCID and
    SLURM_NTASKS: they can be set outside a step too (a batch script or an allocation's
    shell holds the job's task count), so a job started there would wait for ranks
    that never come; the step id is set only in a step's tasks."""
    return ("SLURM_PROCID" in environ and "SLURM_NTASKS" in environ
            and ("SLURM_STEP_ID" in environ or "SLURM_STEPID" in environ))
