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
from typing import TYPE_CHECKING

import torch

from textgym.policy import Decision, Policy
from textgym.rollout import Episode, decisions_of
from textgym.trainers.config import SFTConfig, TrainConfig
from textgym.trainers.optimization import optimizer_step

if TYPE_CHECKING:
    from textgym.distributed import ProcessContext


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
                     seed: int | None = None, process: ProcessContext | None = None) -> float:
    """Maximise the log-likelihood of ``decisions``' answers; returns the mean loss of the last epoch.

    Works for both kinds of decision: a generate-mode decision's loss is the mean NLL of its answer
    tokens; a score-mode decision's is the NLL of its chosen candidate among the valid ones.
    Batches whose loss or gradient is not finite are skipped.

    With several processes (``process``), ``decisions`` are this rank's share: the batches are
    planned over all ranks' decisions (the same shuffled order on every rank, each keeping the part
    of a batch it holds), so every rank takes the same steps with the gradients averaged, and the
    loss returned is the global one.
    """
    distributed = process is not None and process.is_distributed
    if distributed:
        counts = process.gather([len(decisions)])
        total, offset = sum(counts), sum(counts[:process.rank])
    else:
        total, offset = len(decisions), 0
    rng = random.Random(seed)
    last = float("nan")
    for _ in range(epochs):
        order = list(range(total))
        rng.shuffle(order)
        if distributed:  # seed=None draws differently on each rank: rank 0's order for all
            order = process.broadcast_object(order)
        losses = []
        for start in range(0, total, batch_size):
            batch = [decisions[i - offset] for i in order[start:start + batch_size]
                     if offset <= i < offset + len(decisions)]
            loss = None
            if batch:
                ev = policy.evaluate(batch)
                mask = ev.mask.float()
                # Mean NLL per answer token of each example, then over examples.
                loss = (-(ev.logprobs * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
            finite = loss is None or bool(torch.isfinite(loss))
            value = loss.item() if loss is not None and finite else 0.0
            if distributed:  # skip the batch on every rank if it is not finite on one; the global loss
                failed, weighted, count = process.reduce_sum([0.0 if finite else 1.0, value * len(batch),
                                                              len(batch)])
                finite, value = failed == 0, weighted / max(count, 1)
            if not finite:
                continue
            optimizer.zero_grad(set_to_none=True)
            if loss is not None:
                loss.backward()
            if optimizer_step(optimizer, max_grad_norm, process, weight=len(batch)):
                losses.append(value)
        optimizer.zero_grad(set_to_none=True)
        last = sum(losses) / len(losses) if losses else float("nan")
    return last


def sft(policy: Policy, demonstrations: Sequence[Demonstration] | str | Path, system_prompt: str = "",
        config: SFTConfig | None = None, *, epochs: int | None = None,
        parameters: Sequence[torch.nn.Parameter] | None = None,
        process: ProcessContext | None = None) -> list[float]:
    """Fine-tune ``policy`` on demonstrations (a JSONL path or a list); returns the loss per epoch.

    Args:
        policy: the policy (with a LoRA adapter, only the adapter is trained; else the whole model).
        demonstrations: a path to a JSONL file, or :class:`Demonstration` objects.
        system_prompt: the system prompt for demonstrations that carry none (use the env's, e.g.
            ``env.get_wrapper_attr("system_prompt")``).
        config: learning rate, epochs, batch size, clipping.
        epochs: overrides ``config.epochs``.
        parameters: what to train (default: the policy's trainable parameters).
        process: with several data-parallel processes, each trains on its share of the
            demonstrations (every rank holds them all) and the gradients are averaged.
    """
    config = config or SFTConfig()
    torch.manual_seed(config.seed)
    demos = load_demonstrations(demonstrations) if isinstance(demonstrations, (str, Path)) else list(demonstrations)
    if process is not None and process.is_distributed:
        demos = [demos[i] for i in process.shard(len(demos))]
    decisions = demonstration_decisions(policy, demos, system_prompt)
    if parameters is None:
        parameters = [p for p in policy.model.parameters() if p.requires_grad] or \
            list(policy.parameters_to_train())
    optimizer = torch.optim.AdamW(parameters, lr=config.lr)
    history = []
    for epoch in range(epochs or config.epochs):
        history.append(sft_on_decisions(policy, decisions, optimizer, batch_size=config.batch_size, epochs=1,
                                        max_grad_norm=config.max_grad_norm, seed=config.seed + epoch,
                                        process=process))
    return history


class OnlineSFT:
    """Online SFT between RL updates: every ``sft_every`` updates, one epoch of imitation of the
    best episodes (by return) of a replay buffer. See the ``sft_*`` fields of :class:`TrainConfig`.

    With several data-parallel processes, each keeps a replay buffer of its own episodes and
    imitates the best of it; the steps are planned over all ranks' decisions
    (:func:`sft_on_decisions`).

    Args:
        config: the trainer's config (``sft_every``, ``sft_top_fraction``, ``replay_size``,
            ``sft_lr``, ``minibatch_size``, ``max_grad_norm``).
        process: the data-parallel context (``None``: one process).
    """

    def __init__(self, config: TrainConfig, process: ProcessContext | None = None):
        self.config = config
        self.process = process
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
                                batch_size=cfg.minibatch_size, epochs=1, max_grad_norm=cfg.max_grad_norm,
                                process=self.process)
        if self.process is not None and self.process.is_distributed:
            return {"sft_loss": loss, "sft_decisions": int(self.process.reduce_sum([len(decisions)])[0])}
        return {"sft_loss": loss, "sft_decisions": len(decisions)}


__all__ = ["Demonstration", "OnlineSFT", "demonstration_decisions", "load_demonstrations", "sft",
           "sft_on_decisions"]
