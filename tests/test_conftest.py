"""The suite's own machinery (tests/conftest.py): the leak check's child listing, on
both of its paths, and the order that puts the long tests first."""

import subprocess
import threading

import conftest
import pytest


@pytest.mark.parametrize("listed", [True, False], ids=["task-children", "every-process"])
def test_child_pids_sees_a_child_forked_by_another_thread_until_it_is_reaped(monkeypatch, listed):
    if not listed:
        monkeypatch.setattr(conftest, "_children_listed", lambda pid: None)
    started: list[subprocess.Popen] = []
    thread = threading.Thread(target=lambda: started.append(subprocess.Popen(["sleep", "30"])))
    thread.start()
    thread.join()
    (child,) = started
    try:
        assert child.pid in conftest.child_pids()  # its thread has exited: still this process's child
    finally:
        child.kill()
        child.wait()
    assert child.pid not in conftest.child_pids()


class _Item:
    def __init__(self, nodeid, timeout=None):
        self.nodeid = nodeid
        self.marks = {} if timeout is None else {"timeout": pytest.mark.timeout(timeout).mark}

    def get_closest_marker(self, name):
        return self.marks.get(name)


def _names(items):
    return [item.nodeid for item in items]


@pytest.mark.parametrize("workers", [None, "1", "2", "3"])
def test_modules_with_long_tests_are_dealt_to_the_front_of_each_workers_share(monkeypatch, workers):
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    items = [_Item("a.py::1"), _Item("a.py::2", 60), _Item("b.py::1"), _Item("b.py::2", 240), _Item("b.py::3"),
             _Item("c.py::1"), _Item("d.py::1", 150), _Item("e.py::1"), _Item("e.py::2"), _Item("e.py::3")]
    before = _names(items)
    conftest.pytest_collection_modifyitems(items)
    after = _names(items)
    assert sorted(after) == sorted(before)  # nothing lost or doubled
    if workers in (None, "1"):  # longest module first, each module whole, the rest in order
        assert after == ["b.py::1", "b.py::2", "b.py::3", "d.py::1", "a.py::1", "a.py::2", "c.py::1",
                         "e.py::1", "e.py::2", "e.py::3"]
    elif workers == "2":  # shares of 5 and 5, as worksteal cuts them
        assert after[:5] == ["b.py::1", "b.py::2", "b.py::3", "a.py::1", "a.py::2"]
        assert after[5:] == ["d.py::1", "c.py::1", "e.py::1", "e.py::2", "e.py::3"]
    else:  # shares of 3, 3 and 4
        assert after[:3] == ["b.py::1", "b.py::2", "b.py::3"]
        assert after[3:6] == ["d.py::1", "a.py::1", "a.py::2"]
        assert after[6:] == ["c.py::1", "e.py::1", "e.py::2", "e.py::3"]
