"""Sampling on the model's device: the next token (temperature, top-p), a candidate (score mode),
and the generate loop that extends a batch state token by token until each answer ends.

Only the chosen token ids cross to the host during generation (to check the end-of-turn token
and stop strings); the log-probs stay on the device until the answers are complete. The
generator is on the model's device, so a seed replays the same draws there.

Example:
    >>> import torch
    >>> from textgym.policy.sampling import sample_next
    >>> logits = torch.tensor([[0.0, 5.0, 0.0]])
    >>> tokens, logprobs = sample_next(logits, temperature=1.0, top_p=1.0, greedy=True)
    >>> tokens.tolist()
    [1]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from textgym.policy.kv_cache import BatchState, Counters

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["generate", "sample_candidate", "sample_next"]


def sample_next(logits: torch.Tensor, temperature: float, top_p: float, greedy: bool,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Next tokens ``[B]`` and their log-probs under ``softmax(logits / temperature)``.

    Top-p only shapes the draw: the log-probs returned are those of the full distribution (what
    re-scoring computes).
    """
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    if greedy:
        tokens = logp.argmax(dim=-1)
    else:
        probs = logp.exp()
        if top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            # keep the smallest set whose mass reaches top_p (always at least the top token)
            drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p
            sorted_probs[drop] = 0.0
            probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        tokens = torch.multinomial(probs, 1, generator=generator)[:, 0]
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]


def sample_candidate(scores: torch.Tensor, temperature: float, greedy: bool,
                     generator: torch.Generator | None = None) -> tuple[int, torch.Tensor]:
    """Score mode: the chosen candidate's index, and the log-softmax over all candidates ``[K]``."""
    logp = torch.log_softmax(scores / temperature, dim=-1)
    if greedy:
        return int(torch.argmax(scores)), logp
    return int(torch.multinomial(logp.exp(), 1, generator=generator)), logp


def _hit_stop(tokenizer: PreTrainedTokenizerBase, stop: Sequence[str], answer: list[int]) -> bool:
    if not stop:
        return False
    text = tokenizer.decode(answer[-16:], skip_special_tokens=True)
    return any(s in text for s in stop)


def generate(model: torch.nn.Module, batch: BatchState, *, max_new_tokens: int, temperature: float,
             top_p: float, greedy: bool, generator: torch.Generator | None, end_ids: set[int],
             stop: Sequence[str], tokenizer: PreTrainedTokenizerBase, counters: Counters) -> list[tuple[list[int], list[float]]]:
    """Sample an answer per row of ``batch``: ``(answer ids, their log-probs)`` per row.

    An answer ends with an end-of-turn token (kept), a stop string (kept) or after
    ``max_new_tokens``. Finished rows leave the batch (their KV rows are dropped), so the model
    runs only the answers still being written.
    """
    rows = batch.last_logits.shape[0]
    device = batch.last_logits.device
    answers: list[list[int]] = [[] for _ in range(rows)]
    steps: list[tuple[list[int], torch.Tensor]] = []  # per step: which rows, their token log-probs
    active = list(range(rows))  # original row index of each row still in the cache
    cache, mask, position, logits = batch.cache, batch.attention_mask, batch.next_position, batch.last_logits
    for step in range(max_new_tokens):
        tokens, token_logprobs = sample_next(logits, temperature, top_p, greedy, generator)
        steps.append((active, token_logprobs))
        still = []
        for j, (row, token) in enumerate(zip(active, tokens.tolist())):  # only the ids cross to the host
            answers[row].append(token)
            if token in end_ids or _hit_stop(tokenizer, stop, answers[row]):
                continue
            still.append(j)
        if not still or step == max_new_tokens - 1:
            break
        if len(still) < len(active):  # drop finished rows from the batch
            keep = torch.tensor(still, device=device)
            cache.batch_select_indices(keep)
            mask, position, tokens = mask.index_select(0, keep), position.index_select(0, keep), tokens.index_select(0, keep)
            active = [active[j] for j in still]
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=device)], 1)
        out = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=position[:, None],
                    past_key_values=cache, use_cache=True)
        counters["model_tokens"] += len(active)
        cache, logits, position = out.past_key_values, out.logits[:, -1], position + 1
    # The log-probs cross to the host once, at the end.
    logprobs: list[list[float]] = [[] for _ in range(rows)]
    values = torch.cat([lps for _, lps in steps]).tolist()
    at = 0
    for step_rows, lps in steps:
        for row, value in zip(step_rows, values[at:at + len(step_rows)]):
            logprobs[row].append(value)
        at += len(step_rows)
    return list(zip(answers, logprobs))
