"""The packages import with no side effects and algorithms never import transport."""

import ast
import functools
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch.distributed", "multiprocessing", "rlpar.distributed", "rlpar.parallel")


@functools.cache
def _nodes(path: pathlib.Path) -> tuple[ast.AST, ...]:
    """The import and attribute nodes of ``path``, what the checks here read, parsed
    once per session: several tests read the same files (the benchmarks are modules
    of experiments too). Not every node: a session's worth of whole trees kept alive
    costs the garbage collector more than parsing again."""
    return tuple(node for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, (ast.Import, ast.ImportFrom, ast.Attribute)))


@pytest.mark.parametrize("path", sorted((ROOT / "algorithms").rglob("*.py")), ids=str)
def test_algorithms_never_import_transport(path):
    for node in _nodes(path):
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


JOBS = ("apex", "a3c", "a2c", "maddpg", "impala", "ppo", "pqn")


@pytest.mark.parametrize("job", JOBS)
def test_every_job_is_a_config_a_run_and_roles_on_the_shared_runtime(job):
    """One pattern: ``experiments/<job>.py`` holds the typed config, ``run``, ``main``
    and ``job()``, the runtime ``Job`` (its roles: the actor-learner program's, or the
    job's own in ``experiments/roles/<job>.py``)."""
    import dataclasses
    import importlib

    from experiments.runtime.job import Job

    entry = importlib.import_module(f"experiments.{job}")
    assert isinstance(entry.job(), Job) and entry.job().name == job
    configs = [v for v in vars(entry).values() if isinstance(v, type) and dataclasses.is_dataclass(v)
               and v.__module__ == entry.__name__ and "run" in {f.name for f in dataclasses.fields(v)}]
    assert len(configs) == 1, f"experiments/{job}.py should define one job config with a run section"
    for name in ("run", "main", "format_summary"):
        assert callable(getattr(entry, name, None)), f"experiments.{job}.{name}"
    source = (ROOT / "experiments" / f"{job}.py").read_text()
    assert "rlpar.distributed" not in source  # transport lives in the roles and the runtime


def test_experiments_hold_only_job_entry_points():
    allowed = {"__init__.py", "apex.py", "a3c.py", "a2c.py", "maddpg.py", "impala.py", "ppo.py", "pqn.py", "evaluate.py"}
    modules = {p.name for p in (ROOT / "experiments").glob("*.py")}
    assert modules <= allowed, f"shared job machinery belongs in experiments/runtime: {modules - allowed}"


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """Every module ``path`` imports, function-local imports included: ``from a.b
    import c`` is an edge to ``a.b.c`` when that is a module (``from experiments.roles
    import apex`` imports the roles, not just their package), else to ``a.b``."""
    names = set()
    for node in _nodes(path):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & modules
            names.update(subs or {node.module})
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_import_cycles_between_modules_of_the_packages():
    modules = {}
    for package in ("algorithms", "envs", "rlpar", "experiments"):
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            modules[name] = path
    graph = {name: {i for i in _imports(path, set(modules)) if i in modules and i != name}
             for name, path in modules.items() if not name.endswith("__init__")}
    # Package __init__ re-exports are not cycles of their own; ignore edges into packages.
    packages = {n for n, p in modules.items() if p.name == "__init__.py"}
    graph = {n: {i for i in deps if i not in packages} for n, deps in graph.items() if n not in packages}
    seen, stack, cycles = set(), [], []

    def visit(node):
        if node in stack:
            cycles.append(stack[stack.index(node):] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        stack.append(node)
        for dep in graph.get(node, ()):
            visit(dep)
        stack.pop()

    for node in sorted(graph):
        visit(node)
    assert not cycles, f"import cycles: {cycles}"


PUBLIC_JOB_MODULES = {f"experiments.{job}" for job in JOBS} | {"experiments.evaluate"}


def _public(module: str) -> bool:
    """What code outside the jobs may import from ``experiments``: the job entry points,
    the runtime, the actor-learner program's public names
    (``experiments.roles.actor_learner.__all__``) and the benchmarks' own modules. The
    other role modules are internal: changing them must not break a benchmark."""
    return (module in PUBLIC_JOB_MODULES or module == "experiments.roles.actor_learner"
            or module.startswith(("experiments.runtime", "experiments.bench")))


OURS = ("rlpar", "envs", "algorithms", "experiments")
BENCH_MODULES = sorted((ROOT / "experiments" / "bench").rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _ours(module: str) -> bool:
    return module.split(".")[0] in OURS and not module.startswith("experiments.bench")


@pytest.mark.parametrize("path", BENCH_MODULES, ids=lambda p: str(p.relative_to(ROOT / "experiments" / "bench")))
def test_benchmarks_use_only_public_api(path):
    """A benchmark measures what a user gets: it imports the public modules of the
    packages and no ``_private`` name, module or attribute of theirs (its own are its
    business)."""
    from experiments.roles import actor_learner

    modules_bound = set()  # local names bound to one of our modules
    for node in _nodes(path):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "experiments":
                modules = [f"experiments.{alias.name}" for alias in node.names]
            else:
                modules = [node.module]
            for module in modules:
                if module.startswith("experiments."):
                    assert _public(module), f"{path.name} imports internal {module}"
            if _ours(node.module):
                assert not any(_private(part) for part in node.module.split(".")), \
                    f"{path.name} imports the private module {node.module}"
                private = [a.name for a in node.names if _private(a.name)]
                assert not private, f"{path.name} imports private {private} from {node.module}"
                if _is_package(node.module):  # from rlpar import buffers: a module bound
                    modules_bound.update(a.asname or a.name for a in node.names
                                         if importlib.util.find_spec(f"{node.module}.{a.name}"))
            if node.module == "experiments.roles.actor_learner":
                private = [a.name for a in node.names if a.name not in actor_learner.__all__]
                assert not private, f"{path.name} imports {private}, not in actor_learner.__all__"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("experiments."):
                    assert _public(alias.name), f"{path.name} imports internal {alias.name}"
                if _ours(alias.name):
                    assert not any(_private(part) for part in alias.name.split(".")), \
                        f"{path.name} imports the private module {alias.name}"
                    modules_bound.add(alias.asname or alias.name.split(".")[0])
    for node in _nodes(path):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name):
            assert node.value.id not in modules_bound, \
                f"{path.name} uses {node.value.id}.{node.attr}, private to that module"


def _is_package(module: str) -> bool:
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.submodule_search_locations is not None


AGENTS = ("dqn", "td3", "impala", "ppo", "pqn", "a2c", "maddpg", "sac", "r2d2")


@pytest.mark.parametrize("agent", AGENTS)
def test_each_agent_folder_exports_its_names_and_cites_its_paper(agent):
    """``algorithms/<agent>/``: its learning code, config and builder, one package whose
    ``__all__`` all resolve and whose docstring names the paper (authors and year)."""
    import importlib
    import re

    package = importlib.import_module(f"algorithms.{agent}")
    assert package.__all__ and all(hasattr(package, name) for name in package.__all__)
    assert re.search(r"et al\. (19|20)\d\d|, (19|20)\d\d", package.__doc__), package.__doc__
    assert set(AGENTS) == {p.parent.name for p in (ROOT / "algorithms").glob("*/__init__.py")}
