"""Algorithm tests run tiny networks: one torch intra-op thread each."""

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    yield
