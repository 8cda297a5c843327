"""Re-scoring a minibatch for the loss, with optional state centering (score mode).

Example:
    >>> import torch
    >>> from types import SimpleNamespace
    >>> from textgym.policy import Evaluation
    >>> from textgym.trainers.engine.centering import centred_logprobs
    >>> per_state = torch.tensor([[0.3, -0.2], [1.0, 0.5]], requires_grad=True).log_softmax(-1)
    >>> ev = Evaluation(logprobs=per_state[:, :1], mask=torch.ones(2, 1, dtype=torch.bool),
    ...                 old_logprobs=torch.zeros(2, 1), entropy=torch.zeros(2), hidden=torch.zeros(2, 1),
    ...                 candidate_logprobs=list(per_state.unbind()))
    >>> same = [SimpleNamespace(candidates=[[1], [2]], action_index=0)] * 2
    >>> torch.allclose(centred_logprobs(ev, same, 1.0), ev.logprobs)   # values unchanged
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from textgym.policy import Decision, Evaluation, Policy

__all__ = ["centred_logprobs", "evaluate_minibatch"]


def centred_logprobs(ev: Evaluation, decisions: Sequence[Decision], weight: float) -> torch.Tensor:
    """Score mode: the chosen candidates' log-probs ``[B, 1]`` with the shared shift of their
    gradient scaled by ``1 - weight``.

    Decisions that share a candidate set form a group; within it each state's candidate scores
    (its log-probs ``l(s)``, logits up to a constant) become ``l(s) - weight * (mean_s l -
    stopgrad(mean_s l))`` and are normalised again: the same values, but the gradient reaching the
    scores of each state is its own minus ``weight`` times the group's mean, so a gradient step no
    longer gets credit for moving every state of the group at once, only for moving some states
    relative to the others. Where every decision's own gradient vanishes (a policy sure of its
    answers) the mean does too: the centring cannot push a settled policy anywhere. (Centring the
    chosen log-probs instead, after the softmax, pushed on the unlikely answers of other states
    through their full softmax gradient: a near-deterministic Blackjack policy flipped to HIT in
    every state within two updates.)
    """
    chosen = list(ev.logprobs[:, 0].unbind())
    groups: dict[tuple, list[int]] = {}
    for row, decision in enumerate(decisions):
        groups.setdefault(tuple(map(tuple, decision.candidates)), []).append(row)
    for rows in groups.values():
        if len(rows) < 2:
            continue
        logprobs = torch.stack([ev.candidate_logprobs[r] for r in rows])  # [n, K]
        shift = logprobs.mean(dim=0)
        logprobs = (logprobs - weight * (shift - shift.detach())).log_softmax(dim=-1)
        for j, r in enumerate(rows):
            chosen[r] = logprobs[j, decisions[r].action_index]
    return torch.stack(chosen)[:, None]


def evaluate_minibatch(policy: Policy, decisions: Sequence[Decision], indices: torch.Tensor,
                       state_centering: float = 0.0) -> Evaluation:
    """``policy.evaluate`` on the decisions at ``indices`` (with grad), the chosen log-probs
    centred over the minibatch when ``state_centering`` is set (score mode; see
    ``TrainConfig.state_centering``)."""
    batch = [decisions[i] for i in indices.tolist()]
    ev = policy.evaluate(batch)
    if state_centering and ev.candidate_logprobs is not None:
        ev = dataclasses.replace(ev, logprobs=centred_logprobs(ev, batch, state_centering))
    return ev
