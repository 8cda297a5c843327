"""The reference policy (for KL penalties): the base weights under the trained ones.

With a LoRA adapter the reference is the same model with the adapter disabled (no second copy);
without one it is a frozen copy of the weights, taken before training changes them.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import torch

from textgym.lora import is_peft_model

__all__ = ["ReferenceWeights"]


class ReferenceWeights:
    """Where the reference policy's weights come from, and whether they are in use now."""

    def __init__(self) -> None:
        self.snapshot: torch.nn.Module | None = None
        self.active = False

    def take_snapshot(self, model: torch.nn.Module) -> None:
        """Freeze a copy of ``model``'s weights as the reference (once: later calls keep the first)."""
        if self.snapshot is None:
            self.snapshot = copy.deepcopy(model).eval().requires_grad_(False)

    @contextlib.contextmanager
    def use(self, model: torch.nn.Module) -> Iterator[torch.nn.Module]:
        """Within this block, the model that computes the reference policy (``model`` with its
        adapter disabled, or the snapshot, taken now if there is none)."""
        self.active = True
        try:
            if is_peft_model(model):
                with model.disable_adapter():
                    yield model
            else:
                self.take_snapshot(model)
                yield self.snapshot
        finally:
            self.active = False
