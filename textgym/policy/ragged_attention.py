"""Attention over each row's own columns of a shared KV cache (conversation mode's batches).

A :class:`~textgym.policy.conversation.ConversationCache` batches conversations of different
lengths in one KV cache: the cache is as wide as its longest row, and the others' extra columns
are masked. Plain SDPA still attends over every column of every row, so a batch whose longest
conversation is 1,200 tokens and whose mean is 450 pays for 1,200 per row. The cache keeps each
row's live columns contiguous at its right end, so a row's attention only needs the columns from
its first live one: :func:`ragged_sdpa` runs SDPA per group of consecutive rows that start at the
same column, on views of the cache (nothing is copied), and reads the grouped KV heads directly
on CPU instead of repeating them per query head.

It is registered with transformers as the ``"textgym_ragged"`` attention implementation (the
mask is SDPA's), and used only inside :func:`ragged_attention`, for a model whose attention is
SDPA; every other call of the model, and every call without ``row_groups``, runs transformers'
own SDPA unchanged.

Example:
    >>> import torch
    >>> from textgym import models
    >>> from textgym.policy.ragged_attention import ragged_attention, supports_ragged
    >>> model, _ = models.load("tiny")
    >>> supports_ragged(model)
    True
    >>> ids, mask = torch.tensor([[5, 6, 7], [0, 8, 9]]), torch.tensor([[1, 1, 1], [0, 1, 1]])
    >>> plain = model(input_ids=ids, attention_mask=mask).logits[:, -1]
    >>> with ragged_attention(model):   # row 0 from column 0, row 1 from column 1
    ...     ragged = model(input_ids=ids, attention_mask=mask, row_groups=((0, 1, 0), (1, 2, 1))).logits[:, -1]
    >>> torch.allclose(plain, ragged, atol=1e-5)
    True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

__all__ = ["NAME", "RowGroups", "ragged_attention", "ragged_sdpa", "row_groups", "supports_ragged"]

NAME = "textgym_ragged"

RowGroups = tuple[tuple[int, int, int], ...]
"""``(first row, end row, first column)`` per group of consecutive rows: rows ``first..end-1``
attend to the cache columns from ``first column`` on (all their earlier columns are masked)."""

_GQA_IN_SDPA = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def ragged_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                row_groups: RowGroups | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query [B, H, n, D]``, ``key``/``value``
    ``[B, KV heads, W, D]``, ``attention_mask [B, 1, n, W]`` (bool); returns ``[B, n, H, D]``.
    Without ``row_groups`` (or with features it does not handle) it is transformers' SDPA."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    unhandled = kwargs.get("sliding_window") is not None or kwargs.get("softcap") is not None
    if row_groups is None or attention_mask is None or attention_mask.dtype != torch.bool or unhandled:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    # Reading the grouped heads inside SDPA beats copying them per query head on CPU; elsewhere
    # transformers' choice (repeat) is kept, as its kernels prefer it with a mask.
    gqa_inside = groups > 1 and _GQA_IN_SDPA and query.device.type == "cpu"
    out = query.new_empty(query.shape[0], query.shape[2], query.shape[1], query.shape[3])
    for first, end, column in row_groups:
        k, v = key[first:end, :, column:], value[first:end, :, column:]
        if groups > 1 and not gqa_inside:
            k, v = repeat_kv(k, groups), repeat_kv(v, groups)
        extra = {"enable_gqa": True} if gqa_inside else {}
        part = F.scaled_dot_product_attention(query[first:end], k, v, attn_mask=attention_mask[first:end, :, :, column:],
                                              dropout_p=dropout, scale=scaling, **extra)
        out[first:end] = part.transpose(1, 2)
    return out, None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, ragged_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def _configs(model: torch.nn.Module) -> list:
    from transformers import PretrainedConfig

    found = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PretrainedConfig):
            found[id(config)] = config
    return list(found.values())


def supports_ragged(model: torch.nn.Module) -> bool:
    """Whether ``model``'s attention is transformers' SDPA everywhere (what :func:`ragged_sdpa`
    stands in for)."""
    configs = _configs(model)
    return bool(configs) and all(getattr(c, "_attn_implementation", None) == "sdpa" for c in configs)


@contextlib.contextmanager
def ragged_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model`` with :func:`ragged_sdpa` inside the block (its attention setting is restored after)."""
    _register()
    configs = _configs(model)
    before = [c._attn_implementation for c in configs]
    try:
        for config in configs:
            config._attn_implementation = NAME
        yield
    finally:
        for config, implementation in zip(configs, before):
            config._attn_implementation = implementation


def row_groups(mask: torch.Tensor, min_saving: int = 0) -> RowGroups:
    """Groups of consecutive rows of a ``[B, W]`` key mask, each with the first column any of its
    rows needs (its rows' earliest live column). A row joins the group before it when that costs
    at most ``min_saving`` extra columns for the group (fewer SDPA calls)."""
    width = mask.shape[1]
    firsts: Sequence[int] = torch.where(mask.any(dim=1), mask.int().argmax(dim=1), width - 1).tolist()
    groups: list[list[int]] = []
    for row, column in enumerate(firsts):
        if groups:
            first, _, start = groups[-1]
            joined = min(start, column)
            extra = (start - joined) * (row - first) + (column - joined)
            if extra <= min_saving:
                groups[-1][1:] = [row + 1, joined]
                continue
        groups.append([row, row + 1, column])
    return tuple((a, b, c) for a, b, c in groups)
