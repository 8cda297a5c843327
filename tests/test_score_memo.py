"""The score-mode memo (textgym.policy.score_memo): a prompt met again with the same weights is
not run through the model again, and the decisions are those of the model run afresh."""

import copy

import pytest
import torch

import textgym
from textgym.lora import LoraSettings, add_lora
from textgym.policy import PolicyConfig
from textgym.policy.decision import TrunkRecord
from textgym.policy.kv_cache import shared_prefix_length
from textgym.policy.score_memo import ScoredRow, ScoreMemo

SYSTEM = "Name an animal."
OBSERVATIONS = ["Color: red.", "Color: green.", "Color: red.", "Color: blue."]
ACTIONS = [["cat", "dog"], ["cat", "dog", "horse"], ["cat", "dog"], ["cat", "dog"]]


def _policy(tiny_model_and_tokenizer, memo_bytes, layers=None):
    model, tokenizer = tiny_model_and_tokenizer
    model = copy.deepcopy(model)
    if layers is not None:  # an adapter on the top layers: acting records what the frozen layers give
        model = add_lora(model, LoraSettings(r=4, alpha=8, layers=layers))
        with torch.no_grad():
            generator = torch.Generator().manual_seed(0)
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    return textgym.Policy(model, tokenizer, mode="score", seed=0, score_memo_bytes=memo_bytes)


def _greedy(policy, observations, actions):
    return policy.act(observations, [SYSTEM] * len(observations), actions, greedy=True)


def _candidate_logprobs(policy, decisions):
    with torch.no_grad():
        return policy.evaluate(decisions).candidate_logprobs


def test_a_prompt_met_again_is_not_run_again_and_decides_as_a_fresh_pass(tiny_model_and_tokenizer):
    memo = _policy(tiny_model_and_tokenizer, 2**20)
    fresh = _policy(tiny_model_and_tokenizer, 0)
    first = _greedy(memo, OBSERVATIONS, ACTIONS)
    run = memo.counters["model_tokens"]
    assert run > 0 and memo.counters["memo_rows"] == 0 and len(memo.score_memo) == 3  # red twice: one row
    # the same prompts again, and a new one among them
    again = _greedy(memo, OBSERVATIONS + ["Color: black."], ACTIONS + [["cat", "dog"]])
    assert memo.counters["memo_rows"] == 3
    new_tokens = memo.counters["model_tokens"] - run
    reference = _greedy(fresh, OBSERVATIONS + ["Color: black."], ACTIONS + [["cat", "dog"]])
    before = fresh.counters["model_tokens"]  # the system prompt's prefix is cached by now, as in memo
    alone = _greedy(fresh, ["Color: black."], [["cat", "dog"]])
    assert 0 < new_tokens == fresh.counters["model_tokens"] - before  # only the new prompt ran
    for got, want in zip(first + again, reference[:4] + reference):
        assert (got.text, got.prompt_ids, got.answer_ids, got.candidates) == (want.text, want.prompt_ids,
                                                                             want.answer_ids, want.candidates)
        assert got.logprob == pytest.approx(want.logprob, abs=1e-5)
        assert got.token_logprobs == pytest.approx(want.token_logprobs, abs=1e-5)
    assert again[-1].logprob == pytest.approx(alone[0].logprob, abs=1e-5)


def test_each_visit_still_samples_on_its_own(tiny_model_and_tokenizer):
    memo = _policy(tiny_model_and_tokenizer, 2**20)
    fresh = _policy(tiny_model_and_tokenizer, 0)
    observations, actions = ["Color: red."] * 64, [["cat", "dog", "horse"]] * 64
    with memo.exploring(0.5), fresh.exploring(0.5):
        memo.act(observations[:1], [SYSTEM], actions[:1])  # kept
        fresh.act(observations[:1], [SYSTEM], actions[:1])
        got = memo.act(observations, [SYSTEM] * 64, actions)
        want = fresh.act(observations, [SYSTEM] * 64, actions)
    assert memo.counters["memo_rows"] == 1
    # the same generator draws on the same scores: the same 64 choices, and not all alike
    assert [d.action_index for d in got] == [d.action_index for d in want]
    assert len({d.action_index for d in got}) == 3
    for g, w in zip(got, want):
        assert g.behaviour_logprobs == pytest.approx(w.behaviour_logprobs, abs=1e-5)


def test_new_weights_empty_the_memo(tiny_model_and_tokenizer):
    memo = _policy(tiny_model_and_tokenizer, 2**20)
    before = _greedy(memo, OBSERVATIONS, ACTIONS)
    with torch.no_grad():
        for param in memo.model.parameters():
            param.mul_(1.5)
    run = memo.counters["model_tokens"]
    after = _greedy(memo, OBSERVATIONS, ACTIONS)
    assert memo.counters["memo_rows"] == 0 and memo.counters["model_tokens"] > run
    assert any(abs(a.logprob - b.logprob) > 1e-3 for a, b in zip(after, before))


def test_another_precision_is_another_version(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    memo = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0, score_memo_bytes=2**20,
                          act_dtype="bfloat16", eval_act_dtype="float32")
    _greedy(memo, OBSERVATIONS, ACTIONS)
    with memo.evaluating():  # the greedy evaluation acts in float32: not the bf16 rows
        _greedy(memo, OBSERVATIONS, ACTIONS)
    assert memo.counters["memo_rows"] == 0
    with memo.evaluating():
        _greedy(memo, OBSERVATIONS, ACTIONS)
    assert memo.counters["memo_rows"] == 3


@pytest.mark.parametrize("several_tokens", [False, True])
def test_kept_decisions_carry_the_frozen_layers_record_and_rescore_to_their_logprobs(tiny_model_and_tokenizer,
                                                                                    several_tokens):
    memo = _policy(tiny_model_and_tokenizer, 2**20, layers=1)
    actions = [[a + " house" for a in row] for row in ACTIONS] if several_tokens else ACTIONS
    first = _greedy(memo, OBSERVATIONS, actions)
    again = _greedy(memo, OBSERVATIONS, actions)
    assert memo.counters["memo_rows"] == 3
    for a, b in zip(first, again):
        assert isinstance(b.trunk, TrunkRecord) and torch.equal(a.trunk.hidden, b.trunk.hidden)
        assert (b.trunk.candidates is not None) == several_tokens  # the candidates' trie too
        if several_tokens:
            assert torch.equal(a.trunk.candidates, b.trunk.candidates)
    # the update's re-scoring (the top layers from the records) gives the acting log-probs back
    evaluation = memo.evaluate(again)
    assert evaluation.logprobs.flatten().tolist() == pytest.approx([d.logprob for d in again], abs=1e-5)
    prefix_length = shared_prefix_length([d.prompt_ids for d in again])  # as evaluate() takes it
    assert memo._top_rescorer.trunk_for(memo.model, again, prefix_length) is not None  # the top path


def test_the_memo_keeps_within_its_bytes_least_recently_used_out():
    def row(n):
        return ScoredRow(scores=torch.zeros(2), token_logprobs=torch.zeros(2, n), lengths=[n, n], trunk=None)

    size = row(1).nbytes()  # 2 + 2 floats
    memo = ScoreMemo(max_bytes=2 * size)
    assert memo.lookup("v1", ["a"]) == [None]
    memo.store(["a", "b"], [row(1), row(1)])
    assert memo.lookup("v1", ["a"])[0] is not None  # "a" used last: "b" goes first
    memo.store(["c"], [row(1)])
    assert [r is not None for r in memo.lookup("v1", ["a", "b", "c"])] == [True, False, True]
    assert memo.nbytes == 2 * size
    memo.store(["big"], [row(100)])  # larger than the whole budget: not kept, nothing dropped
    assert len(memo) == 2
    assert memo.lookup("v2", ["a", "c"]) == [None, None] and len(memo) == 0 and memo.nbytes == 0


def test_the_setting_is_checked():
    with pytest.raises(ValueError, match="score_memo_bytes"):
        PolicyConfig(score_memo_bytes=-1)
