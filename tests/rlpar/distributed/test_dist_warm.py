"""launch's warm zygotes (rlpar.distributed._warm): forked from one template per
process, each with its own launch's environment, directory, output and restart pipe;
a template that dies costs its launch, not the next one; a killed launcher leaves
nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import dist_launch_programs as programs
import pytest

from rlpar.distributed import _warm, launch
from rlpar.errors import ChildDied
from tests.procs import wait_until_dead


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def where_am_i(tag):
    """A rank's view: its launch's variable, directory, zygote and the zygote's parent."""
    print(f"rank {os.environ['RANK']} says {tag}", flush=True)
    zygote = os.getppid()
    return os.environ.get("RLPAR_TEST_TAG"), os.getcwd(), zygote, _parent_of(zygote)


def kills_its_template(pid_dir):
    """Rank 1 kills the template its zygote was forked from; rank 0 waits to die with it."""
    with open(os.path.join(pid_dir, f"rank{os.environ['RANK']}.pid"), "w") as f:
        f.write(str(os.getpid()))
    if os.environ["RANK"] == "1":
        time.sleep(0.3)
        template = _parent_of(os.getppid())
        with open(f"/proc/{template}/cmdline", "rb") as f:
            if b"rlpar.distributed._template" not in f.read():  # a cold zygote's parent is the launcher
                raise RuntimeError(f"process {template} is no zygote template")
        os.kill(template, signal.SIGKILL)
    time.sleep(60)


def waits_for_a_stop():
    """The stop request this rank gets (None after 10 s without one)."""
    from rlpar.distributed import stops

    deadline = time.monotonic() + 10
    while stops.requested() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    asked = stops.requested()
    return None if asked is None else stops.reason(asked)


@pytest.fixture
def warm(monkeypatch):
    monkeypatch.setenv(_warm.WARM_ENV, "1")


@pytest.mark.timeout(60)
def test_each_launch_forks_from_one_template_with_its_own_env_directory_and_output(warm, tmp_path, monkeypatch,
                                                                                 capfd):
    seen = []
    for tag in ("first", "second"):
        folder = tmp_path / tag
        folder.mkdir()
        monkeypatch.chdir(folder)
        seen.append(launch(where_am_i, nprocs=2, args=(tag,), env={"RLPAR_TEST_TAG": tag}, timeout=50,
                           preload=()))
    for tag, results in zip(("first", "second"), seen):
        assert [r[:2] for r in results] == [(tag, str(tmp_path / tag))] * 2
    zygotes = {r[2] for results in seen for r in results}
    templates = {r[3] for results in seen for r in results}
    assert len(zygotes) == 2 and len(templates) == 1, (zygotes, templates)
    (template,) = templates
    assert template != os.getpid() and _parent_of(template) == os.getpid()
    out = capfd.readouterr().out
    assert all(f"rank {r} says {tag}" in out for r in (0, 1) for tag in ("first", "second"))


@pytest.mark.timeout(60)
def test_a_restartable_rank_of_a_warm_zygote_is_forked_again(warm, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    for _attempt in range(2):  # the second certainly from a template
        for f in pids.iterdir():
            f.unlink()
        (tmp_path / "pids.rank1-done").unlink(missing_ok=True)
        results = launch(programs.rank1_dies_until_restarted, nprocs=2, args=(str(pids), 2),
                         timeout=25, preload=(), restartable={1}, max_restarts=2)
        assert results == [(0, 0, True), (1, 2, True)]
        assert sorted(os.listdir(pids)) == ["rank0.0.pid", "rank1.0.pid", "rank1.1.pid", "rank1.2.pid"]


@pytest.mark.timeout(60)
def test_a_template_that_dies_fails_its_launch_and_the_next_launch_gets_a_new_one(warm, tmp_path):
    launch(programs.rank_and_env, nprocs=1, args=(0,), timeout=25, preload=())  # a template for preload=()
    with pytest.raises(ChildDied):
        launch(kills_its_template, nprocs=2, args=(str(tmp_path),), timeout=25, preload=())
    # Each rank dies with its zygote (PR_SET_PDEATHSIG), a moment after it.
    assert not wait_until_dead([int(path.read_text()) for path in tmp_path.glob("*.pid")])
    assert [r[0] for r in launch(programs.rank_and_env, nprocs=2, args=(5,), timeout=25, preload=())] == [5, 6]


@pytest.mark.timeout(60)
def test_a_killed_launcher_takes_its_template_zygotes_and_ranks_along(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = {[os.path.dirname(programs.__file__)]!r}
        import dist_launch_programs as programs
        from rlpar.distributed import launch
        launch(programs.rank_and_env, nprocs=1, args=(0,), timeout=25, preload=())
        launch(programs.sleeps_forever, nprocs=2, args=({str(tmp_path)!r},), timeout=50, preload=())
    """)
    env = dict(os.environ, **{_warm.WARM_ENV: "1"})
    launcher = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 40
        # Whole pid files only: a rank writes rank<N>.pid.tmp, then renames it.
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        ranks = [int(path.read_text()) for path in tmp_path.glob("*.pid")]
        assert len(ranks) == 2
        zygote = _parent_of(ranks[0])
        template = _parent_of(zygote)
        assert _parent_of(template) == launcher.pid
    finally:
        launcher.kill()
        launcher.wait()
    assert not wait_until_dead([*ranks, zygote, template])


def test_warm_zygotes_can_be_turned_off(monkeypatch, tmp_path):
    monkeypatch.setenv(_warm.WARM_ENV, "0")
    results = launch(where_am_i, nprocs=1, args=("cold",), timeout=25, preload=())
    assert results[0][3] == os.getpid()  # the zygote is this process's own child


@pytest.fixture
def no_templates_yet(monkeypatch):
    """This process's templates as if it had none; the test's own are stopped after it."""
    fresh: dict = {}
    monkeypatch.setattr(_warm, "_templates", fresh)
    yield
    for template in fresh.values():
        template.close()


@pytest.mark.timeout(60)
def test_a_new_kind_of_launch_beyond_the_limit_stops_the_idle_template_used_longest_ago(warm, no_templates_yet,
                                                                                      monkeypatch):
    monkeypatch.setattr(_warm, "_MAX_TEMPLATES", 2)
    parents = {}
    for tag in ("a", "b", "c", "a"):  # "c" needs a third template: "a"'s goes, so "a" gets a new one
        monkeypatch.setenv("TORCH_RLPAR_TEST_TAG", tag)  # read at import time, by its prefix: one template each
        parents.setdefault(tag, []).append(launch(where_am_i, nprocs=1, args=(tag,), timeout=25, preload=())[0][3])
    (a1, a2), (b,), (c,) = parents["a"], parents["b"], parents["c"]
    assert len({a1, a2, b, c}) == 4
    # "c" stopped "a"'s first template, the second "a" stopped "b"'s.
    assert not wait_until_dead([a1, b]) and wait_until_dead([a2, c], timeout=0.5) == [a2, c]


@pytest.mark.timeout(60)
def test_a_stop_sent_the_moment_a_warm_zygote_is_forked_is_not_lost(warm):
    # The launcher signals the zygote as soon as it has its pid (a stop noted before
    # the launch), which may be before the forked child has left the template's
    # dispositions (signals ignored): repeated, since it is a race.
    from rlpar.distributed import stops

    try:
        for _ in range(6):
            stops.forget()
            stops.note(signal.SIGINT)  # what python -m experiments.<job> notes while it prepares
            results = launch(waits_for_a_stop, nprocs=1, timeout=25, preload=(), stop_grace=10)
            assert results == ["interrupted"]
    finally:
        stops.forget()
