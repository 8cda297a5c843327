"""Building a policy from a model name, saving it, and loading it back, here or elsewhere.

:func:`from_pretrained` is the one builder of a policy from a model name: it loads the model
(:func:`textgym.models.load`) and applies the model registry's defaults through
:meth:`PolicyConfig.for_model`. :func:`policy_record` is what :meth:`Policy.save` and every trainer
checkpoint record (the base model's name and the complete settings), so a loaded policy or a
resumed run acts exactly as the original.

:func:`write` is the one writer of a policy's files, used by :meth:`Policy.save` and by every
trainer checkpoint; :func:`load` (:meth:`Policy.load`) reads them, and ``textgym export``'s
folders too. The layout::

    adapter/        PEFT format (adapter_config.json names the base model's hub id or absolute
                    folder), README.md (model card)      -- or model/: a full model folder
    tokenizer/      the tokenizer
    policy.json     the base model's name and portable id, every PolicyConfig setting, "lora"

Example:
    >>> import tempfile
    >>> from textgym.policy import Policy
    >>> policy = Policy.from_pretrained("tiny", normalization="token")
    >>> folder = policy.save(tempfile.mkdtemp() + "/saved")
    >>> Policy.load(folder).normalization
    'token'
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from textgym import models, run_folder
from textgym.lora import is_peft_model
from textgym.policy.config import PolicyConfig

if TYPE_CHECKING:
    from textgym.policy.policy import Policy

__all__ = ["CARD_FILE", "POLICY_FILE", "from_pretrained", "load", "model_card", "policy_record",
           "read_record", "save", "save_adapter", "saved_record", "weights_folder", "write",
           "write_record"]

POLICY_FILE = "policy.json"
CARD_FILE = "README.md"
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


def saved_record(policy: Policy) -> dict[str, Any]:
    """What ``policy.json`` holds: :func:`policy_record`, the base model's portable name
    (``base_model``: :func:`textgym.models.base_model_id`, what another machine loads it by) and
    whether the weights are a LoRA adapter (``lora``)."""
    record = policy_record(policy)
    base = models.base_model_id(policy.name) if policy.name is not None else None
    return {**record, "base_model": base, "lora": is_peft_model(policy.model)}


def write_record(folder: str | os.PathLike, record: dict[str, Any]) -> None:
    """Write ``policy.json`` (:func:`saved_record`'s content) into ``folder``: the one writer of
    the file, for saved policies, checkpoints and exports."""
    (Path(folder) / POLICY_FILE).write_text(json.dumps(record, indent=2))


def write(policy: Policy, folder: str | os.PathLike, location: str | None = None) -> str:
    """Write ``policy`` into ``folder`` so that it can be used elsewhere (the layout of
    :func:`save` and of every trainer checkpoint): ``adapter/`` (PEFT format, its
    ``base_model_name_or_path`` the base model's hub id or absolute folder) or ``model/`` (a full
    model folder with its tokenizer), each with a model card (``README.md``); ``tokenizer/``;
    ``policy.json`` (:func:`saved_record`). Returns ``"adapter"`` or ``"model"``.

    Args:
        folder: where to write (created if missing; files of the same names are overwritten).
        location: how the card's loading examples name ``folder`` (default: ``folder``).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    record = saved_record(policy)
    weights = folder / ("adapter" if record["lora"] else "model")
    if record["lora"]:
        save_adapter(policy.model, weights, record["base_model"])
    else:  # a full model folder loads by itself (textgym.models.load(folder))
        policy.model.save_pretrained(weights, safe_serialization=True)
        policy.tokenizer.save_pretrained(weights)
    policy.tokenizer.save_pretrained(folder / "tokenizer")
    write_record(folder, record)
    model_card(record, location=str(location or folder), nested=True).save(weights / CARD_FILE)
    return weights.name


def save_adapter(model: Any, folder: str | os.PathLike, base_model: str | None) -> None:
    """PEFT ``save_pretrained`` of ``model``'s adapter, then its ``adapter_config.json`` rewritten
    (by PEFT) with ``base_model_name_or_path`` set to ``base_model``: the hub id or absolute
    folder others load the base by, where PEFT records the folder the weights happened to be
    read from (``None``: PEFT's record stays). Set afterwards, not before: while saving, PEFT asks
    that name's config whether the vocabulary was resized, which for a hub id would be a network
    request per checkpoint."""
    from peft import PeftConfig  # lazy: importing peft takes seconds

    model.save_pretrained(str(folder), safe_serialization=True)
    if base_model is None:
        return
    config = PeftConfig.from_pretrained(str(folder))
    config.base_model_name_or_path = base_model
    config.save_pretrained(str(folder))


def save(policy: Policy, directory: str | os.PathLike) -> Path:
    """Save the adapter (LoRA) or the full model, the tokenizer and the policy's record
    (:func:`write`'s layout).

    Written to ``<directory>.tmp`` and renamed, so a crash leaves any previous save intact.
    """
    target = Path(directory)
    tmp = run_folder.temporary(target)
    shutil.rmtree(tmp, ignore_errors=True)
    write(policy, tmp, location=str(target))
    if target.exists():
        old = run_folder.previous(target)
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)
    return target


def read_record(directory: str | os.PathLike) -> dict[str, Any]:
    """The ``policy.json`` of a saved policy, a checkpoint or an export (the one reader)."""
    folder = Path(directory)
    settings_file = folder / POLICY_FILE
    if not settings_file.is_file():
        checkpoint = folder / run_folder.CHECKPOINT
        hint = f" (a run folder: load its checkpoint, {checkpoint})" if checkpoint.is_dir() else ""
        raise FileNotFoundError(f"{folder} is not a saved policy (no {POLICY_FILE}){hint}")
    return json.loads(settings_file.read_text())


def weights_folder(directory: str | os.PathLike, lora: bool) -> Path:
    """Where a saved policy's weights are: ``adapter/`` or ``model/`` (a save or a checkpoint),
    else the folder itself (an export: a plain PEFT adapter or model folder)."""
    folder = Path(directory)
    nested = folder / ("adapter" if lora else "model")
    return nested if nested.is_dir() else folder


def load(cls: type[Policy], directory: str | os.PathLike, device: str | torch.device | None = None,
         dtype: torch.dtype | str | None = None, quantize: str | None = None,
         **overrides: Any) -> Policy:
    """Load a policy written by :func:`save`, a trainer checkpoint or ``textgym export`` (for an
    adapter, the base model is loaded by its registered name, else by its recorded hub id or
    absolute folder; ``device``, ``dtype`` and ``quantize`` as in :func:`textgym.models.load`)."""
    folder = Path(directory)
    record = read_record(folder)
    name, base, lora = record.pop("name"), record.pop("base_model", None), record.pop("lora")
    config = PolicyConfig.from_dict(record).replace(**overrides)
    weights = weights_folder(folder, lora)
    if lora:
        source = name if name in models.REGISTRY else (base or name)
        if source is None:
            raise ValueError(f"{folder}: the adapter's base model name was not recorded")
        model, _ = models.load(source, device=device, dtype=dtype, quantize=quantize)
        from transformers import AutoTokenizer

        tokenizer_folder = folder / "tokenizer" if (folder / "tokenizer").is_dir() else weights
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
        from peft import PeftModel  # lazy: importing peft takes seconds

        with warnings.catch_warnings(), _naming_damaged(weights / "adapter_model.safetensors"):
            warnings.simplefilter("ignore", FutureWarning)
            model = PeftModel.from_pretrained(model, weights, is_trainable=True)
        name = source
    else:
        with _naming_damaged(weights):
            model, tokenizer = models.load(str(weights), device=device, dtype=dtype, quantize=quantize)
    model.eval()
    return cls(model, tokenizer, config=config, name=name)


@contextlib.contextmanager
def _naming_damaged(path: Path) -> Iterator[None]:
    """A safetensors file under ``path`` that cannot be read (truncated by a full disk or an
    interrupted copy) raises ValueError naming ``path``; safetensors' own error names no file."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as exc:
        raise ValueError(f"{path} is not a readable safetensors file (truncated or damaged?): {exc}") from None


# --- model cards -----------------------------------------------------------------------------------


def model_card(record: dict[str, Any], location: str, *, nested: bool = False,
               training: dict[str, Any] | None = None, repo_id: str | None = None) -> Any:
    """The model card (``huggingface_hub.ModelCard``) of a saved policy: what the weights are,
    which copy of the base model they were trained on, the policy settings and how to load them.

    Args:
        record: the policy's ``policy.json`` (:func:`saved_record`).
        location: the folder the loading examples name.
        nested: the weights are in ``adapter/`` or ``model/`` under ``location`` (a save or a
            checkpoint), not in ``location`` itself (an export).
        training: facts of the run (env, algorithm, episodes, evaluation...) for a table.
        repo_id: the hub repository the folder is pushed to (the examples then load from it).
    """
    from huggingface_hub import ModelCard, ModelCardData

    name, base, lora = record.get("name"), record.get("base_model"), bool(record.get("lora"))
    settings = {k: v for k, v in record.items() if k not in ("name", "base_model", "lora")}
    on_hub = base is not None and not Path(base).is_absolute()
    data = ModelCardData(base_model=base if on_hub else None,
                         library_name="peft" if lora else "transformers",
                         pipeline_tag="text-generation",
                         tags=["textgym", "reinforcement-learning", *(["lora"] if lora else [])])
    if base is not None:
        base_text = f"`{base}`"
    elif name is not None:
        base_text = f"textgym's `{name}` model"
    else:
        base_text = "a base model whose name was not recorded"
    what = (f"A LoRA adapter (PEFT) for {base_text}" if lora
            else f"A causal language model fine-tuned from {base_text}")
    text = [f"# {repo_id or Path(location).name}",
            f"{what}, trained with textgym by online reinforcement learning in text environments."]
    if name is not None:
        text.append(f"## Base model\n\nTraining ran on {models.weights_origin(name)}.")
    if training:
        rows = "\n".join(f"| {key} | {value} |" for key, value in training.items())
        text.append(f"## Training\n\n| | |\n|---|---|\n{rows}")
    shown = json.dumps({k: v for k, v in settings.items() if k != "chat_template"}, indent=2)
    text.append("## Policy settings\n\n" + (
        "Score mode: the policy ranks the env's valid actions by their log-likelihood as the "
        "answer (the chosen action is always valid)." if settings.get("mode", "score") == "score"
        else "Generate mode: the policy writes its answer as free text, parsed by the env.")
        + f" The settings are in `{POLICY_FILE}`; `textgym.Policy.load` applies them"
        + (", its own chat template included" if settings.get("chat_template") else "")
        + f".\n\n```json\n{shown}\n```")
    text.append("## How to load\n\n" + _loading_examples(location, nested, lora, name, base, repo_id,
                                                        env=(training or {}).get("env")))
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(text) + "\n")


def _loading_examples(location: str, nested: bool, lora: bool, name: str | None,
                      base: str | None, repo_id: str | None, env: str | None = None) -> str:
    """The model card's code: textgym (and how to get an action from the policy), then PEFT or
    transformers alone, and for an adapter on a hub model textgym has a local copy of, how to
    load it offline."""
    weights = f"{location}/{'adapter' if lora else 'model'}" if nested else location
    tokenizer = f"{location}/tokenizer" if nested else location
    if repo_id is not None:
        weights = tokenizer = repo_id
        textgym_code = ("import textgym\nfrom huggingface_hub import snapshot_download\n\n"
                        f'policy = textgym.Policy.load(snapshot_download("{repo_id}"))')
    else:
        textgym_code = f'import textgym\n\npolicy = textgym.Policy.load("{location}")'
    if env:  # an action for one observation: the env renders the prompt, the policy answers
        textgym_code += (f'\n\nenv = textgym.make("{env.split(":")[-1]}")\nobs, info = env.reset(seed=0)\n'
                         '[decision] = policy.act([obs], [info["system_prompt"]], [info["valid_actions"]], '
                         'greedy=True)\nprint(decision.text)  # the action')
    examples = [f"```python\n{textgym_code}\n```"]
    if lora and base is None:
        examples = examples if name is not None else []
        examples.append("The base model has no weights to download: only `textgym.Policy.load` "
                        "rebuilds it." if name is not None else
                        "Load the base model yourself and add the adapter with "
                        "`peft.PeftModel.from_pretrained(base_model, folder)`.")
        return "\n\n".join(examples)
    if lora:
        loader = "from peft import AutoPeftModelForCausalLM"
        model = f'model = AutoPeftModelForCausalLM.from_pretrained("{weights}")'
        where = f"`{base}`" if not Path(base).is_absolute() else "its folder"
        examples.append(f"With PEFT alone (it loads the base model from {where}):")
    else:
        loader = "from transformers import AutoModelForCausalLM"
        model = f'model = AutoModelForCausalLM.from_pretrained("{weights}")'
        examples.append("With transformers alone:")
    examples.append(f"```python\n{loader}\nfrom transformers import AutoTokenizer\n\n{model}\n"
                    f'tokenizer = AutoTokenizer.from_pretrained("{tokenizer}")\n```')
    local = models.local_copy(name) if lora and name is not None and not Path(base).is_absolute() else None
    if local is not None:
        examples.append(
            f"Offline (no hub; `AutoPeftModelForCausalLM` would try to download `{base}`): load the "
            f"copy of the base model textgym trained on, from `{local}` (`textgym.models.load"
            f'("{name}")` writes it), and add the adapter:')
        examples.append(f"```python\nfrom peft import PeftModel\nfrom transformers import AutoModelForCausalLM, "
                        f'AutoTokenizer\n\nbase = AutoModelForCausalLM.from_pretrained("{local}")\n'
                        f'model = PeftModel.from_pretrained(base, "{weights}")\n'
                        f'tokenizer = AutoTokenizer.from_pretrained("{tokenizer}")\n```')
    return "\n\n".join(examples)
