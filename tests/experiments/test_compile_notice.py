"""The lead's first-run compile notice looks for the kernels' cache where it is
(rlpar.buffers.jit), not in the package's __pycache__."""

import os
import types

import rlpar.buffers
from experiments.runtime.lead import announce_compile
from rlpar.buffers.jit import cache_dir


def test_the_notice_shows_until_the_kernels_are_cached(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLPAR_CACHE_DIR", str(tmp_path))
    ctx = types.SimpleNamespace(job="apex", quiet=False)
    announce_compile(ctx)
    cache = cache_dir(os.path.join(os.path.dirname(rlpar.buffers.__file__), "tree_kernels.py"))
    assert f"compiling the replay's kernels (first run on this machine; cached in {cache})" in (
        capsys.readouterr().err)
    os.makedirs(cache)
    open(os.path.join(cache, "tree_kernels.find_prefix-1.py311.nbi"), "w").close()
    announce_compile(ctx)
    assert capsys.readouterr().err == ""
