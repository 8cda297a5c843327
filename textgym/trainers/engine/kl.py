"""KL helpers of the updates: how far the policy moved from the rollout policy, and the penalty
that keeps it near the reference policy.

Example:
    >>> import torch
    >>> from textgym.policy import Evaluation
    >>> from textgym.trainers.engine.kl import rollout_kl
    >>> same = torch.tensor([[-0.5]])
    >>> ev = Evaluation(logprobs=same, mask=torch.ones(1, 1, dtype=torch.bool), old_logprobs=same,
    ...                 entropy=torch.zeros(1), hidden=torch.zeros(1, 1))
    >>> rollout_kl(ev)                                # the policy has not moved
    0.0
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from textgym.policy import Decision, Evaluation, Policy
from textgym.trainers.engine.losses import approx_kl, masked_mean
from textgym.trainers.engine.optimization import row_batches

__all__ = ["flat_units", "pad_units", "reference_kl", "reference_logprobs", "rollout_kl"]


def flat_units(values: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """Per row, the values at the real units (so they can be re-padded to another batch's shape)."""
    return [row[m].detach().cpu() for row, m in zip(values, mask)]


def pad_units(units: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`flat_units` for a batch with ``mask``: a tensor shaped like ``mask``."""
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    out[mask] = torch.cat([u.float() for u in units]).to(mask.device)
    return out


@torch.no_grad()
def reference_logprobs(policy: Policy, decisions: Sequence[Decision], batch_size: int) -> list[torch.Tensor]:
    """Per decision, the reference policy's log-probs of its units (adapter disabled), computed
    once per update in batches of ``batch_size`` states (a state's decisions in one batch: one row)."""
    out: list[torch.Tensor | None] = [None] * len(decisions)
    with policy.reference():
        for rows in row_batches([d.rescoring_key() for d in decisions], batch_size):
            ev = policy.evaluate([decisions[i] for i in rows])
            for i, units in zip(rows, flat_units(ev.logprobs, ev.mask)):
                out[i] = units
    return out


def rollout_kl(ev: Evaluation) -> float:
    """Approximate KL(rollout policy || current policy) over ``ev``'s units.

    The units were sampled from the rollout policy, so the k3 estimator takes the rollout
    log-probs as the sampling side (CleanRL's ``(ratio - 1) - log ratio``): it grows like
    ``-log ratio`` when the update makes a sampled answer unlikely, instead of like
    ``1 / ratio`` (which overflowed to 1e15 once a collapsing policy gave a sampled answer
    probability 1e-16)."""
    return masked_mean(approx_kl(ev.old_logprobs, ev.logprobs.detach()), ev.mask).item()


def reference_kl(ev: Evaluation, reference: list[torch.Tensor], indices: torch.Tensor) -> torch.Tensor:
    """KL(policy || reference) over the minibatch's units (with grad); ``reference`` comes from
    :func:`reference_logprobs` and ``indices`` are the minibatch's decisions."""
    ref_logprobs = pad_units([reference[i] for i in indices.tolist()], ev.mask)
    return masked_mean(approx_kl(ev.logprobs, ref_logprobs), ev.mask)
