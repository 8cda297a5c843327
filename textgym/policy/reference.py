"""The reference policy (for KL penalties): the base weights under the trained ones, or the
policy as a warm start left it.

With a LoRA adapter the reference is the same model with the adapter disabled (no second copy);
without one it is a frozen copy of the weights, taken before training changes them. After
:meth:`ReferenceWeights.rebase` (``Trainer.warm_start`` calls it: RL then stays near the
imitation, as RLHF's KL stays near its SFT model) the reference is the policy at that moment: the
adapter's weights of then, swapped in for the reference's passes, or a frozen copy of the model.
A checkpoint keeps what the base model does not: the rebased adapter's weights, or the frozen
copy of a full fine-tune (so a resumed run's KL penalty pulls toward the same policy).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import torch

from textgym.lora import adapter_parameters, is_peft_model

__all__ = ["ReferenceWeights"]


class ReferenceWeights:
    """Where the reference policy's weights come from, and whether they are in use now."""

    def __init__(self) -> None:
        self.snapshot: torch.nn.Module | None = None
        #: With an adapter, after :meth:`rebase`: the reference's adapter weights, by parameter name.
        self.adapter: dict[str, torch.Tensor] | None = None
        self.active = False
        #: Counts the changes of the reference's weights, so that what was computed with them
        #: (a trainer's memo of reference log-probs) knows when it is stale.
        self.version = 0

    def rebase(self, model: torch.nn.Module) -> None:
        """From now on the reference policy is ``model`` as it is now."""
        self.version += 1
        if is_peft_model(model):
            self.adapter = {name: p.detach().clone() for name, p in adapter_parameters(model)}
        else:
            self.snapshot = copy.deepcopy(model).eval().requires_grad_(False)

    def state(self) -> dict[str, torch.Tensor] | None:
        """The weights that make the reference (to checkpoint): a rebased adapter's, or a full
        fine-tune's frozen copy (each shared tensor once: tied embeddings). ``None``: the
        reference is the base model under the adapter, which the checkpoint holds already."""
        if self.adapter is not None:
            return self.adapter
        if self.snapshot is None:
            return None
        tensors, seen = {}, set()
        for name, tensor in self.snapshot.state_dict().items():
            if tensor.data_ptr() not in seen:
                seen.add(tensor.data_ptr())
                tensors[name] = tensor
        return tensors

    def load_state(self, model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
        """Make the weights ``tensors`` (from :meth:`state`) the reference of ``model``: its
        adapter's weights, or (without an adapter) a frozen copy of the model holding them."""
        self.version += 1
        if is_peft_model(model):
            names = {name for name, _ in adapter_parameters(model)}
            if set(tensors) != names:
                raise ValueError("the reference weights do not fit the model's adapter")
            self.adapter = {name: t.clone() for name, t in tensors.items()}
            return
        snapshot = copy.deepcopy(model).eval().requires_grad_(False)
        missing, unexpected = snapshot.load_state_dict(tensors, strict=False)
        loaded = {t.data_ptr() for name, t in snapshot.state_dict().items() if name in tensors}
        untied = [name for name in missing if snapshot.state_dict()[name].data_ptr() not in loaded]
        if unexpected or untied:
            raise ValueError("the reference weights do not fit the model")
        self.snapshot = snapshot

    def take_snapshot(self, model: torch.nn.Module) -> None:
        """Freeze a copy of ``model``'s weights as the reference (once: later calls keep the first)."""
        if self.snapshot is None:
            self.version += 1
            self.snapshot = copy.deepcopy(model).eval().requires_grad_(False)

    @contextlib.contextmanager
    def use(self, model: torch.nn.Module) -> Iterator[torch.nn.Module]:
        """Within this block, the model that computes the reference policy (``model`` with its
        adapter disabled, or the snapshot, taken now if there is none)."""
        self.active = True
        try:
            if is_peft_model(model) and self.adapter is not None:
                with _swapped(model, self.adapter):
                    yield model
            elif is_peft_model(model):
                with model.disable_adapter():
                    yield model
            else:
                self.take_snapshot(model)
                yield self.snapshot
        finally:
            self.active = False


@contextlib.contextmanager
def _swapped(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> Iterator[None]:
    """Within this block the adapter holds ``weights``; its own come back after (in place: the
    optimizer keeps its parameters; each copy bumps their versions, so no cache outlives it)."""
    parameters = dict(model.named_parameters())
    own = {name: parameters[name].detach().clone() for name in weights}
    with torch.no_grad():
        for name, w in weights.items():
            parameters[name].copy_(w)
    try:
        yield
    finally:
        with torch.no_grad():
            for name, w in own.items():
                parameters[name].copy_(w)
