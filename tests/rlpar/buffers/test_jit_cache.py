"""numba's disk cache of rlpar's kernels goes to the user's cache directory, never
into the package (a write into site-packages), and where that is not writable the
kernels still compile."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlpar.buffers.jit import cache_dir, cache_root

ROOT = Path(__file__).resolve().parents[3]

# Imports the buffers as a user does (the package, torch and all) and compiles one
# kernel: enough to see where numba caches it, at a fraction of the cost of
# compiling them all. A second dispatcher of the same function then loads it back.
# One interpreter for both cases: it imports torch and numba once, and warms numba's
# compiler on a throwaway function (nothing cached: no cache=True; about half of a
# first compile's CPU is the compiler's own start, paid here once, not per case),
# then forks one branch per case, each with its own RLPAR_CACHE_DIR before it imports
# rlpar. Only the writable case compiles a second dispatcher: the unwritable one has
# no cache to load it from (it would compile again and check nothing).
_ONE_KERNEL = """
import json, os, sys, traceback
import numba, numpy as np, torch

numba.njit(lambda a, i: a[i] + 1.0)(np.zeros(2), 1)
cases = json.loads(sys.argv[1])
children = {}
for case, cache in cases.items():
    pid = os.fork()
    if pid == 0:
        try:
            os.environ["RLPAR_CACHE_DIR"] = cache
            import rlpar.buffers
            from rlpar.buffers import tree_kernels as tk
            from rlpar.buffers.jit import jit
            args = (np.array([3.0, 0.0, 1.0, 2.0]), np.array([0, 2, 4]), 1, np.array([0.5, 1.5]))
            out = np.empty(2, dtype=np.int64)
            tk.find_prefix(*args, out)
            hits = None
            if case == "writable":
                again = jit(tk.find_prefix.py_func)
                again(*args, out)
                hits = sum(again.stats.cache_hits.values())
            # One write of the whole line: the two forks share the pipe, and print's text
            # and newline are two writes where stdout is unbuffered (PYTHONUNBUFFERED),
            # so the other fork's line could land between them.
            os.write(1, (json.dumps({"case": case, "out": out.tolist(), "cache": type(tk.find_prefix._cache).__name__,
                                     "hits": hits, "file": tk.__file__}) + "\\n").encode())
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    children[pid] = case
for pid, case in children.items():
    assert os.waitpid(pid, 0)[1] == 0, case
"""


def test_the_cache_root_follows_rlpar_cache_dir_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RLPAR_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_root() == str(tmp_path / "home" / ".cache" / "rlpar")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG rule: absolute only
    assert cache_root() == str(tmp_path / "home" / ".cache" / "rlpar")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == str(tmp_path / "xdg" / "rlpar")
    monkeypatch.setenv("RLPAR_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == str(tmp_path / "mine")
    # One directory per source directory: two installs never share entries.
    a, b = cache_dir("/x/rlpar/buffers/k.py"), cache_dir("/y/rlpar/buffers/k.py")
    assert a != b and os.path.dirname(a) == str(tmp_path / "mine" / "numba")
    assert os.path.basename(a).startswith("buffers_")


@pytest.mark.timeout(120)
def test_the_kernels_cache_in_the_users_cache_dir_and_nothing_in_the_package(tmp_path, monkeypatch):
    # A copy of the package, so that what lands in its directory is this test's doing;
    # no bytecode, so that its __pycache__ would hold only numba's files.
    source = tmp_path / "site"
    shutil.copytree(ROOT / "rlpar", source / "rlpar", ignore=shutil.ignore_patterns("__pycache__"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cases = {"writable": tmp_path / "cache",
             "unwritable": blocker / "cache"}  # under a file: not creatable, even by root
    env = {**os.environ, "PYTHONPATH": str(source), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONWARNINGS": "default"}
    for name in ("RLPAR_CACHE_DIR", "NUMBA_CACHE_DIR", "NUMBA_CACHE_LOCATOR_CLASSES", "NUMBA_DISABLE_JIT"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-c", _ONE_KERNEL, json.dumps({k: str(v) for k, v in cases.items()})],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Warning" not in proc.stderr, proc.stderr[-3000:]
    results = {r["case"]: r for r in map(json.loads, proc.stdout.strip().splitlines())}
    assert set(results) == set(cases)
    for result in results.values():
        assert result["out"] == [0, 1]
        assert Path(result["file"]).is_relative_to(source)  # the copy ran, not the checkout
    assert results["writable"]["cache"] == "Cache" and results["writable"]["hits"] == 1
    cached = list((tmp_path / "cache" / "numba").glob("buffers_*/tree_kernels.find_prefix*.nbi"))
    monkeypatch.setenv("RLPAR_CACHE_DIR", str(tmp_path / "cache"))
    assert cached and str(cached[0].parent) == cache_dir(results["writable"]["file"])
    assert results["unwritable"]["cache"] == "NullCache"  # compiled, not cached
    written = [p for p in source.rglob("*") if p.suffix in (".nbi", ".nbc") or p.name == "__pycache__"]
    assert written == []
