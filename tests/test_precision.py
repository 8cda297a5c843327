"""Acting precision: the bf16/int8 acting copy, the auto choice, the mismatch correction, and no
deprecated transformers arguments in the hot paths."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch

from textgym.lora import LoraSettings, add_lora
from textgym.policy import Policy, PolicyConfig

SYSTEM = "You balance a pole on a cart. Answer with one word: LEFT or RIGHT."
OBSERVATIONS = ["Pole leans left.", "The cart is far to the right; the pole is falling over."]


def test_acting_and_evaluating_raise_no_future_warning(tiny_model_and_tokenizer):
    # transformers 5.x deprecates ``past_key_values`` (removed in 5.40) with a FutureWarning per call.
    model, tok = tiny_model_and_tokenizer
    score = Policy(copy.deepcopy(model), tok, mode="score", seed=0)
    generate = Policy(copy.deepcopy(model), tok, mode="generate", max_new_tokens=4, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        decisions = score.act(OBSERVATIONS, [SYSTEM] * 2, [["LEFT", "RIGHT"]] * 2)
        score.evaluate(decisions)
        score.act(OBSERVATIONS, [SYSTEM] * 2, [["LEFT", "RIGHT"]] * 2)  # the cached system prefix
        written = generate.act(OBSERVATIONS, [SYSTEM] * 2)
        generate.evaluate(written)
    assert [d.text for d in decisions] and all(d.answer_ids for d in written)


def test_a_bf16_acting_copy_follows_the_weights(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    fast = Policy(copy.deepcopy(model), tok, mode="score", act_dtype="bfloat16", seed=0)
    exact = Policy(fast.model, tok, mode="score", seed=0)  # the same weights, acting in float32
    actions = [["LEFT", "RIGHT"]] * 2
    decisions = fast.act(OBSERVATIONS, [SYSTEM] * 2, actions, greedy=True)
    assert fast.act_precision == "bfloat16" and fast.acting_model() is not fast.model
    assert next(fast.acting_model().parameters()).dtype == torch.bfloat16
    assert next(fast.model.parameters()).dtype == torch.float32  # the trained weights keep theirs
    ev = fast.evaluate(decisions)  # the training precision re-scores what bf16 chose
    assert torch.allclose(ev.logprobs[ev.mask], ev.old_logprobs[ev.mask], atol=0.05)
    assert not torch.equal(ev.logprobs[ev.mask], ev.old_logprobs[ev.mask])  # bf16 is not float32
    with torch.no_grad():  # an update: the acting copy is rebuilt from the new weights
        fast.model.lm_head.weight.mul_(3.0)
    again = fast.act(OBSERVATIONS, [SYSTEM] * 2, actions, greedy=True)
    assert fast._acting.syncs == 2
    ev = fast.evaluate(again)
    assert torch.allclose(ev.logprobs[ev.mask], ev.old_logprobs[ev.mask], atol=0.1)
    assert [d.text for d in again] == [d.text for d in exact.act(OBSERVATIONS, [SYSTEM] * 2, actions, greedy=True)]


def test_a_lora_policy_acts_on_the_merged_copy(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    lora = add_lora(copy.deepcopy(model), LoraSettings(r=4, alpha=8))
    with torch.no_grad():  # a trained adapter (B starts at 0)
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    policy = Policy(lora, tok, mode="generate", act_dtype="bfloat16", max_new_tokens=4, seed=0)
    decisions = policy.act(OBSERVATIONS, [SYSTEM] * 2)
    assert not hasattr(policy.acting_model(), "peft_config")  # merged: plain Linear layers
    ev = policy.evaluate(decisions)  # with the adapter, in float32
    assert torch.allclose(ev.logprobs[ev.mask], ev.old_logprobs[ev.mask], atol=0.05)


def test_int8_acting_quantizes_the_linear_layers(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    policy = Policy(copy.deepcopy(model), tok, mode="score", act_dtype="int8", seed=0)
    decisions = policy.act(OBSERVATIONS, [SYSTEM] * 2, [["LEFT", "RIGHT"]] * 2)
    kinds = {type(m).__module__ for m in policy.acting_model().modules()}
    assert any("quantized" in k for k in kinds)
    ev = policy.evaluate(decisions)
    assert torch.allclose(ev.logprobs[ev.mask], ev.old_logprobs[ev.mask], atol=0.1)


def test_auto_measures_once_and_keeps_float32_decisions(tiny_model_and_tokenizer, tmp_path, monkeypatch):
    from textgym.policy import precision
    from textgym.policy.precision import choose_act_dtype

    monkeypatch.setenv("TEXTGYM_PRECISION_CACHE", str(tmp_path / "precision"))
    model, tok = tiny_model_and_tokenizer
    small = Policy(copy.deepcopy(model), tok, mode="score", act_dtype="auto", name="tiny")
    assert small.act_precision == "float32" and "not measured" in small.precision_choice.describe()
    assert not (tmp_path / "precision").exists()  # too small to measure: nothing cached either
    monkeypatch.setattr(precision, "AUTO_MIN_PARAMETERS", 0)
    policy = Policy(copy.deepcopy(model), tok, mode="score", act_dtype="auto", name="tiny")
    chosen = policy.act_precision
    choice = policy.precision_choice
    assert chosen == choice.dtype and chosen in ("float32", "bfloat16", "int8") and not choice.cached
    assert choice.agree[chosen] and choice.agree["float32"]  # never a precision whose decisions differ
    assert choice.seconds[chosen] == min(s for d, s in choice.seconds.items() if choice.agree[d])
    assert len(list((tmp_path / "precision").glob("*.json"))) == 1
    cached = choose_act_dtype(policy.model, tok, "tiny")
    assert cached.cached and cached.dtype == chosen and chosen in cached.describe()


def test_act_dtype_is_checked():
    with pytest.raises(ValueError, match="act_dtype must be one of auto, float32, bfloat16, int8"):
        PolicyConfig(act_dtype="fp16")


def _perturbed_correction(policy, decisions, shifts, enabled):
    """The correction of ``decisions`` after their acting log-probs were moved by ``shifts``
    (a known acting-vs-training mismatch)."""
    from textgym.trainers.engine.precision import ActingCorrection

    for d, shift in zip(decisions, shifts):
        d.token_logprobs = [lp + shift for lp in d.token_logprobs]
        d.logprob += shift
    return ActingCorrection.measure(policy, decisions, batch_size=8, enabled=enabled, cap=2.0)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_correction_weights_the_gradient_by_the_capped_ratio(tiny_model_and_tokenizer, enabled):
    model, tok = tiny_model_and_tokenizer
    policy = Policy(copy.deepcopy(model), tok, mode="score", act_dtype="bfloat16", seed=0)
    decisions = policy.act(OBSERVATIONS * 2, [SYSTEM] * 4, [["LEFT", "RIGHT"]] * 4)
    shifts = [0.0, -0.3, 0.5, -2.0]  # acting log-prob = training + shift (+ bf16's own small error)
    correction = _perturbed_correction(policy, decisions, shifts, enabled)
    assert correction.metrics["act_mismatch_abs"] == pytest.approx(sum(map(abs, shifts)) / 4, abs=0.02)
    assert correction.metrics["act_mismatch_kl"] > 0
    idx = torch.arange(4)
    advantages = torch.tensor([1.0, -1.0, 0.5, 2.0])
    ev, weights = correction.apply(policy.evaluate(decisions), idx)
    train = torch.tensor([t.item() for t in correction.train])
    act = torch.tensor([d.logprob for d in decisions])
    assert torch.allclose(ev.old_logprobs[:, 0], train)  # the clip ratio compares like with like
    if not enabled:
        assert weights is None
        return
    expected = torch.clamp(torch.exp(train - act), max=2.0)  # 1, 1.35, 0.61, 2 (capped from 7.4)
    assert torch.allclose(weights[:, 0], expected) and weights[3, 0] == 2.0
    # REINFORCE's corrected loss has the importance-weighted gradient of every decision's log-prob.
    params = policy.parameters_to_train()
    loss = -(advantages * (ev.logprobs * weights).sum(1)).mean()
    corrected = torch.autograd.grad(loss, params, allow_unused=True)
    by_hand = [torch.zeros_like(p) for p in params]
    for i in range(4):
        single = policy.evaluate([decisions[i]]).logprobs[0, 0]
        for acc, g in zip(by_hand, torch.autograd.grad(single, params, allow_unused=True)):
            if g is not None:
                acc -= advantages[i] * expected[i] * g / 4
    for got, want in zip(corrected, by_hand):
        if got is not None:
            assert torch.allclose(got, want, atol=1e-5)


def test_the_clipped_surrogate_weights_each_unit():
    from textgym.trainers.engine.losses import clipped_surrogate

    logprobs = torch.tensor([[-0.5, -1.0]], requires_grad=True)
    old, adv, mask = torch.tensor([[-0.5, -1.0]]), torch.tensor([2.0]), torch.tensor([[True, True]])
    weights = torch.tensor([[0.5, 2.0]])
    loss, _ = clipped_surrogate(logprobs, old, adv, mask, 0.2, weights)
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert torch.allclose(grad, torch.tensor([[-0.5, -2.0]]))  # -A * w / units at ratio 1
    plain, _ = clipped_surrogate(logprobs, old, adv, mask, 0.2)
    assert torch.allclose(torch.autograd.grad(plain, logprobs)[0], torch.tensor([[-1.0, -1.0]]))


def test_a_bf16_training_run_records_the_mismatch(tiny_model_and_tokenizer):
    from textgym.trainers import ReinforceConfig, make_trainer

    model, tok = tiny_model_and_tokenizer
    policy = Policy(copy.deepcopy(model), tok, mode="score", act_dtype="bfloat16", seed=0)
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0",
                           config=ReinforceConfig(num_envs=4, episodes_per_update=8, seed=0))
    [metrics] = trainer.train(updates=1)
    assert 0 < metrics["act_mismatch_abs"] < 0.05 and metrics["act_mismatch_kl"] >= 0
    assert policy._acting.syncs == 1


def _update_gradients(model, tok, act_correction: bool, monkeypatch) -> dict:
    """One REINFORCE update of a policy acting in bf16: the gradient the optimizer was handed
    (before clipping), and two computed by hand from the same rollout at the same weights, each
    decision's -A/N * d log pi(answer) summed with the importance weight
    min(pi_train / pi_act, cap) (``weighted``) and without (``plain``)."""
    from textgym.trainers import ReinforceConfig, make_trainer
    from textgym.trainers.engine import optimization
    from textgym.trainers.engine.loss_step import LossStep

    policy = Policy(copy.deepcopy(model), tok, mode="score", act_dtype="bfloat16", seed=0)
    config = ReinforceConfig(num_envs=4, episodes_per_update=8, minibatches=1, epochs=1,
                             baseline="none", act_correction=act_correction, act_correction_cap=1.02,
                             seed=0)
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=config)
    seen: dict = {}
    update, prepare, optimizer_step = trainer.update, LossStep.prepare.__func__, optimization.optimizer_step

    def recording_update(episodes, *args, **kwargs):
        seen["episodes"] = list(episodes)
        return update(episodes, *args, **kwargs)

    def recording_prepare(cls, policy, decisions, config, memo=None):
        seen["decisions"] = decisions
        return prepare(cls, policy, decisions, config, memo)

    def recording_step(optimizer, *args, **kwargs):
        assert "applied" not in seen, "one optimizer step: the whole batch, one epoch"
        params = [p for group in optimizer.param_groups for p in group["params"]]
        seen["applied"] = torch.cat([p.grad.flatten() for p in params])
        # by hand, at the weights the update starts from
        returns = [sum(s.reward for s in episode.steps[k:])
                   for episode in seen["episodes"] for k in range(len(episode.steps))]
        decisions = seen["decisions"]
        plain, weighted = torch.zeros_like(seen["applied"]), torch.zeros_like(seen["applied"])
        for advantage, decision in zip(returns, decisions):
            logprob = policy.evaluate([decision]).logprobs[0].sum()  # the fp32 weights' log pi
            ratio = torch.exp(logprob.detach() - decision.logprob)  # pi_train / pi_act (bf16)
            gradient = torch.cat([g.flatten() for g in torch.autograd.grad(logprob, params)])
            plain -= advantage * gradient / len(decisions)
            weighted -= advantage * torch.clamp(ratio, max=1.02) * gradient / len(decisions)
        seen["plain"], seen["weighted"] = plain, weighted
        return optimizer_step(optimizer, *args, **kwargs)

    monkeypatch.setattr(trainer, "update", recording_update)
    monkeypatch.setattr(LossStep, "prepare", classmethod(recording_prepare))
    monkeypatch.setattr(optimization, "optimizer_step", recording_step)
    [metrics] = trainer.train(updates=1)
    assert metrics["act_mismatch_abs"] > 0 and all(len(d.token_logprobs) == 1 for d in seen["decisions"])
    return seen


def test_a_bf16_training_run_weights_its_update_by_the_capped_ratio(tiny_model_and_tokenizer, monkeypatch):
    # The cap (1.02) is low enough that bf16's own small mismatch reaches it in some decisions:
    # the corrected update differs from the plain one by more than the comparison's tolerance.
    model, tok = tiny_model_and_tokenizer
    corrected = _update_gradients(model, tok, True, monkeypatch)
    monkeypatch.undo()
    uncorrected = _update_gradients(model, tok, False, monkeypatch)
    assert [d.text for d in corrected["decisions"]] == [d.text for d in uncorrected["decisions"]]

    def same(a, b):
        return torch.allclose(a, b, rtol=1e-4, atol=1e-7)

    assert same(corrected["applied"], corrected["weighted"])
    assert not same(corrected["applied"], corrected["plain"])  # the correction changed the update
    assert same(uncorrected["applied"], uncorrected["plain"])  # and without it, the plain gradient


def test_cli_act_dtype(cli):
    bad = cli("eval", "bandit", "--model", "tiny", "--act-dtype", "fp16")
    assert bad.exit_code != 0 and "Traceback" not in bad.output
    [line] = [line for line in bad.stderr.splitlines() if line.strip()]
    assert line.startswith("textgym: error: ") and "'fp16' is not one of 'auto', 'float32', 'bfloat16', 'int8'" in line
    result = cli("eval", "bandit", "--model", "tiny", "--act-dtype", "bfloat16", "--episodes", "4", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["results"]["tiny"]["episodes"] == 4
    assert "4 greedy episodes, 4 envs per forward pass, acting in bfloat16" in result.stderr


# --- fast evaluation: the evaluation precision, envs per forward pass, how long it will take -----

def _acting_dtypes(policy, monkeypatch):
    seen = []
    real = policy.act

    def act(*args, **kwargs):
        seen.append(next(policy.acting_model().parameters()).dtype)
        return real(*args, **kwargs)

    monkeypatch.setattr(policy, "act", act)
    return seen


def test_greedy_evaluation_acts_in_the_evaluation_precision(tiny_model_and_tokenizer, monkeypatch):
    import textgym
    from textgym.rollout import collect
    from textgym.seeds import EVAL_BASE
    from textgym.trainers.engine.evaluation import evaluate_greedy

    model, tok = tiny_model_and_tokenizer
    policy = Policy(copy.deepcopy(model), tok, mode="score", eval_act_dtype="bfloat16", seed=0)
    assert policy.act_precision == "float32" and policy.eval_precision == "bfloat16"
    seen = _acting_dtypes(policy, monkeypatch)
    venv = textgym.make_vec("textgym/Bandit-v0", num_envs=4)
    evaluate_greedy(policy, venv, episodes=4, seed=EVAL_BASE)
    assert seen and set(seen) == {torch.bfloat16}
    seen.clear()
    collect(policy, venv, episodes=4, seed=0)  # training rollouts keep act_dtype
    assert set(seen) == {torch.float32}
    # auto: the run's fast precision, on the same copy (no second one)
    fast = Policy(copy.deepcopy(model), tok, mode="score", act_dtype="bfloat16")
    assert fast.eval_precision == "bfloat16" and fast._eval_acting is fast._acting
    # auto with a float32 run: what act_dtype="auto" would choose (a model this small: float32)
    assert Policy(model, tok, mode="score").eval_precision == "float32"


def test_evaluations_run_all_episodes_side_by_side(tiny_model_and_tokenizer, monkeypatch):
    import textgym
    from textgym.trainers import make_trainer
    from textgym.trainers.engine.early_stop import EarlyStop
    from textgym.trainers.engine.evaluation import EVAL_MAX_ENVS

    made = []
    real = textgym.make_vec
    monkeypatch.setattr(textgym, "make_vec", lambda *a, **k: made.append(k["num_envs"]) or real(*a, **k))
    model, tok = tiny_model_and_tokenizer
    trainer = make_trainer("reinforce", Policy(copy.deepcopy(model), tok, mode="score", seed=0),
                           env="textgym/Bandit-v0", config={"num_envs": 2, "episodes_per_update": 2})
    made.clear()
    assert trainer.evaluate(episodes=EVAL_MAX_ENVS + 6)["episodes"] == EVAL_MAX_ENVS + 6
    trainer.greedy_check(EarlyStop(until=2.0, every=1, episodes=24))
    assert made == [EVAL_MAX_ENVS, 24]  # not the run's 2 envs


def test_a_rollout_reports_the_most_decisions_left(tiny_model_and_tokenizer):
    import textgym
    from textgym.rollout import collect, watch

    policy = Policy(*tiny_model_and_tokenizer, mode="score", seed=0)
    seen = []
    with watch(seen.append):  # CartPole's own limit is 500 steps; the rollout cuts at 20
        rollout = collect(policy, textgym.make_vec("textgym/CartPole-v1", num_envs=2), episodes=3, seed=0,
                          greedy=True, max_episode_steps=20)
    assert seen[0].decisions == 0 and seen[0].decisions_left == 3 * 20
    for report in seen:  # every decision made or episode ended early lowers the bound
        played = sum(ep.length for ep in rollout.episodes)
        assert report.decisions + report.decisions_left <= 3 * 20 and report.decisions <= played
    assert seen[-1].finished and seen[-1].decisions_left == 0
    seen.clear()
    with watch(seen.append):  # the bandit has no step limit and none is given: no bound
        collect(policy, textgym.make_vec("textgym/Bandit-v0", num_envs=2), episodes=2, seed=0)
    assert all(report.decisions_left is None for report in seen)


def test_int8_acting_is_refused_on_a_gpu_with_the_reason(tiny_model_and_tokenizer):
    from textgym.policy.precision import make_acting_copy

    model, tok = tiny_model_and_tokenizer
    reason = "int8 acting is unavailable on cuda: torch's dynamic int8 quantization runs on CPUs only"
    with pytest.raises(ValueError, match=reason):  # refused before anything touches the device
        Policy(model, tok, mode="score", act_dtype="int8", device="cuda")
    with pytest.raises(ValueError, match="int8 acting is unavailable on meta"):
        make_acting_copy(copy.deepcopy(model).to("meta"), "int8")


def _linear_output_dtypes(policy, run):
    """The dtypes the decoder's Linear layers and the output head returned during ``run()``."""
    head = policy.model.get_output_embeddings()
    seen: dict[str, set] = {"layers": set(), "head": set()}
    handles = [m.register_forward_hook(lambda m, a, out, kind=("head" if m is head else "layers"):
                                       seen[kind].add(out.dtype))
               for m in policy.model.modules() if isinstance(m, torch.nn.Linear)]
    try:
        result = run()
    finally:
        for h in handles:
            h.remove()
    return result, seen


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_a_bf16_update_runs_the_layers_in_bf16_and_the_head_in_float32(tiny_model_and_tokenizer, mode):
    from textgym.lora import LoraSettings, add_lora

    model, tok = tiny_model_and_tokenizer
    adapted = add_lora(copy.deepcopy(model), LoraSettings(r=4, alpha=8))
    with torch.no_grad():  # a trained-looking adapter, so that its gradients are not all zero
        generator = torch.Generator().manual_seed(0)
        for name, param in adapted.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    exact = Policy(adapted, tok, mode=mode, seed=0, max_new_tokens=4)
    fast = Policy(adapted, tok, mode=mode, seed=0, max_new_tokens=4, update_dtype="bfloat16")
    actions = [["LEFT", "RIGHT"]] * 2 if mode == "score" else None
    decisions = exact.act(OBSERVATIONS, [SYSTEM] * 2, actions)
    # acting is not the update: the same draws, in float32, with either setting
    again, seen = _linear_output_dtypes(fast, lambda: fast.act(OBSERVATIONS, [SYSTEM] * 2, actions))
    assert [d.answer_ids for d in again] == [d.answer_ids for d in decisions]
    assert seen == {"layers": {torch.float32}, "head": {torch.float32}}

    params = fast.parameters_to_train()
    gradients = {}
    for name, policy in (("float32", exact), ("bfloat16", fast)):
        for p in params:
            p.grad = None
        ev, seen = _linear_output_dtypes(policy, lambda policy=policy: policy.evaluate(decisions))
        assert seen == {"layers": {getattr(torch, name)}, "head": {torch.float32}}
        assert ev.logprobs.dtype == torch.float32
        ev.logprobs[ev.mask].sum().backward()
        gradients[name] = (ev.logprobs[ev.mask].detach(), torch.cat([p.grad.flatten() for p in params]))
        assert all(p.grad.dtype == torch.float32 for p in params)
    assert not torch.is_autocast_enabled("cpu")  # the update's autocast ends with it
    (logprobs, grad), (logprobs16, grad16) = gradients["float32"], gradients["bfloat16"]
    # bf16 keeps 8 significant bits (relative rounding 2^-9 per product); the tiny model's two layers
    # round the hidden states a handful of times, so the log-probs move by a few parts in a thousand
    # of their size and the gradient keeps its direction.
    assert torch.allclose(logprobs16, logprobs, rtol=0, atol=0.02 * (1 + logprobs.abs().max().item()))
    assert not torch.equal(logprobs16, logprobs)  # the setting did change the arithmetic
    assert torch.nn.functional.cosine_similarity(grad16, grad, dim=0) > 0.99


def test_update_dtype_is_checked():
    with pytest.raises(ValueError, match="update_dtype"):
        PolicyConfig(update_dtype="float16")
