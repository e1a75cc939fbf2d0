"""The slow-first test order (tests/durations.py) on made-up durations."""

import pytest

from tests.durations import SLOW_S, order, parse


def test_each_workers_share_starts_with_slow_tests_of_about_equal_total_time():
    ids = [f"t{i}" for i in range(10)]
    seconds = {"t1": 10.0, "t3": 9.0, "t5": 2.0, "t8": 1.5, "t9": 0.1}
    run = [ids[i] for i in order(ids, seconds, workers=2)]
    assert sorted(run) == sorted(ids)  # every test once
    first, second = run[:5], run[5:]  # worksteal's contiguous shares
    assert first[:2] == ["t1", "t8"] and second[:2] == ["t3", "t5"]
    # The fast ones keep pytest's order within and across the shares.
    assert first[2:] + second[2:] == ["t0", "t2", "t4", "t6", "t7", "t9"]


def test_one_worker_runs_slowest_first_and_unknown_durations_change_nothing():
    ids = ["a", "b", "c"]
    assert order(ids, {"c": 3.0, "b": SLOW_S}, workers=1) == [2, 1, 0]
    assert order(ids, {}, workers=3) == [0, 1, 2]
    with pytest.raises(ValueError, match="workers must be >= 1"):
        order(ids, {}, workers=0)


def test_the_durations_report_is_summed_per_test():
    lines = ["2.50s call     tests/a.py::test_x[1-2]", "0.50s setup    tests/a.py::test_x[1-2]",
             "(10 durations < 0.005s hidden.)", "1.00s teardown tests/b.py::test_y"]
    assert parse(lines) == {"tests/a.py::test_x[1-2]": 3.0, "tests/b.py::test_y": 1.0}
