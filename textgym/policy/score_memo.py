"""Score mode's answers to prompts already run with the same acting weights.

An env that revisits its states (Blackjack's 280 hands, a grid world's cells, a board game's
openings) asks the same question many times between two updates. Within one batch identical
prompts already run once (:func:`~textgym.policy.kv_cache.unique_rows`); the memo carries that
across the vector steps of a rollout: a prompt met before with the same weights and precision
(:meth:`Policy._acting_version`) is not run through the model again, its candidate scores and the
frozen layers' record come from here, and every visit still samples on its own. A new version (an
update, the greedy evaluation's precision) empties it. Bounded in bytes, least recently used out,
so envs whose prompts never repeat only pay the bookkeeping.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from textgym.policy.decision import TrunkRecord
from textgym.policy.scoring import ScoredBatch

__all__ = ["ScoreMemo", "ScoredRow", "rows_of", "stack_rows"]


@dataclass
class ScoredRow:
    """One prompt's scored candidates (a row of a :class:`ScoredBatch`) and its trunk record."""

    scores: torch.Tensor
    """``[K]``: the candidates' scores."""
    token_logprobs: torch.Tensor
    """``[K, L]``: their token log-probs (0 past a candidate's own tokens)."""
    lengths: list[int]
    """Per candidate, how many tokens it has."""
    trunk: TrunkRecord | None

    def nbytes(self) -> int:
        trunk = 0 if self.trunk is None else self.trunk.nbytes()
        return (self.scores.numel() * self.scores.element_size() + trunk
                + self.token_logprobs.numel() * self.token_logprobs.element_size())


def rows_of(scored: ScoredBatch, trunks: Sequence[TrunkRecord | None]) -> list[ScoredRow]:
    """Each row of ``scored`` on its own, trimmed to its candidates; copies, so that a kept row
    does not hold its whole batch (or the batch's trunk output) alive."""
    rows = []
    for r, (count, lengths, trunk) in enumerate(zip(scored.counts, scored.lengths, trunks)):
        longest = max(lengths)
        if trunk is not None:
            trunk = dataclasses.replace(trunk, hidden=trunk.hidden.clone(),
                                        candidates=None if trunk.candidates is None else trunk.candidates.clone())
        rows.append(ScoredRow(scores=scored.scores[r, :count].clone(),
                              token_logprobs=scored.token_logprobs[r, :count, :longest].clone(),
                              lengths=list(lengths), trunk=trunk))
    return rows


def stack_rows(rows: Sequence[ScoredRow]) -> ScoredBatch:
    """The :class:`ScoredBatch` of ``rows``, padded as :func:`~textgym.policy.scoring.score_batch`
    pads (``-inf`` scores and 0 log-probs past a row's own candidates and tokens)."""
    width = max(len(row.lengths) for row in rows)
    longest = max(row.token_logprobs.shape[1] for row in rows)
    first = rows[0].scores
    scores = torch.full((len(rows), width), float("-inf"), dtype=first.dtype, device=first.device)
    token_logprobs = torch.zeros((len(rows), width, longest), dtype=rows[0].token_logprobs.dtype, device=first.device)
    for r, row in enumerate(rows):
        count, length = row.token_logprobs.shape
        scores[r, :count] = row.scores
        token_logprobs[r, :count, :length] = row.token_logprobs
    return ScoredBatch(scores=scores, token_logprobs=token_logprobs, counts=[len(row.lengths) for row in rows],
                       lengths=[list(row.lengths) for row in rows])


class ScoreMemo:
    """Scored rows by prompt (and valid actions), for one acting version at a time, at most
    ``max_bytes`` of tensors (0: keep nothing)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._version: Hashable = None
        self._rows: OrderedDict[Hashable, ScoredRow] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._rows.clear()
        self._bytes = 0

    def lookup(self, version: Hashable, keys: Sequence[Hashable]) -> list[ScoredRow | None]:
        """The rows kept for ``keys`` under ``version`` (``None`` where none); a new version
        empties the memo first."""
        if version != self._version:
            self.clear()
            self._version = version
        found = []
        for key in keys:
            row = self._rows.get(key)
            if row is not None:
                self._rows.move_to_end(key)
            found.append(row)
        return found

    def store(self, keys: Sequence[Hashable], rows: Sequence[ScoredRow]) -> None:
        """Keep ``rows`` (the current version's), dropping the least recently used beyond the budget."""
        for key, row in zip(keys, rows):
            size = row.nbytes()
            if size > self.max_bytes:
                continue
            old = self._rows.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes()
            self._rows[key] = row
            self._bytes += size
        while self._bytes > self.max_bytes:
            _, dropped = self._rows.popitem(last=False)
            self._bytes -= dropped.nbytes()
