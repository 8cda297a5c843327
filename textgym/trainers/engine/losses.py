"""The pure-torch pieces of the RL losses: returns, advantages, surrogate objectives, KL.

Every function takes and returns tensors and has no side effects, so each is unit-tested
against numbers computed by hand (tests/test_losses.py).

Example:
    >>> import torch
    >>> returns_to_go(torch.tensor([1.0, 0.0, 2.0]), gamma=0.5)
    tensor([1.5000, 1.0000, 2.0000])
"""

from __future__ import annotations

import torch


def returns_to_go(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted return from each step of one episode: ``G_t = r_t + gamma * G_{t+1}``.

    Args:
        rewards: ``Tensor[T]``, the rewards of one episode in order.
        gamma: discount factor in [0, 1].
    """
    out = torch.empty_like(rewards, dtype=torch.float32)
    running = 0.0
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def normalize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over all elements (population std, so one element gives 0)."""
    return (x - x.mean()) / (x.std(correction=0) + eps)


class EMABaseline:
    """An exponential moving average of returns, subtracted from returns to form advantages.

    The first batch sets the average; later batches move it by ``1 - decay``.

    Example:
        >>> b = EMABaseline(decay=0.5)
        >>> b.advantages(torch.tensor([1.0, 3.0]))     # baseline 2.0
        tensor([-1.,  1.])
        >>> b.value, b.advantages(torch.tensor([4.0])), b.value   # subtracts 2.0, then moves to 3.0
        (2.0, tensor([2.]), 3.0)
    """

    def __init__(self, decay: float = 0.9, value: float | None = None):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.value = value

    def advantages(self, returns: torch.Tensor) -> torch.Tensor:
        """Returns minus the baseline as it stood before this batch; then update the baseline."""
        mean = float(returns.mean())
        baseline = mean if self.value is None else self.value
        self.value = mean if self.value is None else self.decay * self.value + (1 - self.decay) * mean
        return returns - baseline


def group_advantages(returns: torch.Tensor, scale: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages: each return normalised within its group.

    Args:
        returns: ``Tensor[num_groups, G]``, the returns of G episodes that share a start state.
        scale: divide by the group's std (``False``: only subtract the group mean, as in Dr. GRPO).
        eps: added to the std; a group whose returns are all equal gets advantage 0.
    """
    centred = returns - returns.mean(dim=1, keepdim=True)
    if not scale:
        return centred
    return centred / (returns.std(dim=1, keepdim=True) + eps)


def turn_group_advantages(group: list[torch.Tensor], scale: bool = True, eps: float = 1e-6) -> list[torch.Tensor]:
    """Per-decision GRPO advantages within one group: each return-to-go minus the group's mean
    return-to-go at the same turn.

    Members that have already ended do not count in the mean of later turns, so a turn that only
    one member reached gets advantage 0. With ``scale``, the centred values are divided by their
    std over the whole group (all members and turns).

    Args:
        group: one ``Tensor[T_i]`` of returns-to-go per member (episodes from the same start).
        scale: divide by the group's std of the centred values (``False``: only centre).
        eps: added to the std.

    Example:
        >>> turn_group_advantages([torch.tensor([3.0, 1.0]), torch.tensor([1.0])], scale=False)
        [tensor([1., 0.]), tensor([-1.])]
    """
    turns = max(len(r) for r in group)
    padded = torch.full((len(group), turns), float("nan"))
    for i, r in enumerate(group):
        padded[i, : len(r)] = r.float()
    centred = padded - padded.nanmean(dim=0, keepdim=True)
    if scale:
        alive = centred[~centred.isnan()]
        centred = centred / (alive.std(correction=0) + eps)
    return [centred[i, : len(r)] for i, r in enumerate(group)]


def same_state_advantages(keys: list, values: torch.Tensor, fallback: torch.Tensor | None = None,
                          weights: torch.Tensor | None = None) -> torch.Tensor:
    """GiGPO's step-level advantage (arXiv 2505.10978, "anchor states"): each value minus the mean
    of the values of the decisions taken in the same state (equal ``keys``). A state visited once
    has no other decision to compare with: it gets ``fallback`` there (0 when ``None``, so adding
    this to an episode-level advantage falls back to the latter).

    Args:
        keys: per decision, a hashable identity of its state (its prompt and valid actions).
        values: ``Tensor[N]``, per decision, its return-to-go (normalised over the batch).
        fallback: ``Tensor[N]``, the advantage of a decision whose state was visited once.
        weights: ``Tensor[N]``, a weighted mean instead (a tree rollout's every action of a state
            weighted by the policy's probability of it: the state's value under the policy).

    Example:
        >>> same_state_advantages(["s", "t", "s", "s"], torch.tensor([1.0, 5.0, -1.0, 0.0]))
        tensor([ 1.,  0., -1.,  0.])
        >>> same_state_advantages(["s", "t", "s"], torch.tensor([1.0, 5.0, -1.0]), torch.tensor([9.0, 5.0, 9.0]))
        tensor([ 1.,  5., -1.])
        >>> same_state_advantages(["s", "s"], torch.tensor([1.0, -1.0]), weights=torch.tensor([0.75, 0.25]))
        tensor([ 0.5000, -1.5000])
    """
    if len(keys) != values.shape[0]:
        raise ValueError(f"{len(keys)} keys for {values.shape[0]} values")
    groups: dict = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out = torch.zeros_like(values, dtype=torch.float32) if fallback is None else fallback.float().clone()
    for rows in groups.values():
        if len(rows) > 1:
            index = torch.tensor(rows)
            group = values[index].float()
            if weights is None:
                out[index] = group - group.mean()
            else:
                w = weights[index].float()
                out[index] = group - (w * group).sum() / w.sum().clamp_min(1e-12)
    return out


def gae(rewards: torch.Tensor, values: torch.Tensor, last_value: float, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over one episode (Schulman et al., 2016).

    Args:
        rewards: ``Tensor[T]`` rewards of the episode.
        values: ``Tensor[T]`` value estimates of the states where each decision was made.
        last_value: value of the state after the last step (0 when the episode terminated; an
            estimate when it was truncated).
        gamma: discount factor.
        lam: GAE lambda.

    Returns:
        ``(advantages, returns)``, both ``Tensor[T]``, with ``returns = advantages + values``
        (the value targets).
    """
    T = rewards.shape[0]
    advantages = torch.zeros(T, dtype=torch.float32)
    next_value, running = float(last_value), 0.0
    for t in range(T - 1, -1, -1):
        delta = float(rewards[t]) + gamma * next_value - float(values[t])
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = float(values[t])
    return advantages, advantages + values.detach().float()


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is true (along ``dim``, or everywhere)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def clipped_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                      mask: torch.Tensor, clip_eps: float,
                      weights: torch.Tensor | None = None,
                      sum_units: bool = False,
                      clip_eps_high: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate loss over units (answer tokens or whole candidates).

    Each unit's ratio ``exp(logprob - old_logprob)`` is multiplied by its decision's advantage;
    the loss is ``-min(ratio * A, clip(ratio, 1 - eps, 1 + eps_high) * A)``, averaged over each
    decision's real units, then over decisions.

    Args:
        logprobs: ``Tensor[B, T]`` log-probs under the policy being trained (with grad).
        old_logprobs: ``Tensor[B, T]`` log-probs recorded when acting.
        advantages: ``Tensor[B]`` one advantage per decision.
        mask: ``Tensor[B, T]`` which units are real.
        clip_eps: the clip range.
        weights: ``Tensor[B, T]`` per-unit weights of the loss terms (the truncated importance
            ratios of :func:`truncated_importance_weights`); ``None``: 1.
        sum_units: add up each decision's units instead of averaging them (REINFORCE's
            ``-A log pi(answer)``: at ratio 1 the gradient is exactly REINFORCE's).
        clip_eps_high: the upper clip range (DAPO's clip-higher); ``None``: ``clip_eps``.

    Returns:
        ``(loss, clip_fraction)``: the scalar loss and the fraction of real units whose ratio was clipped.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages.unsqueeze(1)
    unclipped = ratio * adv
    high = clip_eps if clip_eps_high is None else clip_eps_high
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    per_unit = -torch.min(unclipped, clipped)
    if weights is not None:
        per_unit = per_unit * weights
    if sum_units:
        loss = (per_unit * mask.to(per_unit.dtype)).sum(dim=1).mean()
    else:
        loss = masked_mean(per_unit, mask, dim=1).mean()
    clip_frac = masked_mean(((ratio < 1.0 - clip_eps) | (ratio > 1.0 + high)).float(), mask)
    return loss, clip_frac.detach()


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float | None) -> torch.Tensor:
    """PPO's value loss: ``0.5 * max((V - R)^2, (V_clipped - R)^2)``, averaged.

    ``V_clipped = old_V + clip(V - old_V, -clip, clip)``; ``clip=None`` gives ``0.5 * (V - R)^2``.
    """
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * unclipped.mean()
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.max(unclipped, (clipped_values - returns) ** 2).mean()


def approx_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-unit k3 estimator of KL(pi || ref) from samples of pi (Schulman, 2020).

    ``exp(ref - logp) - (ref - logp) - 1``: non-negative, unbiased, low variance.
    """
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1.0


def truncated_importance_weights(train_logprobs: torch.Tensor, act_logprobs: torch.Tensor, mask: torch.Tensor,
                                 cap: float, floor: float = 0.0) -> torch.Tensor:
    """Per-unit truncated importance ratios ``max(min(exp(train - act), cap), floor)`` (0 at
    padding), without grad.

    The units were sampled by the acting copy (``act_logprobs``, e.g. bf16) but the gradient is
    taken in the training precision (``train_logprobs``); weighting each unit's policy-gradient
    term by this ratio makes the estimate the training policy's, and the cap bounds its variance.
    ``floor`` (``TrainConfig.importance_floor`` for exploration draws) is the least weight.

    Example:
        >>> truncated_importance_weights(torch.tensor([[0.0, -1.0]]), torch.tensor([[-1.0, -1.0]]),
        ...                              torch.tensor([[True, True]]), cap=2.0)
        tensor([[2., 1.]])
        >>> truncated_importance_weights(torch.tensor([[-5.0, 0.0]]), torch.tensor([[-1.0, -1.0]]),
        ...                              torch.tensor([[True, False]]), cap=1.0, floor=0.5)
        tensor([[0.5000, 0.0000]])
    """
    ratio = torch.exp(train_logprobs.detach().float() - act_logprobs.detach().float())
    return torch.clamp(ratio, min=floor, max=cap) * mask.to(ratio.dtype)


def precision_mismatch(train_logprobs: torch.Tensor, act_logprobs: torch.Tensor,
                       mask: torch.Tensor) -> tuple[float, float]:
    """``(mean |train - act|, KL(act || train))`` over the real units: how far the acting
    precision's log-probs are from the training precision's (the KL by :func:`approx_kl`, the
    acting side being the sampling one)."""
    train, act = train_logprobs.detach().float(), act_logprobs.detach().float()
    mean_abs = masked_mean((train - act).abs(), mask)
    kl = masked_mean(approx_kl(act, train), mask)
    return float(mean_abs), float(kl)


def all_finite(*tensors: torch.Tensor) -> bool:
    """True when every element of every tensor is finite (no NaN, no inf)."""
    return all(bool(torch.isfinite(t).all()) for t in tensors)


__all__ = [
    "EMABaseline",
    "all_finite",
    "approx_kl",
    "clipped_surrogate",
    "clipped_value_loss",
    "gae",
    "group_advantages",
    "masked_mean",
    "normalize",
    "precision_mismatch",
    "returns_to_go",
    "same_state_advantages",
    "truncated_importance_weights",
]
