"""Conversation mode: an episode as one chat, at the cost of its new tokens (textgym.policy.conversation)."""

import copy

import pytest
import torch

import textgym
from textgym.policy import Policy
from textgym.policy.conversation import Conversation, ConversationCache, ConversationWindow
from textgym.policy.kv_cache import append_in_place_cache, grow_in_place
from textgym.policy.ragged_attention import row_groups
from textgym.policy.rescoring import conversation_chains
from textgym.rollout import collect, conversation_runs
from textgym.trainers import make_trainer
from textgym.trainers.engine.optimization import minibatches

SYSTEM = "Balance the pole. Answer LEFT or RIGHT."
ACTIONS = ["LEFT", "RIGHT", "go north"]  # "go north": a multi-token candidate (scored through a trie)


def _policy(tiny_model_and_tokenizer, mode, **settings):
    model, tokenizer = tiny_model_and_tokenizer
    return Policy(copy.deepcopy(model), tokenizer, mode=mode, seed=0, max_new_tokens=5, **settings)


@torch.no_grad()
def _fresh_logprobs(policy, decision):
    """The decision's log-probs from plain forward passes over its context alone (no cache)."""
    model, t = policy.model, policy.temperature

    def token_logprobs(answer):
        ids = torch.tensor([decision.prompt_ids + answer])
        logits = model(input_ids=ids).logits[0, len(decision.prompt_ids) - 1:-1].float()
        return torch.log_softmax(logits / t, -1).gather(-1, torch.tensor(answer)[:, None])[:, 0]

    if decision.candidates is None:
        return token_logprobs(decision.answer_ids)
    with_t1 = [torch.log_softmax(model(input_ids=torch.tensor([decision.prompt_ids + c])).logits[
        0, len(decision.prompt_ids) - 1:-1].float(), -1).gather(-1, torch.tensor(c)[:, None]).sum()
        for c in decision.candidates]
    return torch.log_softmax(torch.stack(with_t1) / t, -1)[decision.action_index].reshape(1)


def _play(policy, conversations, turns, restart_at=()):
    """Act for every conversation for ``turns`` turns (restarting some); all decisions."""
    decisions = []
    for turn in range(turns):
        for i in restart_at:
            if turn and turn % (7 + 2 * i) == 0:
                conversations[i].restart()
        observations = [f"Turn {turn}: pole {i * 0.1 - turn * 0.01:+.2f} " + "x" * ((i + turn) % 5)
                        for i in range(len(conversations))]
        decisions += policy.act(observations, [SYSTEM] * len(conversations), [ACTIONS] * len(conversations),
                                conversations=conversations)
    return decisions


@pytest.mark.parametrize("ragged", [True, False], ids=["ragged", "plain"])
@pytest.mark.parametrize("mode", ["score", "generate"])
def test_cached_decisions_equal_a_fresh_run_on_the_same_context(tiny_model_and_tokenizer, mode, ragged):
    policy = _policy(tiny_model_and_tokenizer, mode)
    policy.conversation_cache = ConversationCache(ragged=ragged)
    window = ConversationWindow(turns=2, max_tokens=260)
    conversations = [Conversation(window) for _ in range(3)]
    decisions = _play(policy, conversations, 16, restart_at=(0, 1))
    # The run went through episode ends, window rebuilds and compactions of the cache.
    assert policy.conversation_cache.reruns > 3 and policy.conversation_cache.compactions > 0
    assert all(c.rebuilds > 0 for c in conversations)
    assert max(len(d.prompt_ids) for d in decisions) <= 260
    for d in decisions:
        recorded = torch.tensor(d.token_logprobs if mode == "generate" else [d.logprob])
        assert torch.allclose(_fresh_logprobs(policy, d), recorded, atol=2e-5), d.text


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_rescoring_a_conversation_in_one_pass_equals_acting(tiny_model_and_tokenizer, mode):
    policy = _policy(tiny_model_and_tokenizer, mode)
    conversations = [Conversation(ConversationWindow(turns=3)) for _ in range(2)]
    decisions = _play(policy, conversations, 10)
    chains = conversation_chains(policy.model, decisions)
    assert chains is not None and len(chains) < len(decisions) / 3  # turns share one pass
    before = dict(policy.counters)
    ev = policy.evaluate(decisions)
    assert torch.allclose(ev.logprobs[ev.mask], ev.old_logprobs[ev.mask], atol=2e-5)
    # one pass per chain runs far fewer tokens than every decision's context would
    assert policy.counters["prompt_tokens"] - before["prompt_tokens"] < sum(len(d.prompt_ids) for d in decisions) / 3
    single = policy.evaluate(decisions[-1:])  # the per-decision path agrees
    assert torch.allclose(single.logprobs[0], ev.logprobs[-1, :single.logprobs.shape[1]], atol=2e-5)
    assert torch.allclose(single.hidden[0], ev.hidden[-1], atol=1e-4)
    ev.logprobs[ev.mask].sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.model.parameters())


def test_ragged_attention_attends_only_each_rows_own_context(tiny_model_and_tokenizer):
    """Rows of very different lengths: ragged attention gives the same decisions as attention over
    the whole width, and attends to far fewer keys."""
    runs = {}
    for ragged in (True, False):
        policy = _policy(tiny_model_and_tokenizer, "score")
        policy.conversation_cache = ConversationCache(ragged=ragged)
        conversations = [Conversation() for _ in range(4)]
        decisions = []
        for turn in range(12):  # row 0 keeps growing; the others restart every 3 turns
            if turn % 3 == 0:
                for conversation in conversations[1:]:
                    conversation.restart()
            decisions += _play(policy, conversations, 1)
        runs[ragged] = (policy.conversation_cache.attended, [d.logprob for d in decisions],
                        [d.action_index for d in decisions])
    assert runs[True][2] == runs[False][2]
    assert torch.allclose(torch.tensor(runs[True][1]), torch.tensor(runs[False][1]), atol=1e-5)
    assert runs[True][0] < 0.6 * runs[False][0]


def test_ragged_attention_reaches_a_lora_model(tiny_model_and_tokenizer, monkeypatch):
    """The row groups pass through peft's wrapper to every attention layer of the base model."""
    from textgym.lora import add_lora
    from textgym.policy import ragged_attention

    model, tokenizer = tiny_model_and_tokenizer
    policy = Policy(add_lora(copy.deepcopy(model)), tokenizer, mode="score", seed=0)
    calls = []
    sdpa = ragged_attention.F.scaled_dot_product_attention
    monkeypatch.setattr(ragged_attention.F, "scaled_dot_product_attention",
                        lambda *args, **kwargs: calls.append(args[1].shape[-2]) or sdpa(*args, **kwargs))
    conversations = [Conversation() for _ in range(2)]
    _play(policy, conversations, 2)
    conversations[1].restart()
    _play(policy, conversations, 1)
    layers = model.config.num_hidden_layers
    assert len(calls) >= 2 * layers and min(calls) < max(calls)  # a group per row once row 1 restarted
    assert policy.model.config._attn_implementation == "sdpa"  # restored after each call


def test_row_groups_start_at_each_rows_first_live_column():
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1]])
    assert row_groups(mask) == ((0, 1, 0), (1, 3, 3), (3, 4, 5))
    assert row_groups(mask, min_saving=2) == ((0, 1, 0), (1, 4, 3))  # row 3 joins at the cost of 2 columns
    assert row_groups(mask, min_saving=100) == ((0, 4, 0),)


def test_the_cache_grows_in_place_with_room_to_spare():
    kv = tuple((torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)) for _ in range(2))
    buffers = grow_in_place(kv, None, 3)
    assert buffers[0][0].shape[-2] >= 8 and torch.equal(buffers[1][1][:, :, :5], kv[1][1])
    cache = append_in_place_cache(kv, buffers)
    new_k, new_v = torch.randn(2, 3, 3, 4), torch.randn(2, 3, 3, 4)
    cache.update(new_k, new_v, 0)
    keys, values = cache.update(new_k, new_v, 1)
    assert keys.shape[-2] == 8 and torch.equal(keys[:, :, 5:], new_k) and torch.equal(values[:, :, :5], kv[1][1])
    assert keys.data_ptr() == buffers[1][0].data_ptr()  # written into the buffer, not concatenated
    grown = tuple((layer.keys, layer.values) for layer in cache.layers)
    assert grow_in_place(grown, buffers, 1) is buffers  # room left: no copy
    bigger = grow_in_place(grown, buffers, 10_000)
    assert bigger is not buffers and torch.equal(bigger[1][0][:, :, :8], keys)


def test_tokens_per_decision_stay_flat_as_the_episode_grows(tiny_model_and_tokenizer):
    policy = _policy(tiny_model_and_tokenizer, "score")
    conversation = Conversation(ConversationWindow(turns=None, max_tokens=600))
    run, contexts = [], []
    for turn in range(120):
        before = policy.counters["prompt_tokens"]
        [d] = policy.act([f"Turn {turn}: the pole leans {'left' if turn % 3 else 'right'}."], [SYSTEM],
                         [ACTIONS[:2]], conversations=[conversation])
        run.append(policy.counters["prompt_tokens"] - before)
        contexts.append(len(d.prompt_ids))
    incremental = min(run[1:])
    assert max(contexts) <= 600 and conversation.rebuilds >= 3
    assert 0.95 * sum(run[:40]) / 40 < sum(run[-40:]) / 40 < 2 * sum(run[:40]) / 40 + 1  # flat on average
    assert sum(run[1:]) / len(run[1:]) < 2.5 * incremental  # rebuilds cost about one turn more on average
    assert sum(run) < sum(contexts) / 5  # re-sending every context (LlamaGym) runs 5x+ more


def test_turns_window_keeps_between_n_and_2n_earlier_turns(tiny_model_and_tokenizer):
    policy = _policy(tiny_model_and_tokenizer, "score")
    conversation = Conversation(ConversationWindow(turns=3))
    for turn in range(20):
        [d] = policy.act([f"Observation number {turn}."], [SYSTEM], [ACTIONS[:2]], conversations=[conversation])
        shown = [k for k in range(turn + 1) if f"Observation number {k}." in policy.tokenizer.decode(d.prompt_ids)]
        assert shown[-1] == turn and min(turn, 3) <= len(shown) - 1 <= 6
        assert shown == list(range(shown[0], turn + 1))  # the most recent turns, in order
    single = Conversation(ConversationWindow(turns=0))  # the newest observation alone
    [d] = policy.act(["Now."], [SYSTEM], [ACTIONS[:2]], conversations=[single])
    [d] = policy.act(["Later."], [SYSTEM], [ACTIONS[:2]], conversations=[single])
    assert d.prompt_ids == policy.prompt_ids(SYSTEM, "Later.")


def test_the_context_is_the_chat_template_of_the_conversation(tiny_model_and_tokenizer):
    policy = _policy(tiny_model_and_tokenizer, "score")
    conversation = Conversation()
    messages = [{"role": "system", "content": SYSTEM}]
    for text in ("Pole +0.01.", "Pole -0.02.", "Pole +0.03."):
        [d] = policy.act([text], [SYSTEM], [ACTIONS[:2]], conversations=[conversation])
        messages.append({"role": "user", "content": text})
        rendered = policy.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert d.prompt_ids == policy.tokenizer(rendered, add_special_tokens=False)["input_ids"]
        messages.append({"role": "assistant", "content": d.text})


def test_collect_plays_history_envs_as_conversations(tiny_model_and_tokenizer):
    policy = _policy(tiny_model_and_tokenizer, "score")
    venv = textgym.make_vec("textgym/CartPole-v1", num_envs=3, seed=0, history=2)
    rollout = collect(policy, venv, episodes=3, seed=0)
    episode = max(rollout.episodes, key=lambda e: e.length)
    assert episode.length >= 3
    step = episode.steps[2]
    assert "Earlier:" not in step.observation  # the newest observation, not History's rendered text
    context = policy.tokenizer.decode(step.decision.prompt_ids)
    assert episode.steps[0].observation in context and episode.steps[1].observation in context
    assert step.decision.continues(episode.steps[1].decision)
    runs = conversation_runs(rollout.episodes)
    assert runs is not None and len(runs[0]) >= 2
    # the policy's own setting does the same for an env without History
    full = _policy(tiny_model_and_tokenizer, "score", history="full")
    rollout = collect(full, textgym.make_vec("textgym/CartPole-v1", num_envs=2, seed=0), episodes=2, seed=0)
    assert all(s.decision.continues(p.decision) for e in rollout.episodes for p, s in zip(e.steps, e.steps[1:]))


def test_minibatches_keep_conversation_runs_together():
    groups = [[0, 1, 2], [3], [4, 5, 6, 7, 8, 9, 10], [11, 12]]
    torch.manual_seed(0)
    batches = [b.tolist() for b in minibatches(13, 4, groups)]
    assert sorted(i for b in batches for i in b) == list(range(13)) and max(map(len, batches)) <= 4
    pieces = [[0, 1, 2], [3], [4, 5, 6, 7], [8, 9, 10], [11, 12]]
    for piece in pieces:  # each piece of a run sits, contiguous, in one minibatch
        assert any(b[b.index(piece[0]):b.index(piece[0]) + len(piece)] == piece for b in batches if piece[0] in b)


def test_ppo_trains_in_conversation_mode(tiny_model_and_tokenizer):
    policy = _policy(tiny_model_and_tokenizer, "score", history="full")
    trainer = make_trainer("ppo", policy, env="textgym/CartPole-v1",
                           config={"num_envs": 4, "episodes_per_update": 4, "minibatch_size": 16, "epochs": 1,
                                   "kl_coef": 0.1})
    [metrics] = trainer.train(updates=1)
    assert metrics["kl"] < 1e-3 and torch.isfinite(torch.tensor(metrics["loss"]))
    assert "ref_kl" in metrics and "value_loss" in metrics
