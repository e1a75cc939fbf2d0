"""launch: results by rank, failures reported with tracebacks, every rank torn down."""

from __future__ import annotations

import os
import sys

import dist_launch_programs as programs
import pytest

from rlpar.distributed import launch
from rlpar.errors import ChildDied, ChildError
from tests.procs import is_dead

# The entries here need no torch: skip preloading it so each launch takes a fraction
# of a second.


def _gone(pid_dir):
    """Every rank that recorded its pid is dead (gone, or a zombie)."""
    for name in os.listdir(pid_dir):
        pid = int(open(os.path.join(pid_dir, name)).read())
        assert is_dead(pid), f"rank pid {pid} ({name}) is still running"
    return True


@pytest.mark.timeout(30)
def test_results_come_back_in_rank_order_with_torchrun_style_environment(monkeypatch):
    monkeypatch.setenv("RLPAR_RUN_SECRET", "f" * 32)  # e.g. exported for torchrun: not reused
    results = launch(programs.rank_and_env, nprocs=3, args=(10,), timeout=25, preload=())
    assert [r[0] for r in results] == [10, 11, 12]
    envs = [r[1] for r in results]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1
    assert {e["OMP_NUM_THREADS"] for e in envs} == {os.environ.get("OMP_NUM_THREADS", "1")}
    # One fresh run secret for all ranks of a launch (in their environment only).
    (secret,) = {e["RLPAR_RUN_SECRET"] for e in envs}
    assert len(secret) == 32 and int(secret, 16) and secret != "f" * 32
    again = launch(programs.rank_and_env, nprocs=1, args=(0,), timeout=25, preload=())
    assert again[0][1]["RLPAR_RUN_SECRET"] not in (secret, "f" * 32)
    chosen = launch(programs.rank_and_env, nprocs=1, args=(0,), timeout=25, preload=(),
                    env={"RLPAR_RUN_SECRET": "0123456789abcdef" * 2})
    assert chosen[0][1]["RLPAR_RUN_SECRET"] == "0123456789abcdef" * 2


@pytest.mark.timeout(30)
def test_a_rank_that_raises_gives_child_error_with_its_traceback_and_no_orphans(tmp_path):
    with pytest.raises(ChildError) as info:
        launch(programs.rank1_raises, nprocs=2, args=(str(tmp_path),), timeout=25, preload=())
    err = info.value
    assert not isinstance(err, ChildDied)
    assert err.child_name == "rank1"
    assert "rank 1 broke on purpose" in err.child_traceback
    assert "rank1_raises" in err.child_traceback
    assert len(os.listdir(tmp_path)) == 2 and _gone(tmp_path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("cause_after", "grace", "reported", "text"),
    [
        (1.0, None, "rank0", "rank 0 is the cause"),  # rank 1's echo exits first; rank 0 is the cause
        # No cause within the grace: the echo is reported. The grace cut from 5 s to 2 s:
        # the cause comes at 30 s either way, so waiting longer shows nothing more.
        (30.0, 2.0, "rank1", "PeerUnavailable"),
    ],
)
def test_a_lost_peer_waits_for_the_failure_it_echoes(tmp_path, monkeypatch, cause_after, grace, reported, text):
    if grace is not None:
        # The module, not the launch function that rlpar.distributed exports under its name.
        monkeypatch.setattr(sys.modules["rlpar.distributed.launch"], "_ECHO_GRACE_S", grace)
    with pytest.raises(ChildError) as info:
        launch(programs.peer_loss_echoes_first, nprocs=2, args=(str(tmp_path), cause_after),
               timeout=50, preload=())
    assert info.value.child_name == reported
    assert text in str(info.value)
    assert _gone(tmp_path)


@pytest.mark.timeout(30)
def test_a_rank_killed_by_a_signal_gives_child_died(tmp_path):
    with pytest.raises(ChildDied) as info:
        launch(programs.rank1_killed, nprocs=2, args=(str(tmp_path),), timeout=25, preload=())
    assert info.value.child_name == "rank1"
    assert info.value.exitcode == -9
    assert "SIGKILL" in str(info.value)
    assert _gone(tmp_path)


@pytest.mark.timeout(30)
def test_a_death_gives_the_lead_death_grace_to_save_then_kills_the_rest(tmp_path):
    # As torchrun does: the others are asked to stop (as by SIGTERM), and the lead's
    # save is not cut short; its PeerUnavailable is the death's echo.
    with pytest.raises(ChildDied) as info:
        launch(programs.rank1_dies_while_rank0_works, nprocs=2, args=(str(tmp_path), 1.0), timeout=25,
               preload=(), death_grace=10)
    assert info.value.child_name == "rank1" and "SIGKILL" in str(info.value)
    assert (tmp_path / "saved").read_text() == "terminated"
    # A lead that does not stop is killed once the grace is over.
    (tmp_path / "saved").unlink()
    with pytest.raises(ChildDied, match="rank 1"):
        launch(programs.rank1_dies_while_rank0_works, nprocs=2, args=(str(tmp_path), None), timeout=25,
               preload=(), death_grace=1)
    assert not (tmp_path / "saved").exists() and _gone(tmp_path)
    with pytest.raises(ValueError, match="death_grace"):
        launch(programs.exits_early, nprocs=1, preload=(), death_grace=-1)


@pytest.mark.timeout(30)
def test_a_rank_that_exits_without_result_gives_child_died():
    with pytest.raises(ChildDied) as info:
        launch(programs.exits_early, nprocs=1, timeout=25, preload=())
    assert info.value.exitcode == 3


@pytest.mark.timeout(30)
def test_an_unpicklable_result_is_reported_not_lost():
    with pytest.raises(ChildError, match="UnpicklableResult"):
        launch(programs.returns_unpicklable, nprocs=1, timeout=25, preload=())


@pytest.mark.timeout(30)
def test_timeout_kills_every_rank(tmp_path):
    with pytest.raises(TimeoutError):
        launch(programs.sleeps_forever, nprocs=2, args=(str(tmp_path),), timeout=1.5, preload=())
    assert _gone(tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"nprocs": 0}, "nprocs"),
        ({"nprocs": -1}, "nprocs"),
        ({"nprocs": 2, "timeout": -1.0}, "timeout"),
        ({"nprocs": 2, "timeout": 0}, "timeout"),
        ({"nprocs": 2, "master_port": 70000}, "master_port"),
    ],
)
def test_invalid_launch_arguments_fail_before_spawning(kwargs, match):
    with pytest.raises(ValueError, match=match):
        launch(programs.sleeps_forever, args=("/nonexistent",), preload=(), **kwargs)


def test_entry_must_be_callable_and_args_a_tuple():
    with pytest.raises(TypeError, match="entry"):
        launch("not callable", nprocs=1)
    with pytest.raises(TypeError, match="args"):
        launch(programs.exits_early, nprocs=1, args=[1])
    with pytest.raises(TypeError, match="preload"):
        launch(programs.exits_early, nprocs=1, preload="torch")


@pytest.mark.timeout(30)
def test_a_restartable_rank_that_dies_is_forked_again_while_the_others_go_on(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    results = launch(programs.rank1_dies_until_restarted, nprocs=2, args=(str(pids), 2),
                     timeout=25, preload=(), restartable={1}, max_restarts=2)
    # Rank 0 ran once, undisturbed; rank 1 came back with its RANK and its restart count.
    assert results == [(0, 0, True), (1, 2, True)]
    assert sorted(os.listdir(pids)) == ["rank0.0.pid", "rank1.0.pid", "rank1.1.pid", "rank1.2.pid"]
    assert _gone(pids)


@pytest.mark.timeout(30)
def test_a_restartable_rank_that_dies_after_another_returned_is_neither_restarted_nor_a_failure(tmp_path, caplog):
    # The program was ending: a restart of the rank (or of the world) has nothing to do.
    first, again = tmp_path / "first", tmp_path / "again"
    first.mkdir(), again.mkdir()
    with caplog.at_level("WARNING"):
        results = launch(programs.rank1_dies_after_rank0_returned, nprocs=2, args=(str(first),),
                         timeout=25, preload=(), restartable={1}, max_restarts=3)
    assert results == ["done", None]
    assert sorted(os.listdir(first)) == ["rank0.0.pid", "rank1.0.pid"]
    assert "rank 1 was killed by signal SIGKILL after rank(s) [0] returned" in caplog.text
    # A rank not named restartable still ends the launch, result or not.
    with pytest.raises(ChildDied, match="rank 1"):
        launch(programs.rank1_dies_after_rank0_returned, nprocs=2, args=(str(again),),
               timeout=25, preload=(), restartable={0}, max_restarts=3)
    assert _gone(first) and _gone(again)


@pytest.mark.timeout(30)
def test_a_rank_that_keeps_dying_ends_the_launch_after_max_restarts(tmp_path):
    from rlpar.errors import RankKeepsDying

    with pytest.raises(RankKeepsDying) as info:
        launch(programs.rank1_dies_until_restarted, nprocs=2, args=(str(tmp_path), 99),
               timeout=25, preload=(), restartable={1}, max_restarts=2)
    assert info.value.child_name == "rank1" and info.value.restarts == 2
    assert "SIGKILL" in str(info.value) and "max_restarts=2" in str(info.value)
    assert len([p for p in os.listdir(tmp_path) if p.startswith("rank1.")]) == 3
    assert _gone(tmp_path)


@pytest.mark.timeout(30)
def test_restarts_are_for_restartable_ranks_that_died_not_for_raises_or_other_ranks(tmp_path):
    # A raise is a bug: a restart would only repeat it.
    with pytest.raises(ChildError) as info:
        launch(programs.rank1_raises, nprocs=2, args=(str(tmp_path),), timeout=25, preload=(),
               restartable={1}, max_restarts=3)
    assert not isinstance(info.value, ChildDied) and info.value.child_name == "rank1"
    # A rank not named restartable that dies ends the launch as before.
    with pytest.raises(ChildDied) as info:
        launch(programs.rank1_killed, nprocs=2, args=(str(tmp_path),), timeout=25, preload=(),
               restartable={0}, max_restarts=3)
    assert info.value.child_name == "rank1" and type(info.value) is ChildDied
    # A rank that died before it joined (during the world's start) is not replaced:
    # the others are waiting in the start for the process that died.
    with pytest.raises(ChildDied) as info:
        launch(programs.rank1_dies_until_restarted, nprocs=2, args=(str(tmp_path), 1, False),
               timeout=25, preload=(), restartable={1}, max_restarts=3)
    assert info.value.child_name == "rank1" and type(info.value) is ChildDied
    # No restarts allowed: the first death ends it, a plain ChildDied.
    with pytest.raises(ChildDied) as info:
        launch(programs.rank1_killed, nprocs=2, args=(str(tmp_path),), timeout=25, preload=(),
               restartable={1}, max_restarts=0)
    assert type(info.value) is ChildDied
    assert _gone(tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"restartable": {2}}, "restartable"),
        ({"restartable": {-1}}, "restartable"),
        ({"restartable": {True}}, "restartable"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": 1.5}, "max_restarts"),
    ],
)
def test_invalid_restart_arguments_fail_before_spawning(kwargs, match):
    with pytest.raises(ValueError, match=match):
        launch(programs.sleeps_forever, nprocs=2, args=("/nonexistent",), preload=(), **kwargs)


@pytest.mark.timeout(90)
def test_a_restartable_rank_that_dies_while_stopping_is_not_restarted_nor_a_failure(tmp_path, ctrl_c):
    # Rank 1 dies as the stop reaches it: the stop goes on with rank 0's result.
    # (The launch's timeout bounds its stop's grace too: well above a loaded machine's start.)
    ctrl_c.when(lambda: os.path.exists(f"{tmp_path}.ready0") and os.path.exists(f"{tmp_path}.ready1"))
    with ctrl_c.contained():
        results = launch(programs.rank1_dies_when_asked_to_stop, nprocs=2, args=(str(tmp_path),),
                         timeout=60, preload=(), restartable={1}, max_restarts=3, stop_grace=10)
    assert results == ["stopped", None]
    assert sorted(os.listdir(tmp_path)) == ["rank0.0.pid", "rank1.0.pid"]
    assert _gone(tmp_path)


@pytest.mark.timeout(90)
def test_the_helper_forks_no_rank_again_once_a_ctrl_c_reached_it(tmp_path, ctrl_c):
    # The launcher sees rank 1's death before its own Ctrl-C and asks for a restart;
    # the helper, which got the Ctrl-C first, hands the death back instead.
    ctrl_c.when((tmp_path / "rank1.0.pid").exists, after=1.0)
    with ctrl_c.contained():
        results = launch(programs.rank1_dies_after_a_ctrl_c_reached_the_helper, nprocs=2,
                         args=(str(tmp_path),), timeout=60, preload=(), restartable={1},
                         max_restarts=10**6, stop_grace=10)
    assert results == ["stopped", None]
    assert sorted(os.listdir(tmp_path)) == ["rank0.0.pid", "rank1.0.pid"]
    assert _gone(tmp_path)


@pytest.mark.timeout(30)
def test_a_ctrl_c_or_a_failure_while_a_rank_leaves_keeps_the_result_it_returned():
    assert launch(programs.returns_then_is_hit_while_leaving, nprocs=2, timeout=25, preload=()) == [100, 101]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("warm", ["0", "1"])  # a fresh zygote; one forked from a template
def test_a_module_function_preload_entry_on_the_launchers_sys_path_runs_once_before_the_ranks_are_forked(
        monkeypatch, warm):
    # The entry's module is found only on the launcher's sys.path (not PYTHONPATH, not the
    # working directory), as a module beside a launching script is; a cheap entry of its
    # own, not the jobs' rlpar.buffers.trees:kernels, whose numba compile costs seconds.
    monkeypatch.setenv("RLPAR_WARM_ZYGOTE", warm)
    monkeypatch.syspath_prepend(os.path.dirname(programs.__file__))
    (marked0, rank0), (marked1, rank1) = launch(programs.preloaded_in, nprocs=2, timeout=50,
                                                preload=("dist_launch_programs:mark_preloaded",))
    assert isinstance(marked0, int) and marked0 == marked1 and marked0 not in (rank0, rank1)
    # A plain module entry imports the module and calls nothing.
    [(marked, _)] = launch(programs.preloaded_in, nprocs=1, timeout=25, preload=("dist_launch_programs",))
    assert marked is None


@pytest.mark.parametrize("entry", ["rlpar.buffers.trees:", ":kernels", "a:b:c", "rlpar buffers", "a.:f"])
def test_a_malformed_preload_entry_is_refused_before_anything_starts(entry):
    with pytest.raises(ValueError, match="'module' or 'module:function'"):
        launch(programs.rank_and_env, nprocs=1, args=(0,), preload=(entry,))
