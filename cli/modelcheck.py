"""Check ``--model``, ``--device``, ``--dtype`` and ``--quantize`` before anything is loaded or
written, so a typo or an offline hub fails in seconds with one line, not after the hub client's
minute of retries. The rules are :mod:`textgym.models`' own (:func:`textgym.models.resolve_model`,
:func:`textgym.models.resolve_placement`); this module only turns their errors into CLIError."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textgym import models  # torch-free at import
from textgym.cli.errors import CLIError

if TYPE_CHECKING:
    import torch


def check_option_names(device: str | None, dtype: str | None, quantize: str | None) -> None:
    """The spelling of ``--device``, ``--dtype`` and ``--quantize``, without importing torch."""
    try:
        models.check_option_names(device, dtype, quantize)
    except models.ModelError as exc:
        raise CLIError(str(exc)) from None


def check_model(name: str, device: str | torch.device | None = None, dtype: str | None = None,
                quantize: str | None = None) -> models.ModelSource:
    """Check that the device, precision and quantization are usable here and that ``name`` is a
    registered model, a model folder, a cached hub id or a hub id while the hub is reachable.
    Returns where the model comes from; raises CLIError."""
    try:
        models.resolve_placement(device, dtype, quantize)
        return models.resolve_model(name)
    except models.ModelError as exc:
        raise CLIError(str(exc)) from None
