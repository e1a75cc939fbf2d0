"""The builders of the actor-learner program's algorithms (see :mod:`algorithms.builder`)."""
