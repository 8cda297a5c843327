"""LoRA adapters: the one place where textgym puts a PEFT adapter on a model.

The settings come from the trainer config (``TrainConfig.lora_*``, mapped by
:meth:`textgym.trainers.TrainConfig.lora_settings`); :func:`add_lora` builds the adapter and
:func:`adapter_settings` reads the settings back from a model that already has one, so a trainer
given such a model (a loaded checkpoint) can continue training it and say where it differs from
its config.

Example:
    >>> from textgym import models
    >>> from textgym.lora import LoraSettings, add_lora, adapter_settings
    >>> model, _ = models.load("tiny")
    >>> model = add_lora(model, LoraSettings(r=4, alpha=8, layers=1), model_name="tiny")
    >>> adapter_settings(model).r, sorted(adapter_settings(model).target_modules)
    (4, ['k_proj', 'o_proj', 'q_proj', 'v_proj'])
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from typing import Any

from textgym.settings import check, setting

__all__ = ["LoraSettings", "adapter_parameters", "adapter_settings", "add_lora", "differences", "is_peft_model"]


@dataclass(frozen=True)
class LoraSettings:
    """What a LoRA adapter looks like (the trainer config's ``lora_*`` fields, in one object).

    Raises:
        ValueError: a setting out of its range (``r must be an integer >= 1, got 0``).
    """

    r: int = setting(16, at_least=1)
    """Rank of the low-rank update."""
    alpha: int = setting(32, at_least=1)
    """Scaling numerator: the update is scaled by ``alpha / r``."""
    dropout: float = setting(0.0, at_least=0, below=1)
    """Dropout on the LoRA branch (0: acting and re-scoring see the same function)."""
    target_modules: tuple[str, ...] | None = None
    """Module names the adapter wraps. ``None``: the model registry's defaults for the model
    (those present in it), else every linear layer (``"all-linear"``)."""
    layers: int | None = setting(None, at_least=1)
    """Adapt only the top this many transformer layers (``None``: all)."""

    def __post_init__(self) -> None:
        if self.target_modules is not None:
            object.__setattr__(self, "target_modules", tuple(self.target_modules))
        check(self)  # every field's range, as declared above (TrainConfig's lora_* are declared like them)


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` carries a PEFT adapter."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def adapter_parameters(model: Any) -> list[tuple[str, Any]]:
    """A PEFT model's adapter parameters (the LoRA matrices), by name."""
    return [(name, p) for name, p in model.named_parameters() if "lora_" in name]


def _target_modules(model: Any, settings: LoraSettings, model_name: str | None) -> Any:
    if settings.target_modules is not None:
        return list(settings.target_modules)
    from textgym import models

    name = model_name or getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    wanted = set(models.spec(name).lora_target_modules)
    present = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    return sorted(wanted & present) or "all-linear"


def _depth(model: Any) -> int:
    depth = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if not depth:
        raise ValueError("lora_layers needs a model whose config has num_hidden_layers")
    return int(depth)


def add_lora(model: Any, settings: LoraSettings | None = None, model_name: str | None = None) -> Any:
    """Wrap ``model`` in a fresh LoRA adapter (peft) and return the wrapped model (in ``eval()`` mode).

    Args:
        model: a Hugging Face causal LM without an adapter.
        settings: the adapter's shape (default :class:`LoraSettings`).
        model_name: the name the model was loaded by, for the registry's target modules
            (default: ``model.config._name_or_path``).

    Raises:
        ValueError: the model already has an adapter (continue training it instead).
    """
    if is_peft_model(model):
        raise ValueError("the model already has a LoRA adapter; train it as it is or load the base model")
    settings = settings or LoraSettings()
    try:
        from peft import LoraConfig, get_peft_model  # lazy: importing peft takes seconds
    except ImportError:
        raise ImportError("LoRA needs peft: pip install 'textgym[train]'") from None
    layers: dict[str, Any] = {}
    if settings.layers is not None:
        depth = _depth(model)
        layers = {"layers_to_transform": list(range(max(0, depth - settings.layers), depth)),
                  "layers_pattern": "layers"}
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=_target_modules(model, settings, model_name), bias="none",
                        task_type="CAUSAL_LM", **layers)
    from textgym.models import prepare_for_kbit_training

    model = prepare_for_kbit_training(model)  # QLoRA: a 4-/8-bit base needs it; others unchanged
    with warnings.catch_warnings():  # transformers' deprecation chatter from inside peft
        warnings.simplefilter("ignore", FutureWarning)
        model = get_peft_model(model, config)
    model.eval()  # no dropout: acting and re-scoring must see the same function
    return model


def adapter_settings(model: Any) -> LoraSettings:
    """The settings of the adapter ``model`` carries (its ``"default"`` adapter)."""
    if not is_peft_model(model):
        raise ValueError("the model has no LoRA adapter")
    config = model.peft_config["default"]
    targets = config.target_modules
    targets = (targets,) if isinstance(targets, str) else tuple(sorted(targets or ()))
    layers = config.layers_to_transform
    top = None
    if layers:
        layers = [layers] if isinstance(layers, int) else list(layers)
        depth = _depth(model)
        if len(layers) < depth and sorted(layers) == list(range(depth - len(layers), depth)):
            top = len(layers)
    return LoraSettings(r=config.r, alpha=config.lora_alpha, dropout=config.lora_dropout,
                        target_modules=targets, layers=top)


def differences(model: Any, wanted: LoraSettings, model_name: str | None = None) -> list[str]:
    """Where the adapter of ``model`` differs from ``wanted`` (``["r: 8 (config: 16)", ...]``).

    A ``None`` in ``wanted`` (registry targets, all layers) is resolved as :func:`add_lora` would.
    """
    have = adapter_settings(model)
    resolved = _target_modules(getattr(model, "get_base_model", lambda: model)(), wanted, model_name)
    wanted_targets = (resolved,) if isinstance(resolved, str) else tuple(sorted(resolved))
    out = []
    for field in fields(LoraSettings):
        mine, theirs = getattr(have, field.name), getattr(wanted, field.name)
        if field.name == "target_modules":
            theirs = wanted_targets
        if field.name == "layers" and theirs is not None and theirs >= _depth(model):
            theirs = None  # "the top N layers" with N >= depth is every layer
        if mine != theirs:
            out.append(f"{field.name}: {mine!r} (config: {theirs!r})")
    return out
