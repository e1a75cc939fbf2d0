"""IMPALA: Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance
Weighted Actor-Learner Architectures" (ICML, arXiv 1802.01561).

The V-trace learner (:mod:`algorithms.impala.impala`), its hyper-parameters
(:mod:`algorithms.impala.config`) and the checks it runs on its input
(:mod:`algorithms.impala.checks`), the unrolls actors send (:mod:`algorithms.impala.unroll`:
the format, the adder, the collator) and the builder the actor-learner program runs
(:mod:`algorithms.impala.builder`).
"""

from algorithms.impala.builder import IMPALABuilder
from algorithms.impala.config import IMPALAConfig
from algorithms.impala.impala import IMPALA
from algorithms.impala.unroll import UnrollAdder, UnrollItems, collate_unrolls

__all__ = ["IMPALA", "IMPALAConfig", "IMPALABuilder", "UnrollAdder", "UnrollItems", "collate_unrolls"]
