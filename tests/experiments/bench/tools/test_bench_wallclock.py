import json
import os
import sys

import pytest

from experiments.bench.tools import wallclock as wc

pytestmark = pytest.mark.timeout(60)

# The evaluator records whether the trainer had finished (its mark, the bench's DONE)
# when it started, as its figures. The trainer leaves its mark and reports; told to
# wait (argv[2]), it first waits for the evaluator's figures, so the order does not
# depend on how fast a loaded machine starts processes.
TRAINER = ("import json, os, sys, time; d = sys.argv[1]; end = time.time() + 20\n"
           f"while sys.argv[2] == 'wait' and not os.path.exists(os.path.join(d, {wc.EVALUATOR!r})) and time.time() < end:\n"
           "    time.sleep(0.05)\n"
           "open(os.path.join(d, 'trained'), 'w').close(); "
           f"print({wc.RESULT_PREFIX!r} + json.dumps({{'env_steps': 7}}))")
EVALUATOR = ("import json, os, sys; d = sys.argv[1]; "
             "seen = {'trained': os.path.exists(os.path.join(d, 'trained')), 'done': os.path.exists(os.path.join(d, 'DONE'))}; "
             f"json.dump(seen, open(os.path.join(d, {wc.EVALUATOR!r}), 'w'))")


@pytest.mark.parametrize("after", [False, True])
def test_the_evaluator_starts_before_the_trainer_or_once_it_has_exited(tmp_path, after):
    run_dir = str(tmp_path)
    result, figures = wc.run_pair([sys.executable, "-c", TRAINER, run_dir, "go" if after else "wait"],
                                  [sys.executable, "-c", EVALUATOR, run_dir],
                                  run_dir=run_dir, trainer_timeout_s=30, evaluator_timeout_s=30, evaluate_after=after)
    assert result["env_steps"] == 7 and "error" not in result
    assert figures == {"trained": after, "done": after}
    assert os.path.exists(os.path.join(run_dir, "evaluator.log"))


def test_an_evaluator_that_fails_after_training_is_reported(tmp_path):
    run_dir = str(tmp_path)
    result, figures = wc.run_pair([sys.executable, "-c", TRAINER, run_dir, "go"], [sys.executable, "-c", "raise SystemExit(3)"],
                                  run_dir=run_dir, trainer_timeout_s=30, evaluator_timeout_s=30, evaluate_after=True)
    assert figures == {}
    assert result["error"].startswith("evaluator exit 3")
    json.dumps(result)


def test_a_final_snapshot_written_just_after_the_budget_counts_at_it(tmp_path):
    rows = [{"env_steps": 100, "wall_s": 50.0, "final": False, "return": -3.0},
            {"env_steps": 200, "wall_s": 100.4, "final": True, "return": 5.0}]
    (tmp_path / wc.CURVE).write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)))
    assert wc.read_curve(str(tmp_path)) == rows  # without a budget: as written, in env-step order
    counted = wc.read_curve(str(tmp_path), budget_s=100.0)
    assert counted[0] == rows[0]
    assert counted[1] == {**rows[1], "wall_s": 100.0, "written_s": 100.4}
    assert wc.value_at(counted, "return", 100.0) == 5.0
    # a snapshot that is not the final one keeps its second, and so does a final one
    # written before the budget (a run stopped by --max-env-steps)
    assert wc.read_curve(str(tmp_path), budget_s=200.0) == rows
    (tmp_path / wc.CURVE).write_text(json.dumps({**rows[1], "final": False}) + "\n")
    assert wc.read_curve(str(tmp_path), budget_s=100.0)[0]["wall_s"] == 100.4
