"""Building a policy from a model name, saving it, and loading it back.

:func:`from_pretrained` is the one builder of a policy from a model name: it loads the model
(:func:`textgym.models.load`) and applies the model registry's defaults through
:meth:`PolicyConfig.for_model`. :func:`policy_record` is what :meth:`Policy.save` and every trainer
checkpoint record (the base model's name and the complete settings), so a loaded policy or a
resumed run acts exactly as the original.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from textgym import models
from textgym.lora import is_peft_model
from textgym.policy.config import PolicyConfig

if TYPE_CHECKING:
    from textgym.policy.policy import Policy

__all__ = ["POLICY_FILE", "from_pretrained", "load", "policy_record", "save"]

POLICY_FILE = "policy.json"
_LORA_KEYWORDS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")


def policy_record(policy: Policy) -> dict[str, Any]:
    """The base model's name and every setting of ``policy`` (JSON-able)."""
    return {"name": policy.name, **policy.config.to_dict()}


def from_pretrained(cls: type[Policy], name_or_path: str = models.DEFAULT_MODEL, mode: str | None = None, *,
                    config: PolicyConfig | None = None, device: str | torch.device | None = None,
                    dtype: torch.dtype | str | None = None, quantize: str | None = None,
                    lora: bool | None = None, **overrides: Any) -> Policy:
    """Load a model by name (see :func:`textgym.models.load`) and wrap it in a policy.

    Args:
        name_or_path: registered name, hub id or folder.
        mode: ``"score"`` or ``"generate"`` (an override, like ``**overrides``).
        config: complete settings (e.g. recorded by a save); ``None``: the defaults with the
            model registry's on top (see :meth:`PolicyConfig.for_model`).
        device, dtype, quantize: see :func:`textgym.models.load` (default: CUDA if available,
            else CPU; bf16 on a bf16-capable GPU, else fp32; not quantized).
        lora: not needed any more: the trainer adds the LoRA adapter from its config
            (``TrainConfig.lora_*``); ``True`` warns and is otherwise what the trainer does anyway.
        **overrides: settings of :class:`PolicyConfig` (temperature, normalization, seed, ...).
    """
    given = sorted(set(overrides) & set(_LORA_KEYWORDS))
    if given:
        raise TypeError(f"{', '.join(given)}: LoRA settings belong to the trainer config "
                        f"(TrainConfig.lora_r, lora_alpha, lora_dropout, lora_target_modules, lora_layers), "
                        f"which adds the adapter; Policy.from_pretrained no longer takes them")
    if lora:
        warnings.warn("Policy.from_pretrained(lora=True) is no longer needed: the trainer adds the LoRA "
                      "adapter from its config (TrainConfig.lora_*); to add one yourself use "
                      "textgym.lora.add_lora(policy.model, LoraSettings(...))", FutureWarning, stacklevel=3)
    if mode is not None:
        overrides["mode"] = mode
    settings = PolicyConfig.for_model(name_or_path, config, **overrides)  # fails before the slow load
    model, tokenizer = models.load(name_or_path, device=device, dtype=dtype, quantize=quantize)
    return cls(model, tokenizer, config=settings, name=name_or_path)


def save(policy: Policy, directory: str | os.PathLike) -> Path:
    """Save the adapter (LoRA) or the full model, the tokenizer and the policy's record.

    Written to ``<directory>.tmp`` and renamed, so a crash leaves any previous save intact.
    Layout: ``adapter/`` (PEFT, safetensors) or ``model/`` (a full model folder with its
    tokenizer), ``tokenizer/``, ``policy.json``.
    """
    target = Path(directory)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    lora = is_peft_model(policy.model)
    weights = tmp / ("adapter" if lora else "model")
    policy.model.save_pretrained(weights)
    policy.tokenizer.save_pretrained(tmp / "tokenizer")
    if not lora:  # a full model folder loads by itself (textgym.models.load(folder))
        policy.tokenizer.save_pretrained(weights)
    record = {**policy_record(policy), "lora": lora}
    (tmp / POLICY_FILE).write_text(json.dumps(record, indent=2))
    if target.exists():
        old = target.with_name(target.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)
    return target


def load(cls: type[Policy], directory: str | os.PathLike, device: str | torch.device | None = None,
         dtype: torch.dtype | str | None = None, quantize: str | None = None,
         **overrides: Any) -> Policy:
    """Load a policy written by :func:`save` (for an adapter, the base model is loaded by name;
    ``device``, ``dtype`` and ``quantize`` as in :func:`textgym.models.load`)."""
    folder = Path(directory)
    settings_file = folder / POLICY_FILE
    if not settings_file.is_file():
        raise FileNotFoundError(f"{folder} is not a saved policy (no {POLICY_FILE})")
    record = json.loads(settings_file.read_text())
    name, lora = record.pop("name"), record.pop("lora")
    config = PolicyConfig.from_dict(record).replace(**overrides)
    if lora:
        if name is None:
            raise ValueError(f"{folder}: the adapter's base model name was not recorded")
        model, _ = models.load(name, device=device, dtype=dtype, quantize=quantize)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
        from peft import PeftModel  # lazy: importing peft takes seconds

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            model = PeftModel.from_pretrained(model, folder / "adapter", is_trainable=True)
    else:
        model, tokenizer = models.load(str(folder / "model"), device=device, dtype=dtype,
                                       quantize=quantize)
    model.eval()
    return cls(model, tokenizer, config=config, name=name)
