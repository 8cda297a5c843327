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

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence

import torch

from textgym.policy import Decision, Evaluation, Policy
from textgym.trainers.engine.losses import approx_kl, masked_mean
from textgym.trainers.engine.optimization import row_batches

__all__ = ["ReferenceMemo", "flat_units", "pad_units", "reference_kl", "reference_logprobs", "rollout_kl"]


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


class ReferenceMemo:
    """The reference policy's log-probs of decisions, kept across updates.

    The reference does not change during a run (until a warm start rebases it), so a decision
    with the same context and answer as one met by an earlier update has the same reference
    log-probs: where states recur (Blackjack's 280 hands, a GRPO group's shared first turns) an
    update re-scores with the reference only what is new. Least recently used entries go first
    past ``entries``; everything goes when the policy's reference changes
    (:attr:`Policy.reference_version <textgym.policy.Policy.reference_version>`).

    Example:
        >>> import textgym
        >>> from textgym.rollout import collect, decisions_of
        >>> policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
        >>> rollout = collect(policy, textgym.make_vec("textgym/Bandit-v0", num_envs=2), episodes=4, seed=0)
        >>> decisions = decisions_of(rollout.episodes)
        >>> memo = ReferenceMemo()
        >>> first = memo.logprobs(policy, decisions, batch_size=8, entries=100)
        >>> again = memo.logprobs(policy, decisions, batch_size=8, entries=100)   # no forward pass
        >>> memo.hits == len(decisions), all(a.equal(b) for a, b in zip(first, again))
        (True, True)
    """

    def __init__(self) -> None:
        self._units: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._version: int | None = None
        self.hits = 0
        """Decisions served from the memo by the last :meth:`logprobs`."""

    @staticmethod
    def key(decision: Decision) -> bytes:
        """What fixes a decision's reference log-probs: its context, and its candidates and choice
        (score mode) or its answer (generate mode); a 128-bit digest of their token ids."""
        digest = hashlib.blake2b(digest_size=16)
        parts = [decision.prompt_ids, decision.answer_ids, *(decision.candidates or ()),
                 [-1 if decision.action_index is None else decision.action_index]]
        for ids in parts:  # each part's length first: the parts' bounds are part of the key
            digest.update(array("q", [len(ids), *ids]).tobytes())
        return digest.digest()

    def logprobs(self, policy: Policy, decisions: Sequence[Decision], batch_size: int,
                 entries: int) -> list[torch.Tensor]:
        """:func:`reference_logprobs` of ``decisions``, the reference re-scoring only those not
        kept; then keeps at most ``entries`` (0: nothing)."""
        if self._version != policy.reference_version:
            self._units.clear()
        keys = [self.key(d) for d in decisions]
        missing = [i for i, key in enumerate(keys) if key not in self._units]
        self.hits = len(decisions) - len(missing)
        fresh = dict(zip((keys[i] for i in missing),
                         reference_logprobs(policy, [decisions[i] for i in missing], batch_size)
                         if missing else ()))
        self._version = policy.reference_version  # after the pass: a first snapshot is taken there
        out = [fresh[key] if key in fresh else self._units[key] for key in keys]
        for key in keys:
            if key in self._units:
                self._units.move_to_end(key)
        self._units.update(fresh)
        while len(self._units) > entries:
            self._units.popitem(last=False)
        return out


def rollout_kl(ev: Evaluation, drawn: torch.Tensor | None = None) -> float:
    """Approximate KL(rollout policy || current policy) over ``ev``'s units.

    The units were sampled from the rollout policy, so the k3 estimator takes the rollout
    log-probs as the sampling side (CleanRL's ``(ratio - 1) - log ratio``): it grows like
    ``-log ratio`` when the update makes a sampled answer unlikely, instead of like
    ``1 / ratio`` (which overflowed to 1e15 once a collapsing policy gave a sampled answer
    probability 1e-16).

    ``drawn``: ``[B, T]`` log-probs of the distribution that drew each unit, where it was not the
    rollout policy (an exploration floor, :func:`~textgym.trainers.engine.loss_step.behaviour_logprobs`):
    each unit's term is then weighed by ``pi_rollout / mu``, so the estimate stays one of the rollout
    policy's KL. Unweighed, a floor's draw of an answer the policy gives 1e-9 that the update
    lifts to 1e-4 would add ~1e5 (measured: 6.6e5 on BabyAI once the policy was sure)."""
    new = ev.logprobs.detach()
    if drawn is None:
        return masked_mean(approx_kl(ev.old_logprobs, new), ev.mask).item()
    # importance sampling from mu (E_mu[pi / mu * f] = E_pi[f]), the weight folded into k3's
    # exponentials so that no term is an overflow times an underflow
    old = ev.old_logprobs.detach()
    terms = torch.exp(new - drawn) - torch.exp(old - drawn) * (new - old + 1.0)
    return masked_mean(terms.masked_fill(~ev.mask, 0.0), ev.mask).item()


def reference_kl(ev: Evaluation, reference: list[torch.Tensor], indices: torch.Tensor) -> torch.Tensor:
    """KL(policy || reference) over the minibatch's units (with grad); ``reference`` comes from
    :func:`reference_logprobs` and ``indices`` are the minibatch's decisions."""
    ref_logprobs = pad_units([reference[i] for i in indices.tolist()], ev.mask)
    return masked_mean(approx_kl(ev.logprobs, ref_logprobs), ev.mask)
