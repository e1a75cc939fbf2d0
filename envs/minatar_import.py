"""Import MinAtar without its display libraries, which load on first use instead.

``minatar.environment`` and ``minatar.gym`` import ``matplotlib.pyplot`` and
``seaborn`` (which brings ``scipy.stats``) when they are imported, only for their
human display (``Environment.display_state``, ``BaseEnv.render``). That took about
2 s of CPU (of 2.6 s for ``import minatar``) in every process that made a MinAtar
env: each actor rank, env worker, bench trainer and evaluator, none of which draws.

:func:`import_minatar` imports ``minatar.gym`` with a stand-in for each of those two
modules that imports the real one when an attribute is first read, so a render still
works. The stand-ins leave ``sys.modules`` once minatar has them: an ``import
seaborn`` elsewhere, later, gets the real module.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

DISPLAY_MODULES = ("seaborn", "matplotlib.pyplot")
_lock = threading.Lock()  # two threads registering MinAtar ids: one puts stand-ins in, and takes them out


class OnFirstUse(types.ModuleType):
    """Stands for the module of its name; the first attribute read imports that
    module (once this stand-in is out of ``sys.modules``) and reads it there."""

    def __getattr__(self, attr: str):
        if attr.startswith("__") or sys.modules.get(self.__name__) is self:
            raise AttributeError(attr)
        return getattr(importlib.import_module(self.__name__), attr)


def import_minatar() -> None:
    """``import minatar.gym`` (and so ``minatar.environment``) with the display
    modules it imports standing in, where they are installed and not yet imported."""
    with _lock:
        if sys.modules.get("minatar.gym") is not None:  # None: imports of it fail, as they should
            return
        stand_ins = {name: OnFirstUse(name) for name in DISPLAY_MODULES
                     if name not in sys.modules and _installed(name)}
        sys.modules.update(stand_ins)
        try:
            importlib.import_module("minatar.gym")
        finally:
            for name, module in stand_ins.items():
                if sys.modules.get(name) is module:
                    del sys.modules[name]


def _installed(name: str) -> bool:
    # The top-level package only: finding a submodule would import its package.
    return importlib.util.find_spec(name.partition(".")[0]) is not None
