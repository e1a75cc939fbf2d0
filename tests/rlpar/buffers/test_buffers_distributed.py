"""Distributed replay across 3 real ranks (TensorPipe RPC on loopback), one world:
sampling equals one buffer in distribution, stale updates are dropped, remote adds
to dedicated shards, shared-frames shards, and a SIGKILLed shard raises or is dropped within the timeout."""

from __future__ import annotations

import pickle

import buffer_programs as programs
import numpy as np
import pytest
from scipy.stats import chisquare

from tests.rlpar.distributed.unsupervised import run_ranks


@pytest.mark.timeout(150)
def test_three_shard_ranks(tmp_path, monkeypatch):
    # The survivors' shutdown waits this long for the killed shard rank (lost), not 10 s.
    monkeypatch.setenv("RLPAR_LOST_S", "3")
    timeout = 10.0
    # Not launch(): it tears the world down when the killed rank dies. The ranks fork
    # from one zygote that imported torch and the buffers, and loaded the replay's
    # compiled kernels, once for all three (as a job's zygote does).
    run_ranks(tmp_path, programs.sharded_world, (150, timeout), nprocs=3, timeout=140,
              preload=("torch", "rlpar.buffers", "rlpar.buffers.trees:kernels"))
    codes = [int((tmp_path / f"exit{rank}").read_text().split()[0]) for rank in range(3)]
    results = []
    for rank in (0, 1):
        with open(tmp_path / f"result{rank}.pkl", "rb") as f:
            status, value = pickle.load(f)
        assert status == "ok", value
        results.append(value)
    assert codes == [0, 0, -9]
    out = results[0]
    assert [r["local_size"] for r in results] == list(programs.SIZES[:2])

    # Frequencies and weights are those of one buffer holding all 20 items.
    leaf = np.concatenate([programs.priorities(r) for r in range(3)]) ** 0.6
    counts = np.bincount(out["actions"], minlength=20)
    assert chisquare(counts, leaf / leaf.sum() * counts.sum()).pvalue > 1e-3
    w = (20 * leaf / leaf.sum()) ** -0.4
    np.testing.assert_allclose(out["weights"], (w / w.max())[out["actions"]], rtol=1e-5)
    assert 0.0 <= out["wait_fraction"] <= 1.0

    # Shard 1 was refilled before the update arrived: the stale update was dropped.
    np.testing.assert_allclose(out["leaves1"], 2.0**0.6)
    if 2 in out["sampled_shards"]:
        assert out["leaves2"].max() == pytest.approx(50.0**0.6)
    assert out["update_errors"] == 0

    # Dedicated "uni" shards on ranks 1, 2; rank 0's adds went to its home shard.
    assert out["uni_len"] == 9
    assert set(out["uni_actions"].tolist()) <= {
        1000,
        1001,
        1002,
        1010,
        1011,
        1012,
        1020,
        1021,
        1022,
    }

    # Shared-frames shards: exact obs/next_obs after the trip over RPC.
    assert out["frames_ok"] and out["frames_shards"] == [0, 1, 2]

    # Dead shard: "raise" names it, "drop" samples the rest; both within the timeout.
    assert out["raise"].startswith("PeerUnavailable") and "rank2" in out["raise"], out["raise"]
    assert out["raise_s"] < timeout + 2 and out["drop_s"] < timeout + 2
    assert out["drop_shards"] in ([0], [1], [0, 1]) and out["drop_len"] == 8
    assert out["drop_update_errors"] == 0
