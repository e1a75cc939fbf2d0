"""What an install ships besides the code (the license and the PEP 561 markers) and
what it leaves out (the benchmarks)."""

import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("rlpar", "envs", "algorithms", "experiments")


def test_the_license_and_the_typed_markers_are_there_and_declared():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert project["project"]["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) 2026 the rlpar authors" in text
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["*"]
    for package in PACKAGES:
        assert (ROOT / package / "py.typed").is_file(), package


@pytest.mark.timeout(60)
def test_the_wheel_holds_the_license_and_every_typed_marker_and_no_benchmark(tmp_path):
    """A real build (a few seconds, no network: the installed setuptools) of a copy of
    the tree, so the checkout gets no build/ or egg-info."""
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("PEP 639 license-files needs setuptools >= 77")
    source = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, source / name, ignore=skip)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(tmp_path / "dist"), str(source)],
                   check=True, timeout=50)
    (wheel,) = (tmp_path / "dist").glob("rlpar-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"{package}/py.typed" for package in PACKAGES} <= names
    # Every module ships, the agent folders' (algorithms/<agent>/) too: a folder the
    # package finder misses (no __init__.py) would be left out of the wheel.
    modules = {path.relative_to(source).as_posix() for name in PACKAGES for path in (source / name).rglob("*.py")
               if not path.relative_to(source).as_posix().startswith("experiments/bench/")}
    assert not modules - names, sorted(modules - names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)[:5]
    assert "experiments/runtime/__init__.py" in names  # the packages' code is there ...
    bench = sorted(n for n in names if n.startswith("experiments/bench"))
    assert not bench, f"the benchmarks run from a checkout, not from the wheel: {bench[:5]}"
