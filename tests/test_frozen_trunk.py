"""Re-scoring the trained top layers alone from what the frozen layers gave while acting
(textgym.policy.frozen_trunk): same log-probs, hidden states and gradients as the full pass,
used only where it applies, and checked once per model."""

import copy
import dataclasses

import pytest
import torch

import textgym
from textgym.lora import LoraSettings, add_lora
from textgym.policy import PolicyConfig, frozen_trunk, rescoring
from textgym.policy.scoring import CandidateTrie
from textgym.rollout import collect, decisions_of

OBSERVATIONS = ["Color: red.", "Color: green.", "Color: red.", "Color: blue."]


def _policy(tiny_model_and_tokenizer, layers=1, mode="score", **settings):
    model, tokenizer = tiny_model_and_tokenizer
    adapted = add_lora(copy.deepcopy(model), LoraSettings(r=4, alpha=8, layers=layers))
    with torch.no_grad():  # a trained-looking adapter, so that the top layers' weights matter
        generator = torch.Generator().manual_seed(0)
        for name, param in adapted.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    return textgym.Policy(adapted, tokenizer, mode=mode, seed=0, **settings)


# one-token candidates; several tokens (a trie: "dog house" and "dog bed" share "dog"); per-row sets
ACTION_SETS = {
    "one token": [["cat", "dog"]] * 4,
    "several tokens": [["cat", "dog house", "dog bed", "a big dog"]] * 4,
    "per row": [["cat", "dog house"], ["left", "right", "go forward"], ["cat", "dog house"], ["cat", "dog"]],
}


def _act(policy, actions=ACTION_SETS["one token"]):
    return policy.act(OBSERVATIONS, ["Name an animal."] * 4, actions)


def _loss_and_grads(policy, decisions):
    params = [p for p in policy.model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    evaluation = policy.evaluate(decisions)
    (evaluation.logprobs.sum() + evaluation.hidden.square().mean()).backward()
    return evaluation, [p.grad.clone() for p in params]


def test_acting_records_the_frozen_layers_output(tiny_model_and_tokenizer):
    policy = _policy(tiny_model_and_tokenizer)  # the tiny model has 2 layers: the adapter is on layer 1
    decisions = _act(policy)
    prefix = len(policy.prompts.system_prefix("Name an animal."))
    for d in decisions:
        assert d.trunk.layer == 1 and d.trunk.start == prefix
        assert d.trunk.hidden.shape == (len(d.prompt_ids) - prefix, policy.model.config.hidden_size)
    # rows 0 and 2 are the same prompt, run once
    assert torch.equal(decisions[0].trunk.hidden, decisions[2].trunk.hidden)


def test_candidates_of_several_tokens_record_their_trie(tiny_model_and_tokenizer):
    policy = _policy(tiny_model_and_tokenizer)
    decisions = _act(policy, ACTION_SETS["per row"])
    size = policy.model.config.hidden_size
    for d in decisions:
        columns = len(CandidateTrie(d.candidates).tokens)
        assert columns == 0 or d.trunk.candidates.shape == (columns, size)
        assert (d.trunk.candidates is None) == (columns == 0)
    assert decisions[1].trunk.candidates is not None
    assert torch.equal(decisions[0].trunk.candidates, decisions[2].trunk.candidates)  # the same prompt, run once
    # what the frozen layer gave at each trie token: the prompt and the candidate as one causal sequence
    trunk = frozen_trunk.find_trunk(policy.model)
    own = frozen_trunk.own_records(policy.model, trunk, decisions)
    for d, o in zip(decisions, own):
        torch.testing.assert_close(o.trunk.hidden, d.trunk.hidden)
        if d.trunk.candidates is not None:
            torch.testing.assert_close(o.trunk.candidates, d.trunk.candidates)


@pytest.mark.parametrize("actions", list(ACTION_SETS))
def test_the_top_layers_alone_give_the_full_passs_logprobs_hidden_states_and_gradients(tiny_model_and_tokenizer,
                                                                                        monkeypatch, actions):
    policy = _policy(tiny_model_and_tokenizer)
    decisions = _act(policy, ACTION_SETS[actions])
    assert all(d.trunk is not None for d in decisions)
    assert any(len(c) > 1 for d in decisions for c in d.candidates) == (actions != "one token")
    calls = []
    real = frozen_trunk.rescore_top
    monkeypatch.setattr(rescoring, "rescore_top", lambda *a, **k: calls.append(1) or real(*a, **k))
    top, top_grads = _loss_and_grads(policy, decisions)
    assert calls  # the top path ran (after its one check against the full pass)
    plain = [copy.copy(d) for d in decisions]
    for d in plain:
        d.trunk = None  # no records: the full pass
    full, full_grads = _loss_and_grads(policy, plain)
    torch.testing.assert_close(top.logprobs, full.logprobs)
    torch.testing.assert_close(top.hidden, full.hidden)
    torch.testing.assert_close(top.entropy, full.entropy)
    for a, b in zip(top.candidate_logprobs, full.candidate_logprobs):
        torch.testing.assert_close(a, b)
    for a, b in zip(top_grads, full_grads):
        torch.testing.assert_close(a, b)
    # and the acting policy's log-probs, as with the full pass
    torch.testing.assert_close(top.logprobs[:, 0], torch.tensor([d.logprob for d in decisions]), atol=1e-5, rtol=0)


def test_it_applies_only_where_it_can(tiny_model_and_tokenizer, monkeypatch):
    assert all(d.trunk is None for d in _act(_policy(tiny_model_and_tokenizer, layers=None)))  # every layer adapted
    model, tokenizer = tiny_model_and_tokenizer
    assert all(d.trunk is None for d in _act(textgym.Policy(model, tokenizer, mode="score")))  # nothing trained
    generate = _policy(tiny_model_and_tokenizer, mode="generate", max_new_tokens=2)
    assert all(d.trunk is None for d in generate.act(OBSERVATIONS, ["Name an animal."] * 4))
    conversation = _policy(tiny_model_and_tokenizer, history="full")
    rollout = collect(conversation, textgym.make_vec("textgym/Bandit-v0", num_envs=2), episodes=2, seed=0)
    assert all(d.trunk is None for d in decisions_of(rollout.episodes))
    # candidates of several tokens without their trie's records: the full pass
    policy = _policy(tiny_model_and_tokenizer)
    decisions = policy.act(OBSERVATIONS[:2], ["Name an animal."] * 2, [["cat", "dog house"]] * 2)
    assert any(len(c) > 1 for c in decisions[0].candidates)
    for d in decisions:
        d.trunk = dataclasses.replace(d.trunk, candidates=None)
    calls = []
    monkeypatch.setattr(rescoring, "rescore_top", lambda *a, **k: calls.append(1))
    policy.evaluate(decisions)
    # decisions acted on under other system prompts: their records start after the prefix they share
    mixed = _act(policy)[:2] + policy.act(OBSERVATIONS[:2], ["Name a color."] * 2, [["cat", "dog"]] * 2)
    assert all(d.trunk is not None for d in mixed)
    policy.evaluate(mixed)
    assert not calls


@pytest.mark.parametrize("act_dtype", ["float32", "bfloat16"])
def test_a_model_whose_top_pass_differs_keeps_the_full_pass(tiny_model_and_tokenizer, monkeypatch, caplog, act_dtype):
    policy = _policy(tiny_model_and_tokenizer, act_dtype=act_dtype, trunk_in_act_dtype=True)
    decisions = _act(policy)
    real = frozen_trunk.rescore_top

    def off(*args, **kwargs):
        top = real(*args, **kwargs)
        return dataclasses.replace(top, logits=top.logits + torch.arange(top.logits.shape[-1]) * 1e-2)

    monkeypatch.setattr(rescoring, "rescore_top", off)
    with caplog.at_level("WARNING"):
        evaluation = policy.evaluate(decisions)
    assert "did not reproduce the full pass" in caplog.text
    plain = [copy.copy(d) for d in decisions]
    for d in plain:
        d.trunk = None
    torch.testing.assert_close(evaluation.logprobs, policy.evaluate(plain).logprobs)
    calls = []
    monkeypatch.setattr(rescoring, "rescore_top", lambda *a, **k: calls.append(1))
    policy.evaluate(decisions)
    assert not calls  # decided once for the model


@pytest.mark.parametrize("algorithm", ["reinforce", "grpo", "ppo"])
def test_a_trainer_with_a_top_adapter_updates_from_the_records(tiny_model_and_tokenizer, algorithm, monkeypatch):
    from textgym.trainers import make_trainer

    model, tokenizer = tiny_model_and_tokenizer
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0)
    trainer = make_trainer(algorithm, policy, env="textgym/CartPole-v1",
                           config={"num_envs": 4, "episodes_per_update": 4, "lora_layers": 1, "kl_coef": 0.1,
                                   "max_train_episode_steps": 5})
    calls = []
    real = frozen_trunk.rescore_top
    monkeypatch.setattr(rescoring, "rescore_top", lambda *a, **k: calls.append(1) or real(*a, **k))
    rollout = trainer.collect()
    assert all(d.trunk is not None for d in decisions_of(rollout.episodes))
    metrics = trainer.update(rollout.episodes, stats=rollout.stats)
    assert calls and metrics["kl"] >= 0 and torch.isfinite(torch.tensor(metrics["loss"]))
    # the records served that update and are not kept (a replay buffer would pile them up)
    assert all(d.trunk is None for d in decisions_of(rollout.episodes))
    assert all(ep.bootstrap.trunk is None for ep in rollout.episodes if ep.bootstrap is not None)


def test_a_decoder_whose_layers_cannot_be_called_so_keeps_the_full_pass(tiny_model_and_tokenizer, monkeypatch):
    policy = _policy(tiny_model_and_tokenizer)
    decisions = _act(policy)

    def unsupported(*args, **kwargs):
        raise TypeError("forward() got an unexpected keyword argument 'position_embeddings'")

    monkeypatch.setattr(rescoring, "rescore_top", unsupported)
    evaluation = policy.evaluate(decisions)  # no error: the full pass
    torch.testing.assert_close(evaluation.logprobs[:, 0], torch.tensor([d.logprob for d in decisions]),
                               atol=1e-5, rtol=0)


def test_bfloat16_models_take_the_top_path_too(tiny_model_and_tokenizer, monkeypatch):
    model, tokenizer = tiny_model_and_tokenizer
    policy = _policy((copy.deepcopy(model).to(torch.bfloat16), tokenizer))
    decisions = _act(policy)
    assert decisions[0].trunk.hidden.dtype == torch.bfloat16
    calls = []
    real = frozen_trunk.rescore_top
    monkeypatch.setattr(rescoring, "rescore_top", lambda *a, **k: calls.append(1) or real(*a, **k))
    top = policy.evaluate(decisions)
    plain = [copy.copy(d) for d in decisions]
    for d in plain:
        d.trunk = None
    assert calls
    torch.testing.assert_close(top.logprobs, policy.evaluate(plain).logprobs)


def _relative_error(grads, reference):
    return max(float((a.float() - b).norm() / b.norm()) for a, b in zip(grads, reference))


def test_a_bfloat16_trunk_is_as_close_to_float32_as_bfloat16_acting(tiny_model_and_tokenizer, monkeypatch):
    """trunk_in_act_dtype: the bf16 acting copy's frozen-layer output feeds the float32 top layers.
    Exact: the records are the acting copy's own states. Derived tolerance: the log-probs are as
    close to the float32 full pass as bf16 acting's own (plus float noise), the gradients at least
    as close as an update run wholly in bf16."""
    policy = _policy(tiny_model_and_tokenizer, act_dtype="bfloat16", trunk_in_act_dtype=True)
    decisions = _act(policy)
    assert all(d.trunk is not None and d.trunk.hidden.dtype == torch.bfloat16 for d in decisions)
    with frozen_trunk.recording(frozen_trunk.acting_trunk(frozen_trunk.find_trunk(policy.model),
                                                          policy.acting_model())) as seen:
        policy.acting_model()(input_ids=torch.tensor([decisions[1].prompt_ids]), use_cache=False)
    torch.testing.assert_close(decisions[1].trunk.hidden, seen[-1][0, decisions[1].trunk.start:], atol=0, rtol=0)
    calls = []
    real = frozen_trunk.rescore_top
    monkeypatch.setattr(rescoring, "rescore_top", lambda *a, **k: calls.append(1) or real(*a, **k))
    top, top_grads = _loss_and_grads(policy, decisions)
    assert calls  # the check against the full pass accepted the bf16 records
    plain = [copy.copy(d) for d in decisions]
    for d in plain:
        d.trunk = None
    full, full_grads = _loss_and_grads(policy, plain)
    acting_gap = (full.old_logprobs - full.logprobs).abs().max()
    assert (top.logprobs - full.logprobs).abs().max() <= acting_gap + rescoring.FLOAT_TOLERANCE
    whole_bf16 = textgym.Policy(copy.deepcopy(policy.model).to(torch.bfloat16), policy.tokenizer, mode="score")
    _, bf16_grads = _loss_and_grads(whole_bf16, plain)
    assert 0 < _relative_error(top_grads, full_grads) <= _relative_error(bf16_grads, full_grads)


def test_the_check_of_bfloat16_records_is_not_failed_by_their_rounding(tiny_model_and_tokenizer, monkeypatch):
    """The check runs on records the float32 model makes itself: a bf16 copy's rounding, which can
    move one decision's log-prob further than acting moved it (SmolLM2: in 14 of 40 samples of 8
    decisions), does not turn the top path off for the whole run."""
    policy = _policy(tiny_model_and_tokenizer, act_dtype="bfloat16", trunk_in_act_dtype=True)
    decisions = _act(policy)
    generator = torch.Generator().manual_seed(1)
    for d in decisions:  # rounding far above bf16's own: the top path's gap now exceeds acting's
        d.trunk.hidden = d.trunk.hidden + (torch.randn(d.trunk.hidden.shape, generator=generator) * 0.5).to(
            d.trunk.hidden.dtype)
    plain = [copy.copy(d) for d in decisions]
    for d in plain:
        d.trunk = None
    full = policy.evaluate(plain)
    calls = []
    real = frozen_trunk.rescore_top
    monkeypatch.setattr(rescoring, "rescore_top", lambda *a, **k: calls.append(1) or real(*a, **k))
    top = policy.evaluate(decisions)
    acting_gap = (full.old_logprobs - full.logprobs).abs().max()
    assert (top.logprobs - full.logprobs).abs().max() > acting_gap  # the rule of the old check failed here
    assert calls and all(policy._top_rescorer._verdicts.values())  # the top path is kept


def test_without_the_setting_a_bfloat16_acting_copy_records_nothing(tiny_model_and_tokenizer):
    assert PolicyConfig().trunk_in_act_dtype  # on by default: off is the slow path
    off = _policy(tiny_model_and_tokenizer, act_dtype="bfloat16", trunk_in_act_dtype=False)
    assert all(d.trunk is None for d in _act(off))
    # and in float32 the setting changes nothing: the weights themselves act and record
    fp32 = _act(_policy(tiny_model_and_tokenizer, trunk_in_act_dtype=True))
    assert all(d.trunk.hidden.dtype == torch.float32 for d in fp32)


def test_a_bfloat16_update_keeps_the_top_path(tiny_model_and_tokenizer, monkeypatch):
    """``update_dtype="bfloat16"`` runs the top layers under autocast, but the one check of the top
    path against the full pass runs in float32: bf16's rounding would fail it and turn the fast
    path off for the whole run."""
    policy = _policy(tiny_model_and_tokenizer, act_dtype="bfloat16", update_dtype="bfloat16")
    exact = _policy(tiny_model_and_tokenizer, act_dtype="bfloat16")  # the same weights, a float32 update
    decisions = _act(policy)
    calls = []
    real = frozen_trunk.rescore_top

    def top_in_bf16(*args, **kwargs):
        calls.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else torch.float32)
        return real(*args, **kwargs)

    monkeypatch.setattr(rescoring, "rescore_top", top_in_bf16)
    fast = policy.evaluate(decisions)
    assert all(policy._top_rescorer._verdicts.values())  # the top path is kept
    assert calls[0] == torch.float32 and calls[-1] == torch.bfloat16  # the check in float32, then bf16
    slow = exact.evaluate(decisions)
    assert fast.logprobs.dtype == torch.float32
    # bf16's rounding, the same kind as the acting copy's (the update's layers in bf16, as the copy's):
    # within twice the copy's own gap from float32 (measured: 0.047 against the copy's 0.048)
    acting_gap = (slow.old_logprobs - slow.logprobs).abs().max().item()
    assert 0 < (fast.logprobs - slow.logprobs).abs().max().item() <= 2 * acting_gap


def test_records_from_a_bf16_acting_copy_pass_the_check_with_candidates_of_several_tokens(tiny_model_and_tokenizer,
                                                                                          monkeypatch):
    policy = _policy(tiny_model_and_tokenizer, act_dtype="bfloat16", trunk_in_act_dtype=True)
    decisions = _act(policy, ACTION_SETS["several tokens"])
    assert all(d.trunk.candidates is not None and d.trunk.candidates.dtype == torch.bfloat16 for d in decisions)
    calls = []
    real = frozen_trunk.rescore_top
    monkeypatch.setattr(rescoring, "rescore_top", lambda *a, **k: calls.append(1) or real(*a, **k))
    top = policy.evaluate(decisions)
    assert calls  # the check (on records made again in float32) kept the top path
    plain = [copy.copy(d) for d in decisions]
    for d in plain:
        d.trunk = None
    full = policy.evaluate(plain)
    # the records' bf16 rounding only: the acting copy's own mismatch is of this size
    torch.testing.assert_close(top.logprobs, full.logprobs, atol=5e-2, rtol=0)
