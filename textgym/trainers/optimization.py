"""The optimizer side of an update: the learning-rate schedule, the minibatch loop, and the step.

:func:`optimizer_step` is the one place where an optimizer steps (per-group gradient clipping and
the non-finite guard included): the RL minibatch loop (:func:`run_minibatches`) and the SFT
steps (:mod:`textgym.trainers.sft`) both go through it.

Example:
    >>> import torch
    >>> from textgym.trainers.optimization import optimizer_step
    >>> weight = torch.nn.Parameter(torch.ones(2))
    >>> optimizer = torch.optim.SGD([weight], lr=0.5)
    >>> weight.grad = torch.tensor([3.0, 4.0])                # norm 5, clipped to 1
    >>> optimizer_step(optimizer, max_grad_norm=1.0), [round(w, 4) for w in weight.tolist()]
    (True, [0.7, 0.6])
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

__all__ = ["LossFn", "chunks_of", "lr_factor", "optimizer_step", "run_minibatches"]

logger = logging.getLogger("textgym.trainers")

LossFn = Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, float]]]
"""``loss_fn(indices) -> (mean loss over those decisions, float statistics)``."""


def lr_factor(update: int, warmup: int, total: int | None, schedule: str) -> float:
    """Multiplier of the peak learning rate at (0-based) ``update``."""
    if warmup and update < warmup:
        return (update + 1) / warmup
    if schedule == "constant" or not total:
        return 1.0
    progress = min(1.0, (update - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def optimizer_step(optimizer: torch.optim.Optimizer, max_grad_norm: float | None) -> bool:
    """Clip each parameter group's gradient norm to ``max_grad_norm`` and step; returns ``False``
    (and steps nothing, gradients cleared) when a gradient is not finite.

    Each group is clipped on its own: the value head's large early gradients must not shrink the
    policy's step.
    """
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


def chunks_of(minibatch: torch.Tensor, accumulation_steps: int, token_counts: Sequence[int] | None = None,
              max_chunk_tokens: int | None = None) -> list[torch.Tensor]:
    """``minibatch`` (decision indices) split into at least ``accumulation_steps`` chunks, and into
    enough that no chunk holds more than ``max_chunk_tokens`` padded tokens (its size times its
    longest ``token_counts``); with token counts, decisions of similar length share a chunk.

    Example:
        >>> [c.tolist() for c in chunks_of(torch.tensor([0, 1, 2, 3]), 1, [100, 2, 100, 2], 256)]
        [[1, 3], [0, 2]]
    """
    parts = min(accumulation_steps, len(minibatch))
    if token_counts is not None and max_chunk_tokens is not None and len(minibatch):
        lengths = torch.tensor([token_counts[i] for i in minibatch.tolist()])
        minibatch = minibatch[lengths.argsort(stable=True)]  # short with short: less padding
        while parts < len(minibatch) and max(len(c) * max(token_counts[i] for i in c.tolist())
                                             for c in minibatch.chunk(parts)) > max_chunk_tokens:
            parts += 1
    return list(minibatch.chunk(parts))


def run_minibatches(optimizer: torch.optim.Optimizer, num_decisions: int, loss_fn: LossFn, *, epochs: int,
                    minibatch_size: int, gradient_accumulation_steps: int = 1,
                    max_grad_norm: float | None = 1.0, target_kl: float | None = None,
                    token_counts: Sequence[int] | None = None,
                    max_chunk_tokens: int | None = None) -> dict[str, float]:
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
    A non-finite loss or gradient
    stops the update before that optimizer step (``nonfinite: True``; the weights keep what the
    earlier steps made of them).
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    epochs_done, steps, stopped_nonfinite, stopped_kl = 0, 0, False, False
    for _ in range(epochs):
        epoch_kl: list[float] = []
        perm = torch.randperm(num_decisions)
        for start in range(0, num_decisions, minibatch_size):
            minibatch = perm[start:start + minibatch_size]
            optimizer.zero_grad(set_to_none=True)
            finite = True
            minibatch_kl: list[float] = []
            for chunk in chunks_of(minibatch, gradient_accumulation_steps, token_counts, max_chunk_tokens):
                loss, stats = loss_fn(chunk)
                if not torch.isfinite(loss):
                    finite = False
                    break
                (loss * len(chunk) / len(minibatch)).backward()
                for key, value in {"loss": loss.item(), **stats}.items():
                    sums[key] = sums.get(key, 0.0) + float(value)
                    counts[key] = counts.get(key, 0) + 1
                if "kl" in stats:
                    minibatch_kl.append(float(stats["kl"]))
            epoch_kl.extend(minibatch_kl)
            if (finite and target_kl is not None and minibatch_kl
                    and float(np.mean(minibatch_kl)) > 1.5 * target_kl):
                stopped_kl = True  # the policy already moved too far: no step on this minibatch
                break
            if not finite or not optimizer_step(optimizer, max_grad_norm):
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
    out = {key: sums[key] / counts[key] for key in sums}
    out["epochs"] = epochs_done
    out["optimizer_steps"] = steps
    if stopped_kl:
        out["kl_stop"] = True
    if stopped_nonfinite:
        logger.warning("non-finite loss or gradient: the rest of the update was skipped "
                       "(the weights were not changed by the failing step)")
        out["nonfinite"] = True
    return out
