"""Atomic, pickle-free checkpoints.

Layout of a checkpoint folder::

    adapter/                  PEFT save_pretrained (safetensors), its base_model_name_or_path the
                              base model's hub id (or absolute folder), README.md (model card)
                                                       -- or model/ for full fine-tuning
    tokenizer/                the tokenizer                 (these three: persistence.write, so
    policy.json               the policy's record           that Policy.load(checkpoint) works)
    value_head.safetensors    PPO's value head (when there is one)
    reference.safetensors     the KL reference's weights: a warm start's adapter weights, or a full
                              fine-tune's frozen copy of the model
    optimizer.safetensors     every tensor of the optimizer state, flattened ("<name>/<param>.<key>")
    trainer_state.json        counters, config, RNG states, optimizer hyper-parameters, the policy
                              (base model name and every PolicyConfig setting), anything else
    metrics.jsonl             (from a Trainer) the run's metrics lines up to this checkpoint

It is written to ``<dir>.tmp`` and then renamed into place, so a crash mid-write leaves the
previous checkpoint intact. Loading reads only safetensors and JSON: nothing is unpickled.

Example:
    >>> import tempfile, torch
    >>> p = torch.nn.Parameter(torch.ones(2)); opt = torch.optim.AdamW([p], lr=0.1)
    >>> p.grad = torch.ones(2); opt.step()
    >>> tensors, meta = flatten_optimizer(opt, "policy")
    >>> sorted(tensors)
    ['policy/0.exp_avg', 'policy/0.exp_avg_sq', 'policy/0.step']
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from textgym import run_folder
from textgym.lora import is_peft_model
from textgym.policy import Policy, persistence
from textgym.policy.persistence import policy_record
from textgym.settings import check, setting

__all__ = ["NonFiniteWeightsError", "check_finite", "checkpoint_dir", "flatten_optimizer", "get_rng_states", "load_checkpoint", "load_model_weights",
           "load_tensors",
           "policy_from_record", "policy_record", "read_state", "remove_stale_temporary", "save_checkpoint",
           "save_model_weights",
           "set_rng_states", "unflatten_optimizer"]

STATE_FILE = run_folder.STATE
OPTIMIZER_FILE = "optimizer.safetensors"
REFERENCE_FILE = "reference.safetensors"
VALUE_HEAD_FILE = "value_head.safetensors"


# --- optimizer state <-> (safetensors, JSON) --------------------------------------------------

def flatten_optimizer(optimizer: torch.optim.Optimizer, name: str) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``optimizer.state_dict()`` into tensors (for safetensors) and the rest (for JSON)."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    meta: dict[str, Any] = {"param_groups": sd["param_groups"], "state": {}}
    for index, param_state in sd["state"].items():
        scalars = {}
        for key, value in param_state.items():
            if torch.is_tensor(value):
                tensors[f"{name}/{index}.{key}"] = value.detach().cpu().clone()
            else:
                scalars[key] = value
        meta["state"][str(index)] = scalars
    return tensors, meta


def unflatten_optimizer(optimizer: torch.optim.Optimizer, name: str, tensors: dict[str, torch.Tensor],
                        meta: dict) -> None:
    """Load what :func:`flatten_optimizer` produced back into ``optimizer``.

    Raises:
        ValueError: the state does not fit the optimizer's parameters (another adapter's: a
            parameter it does not have, or a moment of another shape). torch would load it and
            fail, or silently misbehave, at the next step.
    """
    state: dict[int, dict[str, Any]] = {int(i): dict(s) for i, s in meta["state"].items()}
    prefix = name + "/"
    for key, value in tensors.items():
        if key.startswith(prefix):
            index, field = key[len(prefix):].split(".", 1)
            state.setdefault(int(index), {})[field] = value
    _check_fits(optimizer, name, state)
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def _check_fits(optimizer: torch.optim.Optimizer, name: str, state: dict[int, dict[str, Any]]) -> None:
    """ValueError unless every tensor of ``state`` (per parameter index) has its parameter's shape
    (0-dimensional ones, like Adam's step count, excepted)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for index, moments in sorted(state.items()):
        if not 0 <= index < len(params):
            raise ValueError(f"the {name!r} optimizer state has parameter {index}, the model has "
                             f"{len(params)} trainable ones")
        for field, value in moments.items():
            if torch.is_tensor(value) and value.dim() > 0 and value.shape != params[index].shape:
                raise ValueError(f"the {name!r} optimizer state's {field} of parameter {index} has "
                                 f"shape {tuple(value.shape)}, the parameter {tuple(params[index].shape)}")


def load_tensors(file: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file of a checkpoint.

    Raises:
        FileNotFoundError: no such file.
        ValueError: naming the file, when it is not a readable safetensors file (truncated by a
            full disk or an interrupted copy, or another file under its name).
    """
    try:
        return load_file(str(file))
    except FileNotFoundError:
        raise
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"{file} is not a readable safetensors file (truncated or damaged?): "
                         f"{exc}") from None


# --- RNG states as JSON lists --------------------------------------------------------------

def get_rng_states() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's global generators, as JSON-able lists."""
    py_version, py_state, py_gauss = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [py_version, list(py_state), py_gauss],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_states` returned."""
    version, py_state, gauss = states["python"]
    random.setstate((version, tuple(py_state), gauss))
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(states["torch"], dtype=torch.uint8))


# --- model weights ------------------------------------------------------------------------------

def save_model_weights(model: torch.nn.Module, folder: Path) -> str:
    """``adapter/`` (PEFT format) for a PEFT model, else ``model/`` (full weights); returns which."""
    if is_peft_model(model):
        model.save_pretrained(str(folder / "adapter"), safe_serialization=True)
        return "adapter"
    model.save_pretrained(str(folder / "model"), safe_serialization=True)
    return "model"


def load_model_weights(model: torch.nn.Module, folder: Path) -> None:
    """Load the weights saved by :func:`save_model_weights` into an already built ``model``."""
    folder = Path(folder)
    if (folder / "adapter").is_dir():
        if not is_peft_model(model):
            raise ValueError(f"{folder} holds a LoRA adapter but the model has no adapter (use_lora=False?)")
        from peft.utils import set_peft_model_state_dict

        weights = load_tensors(folder / "adapter" / "adapter_model.safetensors")
        result = set_peft_model_state_dict(model, weights)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ValueError(f"adapter in {folder} does not fit the model: unexpected keys {unexpected[:3]}")
        return
    files = sorted((folder / "model").glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no adapter/ or model/*.safetensors in checkpoint {folder}")
    if is_peft_model(model):
        raise ValueError(f"{folder} holds full model weights but the model has a LoRA adapter")
    for file in files:
        # strict=False: save_pretrained leaves out tied weights (e.g. lm_head tied to the embeddings).
        model.load_state_dict(load_tensors(file), strict=False)


# --- the policy --------------------------------------------------------------------------------

def policy_from_record(record: dict[str, Any], device: str | torch.device | None = None) -> Policy:
    """The policy a checkpoint's ``"policy"`` record (:func:`policy_record`: the base model's name
    and every setting) describes, built by :meth:`Policy.from_pretrained` on ``device`` (default:
    the loader's) without the adapter: the trainer adds it and loads its weights."""
    settings = {k: v for k, v in record.items() if v is not None}
    name = settings.pop("name", None)
    if name is None:
        raise ValueError("the checkpoint does not name its base model: pass resume(path, policy=...)")
    return Policy.from_pretrained(name, device=device, **settings)


# --- the checkpoint folder -------------------------------------------------------------------

def save_checkpoint(path: str | Path, *, optimizers: dict[str, torch.optim.Optimizer],
                    state: dict[str, Any], model: torch.nn.Module | None = None,
                    policy: Policy | None = None, value_head: torch.nn.Module | None = None,
                    files: dict[str, str] | None = None, reference: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a checkpoint atomically (to ``<path>.tmp``, then renamed).

    Args:
        path: the checkpoint folder.
        policy: the trained policy: its weights (a PEFT model saves only its adapter), tokenizer,
            settings and model card (:func:`textgym.policy.persistence.write`), so that
            ``Policy.load(path)`` works and the adapter loads with PEFT elsewhere.
        model: instead of ``policy``, a bare model: its weights only.
        optimizers: optimizers by name; their tensors go to ``optimizer.safetensors``.
        state: JSON-able trainer state (counters, config, ...). RNG states are added here.
        value_head: optional module saved to ``value_head.safetensors``.
        files: more text files to keep in the checkpoint, by name (e.g. the run's metrics lines
            up to it, so that a line torn by a crash can be restored on resume).
        reference: the KL reference's own weights (``Policy.reference_state()``), when it has any.
    """
    path = Path(path)
    tmp = run_folder.temporary(path)
    check_finite(policy.model if policy is not None else model, policy, path)
    remove_stale_temporary(path)
    try:
        _write_folder(tmp, path, optimizers=optimizers, state=state, model=model, policy=policy,
                      value_head=value_head, files=files, reference=reference)
    except BaseException as exc:
        # A failed write (a full disk) leaves no half-written folder to fill the disk further.
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            where = exc.filename or tmp
            raise OSError(exc.errno, f"cannot write checkpoint {path} ({where}): "
                                     f"{exc.strerror or exc}", str(where)) from exc
        raise
    _swap_in(tmp, path)
    return path


class NonFiniteWeightsError(ValueError):
    """The weights to save are not finite, or the model's outputs on a probe are not: saving them
    would make every resume fail ("probability tensor contains inf/nan"). The last checkpoint stays."""


def check_finite(model: torch.nn.Module | None, policy: Policy | None = None, path: str | Path = "") -> None:
    """Raise :class:`NonFiniteWeightsError` when a trainable parameter of ``model`` holds NaN or
    inf, or (with ``policy``) when its logits on a probe prompt do: weights blown up by a huge
    learning rate can be finite (1e30) while their products overflow."""
    if model is None:
        return
    for name, parameter in model.named_parameters():
        if parameter.requires_grad and not bool(torch.isfinite(parameter.detach()).all()):
            raise NonFiniteWeightsError(f"not saving checkpoint {path}: parameter {name} holds NaN or inf")
    if policy is None:
        return
    # A prompt as the policy renders them (blown-up weights can stay finite on a short input).
    system, observation = ("You play a game. Answer with one action name: LEFT or RIGHT.",
                           "The pole leans left by 0.02 and the cart moves right at 0.5.")
    try:
        ids = policy.prompts.prompt_ids(system, observation)
    except ValueError:  # no chat template: the plain text
        ids = policy.tokenizer(f"{system}\n{observation}")["input_ids"]
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids], device=device)).logits
    if not bool(torch.isfinite(logits).all()):
        raise NonFiniteWeightsError(f"not saving checkpoint {path}: the model's outputs are NaN or inf "
                                    "(the weights blew up)")


def remove_stale_temporary(path: str | Path) -> bool:
    """Remove ``<path>.tmp``, the half-written checkpoint a killed or failed save left (the
    checkpoint itself is untouched); returns whether there was one."""
    tmp = run_folder.temporary(Path(path))
    if not tmp.exists():
        return False
    shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
    return True


def _write_folder(tmp: Path, path: Path, *, optimizers: dict[str, torch.optim.Optimizer],
                  state: dict[str, Any], model: torch.nn.Module | None, policy: Policy | None,
                  value_head: torch.nn.Module | None, files: dict[str, str] | None,
                  reference: dict[str, torch.Tensor] | None = None) -> None:
    """Write every file of the checkpoint ``path`` into the folder ``tmp``."""
    tmp.mkdir(parents=True)
    if policy is not None:
        weights = persistence.write(policy, tmp, location=str(path))
    elif model is not None:
        weights = save_model_weights(model, tmp)
    else:
        raise TypeError("save_checkpoint() needs the policy (or a bare model)")
    if value_head is not None:
        save_file({k: v.detach().cpu().contiguous() for k, v in value_head.state_dict().items()},
                  str(tmp / VALUE_HEAD_FILE))
    if reference is not None:
        save_file({k: v.detach().cpu().contiguous() for k, v in reference.items()}, str(tmp / REFERENCE_FILE))
    all_tensors: dict[str, torch.Tensor] = {}
    optimizer_meta = {}
    for name, optimizer in optimizers.items():
        tensors, meta = flatten_optimizer(optimizer, name)
        all_tensors.update(tensors)
        optimizer_meta[name] = meta
    save_file(all_tensors, str(tmp / OPTIMIZER_FILE))
    for name, text in (files or {}).items():
        _write_synced(tmp / name, text)
    full_state = {**state, "weights": weights, "optimizers": optimizer_meta, "rng": get_rng_states()}
    with open(tmp / STATE_FILE, "w") as f:
        json.dump(full_state, f)
        f.flush()
        os.fsync(f.fileno())


def _swap_in(tmp: Path, path: Path) -> None:
    """Rename the written folder into place: the previous checkpoint survives as ``<path>.old``
    until the new one is there."""
    old = run_folder.previous(path)
    if path.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def checkpoint_dir(path: str | Path) -> Path:
    """The folder to load: ``path``, or ``<path>.old`` if a crash happened mid-swap."""
    path = Path(path)
    if (path / STATE_FILE).is_file():
        return path
    old = run_folder.previous(path)
    if (old / STATE_FILE).is_file():
        return old
    raise FileNotFoundError(f"no checkpoint at {path} (expected {path / STATE_FILE})")


@dataclass(frozen=True)
class Counters:
    """The run's progress counters in a checkpoint's state, checked when it is read (an edited
    ``trainer_state.json`` fails in one line, before a model loads)."""

    update_count: int = setting(0, at_least=0)
    """Updates done."""
    episodes_seen: int = setting(0, at_least=0)
    """Training episodes played."""
    decisions_seen: int = setting(0, at_least=0)
    """Training decisions taken."""
    nonfinite_updates: int = setting(0, at_least=0)
    """Updates skipped because their loss or gradients were not finite."""
    wall_time: float = setting(0.0, at_least=0)
    """Seconds of training so far, over every session."""

    def __post_init__(self) -> None:
        check(self)


def read_state(path: str | Path) -> dict[str, Any]:
    """The JSON state of a checkpoint, its counters checked (its algorithm's config:
    :func:`textgym.trainers.read_checkpoint`).

    Raises:
        ValueError: a counter out of its range (the file was edited).
    """
    file = checkpoint_dir(path) / STATE_FILE
    with open(file) as f:
        state = json.load(f)
    if not isinstance(state, dict):
        raise ValueError(f"{file} is not a JSON object")  # noqa: TRY004 - a malformed file
    try:
        Counters(**{f.name: state[f.name] for f in fields(Counters) if f.name in state})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{file}: {exc}") from None
    return state


def load_checkpoint(path: str | Path, *, model: torch.nn.Module, optimizers: dict[str, torch.optim.Optimizer],
                    value_head: torch.nn.Module | None = None, restore_rng: bool = True) -> dict[str, Any]:
    """Load a checkpoint into already built objects; returns the JSON state."""
    folder = checkpoint_dir(path)
    state = read_state(folder)
    load_model_weights(model, folder)
    if value_head is not None and (folder / VALUE_HEAD_FILE).is_file():
        value_head.load_state_dict(load_tensors(folder / VALUE_HEAD_FILE))
    tensors = load_tensors(folder / OPTIMIZER_FILE)
    for name, optimizer in optimizers.items():
        if name in state["optimizers"]:
            try:
                unflatten_optimizer(optimizer, name, tensors, state["optimizers"][name])
            except ValueError as exc:  # another run's file, or torch's own group-size check
                raise ValueError(f"{folder / OPTIMIZER_FILE} does not fit the checkpoint's adapter: "
                                 f"{exc}") from None
    if restore_rng:
        set_rng_states(state["rng"])
    return state
