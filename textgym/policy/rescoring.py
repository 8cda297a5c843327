"""Re-scoring: the log-probs of recorded decisions under the current weights, with grad.

The same definition as acting (same temperature, same candidate scores, same token layout), so
with unchanged weights the recomputed log-probs equal the recorded ones to float precision.
Identical rows (same prompt and answer or candidates) are run through the model once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from textgym.policy.decision import Decision, Evaluation
from textgym.policy.kv_cache import Counters, run_prompts, unique_rows
from textgym.policy.scoring import candidate_scores, score_candidates

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["rescore_candidates", "rescore_tokens"]


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
        hidden=batch.hidden.index_select(0, index),
        candidate_logprobs=[unique_logp[u] for u in row_of])


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
