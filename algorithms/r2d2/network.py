"""R2D2's recurrent Q network: a torso, an LSTM, a (dueling) head (Kapturowski et al.
2019, sec. 2.3 and Figure 1's network: Nature-CNN torso, 512-unit LSTM, dueling head).

The default torsos are those of :func:`algorithms.nets.default_torso` (an MLP for
vectors, the MinAtar conv for small images, the Nature CNN for Atari frames). A
network's recurrent state is a dict of named ``(batch, ...)`` tensors, so that actors,
the sequence adder and replay carry it field by field.

With ``last_action_reward`` the LSTM also takes the previous step's action (one-hot)
and reward (squashed by tanh, so that any env's scale fits), as the paper's network
does (sec. 2.3, after Espeholt et al. 2018) and Acme's observation-action-reward
embedding. Both are state fields (``last_action``, ``last_reward``: zero at an
episode's start, so a sequence stores the pair before its first step); within a
sequence they come from the steps' own ``actions`` and ``rewards``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from algorithms.nets import DuelingHead, contiguous_layout, default_torso

State = dict[str, torch.Tensor]


class RecurrentQNetwork(nn.Module):
    """``forward(obs [B, T, *obs], state, actions=None, rewards=None) -> (Q [B, T,
    actions], state after T steps)``.

    The state is ``{"state_h", "state_c"}``, each ``(B, lstm_size)``, zero at an
    episode's start (:meth:`initial_state`); with ``last_action_reward`` also
    ``last_action`` ``(B, num_actions)`` (one-hot; zeros: no action yet) and
    ``last_reward`` ``(B,)``. ``actions`` and ``rewards`` ``[B, T]`` are the actions
    taken at, and the rewards that followed, the ``T`` steps: step ``t`` sees step
    ``t - 1``'s (the state's at ``t = 0``), and the state after holds step ``T - 1``'s.
    Acting (``T = 1``), they are not known yet: leave them out, and the state after
    keeps the last pair for the actor to set (:meth:`algorithms.r2d2.R2D2.last_step`).
    """

    STATE_KEYS = ("state_h", "state_c")

    def __init__(self, torso: nn.Module, features: int, num_actions: int, *, lstm_size: int,
                 dueling: bool = True, last_action_reward: bool = False) -> None:
        super().__init__()
        if min(features, num_actions, lstm_size) < 1:
            raise ValueError(f"sizes must be positive, got features={features} num_actions={num_actions} "
                             f"lstm_size={lstm_size}")
        # The learner runs the torso over every step of a batch of sequences (B x L
        # frames): in contiguous NCHW its update took 16% less CPU on BreakoutNoTrail's
        # (experiments.bench.pomdp.learner).
        contiguous_layout(torso)
        self.torso = torso
        self.num_actions, self.last_action_reward = num_actions, last_action_reward
        inputs = features + (num_actions + 1 if last_action_reward else 0)
        self.lstm = nn.LSTM(inputs, lstm_size, batch_first=True)
        self.head = DuelingHead(lstm_size, num_actions) if dueling else nn.Linear(lstm_size, num_actions)
        self.lstm_size = lstm_size

    def initial_state(self, batch_size: int, device: torch.device | str = "cpu") -> State:
        zeros = torch.zeros(batch_size, self.lstm_size, device=device)
        state = {"state_h": zeros, "state_c": zeros.clone()}
        if self.last_action_reward:
            state["last_action"] = torch.zeros(batch_size, self.num_actions, device=device)
            state["last_reward"] = torch.zeros(batch_size, device=device)
        return state

    def forward(self, obs: torch.Tensor, state: Mapping[str, torch.Tensor], actions: torch.Tensor | None = None,
                rewards: torch.Tensor | None = None) -> tuple[torch.Tensor, State]:
        batch, steps = obs.shape[:2]
        features = self.torso(obs.reshape(batch * steps, *obs.shape[2:])).reshape(batch, steps, -1)
        after: State = {}
        if self.last_action_reward:
            last_action, last_reward = state["last_action"].float(), state["last_reward"].float()
            if actions is None or rewards is None:
                if steps != 1:
                    raise ValueError(f"{steps} steps need their actions and rewards (each step's input "
                                     "holds the previous step's)")
                prev_action, prev_reward = last_action.unsqueeze(1), last_reward.unsqueeze(1)
                after = {"last_action": last_action, "last_reward": last_reward}
            else:
                taken = nn.functional.one_hot(actions.long(), self.num_actions).float()
                prev_action = torch.cat([last_action.unsqueeze(1), taken[:, :-1]], dim=1)
                prev_reward = torch.cat([last_reward.unsqueeze(1), rewards[:, :-1].float()], dim=1)
                after = {"last_action": taken[:, -1], "last_reward": rewards[:, -1].float()}
            features = torch.cat([features, prev_action, torch.tanh(prev_reward).unsqueeze(-1)], dim=-1)
        hc = (state["state_h"].unsqueeze(0).contiguous(), state["state_c"].unsqueeze(0).contiguous())
        out, (h, c) = self.lstm(features, hc)
        return self.head(out), {"state_h": h.squeeze(0), "state_c": c.squeeze(0), **after}


def recurrent_q_network(obs_shape: Sequence[int], num_actions: int, *, lstm_size: int = 512,
                        hidden: Sequence[int] = (64, 64), dueling: bool = True,
                        last_action_reward: bool = False, cnn: str = "nature") -> RecurrentQNetwork:
    """The default R2D2 network for ``obs_shape`` (torso picked by shape, see
    :func:`algorithms.nets.default_torso`; ``cnn`` names the frames torso)."""
    torso, features = default_torso(obs_shape, hidden=hidden, cnn=cnn)
    return RecurrentQNetwork(torso, features, num_actions, lstm_size=lstm_size, dueling=dueling,
                             last_action_reward=last_action_reward)
