"""The optimizer side of an update: the learning-rate schedule, the minibatch loop, and the step.

:func:`optimizer_step` is the one place where an optimizer steps (the gradient average across
data-parallel processes, per-group gradient clipping and the non-finite guard included): the RL
minibatch loop (:func:`run_minibatches`) and the SFT steps (:mod:`textgym.trainers.engine.sft`) both go
through it.

Data parallelism (:mod:`textgym.distributed`): each process holds its own decisions, and the
minibatches are planned over the *global* batch (every rank draws the same permutation of all
ranks' decisions, each keeps the part of a minibatch it holds), so every rank takes the same
number of steps, and N processes take exactly the steps one process would take on the whole batch.

Example:
    >>> import torch
    >>> from textgym.trainers.engine.optimization import optimizer_step
    >>> weight = torch.nn.Parameter(torch.ones(2))
    >>> optimizer = torch.optim.SGD([weight], lr=0.5)
    >>> weight.grad = torch.tensor([3.0, 4.0])                # norm 5, clipped to 1
    >>> optimizer_step(optimizer, max_grad_norm=1.0), [round(w, 4) for w in weight.tolist()]
    (True, [0.7, 0.6])
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from textgym.trainers.engine.train_config import TrainConfig

if TYPE_CHECKING:
    from textgym.distributed import ProcessContext

__all__ = ["LossFn", "MinibatchPlan", "chunk_costs", "chunks_of", "lr_factor", "minibatches", "optimizer_step",
           "row_batches", "run_minibatches"]

logger = logging.getLogger("textgym.trainers")

LossFn = Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, float]]]
"""``loss_fn(indices) -> (mean loss over those decisions, float statistics)``."""


def lr_factor(update: int, warmup: int, total: int | None, schedule: str, decay_from: float = 0.0,
              final: float = 0.0) -> float:
    """Multiplier of the peak learning rate at (0-based) ``update``: a linear warm-up over ``warmup``
    updates, then the peak until ``decay_from`` of the updates after it, then ``schedule`` down to
    ``final`` at update ``total`` (and ``final`` after it)."""
    if warmup and update < warmup:
        return (update + 1) / warmup
    if schedule == "constant" or not total:
        return 1.0
    progress = min(1.0, (update - warmup) / max(1, total - warmup))
    decayed = min(1.0, max(0.0, (progress - decay_from) / (1.0 - decay_from)))
    shape = 1.0 - decayed if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * decayed))
    return final + (1.0 - final) * shape


def optimizer_step(optimizer: torch.optim.Optimizer, max_grad_norm: float | None,
                   process: ProcessContext | None = None, weight: float = 1.0) -> bool:
    """Average the gradients across processes, clip each parameter group's gradient norm to
    ``max_grad_norm`` and step; returns ``False`` (and steps nothing, gradients cleared) when a
    gradient is not finite.

    Each group is clipped on its own: the value head's large early gradients must not shrink the
    policy's step. With several processes (``process``), every rank calls this once per step: the
    gradients become their mean over the ranks weighted by ``weight`` (this rank's number of
    decisions in the step, 0 for none), before clipping and the non-finite check, so every rank
    sees the same gradients and makes the same decision (a NaN on one rank skips the step on all).
    """
    if process is not None and process.is_distributed:
        process.average_gradients([p for group in optimizer.param_groups for p in group["params"]],
                                  weight=weight)
    max_norm = max_grad_norm if max_grad_norm is not None else float("inf")
    finite = True
    for group in optimizer.param_groups:
        grad_norm = torch.nn.utils.clip_grad_norm_(group["params"], max_norm)
        finite = finite and bool(torch.isfinite(grad_norm))
    if not finite:
        optimizer.zero_grad(set_to_none=True)
        return False
    optimizer.step()
    return True


def sequence_cost(tokens: int) -> float:
    """What a sequence of ``tokens`` tokens counts for in a chunk's budget: its tokens, more for
    long ones (attention's scores grow with the square of the length)."""
    return tokens * (1.0 + tokens / 1024)


def chunk_costs(decisions: Sequence[Any], max_answer_tokens: int | None,
                max_tokens: int | None) -> list[float] | None:
    """Per decision, its share of a chunk's budgets (``TrainConfig.max_chunk_answer_tokens``,
    ``max_chunk_tokens``): the larger of its answer tokens over the first and its sequence's
    :func:`sequence_cost` over the second, so a chunk of n decisions stays within both budgets when
    n times its largest cost is at most 1 (:func:`chunks_of` with ``max_chunk_tokens=1``). A
    score-mode decision's answer is all its candidates' tokens. ``None``: no budget.

    Example:
        >>> from types import SimpleNamespace as D
        >>> chunk_costs([D(prompt_ids=[0] * 1023, answer_ids=[1], candidates=None)], 2048, 4096)
        [0.5]

    (1,024 tokens count as 2,048: half of a 4,096 budget.)
    """
    if max_answer_tokens is None and max_tokens is None:
        return None
    costs = []
    for d in decisions:
        answer = sum(map(len, d.candidates)) if d.candidates else len(d.answer_ids)
        cost = len(d.answer_ids) / max_answer_tokens if max_answer_tokens is not None else 0.0
        if max_tokens is not None:
            cost = max(cost, sequence_cost(len(d.prompt_ids) + answer) / max_tokens)
        costs.append(cost)
    return costs


def chunks_of(minibatch: torch.Tensor, accumulation_steps: int, token_counts: Sequence[float] | None = None,
              max_chunk_tokens: float | None = None, keys: Sequence[Hashable] | None = None) -> list[torch.Tensor]:
    """``minibatch`` (decision indices) split into at least ``accumulation_steps`` chunks, and into
    enough that no chunk holds more than ``max_chunk_tokens`` padded tokens (its rows times its
    longest ``token_counts``; a row per decision, or per distinct ``keys`` value: decisions the
    policy re-scores with one row, :meth:`Decision.rescoring_key`). Only when that needs more chunks
    are the decisions sorted by length (short with short: less padding; equal keys stay next to each
    other); otherwise they keep their order (the turns of a conversation stay next to each other,
    re-scored in one pass).

    Example:
        >>> [c.tolist() for c in chunks_of(torch.tensor([0, 1, 2, 3]), 1, [100, 2, 100, 2], 256)]
        [[1, 3], [0, 2]]
        >>> [c.tolist() for c in chunks_of(torch.tensor([0, 1, 2, 3]), 1, [100] * 4, 256)]
        [[0, 1], [2, 3]]
        >>> [c.tolist() for c in chunks_of(torch.tensor([0, 1, 2, 3]), 1, [100] * 4, 256, keys="abab")]
        [[0, 1, 2, 3]]

    (Four decisions in two states are two rows: one pass.)
    """
    parts = min(accumulation_steps, len(minibatch))
    if token_counts is None or max_chunk_tokens is None or not len(minibatch):
        return list(minibatch.chunk(parts)) if len(minibatch) else []

    def rows(chunk: list[int]) -> int:
        return len(chunk) if keys is None else len({keys[i] for i in chunk})

    def too_long(chunks: tuple[torch.Tensor, ...]) -> bool:
        return max(rows(c.tolist()) * max(token_counts[i] for i in c.tolist()) for c in chunks) > max_chunk_tokens

    if not too_long(minibatch.chunk(parts)):
        return list(minibatch.chunk(parts))
    lengths = torch.tensor([token_counts[i] for i in minibatch.tolist()])
    minibatch = minibatch[lengths.argsort(stable=True)]
    if keys is not None:  # a row's duplicates next to it (they are the same length)
        minibatch = torch.tensor([i for run in key_runs(minibatch.tolist(), keys) for i in run], dtype=minibatch.dtype)
    while parts < len(minibatch) and too_long(minibatch.chunk(parts)):
        parts += 1
    return list(minibatch.chunk(parts))


def minibatches(num_decisions: int, minibatch_size: int, groups: Sequence[Sequence[int]] | None = None,
                keys: Sequence[Hashable] | None = None) -> list[torch.Tensor]:
    """One epoch's minibatches of decision indices, shuffled.

    Without ``groups`` or ``keys`` the decisions are shuffled one by one. With ``groups`` (the turns
    of one conversation, :func:`textgym.rollout.conversation_runs`) a group stays together, cut
    into pieces of at most ``minibatch_size``; the pieces are shuffled and packed into minibatches
    of at most ``minibatch_size``, so one pass over a conversation re-scores all its turns. With
    ``keys`` instead (per decision, :meth:`Decision.rescoring_key`) the distinct keys are shuffled
    and each one's decisions laid out together before the cut into minibatches of
    ``minibatch_size``: as many minibatches as one by one, but the decisions of a state met many
    times (Blackjack's hands, a GRPO group's first turn) sit in one minibatch, re-scored by one row.

    Example:
        >>> sorted(sorted(b.tolist()) for b in minibatches(4, 2, keys="abab"))   # one state each
        [[0, 2], [1, 3]]
    """
    if groups is None and keys is not None:
        runs = key_runs(range(len(keys)), keys)
        order = [i for k in torch.randperm(len(runs)).tolist() for i in runs[k]]
        return list(torch.tensor(order, dtype=torch.long).split(minibatch_size))
    if groups is None:
        return list(torch.randperm(num_decisions).split(minibatch_size))
    pieces = [list(g[i:i + minibatch_size]) for g in groups for i in range(0, len(g), minibatch_size)]
    batches: list[list[int]] = [[]]
    for k in torch.randperm(len(pieces)).tolist():
        if len(batches[-1]) + len(pieces[k]) > minibatch_size:
            batches.append([])
        batches[-1].extend(pieces[k])
    return [torch.tensor(b) for b in batches if b]


def key_runs(indices: Iterable[int], keys: Sequence[Hashable]) -> list[list[int]]:
    """``indices`` grouped by their ``keys``, groups in order of first appearance."""
    runs: dict[Hashable, list[int]] = {}
    for i in indices:
        runs.setdefault(keys[i], []).append(i)
    return list(runs.values())


def row_batches(keys: Sequence[Hashable], rows: int) -> list[list[int]]:
    """Indices ``0 .. len(keys) - 1`` in batches of at most ``rows`` distinct keys, every index with
    the others of its key: no-grad passes over an update's decisions (reference log-probs, the
    acting-precision check) run each state once (:meth:`Decision.rescoring_key`).

    Example:
        >>> row_batches("abacbd", 2)
        [[0, 2, 1, 4], [3, 5]]
    """
    runs = key_runs(range(len(keys)), keys)
    return [[i for run in runs[start:start + rows] for i in run] for start in range(0, len(runs), rows)]


class MinibatchPlan:
    """Which of this rank's decisions each minibatch of an epoch holds.

    One process: :func:`minibatches` of its decisions. Several: the plan is drawn by rank 0 over
    *all* ranks' decisions (every rank gets it), rank ``r`` holding global indices
    ``offset .. offset + n - 1``; a minibatch's local part is what falls in that range (possibly
    nothing). Every rank thus runs the same number of minibatches, and the union of the ranks'
    parts is the minibatch one process would have drawn from the same global batch.

    Args:
        num_decisions: this rank's decisions.
        minibatch_size: decisions per minibatch of the global batch.
        process: the data-parallel context (``None``: one process).
        groups: this rank's decisions that stay in one minibatch (local indices; see
            :func:`minibatches`).
        keys: per decision of this rank, its :meth:`Decision.rescoring_key` (equal keys laid out
            together; see :func:`minibatches`).
    """

    def __init__(self, num_decisions: int, minibatch_size: int, process: ProcessContext | None = None,
                 groups: Sequence[Sequence[int]] | None = None, keys: Sequence[Hashable] | None = None):
        self.process = process if process is not None and process.is_distributed else None
        self.minibatch_size = minibatch_size
        self.num_decisions = num_decisions
        if self.process is None:
            self.total, self.offset, self.groups, self.keys = num_decisions, 0, groups, keys
        else:
            counts = self.process.gather([num_decisions])
            self.total, self.offset = sum(counts), sum(counts[:self.process.rank])
            # every rank's groups in global indices, in rank order (as one process would hold them)
            local = None if groups is None else [[self.offset + i for i in g] for g in groups]
            gathered = self.process.gather([local])
            self.groups = None if groups is None else [g for rank_groups in gathered for g in rank_groups]
            # every rank's keys in rank order (a state met on two ranks: one minibatch, a row on each)
            self.keys = None if keys is None else self.process.gather(list(keys))

    def epoch(self) -> list[torch.Tensor]:
        """The local index tensor of each minibatch of a new epoch."""
        # The one-process plan of the global batch (with several processes: rank 0's draw, for all).
        planned = minibatches(self.total, self.minibatch_size, self.groups, self.keys)
        if self.process is None:
            return planned
        planned = [torch.tensor(m, dtype=torch.long) for m in self.process.broadcast_object([m.tolist() for m in planned])]
        return [m[(m >= self.offset) & (m < self.offset + self.num_decisions)] - self.offset for m in planned]


def run_minibatches(optimizer: torch.optim.Optimizer, num_decisions: int, loss_fn: LossFn, *, epochs: int,
                    minibatch_size: int, gradient_accumulation_steps: int = 1,
                    max_grad_norm: float | None = TrainConfig.max_grad_norm, target_kl: float | None = None,
                    process: ProcessContext | None = None,
                    groups: Sequence[Sequence[int]] | None = None,
                    token_counts: Sequence[float] | None = None,
                    max_chunk_tokens: float | None = None,
                    keys: Sequence[Hashable] | None = None) -> dict[str, float]:
    """Minimise ``loss_fn`` over shuffled minibatches of decision indices for ``epochs`` passes.

    ``loss_fn(indices) -> (loss, stats)`` returns the mean loss over those decisions and float
    statistics; the returned metrics are their means over every chunk, plus ``epochs`` (full
    epochs run) and ``optimizer_steps``. A ``"kl"`` statistic (the approximate KL between the
    rollout policy and the current one) drives the target-KL early stop: no more epochs once an
    epoch's mean KL exceeds ``target_kl``, and, within an epoch, no more steps once a minibatch's
    KL exceeds ``1.5 * target_kl`` (``kl_stop: True``), as in Stable-Baselines3's PPO, so one
    update with a single epoch cannot run away either. Each minibatch is split into
    ``gradient_accumulation_steps`` chunks whose gradients add up, or more when a chunk would hold
    more than ``max_chunk_tokens`` tokens (``token_counts``: per decision; see :func:`chunks_of`).
    A non-finite loss or gradient stops the update before that optimizer step (``nonfinite: True``; the weights keep what the
    earlier steps made of them).

    With several processes (``process``; ``num_decisions`` is this rank's count), the minibatches
    are planned over the global batch (:class:`MinibatchPlan`), a minibatch's KL and the
    non-finite check are agreed by all ranks before its step (one all-reduce), the gradients are
    averaged in :func:`optimizer_step`, and the statistics returned are the decision-weighted
    means over all ranks: every rank returns the same metrics and keeps the same weights.
    ``groups``: decisions that stay in one minibatch (the turns of one conversation, see
    :func:`minibatches`). ``keys``: per decision, its :meth:`Decision.rescoring_key`: decisions the
    policy re-scores with one row are laid out in the same minibatch and chunk (one row in the
    chunk's token budget), unless ``groups`` are given.
    """
    distributed = process is not None and process.is_distributed
    plan = MinibatchPlan(num_decisions, minibatch_size, process, groups, keys)
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    # Several processes: per minibatch, each statistic's (sum of chunk value x chunk size, size) here.
    shares: list[dict[str, tuple[float, int]]] = []
    epochs_done, steps, stopped_nonfinite, stopped_kl = 0, 0, False, False
    for _ in range(epochs):
        epoch_kl: list[float] = []
        for minibatch in plan.epoch():
            optimizer.zero_grad(set_to_none=True)
            finite = True
            minibatch_kl: list[float] = []
            share: dict[str, tuple[float, int]] = {}
            shares.append(share)
            for chunk in chunks_of(minibatch, gradient_accumulation_steps, token_counts, max_chunk_tokens, keys):
                loss, stats = loss_fn(chunk)
                if not torch.isfinite(loss):
                    finite = False
                    break
                (loss * len(chunk) / len(minibatch)).backward()
                for key, value in {"loss": loss.item(), **stats}.items():
                    sums[key] = sums.get(key, 0.0) + float(value)
                    counts[key] = counts.get(key, 0) + 1
                    weighted, size = share.get(key, (0.0, 0))
                    share[key] = (weighted + float(value) * len(chunk), size + len(chunk))
                if "kl" in stats:
                    minibatch_kl.append(float(stats["kl"]))
            if distributed:  # one decision for all ranks: skip on a NaN anywhere, the global KL
                kl_weighted, kl_count = share.get("kl", (0.0, 0))
                failed, kl_sum, kl_count = process.reduce_sum([0.0 if finite else 1.0, kl_weighted, kl_count])
                finite = failed == 0
                minibatch_kl = [kl_sum / kl_count] if kl_count else []
            epoch_kl.extend(minibatch_kl)
            if (finite and target_kl is not None and minibatch_kl
                    and float(np.mean(minibatch_kl)) > 1.5 * target_kl):
                stopped_kl = True  # the policy already moved too far: no step on this minibatch
                break
            if not finite or not optimizer_step(optimizer, max_grad_norm, process, weight=len(minibatch)):
                optimizer.zero_grad(set_to_none=True)
                stopped_nonfinite = True
                break
            steps += 1
        if stopped_nonfinite or stopped_kl:
            break
        epochs_done += 1
        if target_kl is not None and epoch_kl and float(np.mean(epoch_kl)) > target_kl:
            break
    optimizer.zero_grad(set_to_none=True)
    out = {key: sums[key] / counts[key] for key in sums} if not distributed else _global_means(process, shares)
    out["epochs"] = epochs_done
    out["optimizer_steps"] = steps
    if stopped_kl:
        out["kl_stop"] = True
    if stopped_nonfinite:
        logger.warning("non-finite loss or gradient: the rest of the update was skipped "
                       "(the weights were not changed by the failing step)")
        out["nonfinite"] = True
    return out


def _global_means(process: ProcessContext, shares: list[dict[str, tuple[float, int]]]) -> dict[str, float]:
    """Each statistic's mean over the minibatches of every rank's ``shares``, a minibatch counting
    with its decision-weighted mean over the ranks: the figure one process computes for the global
    batch (exactly so with ``gradient_accumulation_steps=1``, where a minibatch is one chunk)."""
    per_rank = process.gather([shares])  # every rank ran the same minibatches
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for minibatch in zip(*per_rank):
        for key in dict.fromkeys(k for share in minibatch for k in share):
            weighted = sum(share[key][0] for share in minibatch if key in share)
            size = sum(share[key][1] for share in minibatch if key in share)
            sums[key] = sums.get(key, 0.0) + weighted / size
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}

