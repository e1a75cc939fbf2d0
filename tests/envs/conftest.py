"""Make ``import envs`` find the package, not this test folder.

Under the plain ``pytest`` entry point the repository root is not on sys.path and the
editable-install finder runs after the path finder, so ``tests/envs`` (no __init__.py)
would shadow the real ``envs`` package as a namespace package.
"""

import pathlib
import sys

ROOT = str(pathlib.Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
