"""The job runtime every job is assembled from (see ../shared/DESIGN.md, "Jobs").

A job is its algorithm (``algorithms/``), its roles' wiring
(``experiments/roles/<job>.py``) and its config with ``main``
(``experiments/<job>.py``). What they share lives here: typed config sections and
their command line (:mod:`.cli`, :mod:`.config`), the user's parts (:mod:`.parts`),
the env in every rank (:mod:`.envs`), typed messages (:mod:`.messages`), the
coordinator (:mod:`.coordinator`), the lead's start and end (:mod:`.lead`), the run
directory (:mod:`.rundir`), resuming a run (:mod:`.resume`), the summary
(:mod:`.summary`) and running a job in any mode (:mod:`.job`). Pacing is :class:`algorithms.pacing.Pacing` (the one-process
algorithms use it too).
"""

from experiments.runtime.cli import field, flag, layer_sizes, parse_config, section
from experiments.runtime.config import EnvConfig, FamilyEnvConfig, RunConfig
from experiments.runtime.parts import Parts

__all__ = ["EnvConfig", "FamilyEnvConfig", "Parts", "RunConfig", "field", "flag", "layer_sizes", "parse_config", "section"]
