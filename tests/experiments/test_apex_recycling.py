"""ReDo through the Ape-X job: ``--recycle-every`` reaches the learner's DQN in its own
process, and its dormant share and recycled count reach TensorBoard."""

import pytest
from jobs import apex_config, scalars

from experiments import apex
from experiments.apex import LearnConfig


@pytest.mark.timeout(120)
def test_distributed_learner_recycles_and_logs_it(tmp_path):
    summary = apex.run(apex_config(str(tmp_path), max_env_steps=1000, recycle_every=5, recycle_tau=0.5,
                                   hidden="32,32"), quiet=True)
    assert summary["updates"] >= 5
    tags = scalars(summary["run_dir"])
    recycled = [value for _, value in tags["losses/recycled_units"]]
    shares = [value for _, value in tags["losses/dormant_share"]]
    assert recycled == sorted(recycled)  # a running count (window means of it)
    # tau 0.5 calls a unit dormant below half its layer's mean activation: some always are.
    assert recycled[-1] > 0
    assert all(0.0 <= share <= 1.0 for share in shares) and max(shares) > 0


def test_recycle_flags_are_checked_and_reach_the_dqn():
    from algorithms.dqn import DQNBuilder
    from experiments.runtime.cli import validate

    learn = apex.fill_learn(LearnConfig(recycle_every=1000, recycle_tau=0.05), algorithm="dqn", family="vector")
    config = DQNBuilder(learn=learn, spec=None).dqn
    assert (config.recycle_every, config.recycle_tau) == (1000, 0.05)
    with pytest.raises(ValueError, match=r"--recycle-every must be >= 0 \(0 = off\)"):
        validate(apex_config(recycle_every=-1))
    with pytest.raises(ValueError, match=r"--recycle-tau must be in \[0, 1\)"):
        validate(apex_config(recycle_tau=1.0))
