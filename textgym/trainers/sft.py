"""Supervised warm start: imitate demonstrations before (and, online, between) RL updates.

Demonstrations are JSON lines, each either ``{"prompt": ..., "answer": ...}`` or
``{"observation": ..., "action": ...}``, with an optional ``"system_prompt"`` (default: the
env's, when an env is given). The policy's chat template turns each into prompt token ids; the
loss is the negative log-likelihood of the answer tokens only (the prompt is context).

Example:
    >>> import json, tempfile, textgym
    >>> from textgym.trainers.sft import load_demonstrations, sft
    >>> path = tempfile.mktemp(suffix=".jsonl")
    >>> _ = open(path, "w").write(json.dumps({"observation": "Color: red.", "action": "cat"}) + "\\n")
    >>> model, tok = textgym.models.load("tiny")
    >>> policy = textgym.Policy(model, tok)
    >>> demos = load_demonstrations(path)
    >>> history = sft(policy, demos, system_prompt="Answer with an animal.", epochs=2)
    >>> history[-1] < history[0]          # loss per epoch went down
    True
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from textgym.policy import Decision, Policy
from textgym.rollout import Episode, decisions_of
from textgym.trainers.config import SFTConfig, TrainConfig
from textgym.trainers.optimization import optimizer_step


@dataclass
class Demonstration:
    """One demonstrated turn: what the model saw and what it should answer."""

    prompt: str
    """The observation text (the user message)."""
    answer: str
    """The answer text to imitate."""
    system_prompt: str | None = None
    """The system prompt; ``None`` uses the one given to :func:`sft` (the env's)."""


def load_demonstrations(path: str | Path) -> list[Demonstration]:
    """Read demonstrations from a JSONL file (prompt/answer or observation/action pairs).

    Raises:
        ValueError: naming the line, when a line is not JSON or lacks the fields.
    """
    demos: list[Demonstration] = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not JSON ({error.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object")  # noqa: TRY004 (bad data: ValueError)
        prompt = row.get("prompt", row.get("observation"))
        answer = row.get("answer", row.get("action"))
        if not isinstance(prompt, str) or not isinstance(answer, str):
            raise ValueError(f"{path}:{number}: needs string fields prompt/answer or observation/action")  # noqa: TRY004
        demos.append(Demonstration(prompt, answer, row.get("system_prompt")))
    if not demos:
        raise ValueError(f"{path}: no demonstrations")
    return demos


def demonstration_decisions(policy: Policy, demos: Sequence[Demonstration],
                            system_prompt: str = "") -> list[Decision]:
    """Turn demonstrations into decisions the policy can evaluate: the chat-formatted prompt ids and
    the answer's token ids (with the end-of-turn token, as the policy emits and scores it). A
    generate-mode policy with a ``prefill``: an answer that starts with it is learned as the policy
    writes it, the prefill in the prompt and the rest as the answer."""
    prefill = policy.config.prefill if policy.config.mode == "generate" else ""
    decisions = []
    for demo in demos:
        system = demo.system_prompt if demo.system_prompt is not None else system_prompt
        prompt_ids, answer = policy.prompt_ids(system, demo.prompt), demo.answer
        if prefill and answer.startswith(prefill) and len(answer) > len(prefill):
            prompt_ids, answer = prompt_ids + policy.prefill_ids, answer[len(prefill):]
        answer_ids = policy.candidate_ids(answer)  # answer tokens (+ end-of-turn)
        decisions.append(Decision(text=demo.answer, prompt_ids=prompt_ids,
                                  answer_ids=list(answer_ids), token_logprobs=[0.0] * len(answer_ids),
                                  logprob=0.0))
    return decisions


def sft_on_decisions(policy: Policy, decisions: Sequence[Decision], optimizer: torch.optim.Optimizer,
                     batch_size: int = 16, epochs: int = 1, max_grad_norm: float | None = 1.0,
                     seed: int | None = None) -> float:
    """Maximise the log-likelihood of ``decisions``' answers; returns the mean loss of the last epoch.

    Works for both kinds of decision: a generate-mode decision's loss is the mean NLL of its answer
    tokens; a score-mode decision's is the NLL of its chosen candidate among the valid ones.
    Batches whose loss or gradient is not finite are skipped.
    """
    rng = random.Random(seed)
    last = float("nan")
    for _ in range(epochs):
        order = list(range(len(decisions)))
        rng.shuffle(order)
        losses = []
        for start in range(0, len(order), batch_size):
            batch = [decisions[i] for i in order[start:start + batch_size]]
            ev = policy.evaluate(batch)
            mask = ev.mask.float()
            # Mean NLL per answer token of each example, then over examples.
            loss = (-(ev.logprobs * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
            if not torch.isfinite(loss):
                continue
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if optimizer_step(optimizer, max_grad_norm):
                losses.append(loss.item())
        optimizer.zero_grad(set_to_none=True)
        last = sum(losses) / len(losses) if losses else float("nan")
    return last


def sft(policy: Policy, demonstrations: Sequence[Demonstration] | str | Path, system_prompt: str = "",
        config: SFTConfig | None = None, *, epochs: int | None = None,
        parameters: Sequence[torch.nn.Parameter] | None = None) -> list[float]:
    """Fine-tune ``policy`` on demonstrations (a JSONL path or a list); returns the loss per epoch.

    Args:
        policy: the policy (with a LoRA adapter, only the adapter is trained; else the whole model).
        demonstrations: a path to a JSONL file, or :class:`Demonstration` objects.
        system_prompt: the system prompt for demonstrations that carry none (use the env's, e.g.
            ``env.get_wrapper_attr("system_prompt")``).
        config: learning rate, epochs, batch size, clipping.
        epochs: overrides ``config.epochs``.
        parameters: what to train (default: the policy's trainable parameters).
    """
    config = config or SFTConfig()
    torch.manual_seed(config.seed)
    demos = load_demonstrations(demonstrations) if isinstance(demonstrations, (str, Path)) else list(demonstrations)
    decisions = demonstration_decisions(policy, demos, system_prompt)
    if parameters is None:
        parameters = [p for p in policy.model.parameters() if p.requires_grad] or \
            list(policy.parameters_to_train())
    optimizer = torch.optim.AdamW(parameters, lr=config.lr)
    history = []
    for epoch in range(epochs or config.epochs):
        history.append(sft_on_decisions(policy, decisions, optimizer, batch_size=config.batch_size, epochs=1,
                                        max_grad_norm=config.max_grad_norm, seed=config.seed + epoch))
    return history


class OnlineSFT:
    """Online SFT between RL updates: every ``sft_every`` updates, one epoch of imitation of the
    best episodes (by return) of a replay buffer. See the ``sft_*`` fields of :class:`TrainConfig`.

    Args:
        config: the trainer's config (``sft_every``, ``sft_top_fraction``, ``replay_size``,
            ``sft_lr``, ``minibatch_size``, ``max_grad_norm``).
    """

    def __init__(self, config: TrainConfig):
        self.config = config
        self.replay: list[Episode] = []
        self.optimizer: torch.optim.Optimizer | None = None  # made at the first SFT step

    def make_optimizer(self, parameters: Sequence[torch.nn.Parameter]) -> torch.optim.Optimizer:
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(list(parameters), lr=self.config.sft_lr)
        return self.optimizer

    def after_update(self, policy: Policy, episodes: Sequence[Episode], update_count: int,
                     parameters: Sequence[torch.nn.Parameter]) -> dict[str, float]:
        """Add ``episodes`` to the replay buffer and, on every ``sft_every``-th update, imitate the
        best of it; returns ``sft_loss`` and ``sft_decisions`` when it did."""
        cfg = self.config
        if not cfg.sft_every:
            return {}
        self.replay.extend(episodes)
        self.replay = self.replay[-cfg.replay_size:]
        if update_count % cfg.sft_every:
            return {}
        best = sorted(self.replay, key=lambda ep: float(ep.return_), reverse=True)
        best = best[: max(1, int(len(best) * cfg.sft_top_fraction))]
        decisions = decisions_of(best)
        loss = sft_on_decisions(policy, decisions, self.make_optimizer(parameters),
                                batch_size=cfg.minibatch_size, epochs=1, max_grad_norm=cfg.max_grad_norm)
        return {"sft_loss": loss, "sft_decisions": len(decisions)}


__all__ = ["Demonstration", "OnlineSFT", "demonstration_decisions", "load_demonstrations", "sft",
           "sft_on_decisions"]
