"""The packages import with no side effects and algorithms never import transport."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch.distributed", "multiprocessing", "rlpar.distributed", "rlpar.parallel")


@pytest.mark.parametrize("path", sorted((ROOT / "algorithms").rglob("*.py")), ids=str)
def test_algorithms_never_import_transport(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            assert not name.startswith(FORBIDDEN), f"{path} imports {name}"


def test_top_level_packages_import():
    import algorithms  # noqa: F401
    import envs  # noqa: F401
    import experiments  # noqa: F401
    import rlpar  # noqa: F401
    from rlpar.protocols import Buffer, ParameterStore, Sample  # noqa: F401
