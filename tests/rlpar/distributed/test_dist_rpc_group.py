"""RpcGroup across launched ranks: services, errors, pickled handles, pairs, barriers."""

from __future__ import annotations

import dist_programs as programs
import pytest

from rlpar.distributed import launch


@pytest.mark.timeout(90)
def test_services_errors_pickling_pairs_and_barriers_across_three_ranks():
    results = launch(programs.rpc_roundtrips, nprocs=3, timeout=80)
    r0, r1, r2 = results
    assert [r["name"] for r in results] == ["rank0", "rank1", "rank2"]
    assert r0["names"] == r1["names"] == r2["names"] == ["rank0", "rank1", "rank2"]
    assert r0["call"] == 49
    assert r0["kwargs"] == [9.0, 9.0]
    assert r0["async"] == [i * i for i in range(20)]
    message, host, remote_tb = r0["remote"]
    assert host == "rank1" and "KeyError" in message and "'fail'" in message
    assert "fail_with_key_error" in remote_tb and "missing thing 5" in remote_tb
    assert "missing thing 6" in r0["remote_async"]
    assert r0["missing"][0] == "ServiceNotFound" and "'nobody'" in r0["missing"][1]
    assert "'svc'" in r0["missing"][1]
    assert r0["bad_timeout"][0] == "ValueError"
    assert r0["is_registered"] == (True, False)
    assert r0["paired"] == [0.0, 1.0, 2.0, 3.0]
    assert r0["paired_missing"][0] == "ServiceNotFound"
    # The group handle was pickled to rank 2, resolved there and used to call rank 1.
    assert r0["pickled"] == ("rank2", 25)
    assert r0["conflict"][0] == "ValueError"
    assert r0["after_deregister"][0] == "ServiceNotFound"
    # Duplicate keys: from the host itself and from another member.
    assert r1["dup"][0] == "ValueError" and "'square'" in r1["dup"][1]
    assert r2["dup_other"][0] == "ValueError" and "rank1" in r2["dup_other"][1]
