"""Re-scoring: the log-probs of recorded decisions under the current weights, with grad.

The same definition as acting (same temperature, same candidate scores, same token layout), so
with unchanged weights the recomputed log-probs equal the recorded ones to float precision.
Identical rows (same prompt and answer or candidates) are run through the model once.

Conversation mode: the turns of one episode share their context (turn ``t + 1``'s context extends
turn ``t``'s context and answer), so :func:`conversation_chains` groups a batch's decisions into
chains and one pass over each chain's longest context re-scores all of them: generate-mode answers
are read where they sit in that context, score-mode candidates are scored at each turn's position
seeing only that turn's context (:func:`textgym.policy.scoring.score_points`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from textgym.policy.decision import Decision, Evaluation
from textgym.policy.frozen_trunk import Trunk, rescore_top
from textgym.policy.kv_cache import (
    Counters,
    run_prompts,
    run_sequences,
    shared_prefix_length,
    unique_rows,
)
from textgym.policy.scoring import candidate_scores, score_candidates, score_points

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["conversation_chains", "rescore_candidates", "rescore_candidates_from_trunk",
           "rescore_conversation_candidates", "rescore_conversation_tokens", "rescore_tokens", "same_evaluation"]

# Config entries of models whose logits are not the output embedding of the last hidden state:
# the chain re-scoring applies the output embedding itself, so those models take the per-decision path.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def conversation_chains(model: torch.nn.Module, decisions: Sequence[Decision]) -> list[list[int]] | None:
    """The decisions grouped by conversation: in each chain (indices, longest context first), every
    decision's context and answer start the first one's context, so one pass re-scores the chain.
    ``None`` when no two decisions are turns of one conversation (or the model's logits are not
    its output embedding of the hidden state): the per-decision path then applies."""
    if any(getattr(model.config, name, None) for name in _LOGIT_TRANSFORMS):
        return None
    order = sorted(range(len(decisions)), reverse=True,
                   key=lambda i: len(decisions[i].prompt_ids) + len(decisions[i].answer_ids))
    chains: list[list[int]] = []
    for i in order:
        d = decisions[i]
        for chain in reversed(chains):  # the latest chain first: an episode's turns come together
            head = decisions[chain[0]]
            if head.continues(d) or (head.prompt_ids == d.prompt_ids and head.answer_ids == d.answer_ids):
                chain.append(i)
                break
        else:
            chains.append([i])
    shared = any(len({len(decisions[i].prompt_ids) for i in chain}) > 1 for chain in chains)
    return chains if shared else None


def _chain_layout(decisions: Sequence[Decision], chains: list[list[int]],
                  with_answers: bool) -> tuple[list[list[int]], list[int], int]:
    """``(sequences, row of each decision, prefix length)`` of a chain pass: a row per chain (its
    longest context, with its answer when ``with_answers``); the shared prefix ends before every
    decision's last prompt token (whose hidden state is needed)."""
    sequences = [list(decisions[c[0]].prompt_ids) + (list(decisions[c[0]].answer_ids) if with_answers else [])
                 for c in chains]
    row = [0] * len(decisions)
    for r, chain in enumerate(chains):
        for i in chain:
            row[i] = r
    prefix_length = min(shared_prefix_length(sequences), min(len(d.prompt_ids) for d in decisions) - 1)
    return sequences, row, max(prefix_length, 0)


def rescore_candidates(model: torch.nn.Module, decisions: Sequence[Decision], prefix_length: int, *,
                       temperature: float, normalization: str, tokenizer: PreTrainedTokenizerBase, pad_id: int,
                       device: torch.device, chunk_bytes: int, counters: Counters) -> Evaluation:
    """Score-mode decisions: per decision, the log-softmax over its candidates (``T=1`` unit)."""
    prompts = [list(d.prompt_ids) for d in decisions]
    firsts, row_of = unique_rows([(tuple(p), tuple(map(tuple, d.candidates)))
                                  for p, d in zip(prompts, decisions)])
    batch, _ = run_prompts(model, [prompts[i] for i in firsts], prefix_length, pad_id=pad_id, device=device,
                           counters=counters, want_hidden=True)
    per_unique = score_candidates(model, batch, [decisions[i].candidates for i in firsts], pad_id=pad_id,
                                  chunk_bytes=chunk_bytes, counters=counters)
    return _candidate_evaluation(decisions, firsts, row_of, per_unique, batch.hidden, temperature=temperature,
                                 normalization=normalization, tokenizer=tokenizer, device=device)


def rescore_candidates_from_trunk(model: torch.nn.Module, trunk: Trunk, decisions: Sequence[Decision],
                                  prefix_hidden: torch.Tensor, *, temperature: float, normalization: str,
                                  tokenizer: PreTrainedTokenizerBase, device: torch.device) -> Evaluation:
    """:func:`rescore_candidates` for decisions with trunk records: the top layers alone, from
    what the frozen layers gave while acting (:mod:`.frozen_trunk`); ``prefix_hidden``: the
    trunk's output for the prefix the decisions share."""
    firsts, row_of = unique_rows([(tuple(d.prompt_ids), tuple(map(tuple, d.candidates))) for d in decisions])
    top = rescore_top(model, trunk, [decisions[i] for i in firsts], prefix_hidden, device)
    first = torch.log_softmax(top.logits.float(), dim=-1)
    per_unique = [[torch.cat([first[u, cand[0]].reshape(1), later]) for cand, later in zip(decisions[i].candidates,
                                                                                            top.later[u])]
                  for u, i in enumerate(firsts)]
    return _candidate_evaluation(decisions, firsts, row_of, per_unique, top.hidden, temperature=temperature,
                                 normalization=normalization, tokenizer=tokenizer, device=device)


#: How far two float32 evaluations of the same decisions may differ (log-probs; hidden states
#: ten times that, plus as much relative): batching and padding change the order of sums.
FLOAT_TOLERANCE = 1e-3


def same_evaluation(a: Evaluation, b: Evaluation) -> bool:
    """Whether two evaluations of the same decisions agree to float noise (the candidates'
    log-probs and the hidden states, with a tolerance that follows the hidden states' dtype)."""
    tolerance = FLOAT_TOLERANCE if a.hidden.dtype == torch.float32 else 5e-2
    pairs = zip(a.candidate_logprobs or [], b.candidate_logprobs or [])
    return (a.hidden.shape == b.hidden.shape
            and torch.allclose(a.hidden.float(), b.hidden.float(), atol=tolerance * 10, rtol=tolerance)
            and all(torch.allclose(x, y, atol=tolerance) for x, y in pairs))


def _candidate_evaluation(decisions: Sequence[Decision], firsts: list[int], row_of: list[int],
                          per_unique: list[list[torch.Tensor]], hidden: torch.Tensor, *, temperature: float,
                          normalization: str, tokenizer: PreTrainedTokenizerBase,
                          device: torch.device) -> Evaluation:
    """Score mode: the :class:`Evaluation` from the candidates' token log-probs of each unique
    decision (``firsts``; decision ``i`` is unique decision ``row_of[i]``) and their hidden states."""
    unique_logp, unique_entropy = [], []
    for i, token_lps in zip(firsts, per_unique):
        texts = [tokenizer.decode(c, skip_special_tokens=True) for c in decisions[i].candidates] \
            if normalization == "word" else None
        logp = torch.log_softmax(candidate_scores(token_lps, normalization, texts) / temperature, dim=-1)
        unique_logp.append(logp)
        unique_entropy.append(-(logp.exp() * logp).sum())
    index = torch.tensor(row_of, device=device)
    chosen = [unique_logp[u][d.action_index] for u, d in zip(row_of, decisions)]
    return Evaluation(
        logprobs=torch.stack(chosen)[:, None],
        mask=torch.ones((len(decisions), 1), dtype=torch.bool, device=device),
        old_logprobs=torch.tensor([[d.logprob] for d in decisions], device=device),
        entropy=torch.stack(unique_entropy).index_select(0, index),
        hidden=hidden.index_select(0, index),
        candidate_logprobs=[unique_logp[u] for u in row_of])


def rescore_conversation_candidates(model: torch.nn.Module, decisions: Sequence[Decision],
                                    chains: list[list[int]], *, temperature: float, normalization: str,
                                    tokenizer: PreTrainedTokenizerBase, pad_id: int, device: torch.device,
                                    chunk_bytes: int, counters: Counters) -> Evaluation:
    """Score-mode decisions of conversations: one pass per chain (:func:`conversation_chains`), the
    candidates of each turn scored at its position, seeing only its own context."""
    sequences, row, prefix_length = _chain_layout(decisions, chains, with_answers=False)
    state = run_sequences(model, sequences, prefix_length, pad_id=pad_id, device=device, counters=counters)
    width = state.hidden.shape[1]
    at = torch.tensor([row[i] * width + len(d.prompt_ids) - 1 - prefix_length for i, d in enumerate(decisions)],
                      device=device)
    hidden = state.hidden.reshape(-1, state.hidden.shape[-1]).index_select(0, at)
    first = torch.log_softmax(model.get_output_embeddings()(hidden).float(), dim=-1)
    lengths = [len(d.prompt_ids) for d in decisions]
    per_decision = score_points(model, state.cache, state.attention_mask, row, lengths,
                                torch.tensor(lengths, device=device), first, [d.candidates for d in decisions],
                                pad_id=pad_id, chunk_bytes=chunk_bytes, counters=counters)
    every = list(range(len(decisions)))
    return _candidate_evaluation(decisions, every, every, per_decision, hidden, temperature=temperature,
                                 normalization=normalization, tokenizer=tokenizer, device=device)


def rescore_tokens(model: torch.nn.Module, decisions: Sequence[Decision], prefix_length: int, *,
                   temperature: float, pad_id: int, device: torch.device, counters: Counters) -> Evaluation:
    """Generate-mode decisions: the log-prob of every answer token (``T`` = longest answer)."""
    prompts = [list(d.prompt_ids) for d in decisions]
    answers = [list(d.answer_ids) for d in decisions]
    if any(not a for a in answers):
        raise ValueError("a generate-mode decision has no answer tokens")
    firsts, row_of = unique_rows([(tuple(p), tuple(a)) for p, a in zip(prompts, answers)])
    batch, answer_logits = run_prompts(model, [prompts[i] for i in firsts], prefix_length, pad_id=pad_id,
                                       device=device, counters=counters, answers=[answers[i] for i in firsts],
                                       want_hidden=True)
    # the logits predicting answer token j: column j (the first from the prompt's last position)
    logp = torch.log_softmax(answer_logits / temperature, dim=-1)  # [U, A, V]
    index = torch.tensor(row_of, device=device)
    width = answer_logits.shape[1]
    targets = torch.tensor([answers[i] + [0] * (width - len(answers[i])) for i in firsts], dtype=torch.long,
                           device=device)
    lengths = torch.tensor([len(a) for a in answers], device=device)
    mask = torch.arange(width, device=device)[None, :] < lengths[:, None]
    recorded = [list(d.token_logprobs or [])[:len(a)] for a, d in zip(answers, decisions)]  # demos record none
    old = torch.tensor([r + [0.0] * (width - len(r)) for r in recorded], dtype=torch.float32, device=device)
    logprobs = logp.gather(-1, targets[..., None])[..., 0].index_select(0, index) * mask
    token_entropy = (-(logp.exp() * logp).sum(-1)).index_select(0, index)
    entropy = (token_entropy * mask).sum(-1) / mask.sum(-1)
    return Evaluation(logprobs=logprobs, mask=mask, old_logprobs=old, entropy=entropy,
                      hidden=batch.hidden.index_select(0, index))


def rescore_conversation_tokens(model: torch.nn.Module, decisions: Sequence[Decision], chains: list[list[int]],
                                *, temperature: float, pad_id: int, device: torch.device,
                                counters: Counters) -> Evaluation:
    """Generate-mode decisions of conversations: one pass per chain (:func:`conversation_chains`);
    each turn's answer tokens are read where they sit in the chain's longest context."""
    answers = [list(d.answer_ids) for d in decisions]
    if any(not a for a in answers):
        raise ValueError("a generate-mode decision has no answer tokens")
    sequences, row, prefix_length = _chain_layout(decisions, chains, with_answers=True)
    state = run_sequences(model, sequences, prefix_length, pad_id=pad_id, device=device, counters=counters)
    width = state.hidden.shape[1]
    flat = state.hidden.reshape(-1, state.hidden.shape[-1])
    # Answer token j of decision i is predicted by the hidden state after its token len(prompt) - 1 + j.
    starts = [row[i] * width + len(d.prompt_ids) - 1 - prefix_length for i, d in enumerate(decisions)]
    units = torch.tensor([s + j for s, a in zip(starts, answers) for j in range(len(a))], device=device)
    logp = torch.log_softmax(model.get_output_embeddings()(flat.index_select(0, units)).float() / temperature, -1)
    targets = torch.tensor([t for a in answers for t in a], dtype=torch.long, device=device)
    unit_logprobs = logp.gather(-1, targets[:, None])[:, 0]
    unit_entropy = -(logp.exp() * logp).sum(-1)
    longest = max(len(a) for a in answers)
    lengths = torch.tensor([len(a) for a in answers], device=device)
    mask = torch.arange(longest, device=device)[None, :] < lengths[:, None]
    blank = torch.zeros(mask.shape, dtype=unit_logprobs.dtype, device=device)
    recorded = [list(d.token_logprobs or [])[:len(a)] for a, d in zip(answers, decisions)]  # demos record none
    old = torch.tensor([r + [0.0] * (longest - len(r)) for r in recorded], dtype=torch.float32, device=device)
    entropy = blank.masked_scatter(mask, unit_entropy).sum(-1) / lengths
    return Evaluation(logprobs=blank.masked_scatter(mask, unit_logprobs), mask=mask, old_logprobs=old,
                      entropy=entropy, hidden=flat.index_select(0, torch.tensor(starts, device=device)))
