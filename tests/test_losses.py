"""The loss and advantage functions against numbers computed by hand."""

import math

import pytest
import torch

from textgym.trainers.engine.losses import (
    EMABaseline,
    all_finite,
    approx_kl,
    clipped_surrogate,
    clipped_value_loss,
    gae,
    group_advantages,
    masked_mean,
    normalize,
    returns_to_go,
    turn_group_advantages,
)


def test_returns_to_go_discounts_from_the_end():
    # G2 = 2; G1 = 0 + 0.5*2 = 1; G0 = 1 + 0.5*1 = 1.5
    assert returns_to_go(torch.tensor([1.0, 0.0, 2.0]), 0.5).tolist() == [1.5, 1.0, 2.0]
    assert returns_to_go(torch.tensor([1.0, 1.0, 1.0]), 1.0).tolist() == [3.0, 2.0, 1.0]
    assert returns_to_go(torch.tensor([5.0]), 0.9).tolist() == [5.0]


def test_normalize_zero_mean_unit_std():
    out = normalize(torch.tensor([1.0, 3.0]))  # mean 2, population std 1
    assert torch.allclose(out, torch.tensor([-1.0, 1.0]), atol=1e-6)
    assert normalize(torch.tensor([4.0])).tolist() == [0.0]
    assert normalize(torch.tensor([2.0, 2.0, 2.0])).tolist() == [0.0, 0.0, 0.0]


def test_ema_baseline_first_batch_sets_it_then_moves():
    b = EMABaseline(decay=0.9)
    assert b.advantages(torch.tensor([0.0, 2.0])).tolist() == [-1.0, 1.0]
    assert b.value == 1.0
    # Second batch mean 3: advantages use the old baseline 1, then 0.9*1 + 0.1*3 = 1.2
    assert b.advantages(torch.tensor([3.0])).tolist() == [2.0]
    assert b.value == pytest.approx(1.2)
    with pytest.raises(ValueError, match="decay"):
        EMABaseline(decay=1.0)


def test_group_advantages_normalise_within_each_group():
    returns = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv = group_advantages(returns)
    # Group 0: mean 0.5, sample std sqrt(1/3) = 0.57735
    expected = 0.5 / math.sqrt(1 / 3)
    assert torch.allclose(adv[0], torch.tensor([expected, -expected, expected, -expected]), atol=1e-4)
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # all equal: no signal
    assert group_advantages(returns, scale=False)[0].tolist() == [0.5, -0.5, 0.5, -0.5]


def test_turn_group_advantages_compare_members_at_the_same_turn():
    # Member returns-to-go: A = [3, 1, 0], B = [1, 2], C = [2]
    # turn 0: mean 2 -> A +1, B -1, C 0; turn 1: mean 1.5 -> A -0.5, B +0.5; turn 2: only A -> 0
    group = [torch.tensor([3.0, 1.0, 0.0]), torch.tensor([1.0, 2.0]), torch.tensor([2.0])]
    centred = turn_group_advantages(group, scale=False)
    assert [c.tolist() for c in centred] == [[1.0, -0.5, 0.0], [-1.0, 0.5], [0.0]]
    # scaled: divided by the population std of those six centred values
    std = torch.tensor([1.0, -0.5, 0.0, -1.0, 0.5, 0.0]).std(correction=0)
    scaled = turn_group_advantages(group)
    assert torch.allclose(torch.cat(scaled), torch.tensor([1.0, -0.5, 0.0, -1.0, 0.5, 0.0]) / std, atol=1e-5)
    # identical members: no signal anywhere
    same = turn_group_advantages([torch.tensor([1.0, 2.0])] * 3)
    assert all(a.tolist() == [0.0, 0.0] for a in same)


def test_gae_by_hand():
    rewards = torch.tensor([1.0, 0.0, 1.0])
    values = torch.tensor([0.5, 0.2, 0.4])
    gamma, lam = 0.9, 0.8
    # deltas: d2 = 1 + 0.9*0 - 0.4 = 0.6 ; d1 = 0 + 0.9*0.4 - 0.2 = 0.16 ; d0 = 1 + 0.9*0.2 - 0.5 = 0.68
    # A2 = 0.6 ; A1 = 0.16 + 0.72*0.6 = 0.592 ; A0 = 0.68 + 0.72*0.592 = 1.10624
    adv, ret = gae(rewards, values, last_value=0.0, gamma=gamma, lam=lam)
    assert torch.allclose(adv, torch.tensor([1.10624, 0.592, 0.6]), atol=1e-5)
    assert torch.allclose(ret, adv + values)
    # lambda = 1 and no values: Monte-Carlo returns
    adv1, _ = gae(rewards, torch.zeros(3), 0.0, gamma=1.0, lam=1.0)
    assert adv1.tolist() == [2.0, 1.0, 1.0]
    # A truncated episode bootstraps from last_value
    adv2, _ = gae(torch.tensor([0.0]), torch.tensor([0.0]), last_value=2.0, gamma=0.5, lam=1.0)
    assert adv2.tolist() == [1.0]


def test_masked_mean_ignores_padding():
    x = torch.tensor([[1.0, 3.0, 100.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert masked_mean(x, mask).item() == pytest.approx(2.0)  # (1+3+2)/3
    assert masked_mean(x, mask, dim=1).tolist() == [2.0, 2.0]


def test_clipped_surrogate_by_hand():
    old = torch.log(torch.tensor([[0.5], [0.5]]))
    new = torch.log(torch.tensor([[0.8], [0.3]]))  # ratios 1.6 and 0.6
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 1, dtype=torch.bool)
    loss, clip_frac = clipped_surrogate(new, old, adv, mask, clip_eps=0.2)
    # d0: min(1.6*1, 1.2*1) = 1.2 -> -1.2 ; d1: min(0.6*-1, 0.8*-1) = -0.8 -> 0.8 ; mean -0.2
    assert loss.item() == pytest.approx(-0.2, abs=1e-6)
    assert clip_frac.item() == pytest.approx(1.0)
    # Within the clip range the gradient is the plain policy gradient: d/dlogp (-ratio*A) = -A at ratio 1
    logp = old.clone().requires_grad_(True)
    loss, clip_frac = clipped_surrogate(logp, old, adv, mask, clip_eps=0.2)
    loss.backward()
    assert logp.grad.squeeze(1).tolist() == pytest.approx([-0.5, 0.5])  # -A / B
    assert clip_frac.item() == 0.0


def test_clip_higher_lets_a_better_action_grow_past_clip_eps_and_keeps_the_lower_clip():
    old = torch.log(torch.tensor([[0.01], [0.5]]))
    new = torch.log(torch.tensor([[0.0125], [0.375]])).requires_grad_(True)  # ratios 1.25 and 0.75
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 1, dtype=torch.bool)
    loss, clip_frac = clipped_surrogate(new, old, adv, mask, clip_eps=0.2)
    loss.backward()
    assert new.grad.squeeze(1).tolist() == pytest.approx([0.0, 0.0])   # both clipped: no push
    assert clip_frac.item() == 1.0
    new.grad = None
    loss, clip_frac = clipped_surrogate(new, old, adv, mask, clip_eps=0.2, clip_eps_high=0.28)
    loss.backward()
    # the rare action still gains (d/dlogp -ratio*A = -1.25 / 2 decisions); the falling one stays clipped
    assert new.grad.squeeze(1).tolist() == pytest.approx([-0.625, 0.0])
    assert clip_frac.item() == 0.5
    assert loss.item() == pytest.approx(-(1.25 * 1.0 + 0.8 * -1.0) / 2)


def test_clipped_surrogate_averages_tokens_per_decision():
    # Decision 0 has 2 real tokens, decision 1 has 1; padding must not count.
    logp = torch.zeros(2, 2)
    mask = torch.tensor([[True, True], [True, False]])
    loss, _ = clipped_surrogate(logp, logp, torch.tensor([2.0, 4.0]), mask, 0.2)
    assert loss.item() == pytest.approx(-3.0)  # -(2 + 4) / 2


def test_clipped_value_loss_by_hand():
    values = torch.tensor([1.0, 0.0])
    old = torch.tensor([0.5, 0.0])
    returns = torch.tensor([2.0, 1.0])
    # unclipped: (1-2)^2 = 1, (0-1)^2 = 1 ; clipped V: 0.5+0.2 = 0.7 -> (0.7-2)^2 = 1.69, 0 -> 1
    assert clipped_value_loss(values, old, returns, clip=0.2).item() == pytest.approx(0.5 * (1.69 + 1) / 2)
    assert clipped_value_loss(values, old, returns, clip=None).item() == pytest.approx(0.5)


def test_approx_kl_k3():
    logp = torch.log(torch.tensor([0.5, 0.25]))
    ref = torch.log(torch.tensor([0.25, 0.25]))
    kl = approx_kl(logp, ref)
    # r = ref/p = 0.5 -> 0.5 - ln 0.5 - 1 = 0.193147 ; equal -> 0
    assert kl.tolist() == pytest.approx([0.5 - math.log(0.5) - 1, 0.0], abs=1e-6)
    assert (approx_kl(torch.randn(100), torch.randn(100)) >= 0).all()


def test_all_finite():
    assert all_finite(torch.tensor([1.0]), torch.zeros(3))
    assert not all_finite(torch.tensor([1.0, float("nan")]))
    assert not all_finite(torch.tensor([float("inf")]))


def test_rollout_kl_takes_the_rollout_policy_as_the_sampling_side():
    from types import SimpleNamespace

    from textgym.trainers.engine.kl import rollout_kl

    # two sampled answers: one unchanged, one the update made (almost) impossible
    old = torch.log(torch.tensor([[0.5], [0.5]]))
    new = torch.log(torch.tensor([[0.5], [1e-16]]))
    ev = SimpleNamespace(logprobs=new, old_logprobs=old, mask=torch.ones(2, 1, dtype=torch.bool))
    kl = rollout_kl(ev)
    # k3 with r = new/old: (r - 1) - log r = -1 + log(0.5 / 1e-16) for the second unit, 0 for the first
    assert kl == pytest.approx((math.log(0.5 / 1e-16) - 1) / 2, rel=1e-4)
    # unchanged policy: zero
    same = SimpleNamespace(logprobs=old, old_logprobs=old, mask=ev.mask)
    assert rollout_kl(same) == pytest.approx(0.0, abs=1e-7)
