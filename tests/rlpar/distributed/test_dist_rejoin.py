"""A rank restarted alone rejoins the running world: it calls its peers' services,
the others never stopped, and every rank leaves cleanly."""

from __future__ import annotations

import dist_rejoin_programs as programs
import pytest

from rlpar.distributed import World, current_world, launch


@pytest.mark.timeout(90)
def test_a_killed_rank_rejoins_and_calls_the_running_ranks():
    results = launch(programs.rank2_dies_once, nprocs=3, args=(40,), timeout=80,
                     restartable={1, 2}, max_restarts=1)
    (r0, restarts0, rejoined0, rejoinable0, calls), one, two = results
    assert (r0, restarts0, rejoined0, rejoinable0) == (0, 0, False, True)
    assert one == (1, 0, False, True, None)
    assert two == (2, 1, True, True, None)
    # Rank 1 made all its calls to the same rank-0 process; rank 2's first process made
    # half before it died and its replacement made all of them again.
    assert calls == {(1, 0): 40, (2, 0): 20, (2, 1): 40}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rank": 0, "rank_restarts": 1}, "rank 0 hosts"),
        ({"rank": 1, "rank_restarts": -1}, "rank_restarts"),
        ({"rank": 1, "rank_restarts": 1, "process_group_backend": "gloo"}, "process group"),
        ({"rank": 1, "rank_restarts": 1, "device_maps": {"rank0": {0: 0}}}, "device_maps"),
    ],
)
def test_a_rejoining_rank_refuses_what_it_cannot_do(kwargs, match):
    with pytest.raises(ValueError, match=match):
        World(world_size=2, master_port=29500, **kwargs)
    with pytest.raises(RuntimeError, match="no rlpar World"):
        current_world()
