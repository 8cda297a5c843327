"""Running a batch of prompts on top of a cached shared prefix.

Every env of a task shares the chat header and system prompt. :class:`PrefixCache` keeps that
prefix's KV cache across calls (an LRU, one entry per distinct prefix, dropped when the weights
change); :func:`run_prompts` runs only each row's own suffix (its observation), batched on top of
it, and returns the :class:`BatchState` that candidate scoring and token sampling continue from.
Everything stays on the model's device.

Layout of a batch row: ``[prefix | padding | suffix | answer | padding]``. The padding between
the prefix and the suffix (attention mask 0, explicit position ids) aligns every prompt's end in
the same column, so next-token logits, candidates and sampled tokens line up across rows.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from textgym.policy.prompts import common_prefix_length

if TYPE_CHECKING:
    from transformers import DynamicCache

__all__ = ["BatchState", "Counters", "HeadHook", "PrefixCache", "PrefixKV", "SequenceState", "alias_cache",
           "append_in_place_cache", "contiguous_output_head", "grow_in_place", "run_prompts",
           "run_sequences", "shared_prefix_length", "unique_rows", "weights_version"]

Counters = dict[str, float]
"""The policy's running totals (see :attr:`textgym.Policy.counters`)."""

PrefixKV = tuple[tuple[torch.Tensor, torch.Tensor], ...]
"""Per layer, the ``(keys, values)`` of a prefix run alone (batch dimension 1)."""


@dataclass
class BatchState:
    """The state after running a batch of prompts on top of a shared prefix."""

    cache: DynamicCache
    """A ``transformers.DynamicCache`` with one row per prompt: prefix + padded suffix."""
    attention_mask: torch.Tensor
    """``[B, cache length]`` long: which cache positions are real."""
    next_position: torch.Tensor
    """``[B]``: the position id of each row's next token."""
    last_logits: torch.Tensor
    """``[B, V]`` float: next-token logits after each prompt."""
    hidden: torch.Tensor | None = None
    """``[B, H]``: last hidden state at the last prompt position (when asked for)."""

    def select_rows(self, rows: Sequence[int]) -> BatchState:
        """The state with row ``i`` a copy of row ``rows[i]`` (the cache is reused in place)."""
        index = torch.tensor(rows, device=self.attention_mask.device)
        self.cache.batch_select_indices(index)  # repeated indices copy the rows
        return BatchState(cache=self.cache, attention_mask=self.attention_mask.index_select(0, index),
                          next_position=self.next_position.index_select(0, index),
                          last_logits=self.last_logits.index_select(0, index),
                          hidden=None if self.hidden is None else self.hidden.index_select(0, index))


@dataclass
class SequenceState:
    """The state after running whole token sequences (:func:`run_sequences`): column ``j`` of a
    row's cache holds its token ``j`` (the shared prefix first, then the row's own tokens,
    right-padded)."""

    cache: DynamicCache
    """A ``transformers.DynamicCache`` with one row per sequence."""
    attention_mask: torch.Tensor
    """``[R, cache length]`` long: which cache columns are real."""
    hidden: torch.Tensor
    """``[R, W, H]``: the final hidden state after each token from ``prefix_length`` on (token
    ``j`` in column ``j - prefix_length``)."""
    prefix_length: int
    """How many leading tokens the rows share (run once; no hidden state kept for them)."""


def unique_rows(keys: Sequence[Hashable]) -> tuple[list[int], list[int]]:
    """``(firsts, row_of)``: the first row of every distinct key, and for each row the index of its
    key in ``firsts``. Identical rows (a GRPO group's shared first observation) are run once."""
    seen: dict[Hashable, int] = {}
    firsts: list[int] = []
    row_of = []
    for i, key in enumerate(keys):
        if key not in seen:
            seen[key] = len(firsts)
            firsts.append(i)
        row_of.append(seen[key])
    return firsts, row_of


def shared_prefix_length(prompts: Sequence[Sequence[int]], reference: Sequence[int] | None = None) -> int:
    """The longest prefix shared by all prompts, at most ``reference`` (the system prefix, when
    known, so the cache key is stable across calls), leaving at least one suffix token per prompt."""
    reference = prompts[0] if reference is None else reference
    length = min(len(p) for p in prompts) - 1
    length = min(length, len(reference))
    for p in prompts:
        length = common_prefix_length(reference[:length], p)
    return max(length, 0)


def weights_version(model: torch.nn.Module, *extra: Hashable) -> tuple:
    """A key that changes whenever ``model``'s weights change: every in-place update of a
    parameter (optimizer step, ``load_state_dict``) bumps its ``_version``."""
    return (id(model), *extra, sum(p._version for p in model.parameters()))


_CONTIGUOUS_HEADS: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def _contiguous_inputs(module: torch.nn.Module, args: tuple) -> tuple:
    return tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)


@dataclass
class HeadHook:
    """The hook :func:`contiguous_output_head` installed; :meth:`remove` takes it off again."""

    head: torch.nn.Module
    handle: torch.utils.hooks.RemovableHandle

    def remove(self) -> None:
        self.handle.remove()
        _CONTIGUOUS_HEADS.discard(self.head)


def contiguous_output_head(model: torch.nn.Module) -> HeadHook | None:
    """Make ``model``'s output head read contiguous hidden states (once per head).

    transformers applies the head to ``hidden[:, -logits_to_keep:]``, a strided view; on such a
    view torch multiplies by the vocabulary matrix as a batched matmul with the matrix expanded
    per row. Measured on 1 CPU thread with SmolLM2's 49,152 x 576 head, for the last position of
    32 rows: 210 ms on the view, 25 ms on a contiguous copy, and the backward pass likewise; for 8
    rows 52 ms against 20 ms (``bench/update_cost.py`` measures acting and re-scoring). The logits
    are the same.

    Returns:
        The installed hook (``None`` when the head already has it, or the model has no head).
    """
    head = model.get_output_embeddings()
    if head is None or head in _CONTIGUOUS_HEADS:
        return None
    _CONTIGUOUS_HEADS.add(head)
    return HeadHook(head, head.register_forward_pre_hook(_contiguous_inputs))


def _run_prefix(model: torch.nn.Module, prefix: list[int], device: torch.device, counters: Counters) -> PrefixKV:
    ids = torch.tensor([prefix], device=device)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    counters["model_tokens"] += len(prefix)
    return tuple((layer.keys, layer.values) for layer in out.cache.layers)


class PrefixCache:
    """The KV caches of recent shared prefixes (least recently used dropped beyond ``size``).

    Keyed by the prefix's token ids and the weights' version, so a cache computed with other
    weights (before an optimizer step, or with the LoRA adapter disabled) is never reused.
    """

    def __init__(self, size: int = 4):
        self.size = size
        self._entries: OrderedDict[tuple, PrefixKV] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def get(self, model: torch.nn.Module, prefix: list[int], version: Hashable, device: torch.device,
            counters: Counters) -> PrefixKV:
        """The prefix's KV cache: from the cache, else run now and kept."""
        key = (tuple(prefix), version)
        kv = self._entries.get(key)
        if kv is None:
            counters["prompt_tokens"] += len(prefix)
            counters["prefix_misses"] += 1
            kv = _run_prefix(model, prefix, device, counters)
            self._entries[key] = kv
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        return kv


def alias_cache(model: torch.nn.Module, kv: PrefixKV | None) -> DynamicCache:
    """A ``DynamicCache`` over the tensors ``kv`` without copying them (the cache's constructor
    copies). Running the model on it rebinds its layers to new tensors, never writes into ``kv``."""
    from transformers import DynamicCache

    if kv is None:
        return DynamicCache(config=model.config)
    cache = DynamicCache([(k[..., :0, :], v[..., :0, :]) for k, v in kv])
    for layer, (k, v) in zip(cache.layers, kv):
        layer.keys, layer.values = k, v
    return cache


@functools.cache
def _append_in_place_layer() -> type:
    from transformers.cache_utils import DynamicLayer

    class AppendInPlaceLayer(DynamicLayer):
        """A cache layer over preallocated ``(keys, values)`` buffers: ``update`` writes the new
        columns after the current ones instead of concatenating (which copies the whole cache)."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, buffers: tuple[torch.Tensor, torch.Tensor]):
            super().__init__()
            self.dtype, self.device = keys.dtype, keys.device
            self.keys, self.values, self.buffers = keys, values, buffers
            self.is_initialized = True

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            start, end = self.keys.shape[-2], self.keys.shape[-2] + key_states.shape[-2]
            keys, values = self.buffers
            if end > keys.shape[-2]:
                raise RuntimeError(f"the preallocated cache holds {keys.shape[-2]} columns, {end} needed")
            keys[:, :, start:end] = key_states
            values[:, :, start:end] = value_states
            self.keys, self.values = keys[:, :, :end], values[:, :, :end]
            return self.keys, self.values

    return AppendInPlaceLayer


def grow_in_place(kv: PrefixKV, buffers: PrefixKV | None, columns: int) -> PrefixKV:
    """Buffers that hold ``kv`` in their first columns and room for ``columns`` more: ``buffers``
    themselves when ``kv`` already lives there with enough room, else new ones (twice as wide as
    needed, so growing costs one copy of the cache now and then, not one per call)."""
    keys = kv[0][0]
    width = keys.shape[-2]
    if (buffers is not None and buffers[0][0].data_ptr() == keys.data_ptr()
            and buffers[0][0].shape[:2] == keys.shape[:2] and width + columns <= buffers[0][0].shape[-2]):
        return buffers
    capacity = 2 * (width + columns) + 64
    grown = []
    for k, v in kv:
        big_k = k.new_empty(k.shape[0], k.shape[1], capacity, k.shape[3])
        big_v = v.new_empty(v.shape[0], v.shape[1], capacity, v.shape[3])
        big_k[:, :, :width] = k
        big_v[:, :, :width] = v
        grown.append((big_k, big_v))
    return tuple(grown)


def append_in_place_cache(kv: PrefixKV, buffers: PrefixKV) -> DynamicCache:
    """A ``DynamicCache`` over ``kv`` (views of the first columns of ``buffers``, see
    :func:`grow_in_place`) that writes the model's new columns into ``buffers`` in place."""
    from transformers import DynamicCache

    layer = _append_in_place_layer()
    cache = DynamicCache([(k[..., :0, :], v[..., :0, :]) for k, v in kv])
    cache.layers = [layer(big_k[:, :, :k.shape[-2]], big_v[:, :, :v.shape[-2]], (big_k, big_v))
                    for (k, v), (big_k, big_v) in zip(kv, buffers)]
    return cache


def _new_cache(model: torch.nn.Module, kv: PrefixKV | None, rows: int) -> DynamicCache:
    from transformers import DynamicCache

    if kv is None:
        return DynamicCache(config=model.config)
    return DynamicCache([(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in kv])


def run_prompts(model: torch.nn.Module, prompts: list[list[int]], prefix_length: int, *, pad_id: int,
                device: torch.device, counters: Counters, prefix_cache: PrefixCache | None = None,
                version: Hashable = None, answers: list[list[int]] | None = None,
                want_hidden: bool = False) -> tuple[BatchState, torch.Tensor | None]:
    """Run ``prompts`` (all starting with the same ``prefix_length`` tokens) as one batch.

    Args:
        model: the causal LM.
        prompts: token ids per row.
        prefix_length: how many leading tokens all rows share (run once, expanded to every row).
        pad_id: the padding token.
        device: the model's device (every tensor is built there).
        counters: running totals to add the tokens run to.
        prefix_cache: where the prefix's KV cache is kept (``None``: run it now, not kept, e.g.
            when re-scoring with grad).
        version: the weights' version (:func:`weights_version`), part of the prefix cache's key.
        answers: answer ids per row, appended after the prompt (re-scoring).
        want_hidden: also return the last hidden state at each prompt's last position.

    Returns:
        The batch state, and with ``answers``, the logits at the answer positions ``[B, A, V]``
        (the logits predicting answer token ``j`` are in column ``j``).
    """
    rows = len(prompts)
    prefix = prompts[0][:prefix_length]
    kv = None
    if prefix and prefix_cache is not None:
        kv = prefix_cache.get(model, prefix, version, device, counters)
    elif prefix:
        counters["prompt_tokens"] += len(prefix)
        kv = _run_prefix(model, prefix, device, counters)
    suffix_lengths = np.array([len(p) - prefix_length for p in prompts], dtype=np.int64)
    answers = answers or [[] for _ in prompts]
    answer_lengths = np.array([len(a) for a in answers], dtype=np.int64)
    width = int(suffix_lengths.max())
    answer_width = int(answer_lengths.max())
    total = width + answer_width
    # Row i: padding, its suffix and answer (ending in the same column as every row's), padding;
    # built as arrays (one copy to the device each), not token by token.
    starts = width - suffix_lengths
    lengths = suffix_lengths + answer_lengths
    columns = np.arange(total)[None, :]
    inside = (columns >= starts[:, None]) & (columns < (starts + lengths)[:, None])
    ids = np.full((rows, total), pad_id, dtype=np.int64)
    ids[inside] = np.fromiter(itertools.chain.from_iterable(
        itertools.chain(itertools.islice(p, prefix_length, None), a) for p, a in zip(prompts, answers)),
        dtype=np.int64, count=int(lengths.sum()))
    positions = np.where(inside, prefix_length + columns - starts[:, None], prefix_length)
    mask = np.concatenate([np.ones((rows, prefix_length), dtype=np.int64), inside.astype(np.int64)], axis=1)
    real = int(lengths.sum())
    counters["prompt_tokens"] += int(suffix_lengths.sum())
    counters["model_tokens"] += real
    counters["padded_tokens"] += rows * total - real
    attention_mask = torch.from_numpy(mask).to(device)
    out = model(input_ids=torch.from_numpy(ids).to(device), attention_mask=attention_mask,
                position_ids=torch.from_numpy(positions).to(device),
                cache=_new_cache(model, kv, rows), use_cache=True,
                logits_to_keep=answer_width + 1, output_hidden_states=want_hidden)
    logits = out.logits.float()
    hidden = out.hidden_states[-1][:, width - 1] if want_hidden else None
    batch = BatchState(cache=out.cache, attention_mask=attention_mask,
                       next_position=torch.from_numpy(prefix_length + suffix_lengths).to(device),
                       last_logits=logits[:, 0], hidden=hidden)
    return batch, (logits[:, :answer_width] if answer_width else None)


def run_sequences(model: torch.nn.Module, sequences: list[list[int]], prefix_length: int, *, pad_id: int,
                  device: torch.device, counters: Counters) -> SequenceState:
    """Run ``sequences`` (all starting with the same ``prefix_length`` tokens) as one batch and keep
    the final hidden state of every token after the prefix (the model's output embedding turns
    any of them into next-token logits). Follows the caller's grad mode; the prefix is run once."""
    rows = len(sequences)
    prefix = sequences[0][:prefix_length]
    kv = None
    if prefix:
        counters["prompt_tokens"] += len(prefix)
        kv = _run_prefix(model, prefix, device, counters)
    suffixes = [s[prefix_length:] for s in sequences]
    width = max(len(s) for s in suffixes)
    ids = [s + [pad_id] * (width - len(s)) for s in suffixes]
    mask = [[1] * prefix_length + [1] * len(s) + [0] * (width - len(s)) for s in suffixes]
    positions = [list(range(prefix_length, prefix_length + width)) for _ in suffixes]
    real = sum(len(s) for s in suffixes)
    counters["prompt_tokens"] += real
    counters["model_tokens"] += real
    counters["padded_tokens"] += rows * width - real
    attention_mask = torch.tensor(mask, dtype=torch.long, device=device)
    out = model(input_ids=torch.tensor(ids, dtype=torch.long, device=device), attention_mask=attention_mask,
                position_ids=torch.tensor(positions, dtype=torch.long, device=device),
                cache=_new_cache(model, kv, rows), use_cache=True, logits_to_keep=1,
                output_hidden_states=True)
    return SequenceState(cache=out.cache, attention_mask=attention_mask, hidden=out.hidden_states[-1],
                         prefix_length=prefix_length)
