"""Score mode: the log-likelihood of every valid action as the answer, from one batch state.

A candidate's first token is scored from the prompt's next-token logits. The other tokens need
the candidate's earlier tokens run through the model: they are laid out as a token trie per row
(``go north`` / ``go south`` share ``go``, :class:`CandidateTrie`) appended to that row's own KV
cache, with a tree-shaped attention mask (each token sees the prompt and its own ancestors) and
explicit position ids. The prompt's KV is therefore never copied per candidate.
:func:`score_points` generalises this to several decision points on one row, each seeing the row
only up to its own prompt (the turns of a conversation, re-scored in one pass).

Example:
    >>> from textgym.policy.scoring import CandidateTrie
    >>> trie = CandidateTrie([[5, 6], [5, 7], [8]])      # "go north", "go south", "look"
    >>> trie.tokens                                      # "go" is run once for both
    [5]
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from textgym.policy.kv_cache import BatchState, Counters, alias_cache

if TYPE_CHECKING:
    from transformers import DynamicCache, PreTrainedTokenizerBase

__all__ = ["CandidateTokens", "CandidateTrie", "ScoredBatch", "candidate_scores", "score_batch", "score_candidates",
           "score_points"]


class CandidateTrie:
    """The tokens of a row's candidates that must be run through the model (all but each one's
    last token), shared between candidates with a common start. Column ``q`` holds token
    ``tokens[q]`` at depth ``depths[q]`` (0: right after the prompt) below column ``parents[q]``."""

    def __init__(self, candidates: Sequence[Sequence[int]]):
        self.tokens: list[int] = []
        self.depths: list[int] = []
        self.parents: list[int] = []
        self._column: dict[tuple[int, ...], int] = {}
        for cand in candidates:
            for depth in range(len(cand) - 1):
                key = tuple(cand[:depth + 1])
                if key not in self._column:
                    self._column[key] = len(self.tokens)
                    self.tokens.append(cand[depth])
                    self.depths.append(depth)
                    self.parents.append(self._column[key[:-1]] if depth else -1)

    def ancestry(self, width: int | None = None) -> torch.Tensor:
        """``[width, width]`` bool (default width: the trie's size): column ``q`` may attend to
        column ``c`` (``c`` is ``q`` or an ancestor); padding columns attend to nothing."""
        n = len(self.tokens)
        allowed = torch.zeros((width or n, width or n), dtype=torch.bool)
        for q, parent in enumerate(self.parents):  # parents come before their children
            if parent >= 0:
                allowed[q] = allowed[parent]
            allowed[q, q] = True
        return allowed

    def columns(self, candidate: Sequence[int]) -> list[int]:
        """The columns whose outputs predict ``candidate[1:]``."""
        return [self._column[tuple(candidate[:j])] for j in range(1, len(candidate))]


class CandidateTokens:
    """Action texts -> the token ids they are scored by (an LRU cache of the tokenization).

    Args:
        tokenizer: the model's tokenizer.
        score_end: append the end-of-turn token: ``True``, ``False`` or ``"auto"`` (only when an
            env's candidates are not prefix-free; see :class:`textgym.policy.PolicyConfig`).
        cache_size: how many action texts keep their ids (least recently used dropped).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, score_end: bool | str = "auto", cache_size: int = 4096):
        self.tokenizer = tokenizer
        self.score_end = score_end
        self.cache_size = cache_size
        self._ids: OrderedDict[str, list[int]] = OrderedDict()
        self._sets: OrderedDict[tuple[str, ...], list[list[int]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self, action: str, end: bool | None = None) -> list[int]:
        """Token ids ``action`` is scored by (followed by the end-of-turn token when ``end``;
        default: when ``score_end is True``)."""
        ids = self._ids.get(action)
        if ids is None:
            ids = self.tokenizer(action, add_special_tokens=False)["input_ids"]
            self._ids[action] = ids
            while len(self._ids) > self.cache_size:
                self._ids.popitem(last=False)
        else:
            self._ids.move_to_end(action)
        if end is None:
            end = self.score_end is True
        if end:
            return ids + [self.tokenizer.eos_token_id]
        if not ids:
            raise ValueError(f"action {action!r} has no tokens (score_end=False)")
        return list(ids)

    def candidate_set(self, actions: Sequence[str]) -> list[list[int]]:
        """Token ids of one env's valid actions, as scored (see ``score_end``). Kept per action
        set (envs of a task mostly offer the same few), so a batch builds each set once: the
        lists returned are shared, never to be changed in place."""
        key = tuple(actions)
        ids = self._sets.get(key)
        if ids is not None:
            self._sets.move_to_end(key)
            return ids
        ids = self._sets[key] = self._build_set(actions)
        while len(self._sets) > self.cache_size:
            self._sets.popitem(last=False)
        return ids

    def _build_set(self, actions: Sequence[str]) -> list[list[int]]:
        if self.score_end != "auto":
            return [self.ids(a) for a in actions]
        bare = [self.ids(a, end=False) if a else [] for a in actions]
        prefix_free = all(bare) and not any(
            i != j and len(a) <= len(b) and b[:len(a)] == a
            for i, a in enumerate(bare) for j, b in enumerate(bare))
        return bare if prefix_free else [self.ids(a, end=True) for a in actions]


def score_candidates(model: torch.nn.Module, batch: BatchState, candidates: list[list[list[int]]], *,
                     pad_id: int, chunk_bytes: int, counters: Counters) -> list[list[torch.Tensor]]:
    """Per row, per candidate, the token log-probs ``Tensor[L]`` of the candidate as the answer.

    Args:
        model: the causal LM the batch state was computed with.
        batch: the state after each row's prompt (row ``i`` scores ``candidates[i]``).
        candidates: per row, the token ids of every candidate.
        pad_id: the padding token.
        chunk_bytes: memory budget of the candidate logits computed at once (rows are split
            into chunks beyond it).
        counters: running totals to add the tokens run to.
    """
    rows = list(range(len(candidates)))
    return score_points(model, batch.cache, batch.attention_mask, rows, [None] * len(rows), batch.next_position,
                        torch.log_softmax(batch.last_logits, dim=-1), candidates, pad_id=pad_id,
                        chunk_bytes=chunk_bytes, counters=counters)


def score_points(model: torch.nn.Module, cache: DynamicCache, attention_mask: torch.Tensor, rows: Sequence[int],
                 limits: Sequence[int | None], positions: torch.Tensor, first_logprobs: torch.Tensor,
                 candidates: Sequence[Sequence[Sequence[int]]], *, pad_id: int, chunk_bytes: int,
                 counters: Counters) -> list[list[torch.Tensor]]:
    """Candidates scored at several decision points of a cache, some sharing a row.

    Point ``p`` sits on cache row ``rows[p]`` and sees its columns before ``limits[p]`` (``None``:
    all of them): re-scoring a conversation puts every turn of an episode on one row. The tries
    of a row's points go side by side after the cache, each seeing its own columns and ancestors.

    Args:
        model: the causal LM the cache was computed with.
        cache: the KV cache (its rows are not copied when a chunk takes all of them, in order).
        attention_mask: ``[rows, cache length]``: which cache columns are real.
        rows: per point, its cache row.
        limits: per point, how many leading cache columns it sees (``None``: all).
        positions: ``[points]``: the position id of each point's first candidate token.
        first_logprobs: ``[points, V]``: the log-softmax of the next-token logits at each point.
        candidates: per point, the token ids of every candidate.
        pad_id: the padding token.
        chunk_bytes: memory budget of the candidate logits computed at once.
        counters: running totals to add the tokens run to.

    Returns:
        Per point, per candidate, its token log-probs ``Tensor[L]``.
    """
    token_logprobs = [[first_logprobs[p, cand[0]].reshape(1) for cand in cands]
                      for p, cands in enumerate(candidates)]
    for rest, pieces, _ in _later_tokens(model, cache, attention_mask, rows, limits, positions, candidates,
                                         pad_id=pad_id, chunk_bytes=chunk_bytes, counters=counters,
                                         vocab=first_logprobs.shape[-1]):
        for (p, k, _), part in zip(pieces, rest.split([n for _, _, n in pieces])):
            token_logprobs[p][k] = torch.cat([token_logprobs[p][k], part])
    return token_logprobs


def _tries(candidates: Sequence[Sequence[Sequence[int]]]) -> list[CandidateTrie]:
    """A trie per point; points given the same candidate list (a shared action set) share one."""
    built: dict[int, CandidateTrie] = {}
    return [built.get(id(cands)) or built.setdefault(id(cands), CandidateTrie(cands)) for cands in candidates]


def _later_tokens(model: torch.nn.Module, cache: DynamicCache, attention_mask: torch.Tensor, rows: Sequence[int],
                  limits: Sequence[int | None], positions: torch.Tensor,
                  candidates: Sequence[Sequence[Sequence[int]]], *, pad_id: int, chunk_bytes: int,
                  counters: Counters, vocab: int
                  ) -> Iterator[tuple[torch.Tensor, list[tuple[int, int, int]], list[tuple[int, int]]]]:
    """The log-probs of every candidate's tokens after its first (see :func:`score_points`), a
    chunk of cache rows at a time (one forward pass each): ``(values, pieces, rows)``, where
    ``values`` holds, piece after piece, the ``n`` later tokens' log-probs of candidate ``k`` of
    point ``p`` for each piece ``(p, k, n)``, and ``rows`` lists the pass's rows as ``(cache row,
    columns)``: its tries' tokens fill its first ``columns`` columns. The inputs of a chunk are
    built on the host and cross to the device at once."""
    tries = _tries(candidates)
    by_row: dict[int, list[int]] = {}
    for p, trie in enumerate(tries):
        if trie.tokens:
            by_row.setdefault(rows[p], []).append(p)
    if not by_row:
        return
    device = positions.device
    widths = {r: sum(len(tries[p].tokens) for p in points) for r, points in by_row.items()}
    per_chunk = max(1, chunk_bytes // (max(widths.values()) * vocab * 4 * 2))
    past = attention_mask.shape[1]
    dtype = next(model.parameters()).dtype
    blocked = torch.finfo(dtype).min
    cache_rows = attention_mask.shape[0]
    ordered = sorted(by_row)
    for start in range(0, len(ordered), per_chunk):
        chunk = ordered[start:start + per_chunk]
        w = max(widths[r] for r in chunk)
        ids = torch.full((len(chunk), w), pad_id, dtype=torch.long)
        depth_positions = torch.zeros((len(chunk), w), dtype=torch.long)
        point_of_column = torch.zeros((len(chunk), w), dtype=torch.long)
        real = torch.zeros((len(chunk), w), dtype=torch.bool)  # padding columns attend to nothing
        limit = torch.full((len(chunk), w), past, dtype=torch.long)
        ancestry = torch.zeros((len(chunk), w, w), dtype=torch.bool)
        where: list[tuple[int, int, int]] = []  # (row in chunk, column, target token)
        pieces: list[tuple[int, int, int]] = []  # (point, candidate, how many tokens)
        for r, row in enumerate(chunk):
            offset = 0
            for p in by_row[row]:
                trie, n = tries[p], len(tries[p].tokens)
                span = slice(offset, offset + n)
                ids[r, span] = torch.tensor(trie.tokens)
                depth_positions[r, span] = torch.tensor(trie.depths)
                point_of_column[r, span] = p
                real[r, span] = True
                if limits[p] is not None:
                    limit[r, span] = limits[p]
                ancestry[r, span, span] = trie.ancestry()
                for k, cand in enumerate(candidates[p]):
                    if len(cand) < 2:
                        continue
                    columns = [offset + c for c in trie.columns(cand)]
                    where.extend(zip([r] * (len(cand) - 1), columns, cand[1:]))
                    pieces.append((p, k, len(cand) - 1))
                offset += n
        n_real = sum(widths[r] for r in chunk)
        counters["model_tokens"] += n_real
        counters["padded_tokens"] += len(chunk) * w - n_real
        index = torch.tensor(chunk, device=device)
        real, limit = real.to(device), limit.to(device)
        # A column sees the real cache columns of its row before its point's limit, and its own
        # trie's ancestors; each point's tokens sit at its position plus their depth in its trie.
        seen = attention_mask.index_select(0, index).bool()[:, None, :] & real[:, :, None] \
            & (torch.arange(past, device=device)[None, None, :] < limit[:, :, None])
        allowed = torch.cat([seen, ancestry.to(device)], dim=-1)[:, None]
        point_positions = torch.where(real, positions.index_select(0, point_of_column.to(device).flatten())
                                      .view(len(chunk), w), 0)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, blocked)
        kv = tuple((layer.keys, layer.values) for layer in cache.layers)
        if chunk != list(range(cache_rows)):  # a subset of the rows: copy them
            kv = tuple((k.index_select(0, index), v.index_select(0, index)) for k, v in kv)
        out = model(input_ids=ids.to(device), attention_mask=mask,
                    position_ids=point_positions + depth_positions.to(device),
                    cache=alias_cache(model, kv), use_cache=False)
        logits = out.logits.float()  # [rows, w, V]
        normaliser = torch.logsumexp(logits, dim=-1)  # [rows, w]
        # Gather every candidate's later tokens of the chunk at once (one host -> device copy).
        r_index, columns, targets = torch.tensor(where, dtype=torch.long, device=device).unbind(1)
        yield (logits[r_index, columns, targets] - normaliser[r_index, columns], pieces,
               [(row, widths[row]) for row in chunk])


@dataclass
class ScoredBatch:
    """Every row's candidates scored at once (:func:`score_batch`), padded to the widest row."""

    scores: torch.Tensor
    """``[R, K]``: each candidate's score (``-inf`` past a row's own candidates)."""
    token_logprobs: torch.Tensor
    """``[R, K, L]``: each candidate's token log-probs (0 past its own tokens)."""
    counts: list[int]
    """Per row, how many candidates it has."""
    lengths: list[list[int]]
    """Per row, per candidate, how many tokens it has."""
    later_at: list[tuple[int, int, int] | None] | None = None
    """Per row, where its candidates' later tokens ran: ``(pass, row of that pass, columns)``
    (the passes in order, see :func:`_later_tokens`; ``None``: every candidate is one token).
    What the frozen layers gave there is recorded from it (:func:`~textgym.policy.frozen_trunk.trunk_records`)."""


def score_batch(model: torch.nn.Module, batch: BatchState, candidates: list[list[list[int]]],
                normalization: str, texts: Sequence[Sequence[str]] | None = None, *, pad_id: int,
                chunk_bytes: int, counters: Counters) -> ScoredBatch:
    """:func:`score_candidates` and :func:`candidate_scores` for a whole batch in a few tensor
    operations: the same numbers, without small device operations per row and candidate.

    Args:
        model, batch, candidates, pad_id, chunk_bytes, counters: as :func:`score_candidates`.
        normalization: as :func:`candidate_scores`.
        texts: per row, its candidates' texts (``"word"`` normalization only).
    """
    device = batch.last_logits.device
    first_logprobs = torch.log_softmax(batch.last_logits, dim=-1)
    counts = [len(cands) for cands in candidates]
    lengths = [[len(cand) for cand in cands] for cands in candidates]
    width = max(counts)
    longest = max(max(row) for row in lengths)
    # Where every candidate's first token goes, and what it is: one gather from the logits.
    rows, ks, firsts = [], [], []
    for r, cands in enumerate(candidates):
        rows.extend([r] * len(cands))
        ks.extend(range(len(cands)))
        firsts.extend(cand[0] for cand in cands)
    rows_t, ks_t = torch.tensor(rows, device=device), torch.tensor(ks, device=device)
    token_logprobs = first_logprobs.new_zeros((len(candidates), width, longest))
    token_logprobs[rows_t, ks_t, 0] = first_logprobs[rows_t, torch.tensor(firsts, device=device)]
    every = list(range(len(candidates)))
    later_at: list[tuple[int, int, int] | None] = [None] * len(candidates)
    for step, (rest, pieces, rows_run) in enumerate(_later_tokens(
            model, batch.cache, batch.attention_mask, every, [None] * len(every), batch.next_position, candidates,
            pad_id=pad_id, chunk_bytes=chunk_bytes, counters=counters, vocab=first_logprobs.shape[-1])):
        for r, (row, columns) in enumerate(rows_run):
            later_at[row] = (step, r, columns)
        at = [(p, k, j) for p, k, n in pieces for j in range(1, n + 1)]
        p_index, k_index, j_index = torch.tensor(at, device=device).unbind(1)
        token_logprobs[p_index, k_index, j_index] = rest
    sums = token_logprobs.sum(dim=-1)
    if normalization == "token":
        sums = sums / _padded(lengths, width, device)
    elif normalization == "word":
        if texts is None:
            raise ValueError("word normalization needs the candidate texts")
        words = [[max(1, len(t.split())) for t in row] for row in texts]
        sums = sums / _padded(words, width, device).to(sums.dtype)
    real = torch.arange(width, device=device)[None, :] < torch.tensor(counts, device=device)[:, None]
    scores = sums.masked_fill(~real, float("-inf"))
    return ScoredBatch(scores=scores, token_logprobs=token_logprobs, counts=counts, lengths=lengths,
                       later_at=later_at)


def _padded(values: list[list[int]], width: int, device: torch.device) -> torch.Tensor:
    """``[R, width]`` long: each row's values, padded with 1 (a harmless divisor)."""
    return torch.tensor([row + [1] * (width - len(row)) for row in values], device=device)


def candidate_scores(token_logprobs: Sequence[torch.Tensor], normalization: str,
                     texts: Sequence[str] | None = None) -> torch.Tensor:
    """``[K]``: the score of each of one row's candidates from its token log-probs.

    Args:
        token_logprobs: per candidate, its token log-probs.
        normalization: ``"sum"``, ``"token"`` (mean per token) or ``"word"`` (sum / words).
        texts: the candidates' texts (``"word"`` only).
    """
    sums = torch.stack([t.sum() for t in token_logprobs])
    if normalization == "sum":
        return sums
    if normalization == "token":
        return sums / torch.tensor([len(t) for t in token_logprobs], device=sums.device)
    if texts is None:
        raise ValueError("word normalization needs the candidate texts")
    return sums / torch.tensor([max(1, len(t.split())) for t in texts], device=sums.device, dtype=sums.dtype)
