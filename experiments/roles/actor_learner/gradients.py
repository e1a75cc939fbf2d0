"""The actor-learner program's third data path, A3C's (Mnih et al. 2016): gradients.

Learner 0 hosts a gradient server (:class:`rlpar.servers.GradServer`, named ``grads``;
in serial mode a local one) that owns the model and the optimizer and applies every
gradient on arrival (``--max-staleness``/``--staleness-policy`` bound how stale one may
be). Each actor collects a rollout with its acting copy, pushes the rollout's gradient
and pulls the newest parameters in one call; nothing is sampled. The builder's learner
makes the server through :meth:`GradientHost.host` (it chooses the network and the
optimizer) and says when it has a step to take (following the server). A dead actor
is restarted alone and pulls the newest parameters: the server never calls an actor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from experiments.roles.actor_learner.data import LearnerData

GRADS = "grads"


class GradientHost:
    """Learner 0's handle of the server before it exists: ``host`` makes it, in this
    process and, in a world, as the ``grads`` service of ``group``."""

    def __init__(self, group: Any | None) -> None:
        self.group = group
        self.server: Any = None
        self.ready: Callable[[], bool] = lambda: False

    def host(self, *, model: Any, optimizer_factory: Callable[[Any], Any], ready: Callable[[], bool],
             **server_args: Any) -> Any:
        from rlpar.servers import GradServer, PushPullGradServer

        if self.server is not None:
            raise RuntimeError("the gradient server is hosted already")
        if self.group is None:
            self.server = GradServer(model=model, optimizer_factory=optimizer_factory, **server_args)
        else:
            self.server = PushPullGradServer.host(self.group, GRADS, model=model, optimizer_factory=optimizer_factory,
                                                  **server_args).server
        self.ready = ready
        return self.server

    def close(self) -> None:
        """Nothing to close: the server's services end with the RPC group."""


class GradientData(LearnerData):
    """Learner 0's side of the gradients path: nothing to sample or hold; the loop
    steps when the learner is ready (:class:`GradientHost`)."""

    def ready(self, reported: int) -> bool:
        return self.source.ready()

    def lacking(self) -> int:
        return 0

    def held(self, *, reported: int) -> int:
        return 0

    @property
    def sink(self) -> Any:
        """The server itself (serial mode: the actors push to it in this process)."""
        if self.source.server is None:
            raise RuntimeError("the gradient server is made by the learner: make it before the actors")
        return self.source.server
