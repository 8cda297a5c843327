"""Will a batch of envs fit in the GPU's memory? Checked before a rollout's first forward pass.

A vector step of ``N`` envs runs ``N`` prompt rows through the model at once. Per row it keeps
the whole prompt's KV cache (the shared prefix is expanded into every row when the row's own
tokens are appended), the next-token logits over the vocabulary (in the model's dtype, then in
float32, then their log-softmax) and, while a layer runs, the activations of the row's own
tokens. A batch that does not fit fails deep inside the model with CUDA's out-of-memory error
after minutes of loading; :func:`check_acting_memory` says so at once, with the largest number of
envs that fits.

Example:
    >>> from textgym import models
    >>> model, _ = models.load("tiny")
    >>> bytes_per_row = acting_bytes_per_row(model.config, prompt_tokens=90, new_tokens=1, dtype_bytes=4)
    >>> bytes_per_row > 0
    True
    >>> acting_memory_error(model.config, rows=1024, prompt_tokens=90, new_tokens=1, dtype_bytes=4,
    ...                     free_bytes=bytes_per_row * 100, device="cuda:0").split(": the")[1]
    ' largest safe --num-envs is 80'
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["MEMORY_MARGIN", "acting_bytes_per_row", "acting_memory_error", "check_acting_memory"]

#: The share of the free memory a batch may plan to use: the estimate leaves out the allocator's
#: fragmentation and the small tensors of a step.
MEMORY_MARGIN = 0.8


def _sizes(config: Any) -> dict[str, int] | None:
    """The model's sizes that acting memory follows (``None``: a config that does not name them)."""
    try:
        heads = int(config.num_attention_heads)
        hidden = int(config.hidden_size)
        return {
            "layers": int(config.num_hidden_layers), "heads": heads, "hidden": hidden,
            "kv_heads": int(getattr(config, "num_key_value_heads", None) or heads),
            "head_dim": int(getattr(config, "head_dim", None) or hidden // heads),
            "intermediate": int(getattr(config, "intermediate_size", None) or 4 * hidden),
            "vocab": int(config.vocab_size),
        }
    except (AttributeError, TypeError, ValueError):
        return None


def acting_bytes_per_row(config: Any, prompt_tokens: int, new_tokens: int, dtype_bytes: int) -> int:
    """Bytes one env's row takes while acting: its KV cache (prompt and answer), its logits
    (model dtype, float32 and log-softmax), one layer's activations and attention scores for its
    tokens. 0 when the config does not name the model's sizes."""
    sizes = _sizes(config)
    if sizes is None:
        return 0
    tokens = prompt_tokens + new_tokens
    kv = tokens * sizes["layers"] * 2 * sizes["kv_heads"] * sizes["head_dim"] * dtype_bytes
    logits = sizes["vocab"] * (dtype_bytes + 4 + 4)
    # one layer at a time: the MLP's three intermediate tensors, a few hidden-size ones, the keys
    # and values repeated for every query head, and the attention scores in float32
    activations = prompt_tokens * (3 * sizes["intermediate"] + 6 * sizes["hidden"]) * dtype_bytes \
        + tokens * 2 * sizes["heads"] * sizes["head_dim"] * dtype_bytes \
        + sizes["heads"] * prompt_tokens * tokens * 4
    return kv + logits + activations


def acting_memory_error(config: Any, rows: int, prompt_tokens: int, new_tokens: int, dtype_bytes: int,
                        free_bytes: int, device: str) -> str | None:
    """The message when ``rows`` envs side by side need more than :data:`MEMORY_MARGIN` of
    ``free_bytes`` to act, else ``None``."""
    per_row = acting_bytes_per_row(config, prompt_tokens, new_tokens, dtype_bytes)
    usable = int(free_bytes * MEMORY_MARGIN)
    if per_row == 0 or rows * per_row <= usable:
        return None
    largest = usable // per_row
    return (f"{rows} envs side by side need about {rows * per_row / 2**30:.1f} GiB of GPU memory to act "
            f"({per_row / 2**20:.1f} MiB each: {prompt_tokens}-token prompts, their KV cache and "
            f"{_sizes(config)['vocab']:,}-token logits) and {free_bytes / 2**30:.1f} GiB are free on {device}: the "
            + (f"largest safe --num-envs is {largest}" if largest else "model leaves no room for a batch "
               "(a smaller model, or another device)"))


def check_acting_memory(model: torch.nn.Module, device: torch.device, rows: int, prompt_tokens: int,
                        new_tokens: int) -> None:
    """Raise ``MemoryError`` (the message of :func:`acting_memory_error`) when ``rows`` envs do
    not fit on ``device``'s free memory (a CUDA device; others are not checked). Memory that
    torch's allocator holds but does not use counts as free."""
    if device.type != "cuda":
        return
    free, _total = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    dtype_bytes = next(model.parameters()).element_size()
    message = acting_memory_error(model.config, rows, prompt_tokens, new_tokens, dtype_bytes, free, str(device))
    if message is not None:
        raise MemoryError(message)
