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
