"""Every code block of the README and the manual (docs/) is run or checked here, or is
marked, on the line just before it, with why it cannot run in CI:
``<!-- not run in CI: needs a GPU -->``.

Shell blocks: no command is run; each is checked, cheaply, by what it would reach first.

- ``python -m experiments.<job> FLAGS``: the job's own parser and every check of its
  launch (``experiments.runtime.job.check_command``: flags, config, resume, the env
  built once, the builder made once; nothing launched, nothing written), so a stale
  flag, value or combination fails here;
- ``torchrun TORCHRUN_FLAGS -m experiments.<job> FLAGS``: torchrun's own parser, then
  the job's checks for a world of ``nnodes x nproc-per-node`` ranks;
- ``python -m experiments.<module> ARGS`` (evaluate, the benchmarks): the module's
  ``main``, stopped once its argument parser has parsed;
- ``make TARGET``: the Makefile has the target;
- ``export RLPAR_RUN_SECRET=$(python -c CODE)``: CODE run, its output a valid secret;
- ``tensorboard --logdir DIR``: tensorboard is installed beside this Python.

Any other command fails the test: teach it here, or mark its block.

Python blocks run for real, each in a fresh namespace and in a temporary working
directory (their ``runs/`` go there); the docs write them with small budgets.

The placeholders the docs use are replaced: ``runs/<run>`` by a run directory made here
(a short serial Ape-X run on CartPole, with its checkpoint and policies), ``<this
node's IP>`` by 127.0.0.1, ``--node-rank K`` by ``--node-rank 0``; ``HOST:PORT`` and
``NODE0`` are torchrun's arguments, only parsed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import pathlib
import re
import shlex
import sys
from unittest import mock

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"^<!-- not run in CI: (?P<reason>\S.*?) -->$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
SHELL = {"bash", "sh", "shell", "console"}
PYTHON = {"python", "py"}
README_MAX_LINES = 200  # the README is the entrance; the manual is docs/

# python -m experiments.<job>: the module and its config class (what its main() parses).
JOBS = {"apex": "ApexJobConfig", "impala": "ImpalaJobConfig", "a3c": "A3CJobConfig", "a2c": "A2CJobConfig",
        "ppo": "PPOJobConfig", "pqn": "PQNJobConfig", "maddpg": "MADDPGJobConfig"}
RUN = "runs/<run>"
NODE_IP = "<this node's IP>"
NODE_RANK = "--node-rank K"


def blocks():
    """``(where, lang, text, reason)`` for every fenced block of every page; ``reason``:
    the not-run marker's, or None."""
    found = []
    for page in PAGES:
        lines = page.read_text().split("\n")
        i = 0
        while i < len(lines):
            match = FENCE.match(lines[i])
            if not match:
                i += 1
                continue
            start, lang = i, match["lang"]
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            assert end is not None, f"{page.name}:{i + 1}: a code block that never closes"
            previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            marker = MARKER.match(previous.strip())
            text = "\n".join(line[len(match["indent"]):] for line in lines[start + 1:end])
            found.append((f"{page.relative_to(ROOT)}:{start + 1}", lang, text,
                          marker["reason"] if marker else None))
            i = end + 1
    return found


BLOCKS = blocks()


def test_every_block_says_its_language_and_every_marker_its_reason():
    assert len(BLOCKS) >= 15, "blocks missing: is the fence pattern right?"
    for where, lang, _, reason in BLOCKS:
        assert lang, f"{where}: a code block without a language (```bash, ```python, ...)"
        if reason is not None:
            assert lang in SHELL | PYTHON, f"{where}: only shell and Python blocks are run, no marker needed"
    for page in PAGES:  # a marker that precedes no block is a typo or a stale note
        lines = page.read_text().split("\n")
        for n, line in enumerate(lines):
            if line.startswith("<!-- not run in CI"):
                assert MARKER.match(line), f"{page.name}:{n + 1}: write it as <!-- not run in CI: REASON -->"
                following = next((x for x in lines[n + 1:] if x.strip()), "")
                assert FENCE.match(following), f"{page.name}:{n + 1}: the marker must come just before its block"


def test_the_readme_stays_an_entrance():
    lines = (ROOT / "README.md").read_text().split("\n")
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move the detail to docs/"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished run of experiments.apex with a checkpoint and both policy files, for
    the blocks that re-run, resume or evaluate ``runs/<run>``."""
    from experiments import apex
    from experiments.runtime.cli import apply_overrides

    config = apex.ApexJobConfig()
    apply_overrides(config, {
        "serial": True, "num_actors": 2, "num_envs": 2, "learning_starts": 200, "batch_size": 32,
        "hidden": "32", "eval_every": 500, "eval_episodes": 2, "target_return": 1e9,
        "max_env_steps": 1000, "max_seconds": 60.0, "status_every": 0.0,
        "log_dir": str(tmp_path_factory.mktemp("runs"))})
    summary = apex.run(config, quiet=True)
    path = pathlib.Path(summary["run_dir"])
    assert (path / "checkpoints").is_dir() and (path / "policy.pt").is_file()
    return path


SHELL_BLOCKS = [pytest.param(text, id=where) for where, lang, text, reason in BLOCKS
                if lang in SHELL and reason is None]
PYTHON_BLOCKS = [pytest.param(text, id=where) for where, lang, text, reason in BLOCKS
                 if lang in PYTHON and reason is None]


@pytest.mark.parametrize("text", SHELL_BLOCKS)
def test_shell_block(text, run_dir):
    text = text.replace(RUN, shlex.quote(str(run_dir))).replace(NODE_IP, "127.0.0.1")
    text = text.replace(NODE_RANK, "--node-rank 0")
    for line in text.replace("\\\n", " ").split("\n"):
        if not shlex.split(line, comments=True):
            continue
        secret = re.fullmatch(r"\s*export RLPAR_RUN_SECRET=\$\(python -c '([^']*)'\)\s*(#.*)?", line)
        if secret:
            _check_secret_recipe(secret[1])
            continue
        words = shlex.split(line, comments=True)
        words[0] = words[0].removeprefix(".venv/bin/")
        try:
            _check(words)
        except SystemExit as exc:  # argparse's way to refuse a flag (its message is on stderr)
            pytest.fail(f"{line.strip()!r} exits {exc.code}")


@pytest.mark.parametrize("text", PYTHON_BLOCKS)
@pytest.mark.timeout(120)
def test_python_block(text, run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = compile(text.replace(RUN, str(run_dir)), "<docs block>", "exec")
    exec(code, {"__name__": "__docs__"})


def _check(words):
    command, args = words[0], words[1:]
    if command in ("python", "python3") and args[:1] == ["-m"]:
        return _check_module(args[1], args[2:])
    if command == "torchrun":
        return _check_torchrun(args)
    if command == "make":
        (target,) = args
        assert re.search(rf"^{re.escape(target)}:", (ROOT / "Makefile").read_text(), re.M), \
            f"the Makefile has no target {target!r}"
        return None
    if command == "tensorboard":
        assert args[:1] == ["--logdir"]
        assert (pathlib.Path(sys.executable).parent / "tensorboard").exists(), "tensorboard is not installed"
        return None
    raise AssertionError(f"no check for {' '.join(words)!r}: teach tests/test_docs.py one, or mark the block")


def _check_module(module, args, *, world_size=None):
    name = module.removeprefix("experiments.")
    if name in JOBS:
        from experiments.runtime.job import check_command

        job_module = importlib.import_module(module)
        if "--help" in args:
            with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as exit_:
                check_command(job_module.job, getattr(job_module, JOBS[name]), args)
            assert exit_.value.code == 0
            return None
        return check_command(job_module.job, getattr(job_module, JOBS[name]), args, world_size=world_size)
    assert module.startswith("experiments."), f"python -m {module}: not one of this project's modules"
    assert world_size is None, f"torchrun of {module}: not a job"
    return _parsed(importlib.import_module(module), args)


class _Parsed(Exception):
    pass


def _parsed(module, args):
    """``module.main(args)`` up to its argument parser's result: the run stops there."""
    parse_args = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):
        raise _Parsed(parse_args(self, args, namespace))

    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_and_stop):
        try:
            module.main(args)
        except _Parsed as parsed:
            return parsed.args[0]
    raise AssertionError(f"{module.__name__}.main({args}) returned without parsing its arguments")


def _check_torchrun(args):
    from torch.distributed.run import get_args_parser

    parsed = get_args_parser().parse_args(args)
    assert parsed.module, "torchrun runs the job as a module: -m experiments.<job>"
    nodes = max(int(n) for n in str(parsed.nnodes).split(":"))
    return _check_module(parsed.training_script, parsed.training_script_args,
                         world_size=nodes * int(parsed.nproc_per_node))


def _check_secret_recipe(code):
    from rlpar.distributed.secret import check_secret

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<the secret recipe>", "exec"), {})
    check_secret(out.getvalue().strip())


def test_a_stale_flag_fails_the_check(run_dir):
    """The check is not vacuous: a flag no job has, a bad value, a missing target."""
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        _check(["python", "-m", "experiments.apex", "--num-actorz", "3"])
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        _check(["python", "-m", "experiments.ppo", "--preempt-fraction", "2"])
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        _check(["python", "-m", "experiments.bench.components.replay", "--no-such-flag"])
    with pytest.raises(ValueError, match="--learners"):  # the job's own check, past the parser
        _check(["python", "-m", "experiments.apex", "--learners", "3", "--num-actors", "2"])
    with pytest.raises(AssertionError, match="no target"):
        _check(["make", "tests"])
    with pytest.raises(AssertionError, match="no check"):
        _check(["pip", "install", "rlpar"])
