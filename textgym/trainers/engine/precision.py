"""The acting-precision correction of an update (``TrainConfig.act_correction``).

A policy that acts in bf16 or int8 (``PolicyConfig.act_dtype``) records the acting copy's
log-probs in its decisions, while the update differentiates the weights in their own precision.
:meth:`ActingCorrection.measure` re-scores the rollout once per update in the training precision
(no grad), measures the mismatch, and :meth:`ActingCorrection.apply` hands each minibatch's loss
the training-precision "old" log-probs and the truncated importance weights
(:func:`textgym.trainers.engine.losses.truncated_importance_weights`).

Example:
    >>> import torch
    >>> from textgym.policy import Evaluation
    >>> mask = torch.ones(1, 1, dtype=torch.bool)
    >>> ev = Evaluation(logprobs=torch.tensor([[-0.5]]), mask=mask, old_logprobs=torch.tensor([[-1.0]]),
    ...                 entropy=torch.zeros(1), hidden=torch.zeros(1, 1))
    >>> fix = ActingCorrection([torch.tensor([-0.5])], [torch.tensor([-1.0])], cap=1.5)
    >>> corrected, weights = fix.apply(ev, torch.tensor([0]))
    >>> corrected.old_logprobs, weights          # exp(0.5) = 1.65, capped at 1.5
    (tensor([[-0.5000]]), tensor([[1.5000]]))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from textgym.policy import Decision, Evaluation, Policy
from textgym.trainers.engine.kl import flat_units, pad_units
from textgym.trainers.engine.losses import precision_mismatch, truncated_importance_weights
from textgym.trainers.engine.optimization import row_batches

__all__ = ["ActingCorrection"]


class ActingCorrection:
    """The training-precision log-probs of a rollout's units (``train``, per decision) beside the
    acting ones (``act``); ``cap`` ``None`` measures without correcting."""

    def __init__(self, train: list[torch.Tensor], act: list[torch.Tensor], cap: float | None):
        self.train, self.act, self.cap = train, act, cap
        units = [len(t) for t in train]
        mask = torch.zeros(len(units), max(units, default=0), dtype=torch.bool)
        for row, n in enumerate(units):
            mask[row, :n] = True
        mean_abs, kl = precision_mismatch(pad_units(train, mask), pad_units(act, mask), mask) if units else (0.0, 0.0)
        #: The update's metrics: ``act_mismatch_abs``, ``act_mismatch_kl``.
        self.metrics = {"act_mismatch_abs": mean_abs, "act_mismatch_kl": kl}

    @classmethod
    @torch.no_grad()
    def measure(cls, policy: Policy, decisions: Sequence[Decision], batch_size: int, enabled: bool,
                cap: float) -> ActingCorrection | None:
        """Re-score ``decisions`` in the training precision in batches of ``batch_size``;
        ``None`` when the policy acts in float32 (acting and training log-probs are the same)."""
        if policy.act_precision == "float32":
            return None
        train: list[torch.Tensor | None] = [None] * len(decisions)
        act: list[torch.Tensor | None] = [None] * len(decisions)
        for rows in row_batches([d.rescoring_key() for d in decisions], batch_size):
            ev = policy.evaluate([decisions[i] for i in rows])
            for i, now, then in zip(rows, flat_units(ev.logprobs, ev.mask), flat_units(ev.old_logprobs, ev.mask)):
                train[i], act[i] = now, then
        return cls(train, act, cap if enabled else None)

    def apply(self, ev: Evaluation, indices: torch.Tensor) -> tuple[Evaluation, torch.Tensor | None]:
        """``ev`` (the minibatch at ``indices``) with the training-precision log-probs as
        ``old_logprobs``, and the per-unit truncated importance weights (``None`` when not correcting)."""
        rows = indices.tolist()
        train_old = pad_units([self.train[i] for i in rows], ev.mask)
        weights = None
        if self.cap is not None:
            weights = truncated_importance_weights(train_old, ev.old_logprobs, ev.mask, self.cap)
        return dataclasses.replace(ev, old_logprobs=train_old), weights
