"""R2D2: Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed
Reinforcement Learning" (ICLR).

The parts a builder puts together: the learner (:mod:`algorithms.r2d2.r2d2`: stored
state, burn-in, n-step double-Q targets under value rescaling, mixed sequence
priorities), its hyper-parameters (:mod:`algorithms.r2d2.config`), the recurrent Q
network (:mod:`algorithms.r2d2.network`), the targets (:mod:`algorithms.r2d2.targets`)
and the adder that cuts an actor's steps into overlapping replay sequences
(:mod:`algorithms.r2d2.adder`), the recurrent actor and greedy policy
(:mod:`algorithms.r2d2.actor`) and the builder that runs it in the Ape-X job
(:mod:`algorithms.r2d2.builder`, ``--algorithm r2d2``). Replay holds sequences as items
(:func:`rlpar.buffers.sequence_spec`), locally or sharded.
"""

from algorithms.r2d2.actor import R2D2Actor, R2D2Greedy
from algorithms.r2d2.adder import SequenceAdder
from algorithms.r2d2.builder import R2D2Builder
from algorithms.r2d2.config import R2D2Config
from algorithms.r2d2.network import RecurrentQNetwork, recurrent_q_network
from algorithms.r2d2.r2d2 import R2D2
from algorithms.r2d2.targets import inverse_value_rescale, n_step_targets, value_rescale

__all__ = ["R2D2", "R2D2Actor", "R2D2Builder", "R2D2Config", "R2D2Greedy", "RecurrentQNetwork", "SequenceAdder",
           "inverse_value_rescale", "n_step_targets", "recurrent_q_network", "value_rescale"]
