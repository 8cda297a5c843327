"""Acting precision: the policy acts on a copy of its weights in a faster number format.

``PolicyConfig.act_dtype`` names it: ``"float32"`` (the weights themselves), ``"bfloat16"``
(a bf16 copy), ``"int8"`` (a copy whose Linear layers are dynamically quantized to int8 by
``torch.ao.quantization.quantize_dynamic``) or ``"auto"``. The copy has the LoRA adapter merged
(one matmul per Linear instead of three) and is rebuilt whenever the trained weights change
(:class:`ActingCopy`, keyed by the weights' version), so every rollout acts with the current
policy; the update keeps the weights' own precision (the trainers measure and correct the
mismatch: :mod:`textgym.trainers.engine.precision`).

``"auto"`` measures once per machine and model (:func:`choose_act_dtype`): a forward pass over a
fixed probe batch, timed in each precision, and the probe's greedy decisions compared with
float32's. It picks the fastest precision whose decisions all agree (float32 when none is faster,
e.g. on a CPU without bf16 units, and for models under :data:`AUTO_MIN_PARAMETERS`); the result is cached in ``$TEXTGYM_HOME/precision/``, keyed by
the CPU (model name and flags), the torch version, the thread count and the model (delete the
file to measure again; ``$TEXTGYM_PRECISION_CACHE`` names another folder). The probe times
alternating passes and keeps each precision's fastest, but a machine busy with other work can
still skew it: measure when the machine is quiet.

Example:
    >>> check_act_dtype("bf16")
    Traceback (most recent call last):
    ...
    ValueError: act_dtype must be one of auto, float32, bfloat16, int8; got 'bf16'
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import platform
import time
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from textgym.policy.config import ACT_DTYPES

__all__ = ["ACT_DTYPES", "AUTO_MIN_PARAMETERS", "ActingCopy", "PrecisionChoice", "check_act_dtype",
           "check_acting_device", "choose_act_dtype", "float32_output_head", "make_acting_copy",
           "update_precision"]

#: The precisions ``auto`` tries, in this order (ties go to the earlier one).
_CANDIDATES = ("float32", "bfloat16", "int8")
_PROBE_TEXTS = [f"Cart position {x / 10:+.1f}, velocity {v:+d}, pole angle {a:+d} degrees. Push LEFT or RIGHT?"
                for x, v, a in zip(range(-8, 8), range(-4, 12), range(7, -9, -1))]
_TIMED_PASSES = 2
#: ``auto`` keeps models smaller than this in float32 without measuring: their passes take
#: milliseconds, so another precision saves little (and the copy is rebuilt after every update),
#: and timings that short are noise, which would make the choice change from run to run.
AUTO_MIN_PARAMETERS = 20_000_000
_PROBE_VERSION = 1  # bump when the probe changes: cached choices are then measured again


def check_act_dtype(name: str) -> str:
    """``name`` if it is one of :data:`ACT_DTYPES`, else a ``ValueError`` naming them."""
    if name not in ACT_DTYPES:
        raise ValueError(f"act_dtype must be one of {', '.join(ACT_DTYPES)}; got {name!r}")
    return name


def check_acting_device(dtype: str, device: torch.device | str) -> None:
    """Refuse int8 acting on anything but a CPU: torch's dynamic int8 quantization
    (``torch.ao.quantization.quantize_dynamic``) has CPU kernels only; on a GPU its layers raise
    ``NotImplementedError`` at the first forward pass."""
    device = torch.device(device)
    if dtype == "int8" and device.type != "cpu":
        raise ValueError(f"int8 acting is unavailable on {device}: torch's dynamic int8 quantization runs on "
                         "CPUs only; act in bfloat16 or float32 there (act_dtype, --act-dtype)")


@contextlib.contextmanager
def update_precision(dtype: str, device: torch.device) -> Iterator[None]:
    """The update's pass in ``dtype`` (``PolicyConfig.update_dtype``): ``"bfloat16"`` autocasts
    the matmuls to bf16 (the weights and their gradients stay in their own precision; the head
    stays in float32 where :func:`float32_output_head` is installed); ``"float32"``: unchanged."""
    if dtype == "float32":
        yield
        return
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        yield


_FLOAT32_HEADS: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def float32_output_head(model: torch.nn.Module) -> bool:
    """Make ``model``'s output head compute in its weights' precision (float32 on a CPU) under
    autocast (once per head).

    The logits of a 49,152-word vocabulary run to tens of nats; bf16 keeps 8 bits of them, an
    error of ~0.06 nats a token at 16, the size of the changes a clipped update makes. The head
    is one matmul per scored position, so float32 there costs little of what bf16 saves in the
    layers. Outside autocast the hooks do nothing. Returns whether they were installed now.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or head in _FLOAT32_HEADS:
        return False
    _FLOAT32_HEADS.add(head)
    paused: list[contextlib.ExitStack] = []

    def enter(module: torch.nn.Module, args: tuple) -> tuple | None:
        if not args or not isinstance(args[0], torch.Tensor) or not torch.is_autocast_enabled(args[0].device.type):
            paused.append(contextlib.ExitStack())  # nothing to pause; keeps enter and leave paired
            return None
        stack = contextlib.ExitStack()
        stack.enter_context(torch.autocast(device_type=args[0].device.type, enabled=False))
        paused.append(stack)
        weight = getattr(module, "weight", None)
        return (args[0].to(weight.dtype if isinstance(weight, torch.Tensor) else torch.float32), *args[1:])

    def leave(module: torch.nn.Module, args: tuple, output: Any) -> None:
        paused.pop().close()

    head.register_forward_pre_hook(enter)
    head.register_forward_hook(leave, always_call=True)
    return True


def make_acting_copy(model: torch.nn.Module, dtype: str) -> torch.nn.Module:
    """A frozen copy of ``model`` (its LoRA adapter merged) in ``dtype`` (``"bfloat16"`` or ``"int8"``)."""
    from textgym.lora import is_peft_model

    check_acting_device(dtype, next(model.parameters()).device)

    acting = copy.deepcopy(model)
    for p in acting.parameters():
        p.grad = None
    if is_peft_model(acting):
        acting = acting.merge_and_unload()  # exact in the weights' precision; one matmul per Linear
    acting.requires_grad_(False).eval()
    if dtype == "bfloat16":
        return acting.to(torch.bfloat16)
    if dtype == "int8":
        # torch 2.13 still runs eager dynamic quantization but warns that it moves to torchao.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*quantiz", category=DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*quantiz", category=UserWarning)
            from torch.ao.quantization import quantize_dynamic

            return quantize_dynamic(acting, {torch.nn.Linear}, dtype=torch.qint8)
    raise ValueError(f"no acting copy in {dtype!r}: use bfloat16 or int8")


class ActingCopy:
    """The model the policy acts with: ``model`` itself in float32, else a copy in ``dtype``,
    rebuilt when ``version`` (the weights' version) changes."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self._model: torch.nn.Module | None = None
        self._version: tuple | None = None
        #: How many times the copy was (re)built, and the seconds it took in total.
        self.syncs, self.sync_seconds = 0, 0.0

    def model_for(self, model: torch.nn.Module, version: tuple) -> torch.nn.Module:
        if self.dtype == "float32":
            return model
        if self._model is None or version != self._version:
            started = time.perf_counter()
            self._model = None  # free the old copy first
            self._model = make_acting_copy(model, self.dtype)
            self._version = version
            self.syncs += 1
            self.sync_seconds += time.perf_counter() - started
        return self._model


@dataclass
class PrecisionChoice:
    """What ``auto`` chose and why: ``seconds`` per probe forward pass and whether the probe's
    greedy decisions ``agree`` with float32's, per precision tried."""

    dtype: str
    seconds: dict[str, float] = field(default_factory=dict)
    agree: dict[str, bool] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    cached: bool = False

    def describe(self) -> str:
        if not self.seconds and not self.errors:
            return f"{self.dtype} (auto: a model this small is not measured)"
        base = self.seconds.get("float32")
        timings = ", ".join(
            f"{d} {s * 1000:.0f} ms" + (f" ({base / s:.2f}x)" if base and d != "float32" else "")
            + ("" if self.agree.get(d, True) else " disagrees") for d, s in self.seconds.items())
        failed = "".join(f", {d} unavailable: {e}" for d, e in self.errors.items())
        return f"{self.dtype} (auto{', cached' if self.cached else ''}: {timings}{failed})"


def _cpu_key() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        info = platform.processor()
    lines = {line.split(":")[0].strip(): line.split(":", 1)[1].strip()
             for line in info.splitlines() if ":" in line and line.split(":")[0].strip() in ("model name", "flags")}
    return f"{lines.get('model name', platform.machine())}|{lines.get('flags', '')}"


def _cache_file(model_key: str) -> Path:
    from textgym.models import textgym_home

    key = "|".join([_cpu_key(), torch.__version__, str(torch.get_num_threads()), model_key, str(_PROBE_VERSION)])
    folder = os.environ.get("TEXTGYM_PRECISION_CACHE") or textgym_home() / "precision"
    return Path(folder) / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")


def _probe_batch(tokenizer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in _PROBE_TEXTS]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])  # left-padded: the last column is real
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def _forward(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The probe's greedy next tokens and the seconds the pass took."""
    started = time.perf_counter()
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=1).logits[:, -1]
    return logits.float().argmax(-1), time.perf_counter() - started


def choose_act_dtype(model: torch.nn.Module, tokenizer: Any, model_key: str, device: torch.device | None = None,
                     refresh: bool = False) -> PrecisionChoice:
    """The fastest acting precision for ``model`` on this machine whose greedy decisions on the
    probe batch all agree with float32's (see the module doc); cached per machine and ``model_key``
    (the model's name; ``refresh`` measures again). A model under :data:`AUTO_MIN_PARAMETERS`
    parameters: float32, unmeasured."""
    if sum(p.numel() for p in model.parameters()) < AUTO_MIN_PARAMETERS:
        return PrecisionChoice("float32")
    path = _cache_file(model_key)
    if not refresh and path.is_file():
        try:
            return PrecisionChoice(**{**json.loads(path.read_text()), "cached": True})
        except (ValueError, TypeError):
            pass  # a damaged cache file is measured again
    device = device or next(model.parameters()).device
    ids, mask = (t.to(device) for t in _probe_batch(tokenizer))
    choice = PrecisionChoice("float32")
    models: dict[str, torch.nn.Module] = {}
    greedy: dict[str, torch.Tensor] = {}
    for dtype in _CANDIDATES:
        try:
            models[dtype] = model if dtype == "float32" else make_acting_copy(model, dtype)
            greedy[dtype], _ = _forward(models[dtype], ids, mask)  # also the warm-up
        except Exception as exc:  # noqa: BLE001 - a precision this build cannot run is skipped
            choice.errors[dtype] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            models.pop(dtype, None)
    # Alternating timed passes, the fastest of each kept: a busy machine slows them all alike.
    for _ in range(_TIMED_PASSES):
        for dtype, acting in models.items():
            seconds = _forward(acting, ids, mask)[1]
            choice.seconds[dtype] = min(seconds, choice.seconds.get(dtype, seconds))
    for dtype in models:
        choice.agree[dtype] = bool(torch.equal(greedy[dtype], greedy["float32"]))
    fastest = min((d for d in choice.seconds if choice.agree[d]), key=lambda d: choice.seconds[d])
    choice.dtype = fastest
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({k: v for k, v in asdict(choice).items() if k != "cached"}, indent=1))
    tmp.replace(path)
    return choice
