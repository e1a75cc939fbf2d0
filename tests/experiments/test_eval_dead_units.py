"""Every evaluation logs the policy network's dead ReLU units beside its return
(``network/dead_units/<layer>``), in each job and each mode that evaluates."""

import pytest
from jobs import a3c_config, apex_config, scalars

from experiments import a3c, apex


def dead_unit_curves(run_dir):
    tags = scalars(run_dir)
    curves = {tag: points for tag, points in tags.items() if tag.startswith("network/dead_units/")}
    return curves, [step for step, _ in tags["eval/return"]]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("serial", [True, False])
def test_apex_logs_the_q_networks_dead_units_at_every_evaluation(tmp_path, serial):
    # The distributed run evaluates on its last actor, which sends the shares over RPC.
    # One actor (the evaluator: the last one), a few hundred steps: two evaluations are all it needs.
    summary = apex.run(apex_config(str(tmp_path), serial=serial, num_actors=1, max_env_steps=700,
                                   eval_every=300, hidden="32,32"), quiet=True)
    curves, eval_steps = dead_unit_curves(summary["run_dir"])
    assert len(curves) == 2, sorted(curves)  # one curve per hidden layer's ReLU
    for points in curves.values():
        assert [step for step, _ in points] == eval_steps and len(eval_steps) >= 2
        assert all(0.0 <= share <= 1.0 for _, share in points)


@pytest.mark.timeout(60)
def test_a3c_logs_its_actor_critics_dead_units_and_a_network_without_relus_logs_none(tmp_path):
    with_relu = a3c.run(a3c_config(str(tmp_path / "relu"), activation="relu"), quiet=True)
    curves, eval_steps = dead_unit_curves(with_relu["run_dir"])
    assert curves and all([step for step, _ in points] == eval_steps for points in curves.values())
    # Serial: which network logs which curves does not depend on the world.
    tanh = a3c.run(a3c_config(str(tmp_path / "tanh"), activation="tanh", serial=True, max_env_steps=400),
                   quiet=True)
    assert dead_unit_curves(tanh["run_dir"])[0] == {}
