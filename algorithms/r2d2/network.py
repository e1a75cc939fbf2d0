"""R2D2's recurrent Q network: a torso, an LSTM, a (dueling) head (Kapturowski et al.
2019, sec. 2.3 and Figure 1's network: Nature-CNN torso, 512-unit LSTM, dueling head).

The default torsos are those of :func:`algorithms.nets.default_torso` (an MLP for
vectors, the MinAtar conv for small images, the Nature CNN for Atari frames). A
network's recurrent state is a dict of named ``(batch, ...)`` tensors, so that actors,
the sequence adder and replay carry it field by field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from algorithms.nets import DuelingHead, contiguous_layout, default_torso

State = dict[str, torch.Tensor]


class RecurrentQNetwork(nn.Module):
    """``forward(obs [B, T, *obs], state) -> (Q [B, T, actions], state after T steps)``.

    The state is ``{"state_h", "state_c"}``, each ``(B, lstm_size)``, zero at an
    episode's start (:meth:`initial_state`).
    """

    STATE_KEYS = ("state_h", "state_c")

    def __init__(self, torso: nn.Module, features: int, num_actions: int, *, lstm_size: int,
                 dueling: bool = True) -> None:
        super().__init__()
        if min(features, num_actions, lstm_size) < 1:
            raise ValueError(f"sizes must be positive, got features={features} num_actions={num_actions} "
                             f"lstm_size={lstm_size}")
        # The learner runs the torso over every step of a batch of sequences (B x L
        # frames): in contiguous NCHW its update took 16% less CPU on BreakoutNoTrail's
        # (experiments.bench.pomdp.learner).
        contiguous_layout(torso)
        self.torso = torso
        self.lstm = nn.LSTM(features, lstm_size, batch_first=True)
        self.head = DuelingHead(lstm_size, num_actions) if dueling else nn.Linear(lstm_size, num_actions)
        self.lstm_size = lstm_size

    def initial_state(self, batch_size: int, device: torch.device | str = "cpu") -> State:
        zeros = torch.zeros(batch_size, self.lstm_size, device=device)
        return {"state_h": zeros, "state_c": zeros.clone()}

    def forward(self, obs: torch.Tensor, state: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, State]:
        batch, steps = obs.shape[:2]
        features = self.torso(obs.reshape(batch * steps, *obs.shape[2:]))
        hc = (state["state_h"].unsqueeze(0).contiguous(), state["state_c"].unsqueeze(0).contiguous())
        out, (h, c) = self.lstm(features.reshape(batch, steps, -1), hc)
        return self.head(out), {"state_h": h.squeeze(0), "state_c": c.squeeze(0)}


def recurrent_q_network(obs_shape: Sequence[int], num_actions: int, *, lstm_size: int = 512,
                        hidden: Sequence[int] = (64, 64), dueling: bool = True) -> RecurrentQNetwork:
    """The default R2D2 network for ``obs_shape`` (torso picked by shape, see
    :func:`algorithms.nets.default_torso`)."""
    torso, features = default_torso(obs_shape, hidden=hidden)
    return RecurrentQNetwork(torso, features, num_actions, lstm_size=lstm_size, dueling=dueling)
