"""The loss step every algorithm shares, written once: what surrounds its own objective.

Per update, :meth:`LossStep.prepare` computes what the whole batch needs once: the reference
policy's log-probs for the KL penalty (adapter disabled; only when ``kl_coef > 0``) and the
acting-precision correction (:class:`~textgym.trainers.engine.precision.ActingCorrection`). Per
minibatch, :meth:`LossStep.loss_fn` re-scores the decisions (with grad; state centering when
configured), hands them to the algorithm's ``objective`` (REINFORCE's ``-A log pi``, GRPO's
clipped surrogate, PPO's clipped surrogate plus value loss) and adds the terms common to all:
the entropy bonus, the KL to the rollout policy (reported, and what ``target_kl`` stops on) and
the KL penalty to the reference policy. The algorithm's update (``reinforce.py``, ``grpo.py``,
``ppo.py``) reads top to bottom: advantages, ``LossStep.prepare``, its objective, then
``Trainer.optimize(decisions, step.loss_fn(objective))``.

Example:
    >>> import textgym, torch
    >>> from textgym.rollout import collect, decisions_of
    >>> from textgym.trainers import ReinforceConfig
    >>> policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
    >>> rollout = collect(policy, textgym.make_vec("textgym/Bandit-v0", num_envs=2), episodes=2, seed=0)
    >>> decisions = decisions_of(rollout.episodes)
    >>> step = LossStep.prepare(policy, decisions, ReinforceConfig())
    >>> def objective(ev, weights, idx):            # the algorithm's own term
    ...     loss = -(ev.logprobs * ev.mask).sum(dim=1).mean()
    ...     return loss, {"policy_loss": loss.item()}
    >>> loss, stats = step.loss_fn(objective)(torch.tensor([0, 1]))
    >>> sorted(stats)
    ['entropy', 'kl', 'policy_loss']
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from textgym.policy import Decision, Evaluation, Policy
from textgym.trainers.engine.centering import evaluate_minibatch
from textgym.trainers.engine.kl import ReferenceMemo, reference_kl, reference_logprobs, rollout_kl
from textgym.trainers.engine.losses import masked_mean, truncated_importance_weights
from textgym.trainers.engine.optimization import LossFn
from textgym.trainers.engine.precision import ActingCorrection

if TYPE_CHECKING:
    from textgym.trainers.engine.train_config import TrainConfig

__all__ = ["LossStep", "Objective", "behaviour_logprobs", "skipped_update"]

logger = logging.getLogger("textgym.trainers")

Objective = Callable[[Evaluation, "torch.Tensor | None", torch.Tensor], tuple[torch.Tensor, dict[str, float]]]
"""An algorithm's own term: ``objective(ev, weights, indices) -> (loss, statistics)`` of the
minibatch at ``indices`` re-scored as ``ev`` (``weights``: the acting correction's per-unit
importance weights, ``None`` when not correcting)."""


def skipped_update(what: str) -> dict[str, Any]:
    """The metrics of an update skipped because its inputs (``what``: rewards, advantages...) are
    not finite: the weights are left as they were."""
    logger.warning("non-finite %s: update skipped", what)
    return {"nonfinite": True, "epochs": 0}


def behaviour_logprobs(decisions: Sequence[Decision], acting: torch.Tensor,
                       mask: torch.Tensor) -> torch.Tensor | None:
    """``[B, T]``: each unit's log-prob under the distribution that drew it
    (``Decision.behaviour_logprobs``; the acting log-prob ``acting`` for a decision drawn from the
    policy itself), or ``None`` when every decision was drawn from the policy itself.

    Example:
        >>> from types import SimpleNamespace as D
        >>> behaviour_logprobs([D(behaviour_logprobs=[-0.7]), D(behaviour_logprobs=None)],
        ...                    torch.tensor([[-0.1], [-0.2]]), torch.ones(2, 1, dtype=torch.bool))
        tensor([[-0.7000],
                [-0.2000]])
    """
    if all(d.behaviour_logprobs is None for d in decisions):
        return None
    out = acting.detach().float().clone()
    for row, decision in enumerate(decisions):
        if decision.behaviour_logprobs is not None:
            units = int(mask[row].sum())
            out[row, mask[row]] = torch.tensor(decision.behaviour_logprobs[:units], dtype=out.dtype,
                                               device=out.device)
    return out


@dataclass
class LossStep:
    """One update's shared loss terms (see the module docstring)."""

    policy: Policy
    decisions: Sequence[Decision]
    config: TrainConfig
    reference: list[torch.Tensor] | None
    """Per decision, the reference policy's log-probs of its units (``None``: no KL penalty)."""
    correction: ActingCorrection | None
    """The acting-precision correction (``None``: the policy acts in float32)."""

    @classmethod
    def prepare(cls, policy: Policy, decisions: Sequence[Decision], config: TrainConfig,
                memo: ReferenceMemo | None = None) -> LossStep:
        """What the update's minibatches share, computed once over ``decisions`` (no grad);
        ``memo``: the trainer's reference log-probs of earlier updates (``TrainConfig.reference_memo``)."""
        size = config.minibatch_size
        reference = None
        if config.kl_coef:
            reference = (memo.logprobs(policy, decisions, size, config.reference_memo)
                         if memo is not None and config.reference_memo else reference_logprobs(policy, decisions, size))
        correction = ActingCorrection.measure(policy, decisions, size, config.act_correction,
                                              config.act_correction_cap)
        return cls(policy, decisions, config, reference, correction)

    def loss_fn(self, objective: Objective) -> LossFn:
        """The minibatch loss of :func:`textgym.trainers.engine.optimization.run_minibatches`: the
        algorithm's ``objective`` minus ``entropy_coef`` x entropy plus ``kl_coef`` x the KL to
        the reference policy; its statistics plus ``entropy``, ``kl`` and ``ref_kl``."""
        cfg = self.config

        def loss_fn(idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            ev = evaluate_minibatch(self.policy, self.decisions, idx, cfg.state_centering)
            drawn = behaviour_logprobs([self.decisions[i] for i in idx.tolist()], ev.old_logprobs, ev.mask)
            weights = None
            if self.correction is not None:
                ev, weights = self.correction.apply(ev, idx)
            extra: dict[str, float] = {}
            if drawn is not None:  # drawn from another distribution than the policy: pi_old / mu
                weights = truncated_importance_weights(ev.old_logprobs, drawn, ev.mask, cfg.importance_cap,
                                                       cfg.importance_floor)
                extra["importance_weight"] = float(masked_mean(weights, ev.mask))
            loss, stats = objective(ev, weights, idx)
            stats = {**stats, **extra}
            entropy = ev.entropy.mean()
            loss = loss - cfg.entropy_coef * entropy
            stats = {**stats, "entropy": entropy.item(), "kl": rollout_kl(ev, drawn)}
            if self.reference is not None:
                ref_kl = reference_kl(ev, self.reference, idx)
                loss = loss + cfg.kl_coef * ref_kl
                stats["ref_kl"] = ref_kl.item()
            return loss, stats

        return loss_fn

    @property
    def metrics(self) -> dict[str, float]:
        """The update's metrics of the shared terms: the acting mismatch (when acting in another precision)."""
        return dict(self.correction.metrics) if self.correction is not None else {}
