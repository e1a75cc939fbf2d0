"""The suite's own machinery (tests/conftest.py): the leak check's child listing, on
both of its paths."""

import subprocess
import threading

import pytest


@pytest.fixture
def conftest(request):
    """tests/conftest.py as pytest loaded it (other conftest modules share its name)."""
    (module,) = [plugin for plugin in request.config.pluginmanager.get_plugins()
                 if getattr(plugin, "__file__", "") == str(request.config.rootpath / "tests" / "conftest.py")]
    return module


@pytest.mark.parametrize("listed", [True, False], ids=["task-children", "every-process"])
def test_child_pids_sees_a_child_forked_by_another_thread_until_it_is_reaped(monkeypatch, conftest, listed):
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
