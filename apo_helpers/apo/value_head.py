"""The critic PPO (RAGEN's StarPO) needs and A*PO does without: one value V(s_t) per turn (notebook 05).

``ValueHead`` is a linear layer on the policy's last hidden state at the last token of each turn's prompt, the
position whose hidden state predicts the turn's first response token: it has read the whole state and nothing the
agent wrote in that turn. The trainer attaches one to the policy for ``--objective ppo``, adds its parameters to the
optimizer, and fills ``ObjectiveInputs.values`` (with ``turn_row``, ``turn_rewards`` and ``token_turn``).
``turn_positions`` finds the positions and the turn of each trained token in a chat's assistant mask.
"""

from __future__ import annotations

import torch
from torch import nn


class ValueHead(nn.Module):
    """V(s) = w . h + b on the hidden state ``h`` (size ``hidden_size``) at the last prompt token of a turn.

    Starts at V = 0 (zero weights and bias), so the first advantages are the plain returns. It shares the policy's
    body: the value loss also trains the body, unless the caller passes detached hidden states.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden_states: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``hidden_states`` (B, L, H), e.g. ``model.base_model(...).last_hidden_state``; ``rows`` and ``positions``
        (T,) pick one position per turn -> (T,) values in float32."""
        return self.linear(hidden_states[rows, positions].float()).squeeze(-1)


def turn_positions(assistant_mask: list[int]) -> tuple[list[int], list[int]]:
    """``(value positions, turn of each trained token)`` of one chat.

    Each run of 1s in ``assistant_mask`` is one turn's response; its value position is the index just before the run
    (the last prompt token). The second list gives, for each masked token in order (as ``selected_logprobs``
    returns them), the index of its run: 0 for the chat's first turn, 1 for the next (a one-turn chat: all 0).
    """
    positions, token_turn, previous = [], [], 0
    for index, flag in enumerate(assistant_mask):
        if flag and not previous:
            if index == 0:
                raise ValueError("an assistant span starts at position 0: there is no prompt token to score")
            positions.append(index - 1)
        if flag:
            token_turn.append(len(positions) - 1)
        previous = flag
    return positions, token_turn
