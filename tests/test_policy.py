"""Policy: exact ids and log-probs (checked against a fresh unpadded forward pass), padding,
prefix-cache reuse and invalidation, evaluate() == act(), reference(), seeds, save/load."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from textgym.policy import Decision, Policy

SYSTEM = "You balance a pole on a cart. Answer with one word: LEFT or RIGHT."
OBSERVATIONS = [
    "Pole leans left.",
    "The cart is far to the right of the center and moving fast; the pole is falling over.",
    "x",
]
ACTIONS = ["LEFT", "RIGHT", "WAIT A MOMENT"]


def full_forward_logprobs(model, prompt: list[int], continuation: list[int]) -> list[float]:
    """Log-probs of ``continuation`` after ``prompt`` from one plain forward pass (no cache, no padding)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + continuation])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return [logp[len(prompt) - 1 + j, t].item() for j, t in enumerate(continuation)]


def test_prompt_ids_come_from_the_tokenizer_chat_template(tiny_policy):
    tok = tiny_policy.tokenizer
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": OBSERVATIONS[0]}]
    expected = tok(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False),
                   add_special_tokens=False)["input_ids"]
    assert tiny_policy.prompt_ids(SYSTEM, OBSERVATIONS[0]) == expected
    text = tok.decode(expected)
    assert SYSTEM in text and OBSERVATIONS[0] in text and text.endswith("assistant\n")


def test_templates_without_a_system_role(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    no_system = ("{% for m in messages %}{% if m['role'] == 'system' %}"
                 "{{ raise_exception('System role not supported') }}{% endif %}"
                 "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    for policy in (Policy(model, tok, chat_template=no_system), Policy(model, tok, system_role=False)):
        text = tok.decode(policy.prompt_ids(SYSTEM, OBSERVATIONS[0]))
        assert f"user\n{SYSTEM}\n\n{OBSERVATIONS[0]}<|im_end|>" in text
        assert len(policy.prompts.system_prefix(SYSTEM)) > len(tok(SYSTEM)["input_ids"])  # still cached
        [d] = policy.act([OBSERVATIONS[0]], [SYSTEM], [ACTIONS])
        assert d.token_logprobs == pytest.approx(
            full_forward_logprobs(model, d.prompt_ids, d.answer_ids), abs=1e-4)


def test_score_mode_ids_and_logprobs_match_a_full_forward_pass(tiny_policy):
    policy = tiny_policy
    decisions = policy.act(OBSERVATIONS, [SYSTEM] * 3, [ACTIONS] * 3)
    assert len({len(d.prompt_ids) for d in decisions}) == 3  # different prompt lengths in one batch
    for obs, d in zip(OBSERVATIONS, decisions):
        assert d.text in ACTIONS and d.text == ACTIONS[d.action_index]
        assert d.prompt_ids == policy.prompt_ids(SYSTEM, obs)
        assert d.answer_ids == d.candidates[d.action_index]
        # every candidate's score, recomputed from scratch, gives the recorded softmax log-prob
        scores = torch.tensor([sum(full_forward_logprobs(policy.model, d.prompt_ids, c))
                               for c in d.candidates])
        expected = torch.log_softmax(scores, dim=0)[d.action_index].item()
        assert d.logprob == pytest.approx(expected, abs=1e-4)
        assert d.token_logprobs == pytest.approx(
            full_forward_logprobs(policy.model, d.prompt_ids, d.answer_ids), abs=1e-4)


def test_end_token_is_scored_only_when_candidates_are_not_prefix_free(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    end = tok.eos_token_id
    auto = Policy(model, tok)
    assert all(c[-1] != end for c in auto.candidate_set(["LEFT", "RIGHT"]))
    assert all(c[-1] == end for c in auto.candidate_set(["1", "10"]))  # "1" is a prefix of "10"
    assert all(c[-1] == end for c in Policy(model, tok, score_end=True).candidate_set(["LEFT", "RIGHT"]))
    [d] = auto.act(["Pick a number."], [SYSTEM], [["1", "10", "2"]])
    assert d.answer_ids == d.candidates[d.action_index] and d.answer_ids[-1] == end
    assert d.token_logprobs == pytest.approx(full_forward_logprobs(model, d.prompt_ids, d.answer_ids), abs=1e-4)


@pytest.mark.parametrize("chunk_bytes", [1, 256 * 2**20])  # one row per model call / all rows at once
def test_candidates_sharing_tokens_are_scored_exactly(tiny_model_and_tokenizer, chunk_bytes):
    model, tok = tiny_model_and_tokenizer
    actions = ["go north", "go south", "go north east", "take the lamp", "look"]
    policy = Policy(model, tok, score_chunk_bytes=chunk_bytes, seed=0)
    decisions = policy.act(OBSERVATIONS, [SYSTEM] * 3, [actions] * 3)
    for d in decisions:
        assert all(c[-1] == tok.eos_token_id for c in d.candidates)  # "go north" < "go north east"
        scores = torch.tensor([sum(full_forward_logprobs(model, d.prompt_ids, c)) for c in d.candidates])
        assert d.logprob == pytest.approx(torch.log_softmax(scores, 0)[d.action_index].item(), abs=1e-4)
        assert d.token_logprobs == pytest.approx(
            full_forward_logprobs(model, d.prompt_ids, d.answer_ids), abs=1e-4)
    # the shared "go" / "go north" tokens are run once per row, not once per candidate
    from textgym.policy.scoring import CandidateTrie

    trie = CandidateTrie(decisions[0].candidates)
    assert len(trie.tokens) < sum(len(c) - 1 for c in decisions[0].candidates)


def test_a_batch_gives_the_same_logprobs_as_each_prompt_alone(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    batched = Policy(model, tok, seed=0).act(OBSERVATIONS, [SYSTEM, SYSTEM, "Other rules."], [ACTIONS] * 3,
                                             greedy=True)
    for obs, system, d in zip(OBSERVATIONS, [SYSTEM, SYSTEM, "Other rules."], batched):
        [alone] = Policy(model, tok, seed=0).act([obs], [system], [ACTIONS], greedy=True)
        assert alone.prompt_ids == d.prompt_ids and alone.text == d.text
        assert alone.logprob == pytest.approx(d.logprob, abs=1e-4)
        assert alone.token_logprobs == pytest.approx(d.token_logprobs, abs=1e-4)


def test_shared_prefix_is_computed_once_and_reused(tiny_policy):
    policy = tiny_policy
    policy.act(OBSERVATIONS, [SYSTEM] * 3, [ACTIONS] * 3)
    assert policy.counters["prefix_misses"] == 1
    before = dict(policy.counters)
    decisions = policy.act(OBSERVATIONS[::-1], [SYSTEM] * 3, [ACTIONS] * 3)
    assert policy.counters["prefix_misses"] == 1  # cache hit
    prefix = len(policy.prompts.system_prefix(SYSTEM))
    assert prefix > 10
    new_prompt_tokens = policy.counters["prompt_tokens"] - before["prompt_tokens"]
    assert new_prompt_tokens == sum(len(d.prompt_ids) - prefix for d in decisions)


def test_prefix_cache_is_invalidated_when_the_weights_change(tiny_policy):
    policy = tiny_policy
    [first] = policy.act([OBSERVATIONS[0]], [SYSTEM], [ACTIONS], greedy=True)
    optimizer = torch.optim.SGD(policy.parameters_to_train(), lr=1.0)
    ev = policy.evaluate([first])
    ev.logprobs.sum().backward()
    optimizer.step()
    [second] = policy.act([OBSERVATIONS[0]], [SYSTEM], [ACTIONS], greedy=True)
    assert policy.counters["prefix_misses"] == 2
    assert second.token_logprobs == pytest.approx(
        full_forward_logprobs(policy.model, second.prompt_ids, second.answer_ids), abs=1e-4)
    assert second.token_logprobs != pytest.approx(first.token_logprobs, abs=1e-4)


@pytest.mark.parametrize("normalization", ["token", "word"])
def test_normalizations_divide_the_summed_logprob(tiny_model_and_tokenizer, normalization):
    model, tok = tiny_model_and_tokenizer
    policy = Policy(model, tok, normalization=normalization, seed=0)
    [d] = policy.act([OBSERVATIONS[0]], [SYSTEM], [ACTIONS])
    sums = torch.tensor([sum(full_forward_logprobs(model, d.prompt_ids, c)) for c in d.candidates])
    sizes = torch.tensor([len(c) for c in d.candidates] if normalization == "token"
                         else [len(a.split()) for a in ACTIONS], dtype=torch.float32)
    expected = torch.log_softmax(sums / sizes, dim=0)[d.action_index].item()
    assert d.logprob == pytest.approx(expected, abs=1e-4)


def test_greedy_takes_the_best_candidate_and_temperature_flattens(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    [d] = Policy(model, tok).act([OBSERVATIONS[1]], [SYSTEM], [ACTIONS], greedy=True)
    scores = [sum(full_forward_logprobs(model, d.prompt_ids, c)) for c in d.candidates]
    assert d.action_index == max(range(len(scores)), key=scores.__getitem__)
    [hot] = Policy(model, tok, temperature=1e6).act([OBSERVATIONS[1]], [SYSTEM], [ACTIONS], greedy=True)
    assert hot.logprob == pytest.approx(-math.log(3), abs=1e-3)


def test_sampling_is_reproducible_with_a_seed(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    policy = Policy(model, tok, temperature=0.01)  # the tiny model's scores differ by ~0.1: near-argmax
    runs = []
    for _ in range(2):
        policy.seed(7)
        runs.append([d.text for d in policy.act(OBSERVATIONS * 4, [SYSTEM] * 12, [ACTIONS] * 12)])
    assert runs[0] == runs[1]
    uniform = Policy(model, tok, temperature=1e6, seed=1)
    picks = {d.text for d in uniform.act(OBSERVATIONS * 10, [SYSTEM] * 30, [ACTIONS] * 30)}
    assert picks == set(ACTIONS)  # sampling, not argmax


def test_generate_mode_ids_and_logprobs_match_a_full_forward_pass(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    policy = Policy(model, tok, mode="generate", max_new_tokens=6, temperature=0.7, seed=0)
    decisions = policy.act(OBSERVATIONS, [SYSTEM] * 3)
    for d in decisions:
        assert 1 <= len(d.answer_ids) <= 6
        assert d.text == tok.decode(d.answer_ids, skip_special_tokens=True)
        assert d.candidates is None and d.action_index is None
        with torch.no_grad():
            logits = model(torch.tensor([d.prompt_ids + d.answer_ids])).logits[0].float()
        logp = torch.log_softmax(logits / 0.7, dim=-1)
        expected = [logp[len(d.prompt_ids) - 1 + j, t].item() for j, t in enumerate(d.answer_ids)]
        assert d.token_logprobs == pytest.approx(expected, abs=1e-4)
        assert d.logprob == pytest.approx(sum(expected), abs=1e-4)
    again = Policy(model, tok, mode="generate", max_new_tokens=6, temperature=0.7, seed=0)
    assert [d.answer_ids for d in again.act(OBSERVATIONS, [SYSTEM] * 3)] == [d.answer_ids for d in decisions]


def test_generate_mode_greedy_equals_argmax_decoding(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    policy = Policy(model, tok, mode="generate", max_new_tokens=5)
    [d] = policy.act([OBSERVATIONS[0]], [SYSTEM], greedy=True)
    ids = list(d.prompt_ids)
    with torch.no_grad():
        for _ in range(5):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert d.answer_ids == ids[len(d.prompt_ids):]


def test_generation_stops_at_stop_strings_and_the_end_token(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    free = Policy(model, tok, mode="generate", max_new_tokens=8, seed=3).act(OBSERVATIONS, [SYSTEM] * 3)
    # a stop string taken from the middle of an unconstrained answer cuts that answer there
    row = max(range(3), key=lambda i: len(free[i].answer_ids))
    stop_text = tok.decode(free[row].answer_ids[:3], skip_special_tokens=True)[-2:]
    stopped = Policy(model, tok, mode="generate", max_new_tokens=8, seed=3,
                     stop=[stop_text]).act(OBSERVATIONS, [SYSTEM] * 3)
    assert stop_text in stopped[row].text and len(stopped[row].answer_ids) <= 3
    assert stopped[row].answer_ids == free[row].answer_ids[:len(stopped[row].answer_ids)]
    # with the end-of-turn token forced, every answer is that one token
    with torch.no_grad():
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.config.vocab_size))
        model.lm_head.bias[tok.eos_token_id] = 100.0
    try:
        ended = Policy(model, tok, mode="generate", max_new_tokens=8).act(OBSERVATIONS, [SYSTEM] * 3)
    finally:
        model.lm_head.bias = None
    assert all(d.answer_ids == [tok.eos_token_id] and d.text == "" for d in ended)


def test_prefill_opens_every_answer_and_is_context_not_answer(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    prefill = '{"action": "'
    policy = Policy(model, tok, mode="generate", max_new_tokens=6, temperature=0.7, seed=0, prefill=prefill,
                    stop=['"'])
    prefill_ids = tok(prefill, add_special_tokens=False)["input_ids"]
    decisions = policy.act(OBSERVATIONS * 2, [SYSTEM] * 6)
    for d, observation in zip(decisions, OBSERVATIONS * 2):
        # the prefill's tokens end the prompt; the answer is only what was sampled after them
        assert d.prompt_ids == policy.prompt_ids(SYSTEM, observation) + prefill_ids
        assert d.text == prefill + tok.decode(d.answer_ids, skip_special_tokens=True)
        assert 1 <= len(d.answer_ids) <= 6  # the '"' in the prefill did not end it
        assert d.token_logprobs == pytest.approx(_tempered_logprobs(model, d.prompt_ids, d.answer_ids, 0.7),
                                                 abs=1e-4)
    ev = policy.evaluate(decisions)
    assert ev.mask.sum().item() == sum(len(d.answer_ids) for d in decisions)
    assert torch.allclose(ev.logprobs[ev.mask], ev.old_logprobs[ev.mask], atol=1e-4)
    # score mode ignores the prefill
    scored = Policy(model, tok, prefill=prefill).act(OBSERVATIONS[:1], [SYSTEM], [ACTIONS])[0]
    assert scored.prompt_ids == policy.prompt_ids(SYSTEM, OBSERVATIONS[0]) and scored.text in ACTIONS


def test_rows_that_stop_early_leave_the_others_exact(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    observations = [f"Observation number {i}." for i in range(8)]
    free = Policy(model, tok, mode="generate", max_new_tokens=8, seed=5).act(observations, [SYSTEM] * 8)
    # row k's token k+1 as a stop string: rows 0-3 stop after 2, 3, 4 and 5 tokens; once half the
    # batch has finished, those rows leave the KV cache and the others go on
    stops = [tok.decode(d.answer_ids[k + 1:k + 2], skip_special_tokens=True) for k, d in enumerate(free[:4])]
    stopped = Policy(model, tok, mode="generate", max_new_tokens=8, seed=5, stop=stops).act(observations, [SYSTEM] * 8)
    for k in range(4):
        assert stopped[k].answer_ids == free[k].answer_ids[:k + 2]
    for d in stopped:
        assert d.token_logprobs == pytest.approx(_tempered_logprobs(model, d.prompt_ids, d.answer_ids, 1.0),
                                                 abs=1e-4)


def _tempered_logprobs(model, prompt: list[int], answer: list[int], temperature: float) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + answer])).logits[0].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return [logp[len(prompt) - 1 + j, t].item() for j, t in enumerate(answer)]


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_evaluate_recomputes_the_acting_logprobs_with_grad(tiny_model_and_tokenizer, mode):
    model, tok = tiny_model_and_tokenizer
    policy = Policy(copy.deepcopy(model), tok, mode=mode, max_new_tokens=5, temperature=0.8, seed=0)
    decisions = policy.act(OBSERVATIONS, [SYSTEM, "Other rules.", SYSTEM],
                           [ACTIONS] * 3 if mode == "score" else None)
    ev = policy.evaluate(decisions)
    width = 1 if mode == "score" else max(len(d.answer_ids) for d in decisions)
    assert ev.logprobs.shape == ev.mask.shape == ev.old_logprobs.shape == (3, width)
    assert ev.entropy.shape == (3,) and ev.hidden.shape == (3, model.config.hidden_size)
    assert torch.allclose(ev.logprobs[ev.mask], ev.old_logprobs[ev.mask], atol=1e-4)
    assert ev.mask.sum().item() == (3 if mode == "score" else sum(len(d.answer_ids) for d in decisions))
    assert (ev.entropy > 0).all()
    params = policy.parameters_to_train()
    (ev.logprobs[ev.mask].sum() + ev.hidden.sum()).backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in params)


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_identical_prompts_run_once_but_sample_independently(tiny_model_and_tokenizer, mode):
    model, tok = tiny_model_and_tokenizer
    policy = Policy(model, tok, mode=mode, temperature=1e6 if mode == "score" else 2.0,
                    max_new_tokens=4, seed=0)
    observations = [OBSERVATIONS[0]] * 6 + [OBSERVATIONS[1]] * 2  # e.g. a GRPO group's first step
    actions = [ACTIONS] * 8 if mode == "score" else None
    decisions = policy.act(observations, [SYSTEM] * 8, actions)
    prefix = len(policy.prompts.system_prefix(SYSTEM))
    suffixes = sum(len(policy.prompt_ids(SYSTEM, o)) - prefix for o in OBSERVATIONS[:2])
    assert policy.counters["prompt_tokens"] == prefix + suffixes  # 2 distinct prompts, not 8
    picks = [d.text for d in decisions[:6]]
    assert len(set(picks)) > 1  # independent draws for the duplicates
    for d in decisions[:3]:  # every duplicate's record is exact
        if mode == "generate":
            with torch.no_grad():
                logits = model(torch.tensor([d.prompt_ids + d.answer_ids])).logits[0].float()
            logp = torch.log_softmax(logits / 2.0, dim=-1)
            expected = [logp[len(d.prompt_ids) - 1 + j, t].item() for j, t in enumerate(d.answer_ids)]
        else:
            expected = full_forward_logprobs(model, d.prompt_ids, d.answer_ids)
        assert d.token_logprobs == pytest.approx(expected, abs=1e-4)
    ev = policy.evaluate(decisions)
    assert torch.allclose(ev.logprobs[ev.mask], ev.old_logprobs[ev.mask], atol=1e-4)
    single = policy.evaluate([decisions[1]])
    assert torch.allclose(ev.logprobs[1, :single.logprobs.shape[1]], single.logprobs[0], atol=1e-4)
    assert torch.allclose(ev.hidden[0], ev.hidden[1])
    if mode == "score":
        assert ev.entropy[0] == ev.entropy[1]


def test_evaluate_entropy_over_candidates(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    policy = Policy(model, tok, temperature=1e6)  # near-uniform over the 3 candidates
    ev = policy.evaluate(policy.act([OBSERVATIONS[0]], [SYSTEM], [ACTIONS]))
    assert ev.entropy.item() == pytest.approx(math.log(3), abs=1e-3)


def test_reference_disables_the_lora_adapter(tiny_model_and_tokenizer):
    pytest.importorskip("peft")
    from textgym.lora import LoraSettings, add_lora

    model, tok = tiny_model_and_tokenizer
    policy = Policy(add_lora(copy.deepcopy(model), LoraSettings(r=4, alpha=8, target_modules=("q_proj", "v_proj"))),
                    tok, seed=0)
    assert policy.is_lora
    params = policy.parameters_to_train()
    assert params and all("lora" in n for n, p in policy.model.named_parameters() if p.requires_grad)
    decisions = policy.act(OBSERVATIONS, [SYSTEM] * 3, [ACTIONS] * 3)
    with policy.reference(), torch.no_grad():
        ref = policy.evaluate(decisions)
    assert torch.allclose(ref.logprobs, policy.evaluate(decisions).logprobs, atol=1e-5)  # KL 0 at start
    optimizer = torch.optim.Adam(params, lr=0.01)
    for _ in range(3):
        optimizer.zero_grad()
        (-policy.evaluate(decisions).logprobs.sum()).backward()
        optimizer.step()
    trained = policy.evaluate(decisions).logprobs
    with policy.reference(), torch.no_grad():
        ref_after = policy.evaluate(decisions).logprobs
        acted = policy.act(OBSERVATIONS, [SYSTEM] * 3, [ACTIONS] * 3, greedy=True)
    assert trained.sum() > ref_after.sum() + 1e-2  # the adapter moved the chosen actions up
    assert torch.allclose(ref_after, ref.logprobs, atol=1e-5)  # the reference did not move
    for d in acted:  # acting under reference() uses the base weights, not a stale cache
        assert d.token_logprobs == pytest.approx(full_forward_logprobs(model, d.prompt_ids, d.answer_ids),
                                                 abs=1e-4)


def test_reference_without_lora_is_a_frozen_snapshot(tiny_policy):
    policy = tiny_policy
    decisions = policy.act(OBSERVATIONS, [SYSTEM] * 3, [ACTIONS] * 3)
    optimizer = torch.optim.SGD(policy.parameters_to_train(), lr=0.5)
    (-policy.evaluate(decisions).logprobs.sum()).backward()
    optimizer.step()
    with policy.reference(), torch.no_grad():
        ref = policy.evaluate(decisions)
    assert torch.allclose(ref.logprobs, ref.old_logprobs, atol=1e-4)
    assert not torch.allclose(policy.evaluate(decisions).logprobs, ref.logprobs, atol=1e-3)


def test_save_and_load_a_lora_policy(tmp_path):
    pytest.importorskip("peft")
    from textgym.lora import LoraSettings, add_lora

    policy = Policy.from_pretrained("tiny", temperature=0.5, seed=0, stop=["."], system_role=False)
    policy.model = add_lora(policy.model, LoraSettings(r=4))
    with torch.no_grad():
        for p in policy.parameters_to_train():
            p.add_(0.01)
    decisions = policy.act(OBSERVATIONS, [SYSTEM] * 3, [ACTIONS] * 3, greedy=True)
    policy.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "adapter" / "adapter_model.safetensors").is_file()
    loaded = Policy.load(tmp_path / "ckpt")
    assert loaded.is_lora and loaded.temperature == 0.5 and loaded.mode == "score"
    assert loaded.config == policy.config and loaded.name == "tiny"  # every setting, not a few
    assert loaded.stop == (".",) and loaded.max_new_tokens == 16  # "tiny"'s registry default, recorded
    again = loaded.act(OBSERVATIONS, [SYSTEM] * 3, [ACTIONS] * 3, greedy=True)
    assert [d.logprob for d in again] == pytest.approx([d.logprob for d in decisions], abs=1e-5)


def test_save_and_load_a_full_policy(tmp_path, tiny_policy):
    decisions = tiny_policy.act(OBSERVATIONS, [SYSTEM] * 3, [ACTIONS] * 3, greedy=True)
    tiny_policy.save(tmp_path / "ckpt")
    tiny_policy.save(tmp_path / "ckpt")  # overwriting an earlier save works
    loaded = Policy.load(tmp_path / "ckpt")
    assert not loaded.is_lora and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    again = loaded.act(OBSERVATIONS, [SYSTEM] * 3, [ACTIONS] * 3, greedy=True)
    assert [d.logprob for d in again] == pytest.approx([d.logprob for d in decisions], abs=1e-5)
    with pytest.raises(FileNotFoundError, match="not a saved policy"):
        Policy.load(tmp_path)


def test_bad_input_gives_clear_errors(tiny_policy, tiny_model_and_tokenizer):
    with pytest.raises(ValueError, match="no valid actions"):
        tiny_policy.act(["obs"], [SYSTEM], [[]])
    with pytest.raises(ValueError, match="same length"):
        tiny_policy.act(["a", "b"], [SYSTEM], [ACTIONS])
    with pytest.raises(ValueError, match="mode"):
        Policy(*tiny_model_and_tokenizer, mode="chat")
    with pytest.raises(ValueError, match="temperature"):
        Policy(*tiny_model_and_tokenizer, temperature=0)
    assert tiny_policy.act([], [], []) == []
    assert isinstance(tiny_policy.act([""], [""], [["A"]])[0], Decision)  # empty texts are fine


def test_policy_config_is_validated_and_round_trips():
    from textgym.policy import PolicyConfig

    template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    config = PolicyConfig(mode="generate", temperature=0.7, stop=["\n"], chat_template=template)
    assert config.stop == ("\n",)
    assert PolicyConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="normalization"):
        PolicyConfig(normalization="max")
    with pytest.raises(ValueError, match="no setting"):
        PolicyConfig.from_dict({"temperature": 1.0, "beam_width": 4})
    with pytest.raises(TypeError, match="unknown policy setting"):
        PolicyConfig().replace(beam_width=4)


def test_settings_are_one_config_with_keyword_overrides(tiny_model_and_tokenizer):
    from textgym.policy import PolicyConfig

    model, tok = tiny_model_and_tokenizer
    base = PolicyConfig(mode="generate", temperature=0.5, max_new_tokens=7)
    policy = Policy(model, tok, config=base, temperature=0.9)
    assert policy.config == base.replace(temperature=0.9)
    assert (policy.mode, policy.temperature, policy.max_new_tokens) == ("generate", 0.9, 7)
    with pytest.raises(AttributeError):
        policy.temperature = 2.0  # read-only: a policy's settings are its config
    with pytest.raises(TypeError, match="unknown policy setting"):
        Policy(model, tok, beam_width=4)


def test_from_pretrained_applies_the_registry_and_leaves_lora_to_the_trainer():
    policy = Policy.from_pretrained("tiny", mode="generate", seed=0)
    assert policy.max_new_tokens == 16 and policy.name == "tiny"  # the registry's default for "tiny"
    assert Policy.from_pretrained("tiny", max_new_tokens=5).max_new_tokens == 5  # an override wins
    assert not policy.is_lora
    with pytest.raises(TypeError, match="trainer config"):
        Policy.from_pretrained("tiny", lora_r=8)
    with pytest.warns(FutureWarning, match="trainer adds the LoRA adapter"):
        assert not Policy.from_pretrained("tiny", lora=True).is_lora


def test_the_candidate_token_cache_is_bounded(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    policy = Policy(model, tok, candidate_cache_size=8, seed=0)
    commands = [[f"take coin {i}", f"drop coin {i}"] for i in range(12)]  # free-form commands keep coming
    decisions = policy.act([f"Room {i}." for i in range(12)], [SYSTEM] * 12, commands)
    assert len(policy.candidate_tokens) == 8  # the least recently used texts were dropped
    for d, actions in zip(decisions, commands):  # and every candidate was still tokenized right
        assert d.candidates == [tok(a, add_special_tokens=False)["input_ids"] for a in actions]
    assert policy.candidate_ids("take coin 0") == tok("take coin 0", add_special_tokens=False)["input_ids"]


def test_the_output_head_reads_contiguous_hidden_states(tiny_policy):
    """transformers hands the head a strided view (the last positions); torch multiplies such a
    view by the vocabulary matrix far more slowly (kv_cache.contiguous_output_head)."""
    from textgym.policy.kv_cache import contiguous_output_head

    head = tiny_policy.model.get_output_embeddings()
    seen = []
    probe = head.register_forward_pre_hook(lambda module, args: seen.append(args[0].is_contiguous()))
    try:
        hidden = torch.randn(3, 5, head.in_features)
        view = hidden[:, -1:]
        assert not view.is_contiguous()
        torch.testing.assert_close(head(view), hidden[:, -1:].contiguous() @ head.weight.T)
        tiny_policy.act(["Color: red."], ["Name an animal."], [["cat", "dog"]])
        assert seen and all(seen)
        assert contiguous_output_head(tiny_policy.model) is None  # installed once per head
    finally:
        probe.remove()


def test_a_batch_decides_exactly_as_its_rows_one_by_one(tiny_model_and_tokenizer):
    """Acting scores and samples every row in a few tensor operations: the same choices, log-probs
    and records as the row-by-row definition (each row's candidate scores, then
    ``sample_candidate`` on each row in order with the same generator), action sets of several
    sizes and multi-token candidates in one batch, duplicates included."""
    from textgym.policy.kv_cache import run_prompts, shared_prefix_length, unique_rows
    from textgym.policy.sampling import sample_candidate
    from textgym.policy.scoring import candidate_scores, score_candidates

    model, tok = tiny_model_and_tokenizer
    observations = OBSERVATIONS * 3 + [OBSERVATIONS[0]]
    valid = [ACTIONS, ["LEFT", "RIGHT"], ["go north", "go north east", "look", "x"], ["LEFT", "RIGHT"]] * 2 \
        + [ACTIONS, ["LEFT", "RIGHT"]]
    for normalization, greedy, floor in [("sum", False, 0.0), ("token", False, 0.3), ("word", True, 0.0)]:
        policy = Policy(model, tok, normalization=normalization, temperature=0.7, seed=3)
        with policy.exploring(floor):
            decisions = policy.act(observations, [SYSTEM] * 10, valid, greedy=greedy)
        reference = Policy(model, tok, normalization=normalization, temperature=0.7, seed=3)
        prompts = [reference.prompt_ids(SYSTEM, o) for o in observations]
        candidates = [reference.candidate_set(v) for v in valid]
        # as acting does: identical rows (same prompt and actions) run once, each sampled on its own
        firsts, row_of = unique_rows([(tuple(p), tuple(v)) for p, v in zip(prompts, valid)])
        with torch.inference_mode():
            batch, _ = run_prompts(model, [prompts[i] for i in firsts],
                                   shared_prefix_length(prompts, reference.prompts.system_prefix(SYSTEM)),
                                   pad_id=reference.pad_id, device=reference.device,
                                   counters=dict.fromkeys(reference.counters, 0))
            per_unique = score_candidates(model, batch, [candidates[i] for i in firsts], pad_id=reference.pad_id,
                                          chunk_bytes=2**28, counters=dict.fromkeys(reference.counters, 0))
        per_row = [per_unique[u] for u in row_of]
        for d, token_lps, actions, prompt in zip(decisions, per_row, valid, prompts):
            scores = candidate_scores(token_lps, normalization, list(actions))
            k, logp, behaviour = sample_candidate(scores, 0.7, greedy, reference.generator, floor=floor)
            assert (d.action_index, d.text, d.prompt_ids) == (k, actions[k], prompt)
            assert d.behaviour_logprobs == (None if behaviour is None else [behaviour])
            assert d.logprob == float(logp[k]) and d.token_logprobs == token_lps[k].tolist()


def test_prompts_are_rendered_once_per_system_prompt_exactly_as_the_template(tiny_model_and_tokenizer):
    from textgym.policy.prompts import ChatPrompts

    _, tok = tiny_model_and_tokenizer
    prompts = ChatPrompts(tok)
    odd = ["  leading and trailing spaces \n", "{{ not a template }} <b>&amp;</b>", ""]
    for obs in odd:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": obs}]
        rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert prompts.prompt_text(SYSTEM, obs) == rendered
    assert prompts.frame(SYSTEM) is not None
    assert prompts.batch_prompt_ids([SYSTEM] * 3, odd) == [prompts.prompt_ids(SYSTEM, o) for o in odd]
    # A template that trims its messages does not place them verbatim: every prompt is rendered.
    trimming = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] | trim }}\n{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    trimmed = ChatPrompts(tok, chat_template=trimming)
    assert trimmed.frame(SYSTEM) is None
    assert trimmed.prompt_text(SYSTEM, odd[0]).endswith("<|user|>leading and trailing spaces\n<|assistant|>")


def test_gpu_memory_is_checked_before_a_batch_too_large_for_it(tiny_model_and_tokenizer):
    from textgym.policy.memory import acting_bytes_per_row, acting_memory_error

    model, _ = tiny_model_and_tokenizer
    per_row = acting_bytes_per_row(model.config, prompt_tokens=90, new_tokens=8, dtype_bytes=2)
    longer = acting_bytes_per_row(model.config, prompt_tokens=180, new_tokens=8, dtype_bytes=2)
    assert 0 < per_row < longer
    fits = acting_memory_error(model.config, 1024, 90, 8, 2, free_bytes=2 * 1024 * per_row, device="cuda:0")
    assert fits is None
    message = acting_memory_error(model.config, 1024, 90, 8, 2, free_bytes=500 * per_row, device="cuda:0")
    largest = int(500 * per_row * 0.8) // per_row
    assert message.startswith("1024 envs side by side need about ")
    assert message.endswith(f"free on cuda:0: the largest safe --num-envs is {largest}") and 390 < largest <= 400
    assert "no room" in acting_memory_error(model.config, 8, 90, 8, 2, free_bytes=per_row // 2, device="cuda:0")
