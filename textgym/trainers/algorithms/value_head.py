"""A small value head for PPO: reads the policy's last hidden state at a decision.

Example:
    >>> import torch
    >>> head = ValueHead(hidden_size=8, width=4)
    >>> head(torch.zeros(3, 8)).shape
    torch.Size([3])
"""

from __future__ import annotations

import torch
from torch import nn


class ValueHead(nn.Module):
    """``Linear -> Tanh -> Linear`` from the hidden size to one value per decision.

    The last layer starts at zero so the first values are 0 and the first advantages are the
    plain returns.

    Args:
        hidden_size: size of the language model's hidden state.
        width: hidden width of the head.
    """

    def __init__(self, hidden_size: int, width: int = 128):
        super().__init__()
        self.hidden_size, self.width = hidden_size, width
        self.net = nn.Sequential(nn.Linear(hidden_size, width), nn.Tanh(), nn.Linear(width, 1))
        nn.init.zeros_(self.net[2].weight)
        nn.init.zeros_(self.net[2].bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.net(hidden.float()).squeeze(-1)
