"""The run directory of a torchrun launch: a restart of the world goes on in its
first attempt's directory; a new launch never writes into an earlier one."""

import os

from experiments.runtime.rundir import RunDir


def test_a_second_launch_with_torchruns_default_run_id_gets_its_own_directory(tmp_path):
    # torchrun's --rdzv-id defaults to "none": two launches in one log dir share the id.
    first = RunDir.for_elastic(str(tmp_path), "a3c", "none", restart=0)
    second = RunDir.for_elastic(str(tmp_path), "a3c", "none", restart=0)
    assert first.path != second.path
    assert os.path.isdir(first.path) and os.path.isdir(second.path)
    # A restart of the second launch's world goes on in the second launch's directory.
    assert RunDir.for_elastic(str(tmp_path), "a3c", "none", restart=1).path == second.path
    assert RunDir.for_elastic(str(tmp_path), "a3c", "none", restart=2).path == second.path


def test_a_restart_without_a_note_here_starts_a_fresh_directory(tmp_path):
    # Rank 0 may come back on another node, whose log dir never saw the first attempt.
    run_dir = RunDir.for_elastic(str(tmp_path), "apex", "job-7", restart=1)
    assert os.path.isdir(run_dir.path)
    assert RunDir.for_elastic(str(tmp_path), "apex", "job-7", restart=2).path == run_dir.path


def test_a_noted_directory_that_was_removed_is_not_reused(tmp_path):
    noted = RunDir.for_elastic(str(tmp_path), "ppo", "r", restart=0)
    os.rmdir(noted.path)
    again = RunDir.for_elastic(str(tmp_path), "ppo", "r", restart=1)
    assert again.path != noted.path and os.path.isdir(again.path)
