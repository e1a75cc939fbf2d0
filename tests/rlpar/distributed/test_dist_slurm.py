"""Slurm's compressed host lists and an srun task's environment as a world
(rlpar.distributed.slurm, rlpar.distributed.launcher_env)."""

from __future__ import annotations

import pytest

from rlpar.distributed.launcher_env import LauncherEnv, from_environ
from rlpar.distributed.slurm import (
    PORT_BASE,
    PORT_SPAN,
    default_port,
    first_host,
    hostlist,
    tasks_per_node,
)


@pytest.mark.parametrize("text, hosts", [
    ("gpu5", ["gpu5"]),
    ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),  # no padding: the first number has none
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-n[1,3]", ["rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"]),
    ("a[1]b,c.d-e_f", ["a1b", "c.d-e_f"]),
])
def test_a_host_list_expands_as_slurm_writes_it(text, hosts):
    assert hostlist(text) == hosts
    assert first_host(text) == hosts[0]


@pytest.mark.parametrize("text, match", [
    ("", "empty host list"),
    ("node[01-03", r"'\[' is never closed"),
    ("node01]", r"'\]' without '\['"),
    ("node[0[1]]", r"nested '\['"),
    ("node[]", r"empty brackets"),
    ("node[a-c]", r"'a-c' is not a number or a range"),
    ("node[1-2-3]", r"'1-2-3' is not a number or a range"),
    ("node[5-3]", "runs backwards"),
    ("node1,,node2", "empty host name"),
    ("node1,", "empty host name"),
    ("node 1", r"' ' cannot be part of a host name"),
])
def test_a_malformed_host_list_is_refused_naming_the_problem(text, match):
    with pytest.raises(ValueError, match=match):
        hostlist(text)


def test_tasks_per_node_and_the_default_port():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert tasks_per_node("4") == [4]
    with pytest.raises(ValueError, match="not N or N"):
        tasks_per_node("2(3)")
    assert default_port("123456") == PORT_BASE + 123456 % PORT_SPAN
    assert all(PORT_BASE <= default_port(str(j)) < PORT_BASE + PORT_SPAN < 32768 for j in (0, 14999, 10**9))
    with pytest.raises(ValueError, match="SLURM_JOB_ID must be a number"):
        default_port("12a")


_TASK = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0",
         "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_ID": "4242",
         "SLURM_JOB_NODELIST": "node[07-08]"}


def test_an_srun_task_is_a_rank_of_the_step_whose_store_is_on_its_first_node():
    assert from_environ(_TASK) == LauncherEnv("srun", rank=5, world_size=8, local_rank=1, local_world_size=4,
                                              master_addr="node07", master_port=default_port("4242"))
    # The step's own node list, MASTER_ADDR and MASTER_PORT win.
    step = dict(_TASK, SLURM_STEP_NODELIST="gpu[3-4]")
    assert from_environ(step).master_addr == "gpu3"
    given = from_environ(dict(step, MASTER_ADDR="10.0.0.9", MASTER_PORT="29400"))
    assert (given.master_addr, given.master_port) == ("10.0.0.9", 29400)


def test_torchruns_variables_win_over_slurms_and_no_launcher_is_none():
    torchrun = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500", "LOCAL_RANK": "1"}
    found = from_environ(dict(_TASK, **torchrun))
    assert (found.launcher, found.rank, found.world_size, found.local_world_size) == ("torchrun", 1, 2, 2)
    assert from_environ({}) is None
    # The batch script (or an allocation's shell) is not a task of a step.
    assert from_environ({k: v for k, v in _TASK.items() if k != "SLURM_STEP_ID"}) is None


@pytest.mark.parametrize("change, error, match", [
    ({"SLURM_PROCID": "8"}, ValueError, r"SLURM_PROCID must be in \[0, SLURM_NTASKS=8\)"),
    ({"SLURM_NTASKS": "x"}, ValueError, "SLURM_NTASKS must be an integer"),
    ({"SLURM_JOB_NODELIST": "node[07-"}, ValueError, r"SLURM_JOB_NODELIST: .*never closed.*set MASTER_ADDR"),
    ({"SLURM_JOB_NODELIST": ""}, RuntimeError, "no host for the store"),
    ({"SLURM_JOB_ID": ""}, RuntimeError, "no port for the store"),
    ({"SLURM_NODEID": "2"}, ValueError, "SLURM_NODEID 2 is not a node"),
    ({"MASTER_PORT": "70000"}, ValueError, "MASTER_PORT must be in 1..65535"),
])
def test_an_srun_task_with_a_bad_variable_is_refused_naming_it(change, error, match):
    with pytest.raises(error, match=match):
        from_environ(dict(_TASK, **change))


def test_torchrun_with_variables_missing_says_which():
    with pytest.raises(RuntimeError, match=r"\['MASTER_ADDR', 'MASTER_PORT'\] are not set"):
        from_environ({"RANK": "0", "WORLD_SIZE": "2"})
    assert from_environ({"RANK": "0"}) is None  # not a launcher's: RANK alone may mean anything
