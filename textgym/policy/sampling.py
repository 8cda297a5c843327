"""Sampling on the model's device: the next token (temperature, top-p), a candidate (score mode),
and the generate loop that extends a batch state token by token until each answer ends.

Only the chosen token ids cross to the host during generation (to check the end-of-turn token
and stop strings); the log-probs stay on the device until the answers are complete. The
generator is on the model's device, so a seed replays the same draws there.

Example:
    >>> import torch
    >>> from textgym.policy.sampling import sample_next
    >>> logits = torch.tensor([[0.0, 5.0, 0.0]])
    >>> tokens, logprobs, _ = sample_next(logits, temperature=1.0, top_p=1.0, greedy=True)
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

__all__ = ["StopStrings", "generate", "sample_candidate", "sample_candidates", "sample_next"]


def sample_next(logits: torch.Tensor, temperature: float, top_p: float, greedy: bool,
                generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Next tokens ``[B]``, their log-probs under ``softmax(logits / temperature)`` (the policy's,
    what re-scoring computes), and their log-probs under the distribution that drew them.

    Top-p draws from the policy renormalised over the smallest set of tokens whose mass reaches
    ``top_p``: a kept token's draw log-prob is its policy log-prob minus the log of the kept mass
    (the update weighs it by the importance ratio of the two). ``None`` for the last one when the
    draw is the policy itself (greedy, or ``top_p`` 1).
    """
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    behaviour = None
    if greedy:
        tokens = logp.argmax(dim=-1)
    else:
        probs = logp.exp()
        if top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            # keep the smallest set whose mass reaches top_p (always at least the top token)
            drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p
            sorted_probs[drop] = 0.0
            kept_mass = sorted_probs.sum(-1)
            probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        tokens = torch.multinomial(probs, 1, generator=generator)[:, 0]
        if top_p < 1.0:
            behaviour = logp.gather(-1, tokens[:, None])[:, 0] - kept_mass.log()
    return tokens, logp.gather(-1, tokens[:, None])[:, 0], behaviour


def sample_candidate(scores: torch.Tensor, temperature: float, greedy: bool,
                     generator: torch.Generator | None = None, floor: float = 0.0
                     ) -> tuple[int, torch.Tensor, float | None]:
    """Score mode: the chosen candidate's index, the log-softmax over all candidates ``[K]`` (the
    policy), and the chosen one's log-prob under the distribution that drew it.

    With an exploration ``floor`` in (0, 1], the draw is from ``(1 - floor) * policy + floor *
    uniform`` over the ``K`` candidates, so every valid action keeps a probability of at least
    ``floor / K``; the last value is then that mixture's log-prob of the chosen one (``None`` when
    the draw is the policy itself: greedy, or ``floor`` 0).

    Example:
        >>> k, logp, behaviour = sample_candidate(torch.tensor([0.0, -50.0]), 1.0, False, floor=1.0)
        >>> round(behaviour, 4) == round(float(torch.tensor(0.5).log()), 4)   # uniform over 2
        True
    """
    logp = torch.log_softmax(scores / temperature, dim=-1)
    if greedy:
        return int(torch.argmax(scores)), logp, None
    if not floor:
        return int(torch.multinomial(logp.exp(), 1, generator=generator)), logp, None
    mixture = (1.0 - floor) * logp.exp() + floor / logp.shape[-1]
    k = int(torch.multinomial(mixture, 1, generator=generator))
    return k, logp, float(mixture[k].log())


def sample_candidates(scores: torch.Tensor, counts: Sequence[int], temperature: float, greedy: bool,
                      generator: torch.Generator | None = None, floor: float = 0.0
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """:func:`sample_candidate` for every row of ``scores`` at once: the chosen indices ``[R]``,
    the log-softmax over each row's candidates ``[R, K]`` (``-inf`` past a row's ``counts``), and
    the chosen ones' log-probs under the distribution that drew them ``[R]`` (``None`` when that
    is the policy itself: greedy, or no exploration ``floor``).

    The same choices as :func:`sample_candidate` row after row, with the same generator: rows
    with the same number of candidates are computed together, and a draw takes one
    ``Exp(1)`` variate per candidate in row order, as ``torch.multinomial`` does row by row (on
    a CPU the stream is the same; on a GPU, one call's stream differs from many calls').
    """
    rows = scores.shape[0]
    device = scores.device
    logp = torch.full_like(scores, float("-inf"))
    chosen = torch.zeros(rows, dtype=torch.long, device=device)
    drawn = torch.zeros(rows, dtype=scores.dtype, device=device) if floor and not greedy else None
    noise = None
    if not greedy:  # every row's variates, drawn in row order by one call
        noise = torch.empty(sum(counts), dtype=scores.dtype, device=device).exponential_(1, generator=generator)
        starts = torch.tensor([0, *counts[:-1]], device=device).cumsum(0)
    by_count: dict[int, list[int]] = {}
    for r, k in enumerate(counts):
        by_count.setdefault(k, []).append(r)
    for k, members in by_count.items():
        index = torch.tensor(members, device=device) if len(members) < rows else None
        group = scores[:, :k] if index is None else scores.index_select(0, index)[:, :k]
        group_logp = torch.log_softmax(group / temperature, dim=-1)
        group_drawn = None
        if greedy:
            picks = group.argmax(dim=-1)
        else:
            at = (starts if index is None else starts.index_select(0, index))[:, None] \
                + torch.arange(k, device=device)
            probs = group_logp.exp()
            if floor:
                probs = (1.0 - floor) * probs + floor / k
            picks = (probs / noise[at]).argmax(dim=-1)
            if floor:
                group_drawn = probs.gather(1, picks[:, None])[:, 0].log()
        if index is None:
            logp[:, :k], chosen = group_logp, picks
            if group_drawn is not None:
                drawn = group_drawn
        else:
            logp[index, :k] = group_logp
            chosen[index] = picks
            if group_drawn is not None:
                drawn[index] = group_drawn
    return chosen, logp, drawn


class StopStrings:
    """Finds stop strings at the end of growing answers, cheaply enough to ask after every token.

    A stop string can only be completed by a token whose text holds its last character, so a
    token's text (decoded once per token id and cached) is looked at first; only then is the
    answer's tail decoded as a whole (tokenizers need not decode token by token the way they
    decode a sequence) and searched.

    Example:
        >>> from textgym import models
        >>> _, tokenizer = models.load("tiny")
        >>> stops = StopStrings(tokenizer, ['"'])
        >>> stops.hit(tokenizer('LEFT"', add_special_tokens=False)["input_ids"])
        True
        >>> stops.hit(tokenizer("LEFT", add_special_tokens=False)["input_ids"])
        False

    Args:
        tokenizer: the model's tokenizer.
        stop: the stop strings (empty ones are ignored).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop: Sequence[str]):
        self.tokenizer = tokenizer
        self.stop = tuple(s for s in stop if s)
        # A whitespace at the end of a stop string may be dropped from a lone token's text
        # (SentencePiece): then every token is checked in full.
        self._always = any(s[-1].isspace() for s in self.stop)
        self._last_chars = frozenset(s[-1] for s in self.stop)
        # tokens of the tail to decode: enough to hold the longest stop string
        self._window = max([16] + [len(s) + 2 for s in self.stop])
        self._pieces: dict[int, str] = {}

    def __bool__(self) -> bool:
        return bool(self.stop)

    def _may_end(self, token: int) -> bool:
        if self._always:
            return True
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self.tokenizer.decode([token], skip_special_tokens=True)
        return any(c in piece for c in self._last_chars)

    def hit(self, answer: Sequence[int]) -> bool:
        """Whether ``answer`` (token ids) holds a stop string that its last token completed."""
        if not self.stop or not answer or not self._may_end(answer[-1]):
            return False
        text = self.tokenizer.decode(list(answer[-self._window:]), skip_special_tokens=True)
        return any(s in text for s in self.stop)


def generate(model: torch.nn.Module, batch: BatchState, *, max_new_tokens: int, temperature: float,
             top_p: float, greedy: bool, generator: torch.Generator | None, end_ids: set[int],
             stop: Sequence[str] | StopStrings, tokenizer: PreTrainedTokenizerBase,
             counters: Counters) -> list[tuple[list[int], list[float], list[float] | None]]:
    """Sample an answer per row of ``batch``: ``(answer ids, their log-probs, their log-probs
    under the distribution that drew them or None when it is the policy's)`` per row
    (:func:`sample_next`).

    An answer ends with an end-of-turn token (kept), a stop string (kept) or after
    ``max_new_tokens``. ``stop`` is a list of strings, or a :class:`StopStrings` built once (its
    cache of token texts then lasts across calls). A finished row stays in the batch (its new
    tokens are ignored) until at least half of the rows have finished: then the finished ones
    leave (their KV rows are dropped), so the model runs mostly answers still being written
    without copying the cache at every step.
    """
    stops = stop if isinstance(stop, StopStrings) else StopStrings(tokenizer, stop)
    rows = batch.last_logits.shape[0]
    device = batch.last_logits.device
    answers: list[list[int]] = [[] for _ in range(rows)]
    # per step: the original row of each batch position (None: finished), their token log-probs
    steps: list[tuple[list[int | None], torch.Tensor]] = []
    drawn: list[torch.Tensor] = []  # per step, the draw's log-probs (top-p only)
    in_batch: list[int | None] = list(range(rows))
    writing = rows
    cache, mask, position, logits = batch.cache, batch.attention_mask, batch.next_position, batch.last_logits
    for step in range(max_new_tokens):
        tokens, token_logprobs, behaviour = sample_next(logits, temperature, top_p, greedy, generator)
        steps.append((list(in_batch), token_logprobs))
        if behaviour is not None:
            drawn.append(behaviour)
        for j, token in enumerate(tokens.tolist()):  # only the ids cross to the host
            row = in_batch[j]
            if row is None:
                continue
            answers[row].append(token)
            if token in end_ids or stops.hit(answers[row]):
                in_batch[j] = None
                writing -= 1
        if not writing or step == max_new_tokens - 1:
            break
        if 2 * writing <= len(in_batch):  # half the batch has finished: drop those rows
            kept = [j for j, row in enumerate(in_batch) if row is not None]
            keep = torch.tensor(kept, device=device)
            cache.batch_select_indices(keep)
            mask, position, tokens = mask.index_select(0, keep), position.index_select(0, keep), tokens.index_select(0, keep)
            in_batch = [in_batch[j] for j in kept]
        mask = torch.cat([mask, torch.ones((len(in_batch), 1), dtype=mask.dtype, device=device)], 1)
        out = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=position[:, None],
                    cache=cache, use_cache=True)
        counters["model_tokens"] += writing
        counters["padded_tokens"] += len(in_batch) - writing
        cache, logits, position = out.cache, out.logits[:, -1], position + 1
    # The log-probs cross to the host once, at the end.
    logprobs = _per_row([lps for _, lps in steps], steps, rows)
    behaviours = _per_row(drawn, steps, rows) if drawn else [None] * rows
    return list(zip(answers, logprobs, behaviours))


def _per_row(per_step: list[torch.Tensor], steps: list[tuple[list[int | None], torch.Tensor]],
             rows: int) -> list[list[float]]:
    """Per-step values of the batch positions (``steps``' rows) gathered per original row."""
    out: list[list[float]] = [[] for _ in range(rows)]
    values = torch.cat(per_step).tolist()
    at = 0
    for (step_rows, _), lps in zip(steps, per_step):
        for row, value in zip(step_rows, values[at:at + len(step_rows)]):
            if row is not None:
                out[row].append(value)
        at += len(step_rows)
    return out
