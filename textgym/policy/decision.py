"""What a policy hands to the rest of textgym: a :class:`Decision` per action taken, and an
:class:`Evaluation` of a batch of decisions re-scored with grad for training."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

__all__ = ["Decision", "Evaluation", "TrunkRecord"]


@dataclass
class TrunkRecord:
    """What the frozen lower layers gave for a decision's prompt while acting: the hidden states
    entering the first trained layer (:mod:`textgym.policy.frozen_trunk`), so that re-scoring can
    run the trained top alone."""

    layer: int
    """Index of the first trained layer (the one these states enter)."""
    start: int
    """The first prompt position recorded (the tokens before it were a cached prefix)."""
    hidden: torch.Tensor
    """``[len(prompt_ids) - start, H]``, on the model's device, in its dtype."""
    candidates: torch.Tensor | None = None
    """``[columns, H]``: the same layer's input at the candidates' tokens run after the prompt
    (all but each candidate's last, laid out as their
    :class:`~textgym.policy.scoring.CandidateTrie`); ``None`` when every candidate is one token."""

    def nbytes(self) -> int:
        """The bytes its tensors hold."""
        held = [self.hidden] + ([self.candidates] if self.candidates is not None else [])
        return sum(t.numel() * t.element_size() for t in held)


@dataclass
class Decision:
    """One action taken by the policy, with everything training needs (no re-tokenization)."""

    text: str
    """The answer passed to ``env.step`` (score mode: the chosen action name)."""
    prompt_ids: list[int]
    """The exact token context the decision was made on: the full chat-formatted prompt
    (system + user + assistant header)."""
    answer_ids: list[int]
    """The answer tokens (score mode: the chosen candidate's tokens)."""
    token_logprobs: list[float]
    """Per answer token log-prob under the acting policy (score mode: the chosen candidate's token
    log-probs under the language model, for inspection)."""
    logprob: float
    """Log-prob of the whole decision: generate: sum of ``token_logprobs``; score: the log-softmax
    over candidates (at the policy's temperature) of the chosen one."""
    candidates: list[list[int]] | None = None
    """Score mode: token ids of every valid action (as scored); ``None`` in generate mode."""
    action_index: int | None = None
    """Score mode: index of the chosen action in ``candidates``; ``None`` in generate mode."""
    candidate_logprobs: list[float] | None = None
    """Score mode: the log-softmax over candidates (at the policy's temperature) of every one of
    ``candidates``, so the log-prob of another choice in the same state is at hand
    (:meth:`choosing`); ``logprob`` is ``candidate_logprobs[action_index]``. ``None`` in generate
    mode and for decisions built without it (demonstrations)."""
    behaviour_logprobs: list[float] | None = None
    """Per unit (score mode: one, the chosen candidate; generate: one per answer token), its
    log-prob under the distribution that actually drew it, where that is not the policy's own:
    an exploration floor (:meth:`Policy.exploring <textgym.policy.Policy.exploring>`) or a top-p
    cut. The update weighs each unit by the truncated ratio of the policy's probability to this
    one (``TrainConfig.importance_cap``). ``None``: drawn from the policy itself (``logprob``)."""
    trunk: TrunkRecord | None = field(default=None, compare=False, repr=False)
    """Set while training with an adapter on the top layers only: the frozen layers' output for
    the prompt (re-scoring then runs the top layers alone). ``None`` otherwise."""

    def choosing(self, index: int, text: str) -> Decision:
        """The same state's decision for candidate ``index`` (the action named ``text``) instead, taken on purpose rather than
        drawn (a tree rollout's branch: :mod:`textgym.trainers.engine.branching`): its log-prob
        under the policy from ``candidate_logprobs``, and a behaviour log-prob of 0 (probability
        1), so an update weighs it by the policy's own probability of it, truncated and floored
        as any off-policy unit (``TrainConfig.importance_cap``, ``importance_floor``).

        Raises:
            ValueError: not a score-mode decision with ``candidate_logprobs``, or no such candidate.
        """
        if self.candidates is None or self.candidate_logprobs is None:
            raise ValueError("choosing() needs a score-mode decision with candidate_logprobs")
        if not 0 <= index < len(self.candidates):
            raise ValueError(f"candidate {index} of a decision with {len(self.candidates)} candidates")
        return replace(self, text=text, answer_ids=list(self.candidates[index]), action_index=index,
                       logprob=self.candidate_logprobs[index], token_logprobs=[], behaviour_logprobs=[0.0])

    def continues(self, earlier: Decision) -> bool:
        """Whether this decision's context starts with ``earlier``'s context and answer: a later
        turn of the same conversation (conversation mode), so one pass over this context re-scores
        both."""
        n = len(earlier.prompt_ids)
        return (len(self.prompt_ids) >= n + len(earlier.answer_ids)
                and self.prompt_ids[:n] == earlier.prompt_ids
                and self.prompt_ids[n:n + len(earlier.answer_ids)] == earlier.answer_ids)

    def rescoring_key(self) -> int:
        """Equal for decisions that :meth:`Policy.evaluate <textgym.policy.Policy.evaluate>` re-scores
        with one row of the model: the same context and, in score mode, the same candidates (the
        chosen one may differ), in generate mode the same answer. A hash of token ids, so the same
        in every process; updates lay such decisions out side by side to run them once."""
        if self.candidates is not None:
            return hash((tuple(self.prompt_ids), tuple(map(tuple, self.candidates))))
        return hash((tuple(self.prompt_ids), tuple(self.answer_ids)))


@dataclass
class Evaluation:
    """Log-probs of a batch of decisions recomputed with grad (see :meth:`Policy.evaluate`)."""

    logprobs: torch.Tensor
    """``[B, T]`` per-unit log-probs (generate: per answer token; score: ``T=1``, the candidate softmax)."""
    mask: torch.Tensor
    """``[B, T]`` bool: which units are real."""
    old_logprobs: torch.Tensor
    """``[B, T]`` the same units' log-probs recorded at acting time."""
    entropy: torch.Tensor
    """``[B]`` entropy of the acting distribution (generate: mean per answer token; score: over candidates)."""
    hidden: torch.Tensor
    """``[B, H]`` last hidden state at the last prompt position (input of a value head)."""
    candidate_logprobs: list[torch.Tensor] | None = None
    """Score mode: per decision, the log-softmax over all its candidates (with grad); ``None`` in
    generate mode."""
