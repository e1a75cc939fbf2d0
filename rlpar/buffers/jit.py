"""numba's ``njit`` for rlpar's kernels, with the disk cache in the user's cache directory.

``numba.njit(cache=True)`` caches next to the source, in the package's
``__pycache__``: a write into site-packages, and on a read-only or shared install a
probe of it. Here the compiled kernels are cached under :func:`cache_dir`::

    $RLPAR_CACHE_DIR/numba/            when RLPAR_CACHE_DIR is set, else
    $XDG_CACHE_HOME/rlpar/numba/       else ~/.cache/rlpar/numba/

in a sub-directory per source directory (two installs never share an entry). Only
rlpar's kernels are affected: numba's global configuration (``NUMBA_CACHE_DIR``,
``numba.config.CACHE_DIR``) is neither read nor changed, so other code's caching is
untouched. When that directory cannot be created or written, the kernels compile in
every process instead (no caching, no error). Nothing is written until a kernel
module is first imported (``rlpar.buffers`` imports them on first use).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from typing import Any

CACHE_ENV = "RLPAR_CACHE_DIR"


def cache_root() -> str:
    """rlpar's cache directory: ``$RLPAR_CACHE_DIR``, else ``$XDG_CACHE_HOME/rlpar``,
    else ``~/.cache/rlpar`` (the XDG base-directory rule; relative values are ignored,
    as that rule says)."""
    explicit = os.environ.get(CACHE_ENV, "")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rlpar")


def cache_dir(source_file: str) -> str:
    """Where the kernels of ``source_file`` are cached: one directory per source
    directory, named like numba's own user-wide locator names it (the directory's
    name and a hash of its path)."""
    directory = os.path.dirname(os.path.abspath(source_file))
    digest = hashlib.sha1(directory.encode()).hexdigest()
    return os.path.join(cache_root(), "numba", f"{os.path.basename(directory)}_{digest}")


def jit(fn: Callable[..., Any]) -> Any:
    """``numba.njit(nogil=True)`` with the disk cache in :func:`cache_dir` (or none,
    where that is not writable)."""
    import numba

    dispatcher = numba.njit(nogil=True)(fn)
    cache = _function_cache(fn)
    if cache is not None:
        # What Dispatcher.enable_caching() does (njit(cache=True)), with our locator
        # in place of numba's, whose first choice is the package's __pycache__.
        dispatcher._cache = cache
    return dispatcher


def _function_cache(fn: Callable[..., Any]) -> Any | None:
    try:
        return _cache_class()(fn)
    except RuntimeError as exc:  # "no locator available": nowhere writable
        if "no locator available" not in str(exc):
            raise
        return None


@functools.cache
def _cache_class() -> type:
    """numba's FunctionCache with our locator as its only one (numba's
    ``NUMBA_CACHE_LOCATOR_CLASSES``, a debugging override, still replaces it)."""
    from numba.core import caching

    class Locator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        """The source file's hash keys the entries (numba's own rule); the place is ours.
        ``from_function`` (the mixin's) returns None where the directory cannot be
        made or written."""

        def __init__(self, py_func: Any, py_file: str) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = cache_dir(py_file)

        def get_cache_path(self) -> str:
            return self._cache_path

    class Impl(caching.CompileResultCacheImpl):
        _locator_classes = [Locator]

    class Cache(caching.FunctionCache):
        _impl_class = Impl

    return Cache
