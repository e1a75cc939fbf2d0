"""The R2D2 learner bench: its --quick lines on an image env and a vector env (not a
measurement), and its flag errors."""

import importlib.util
import json

import pytest

from experiments.bench.pomdp import learner

MINATAR = importlib.util.find_spec("minatar") is not None


def lines_of(capsys):
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


@pytest.mark.skipif(not MINATAR, reason="BreakoutNoTrail needs the minatar extra")
def test_quick_mode_times_both_layouts_and_they_learn_the_same_parameters(capsys):
    assert learner.main(["--quick", "--envs", "BreakoutNoTrail"]) == 0
    nchw, channels_last, compare = lines_of(capsys)
    assert (nchw["layout"], channels_last["layout"], compare["kind"]) == ("nchw", "channels_last", "compare")
    for line in (nchw, channels_last):
        assert line["updates"] == 12 and line["cpu_ms_per_update"] > 0 and line["sequence_length"] == 25
        assert line["batch_size"] == 8  # the pomdp bench's quick R2D2 settings
    assert compare["max_param_diff"] < 1e-5  # two convolution kernels: same sums, maybe in another order
    assert compare["cpu_ratio_channels_last_over_nchw"] > 0


def test_a_vector_env_has_one_layout_and_says_so(capsys):
    assert learner.main(["--quick", "--envs", "StatelessCartPole"]) == 0
    (line,) = lines_of(capsys)
    assert line["layout"] is None and line["note"] == "no image torso: one layout"


@pytest.mark.parametrize("args, named", [
    (["--envs", "Pong"], "Pong"),
    (["--updates", "0"], "--updates"),
    (["--threads", "0"], "--threads"),
    (["--envs", "StatelessCartPole", "--flags=--no-such-flag"], "--no-such-flag"),
])
def test_bad_arguments_exit_2_naming_them(capsys, args, named):
    with pytest.raises(SystemExit) as exit_:
        learner.main(args)
    assert exit_.value.code == 2 and named in capsys.readouterr().err
