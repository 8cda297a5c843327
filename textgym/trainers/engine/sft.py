"""Supervised warm start: imitate demonstrations before (and, online, between) RL updates.

Demonstrations are JSON lines, each either ``{"prompt": ..., "answer": ...}`` or
``{"observation": ..., "action": ...}``, with an optional ``"system_prompt"`` (default: the
env's, when an env is given) and ``"valid_actions"``; or the play of one of the env's reference
players (:func:`player_demonstrations`: ``textgym train --sft-player scripted``). The policy's
chat template turns each into prompt token ids; the loss is the negative log-likelihood of the
answer tokens (the prompt is context), or, for a score-mode policy and a demonstration that lists
its valid actions, of the answer among them (what the policy's greedy choice maximises).

Example:
    >>> import json, tempfile, textgym
    >>> from textgym.trainers.engine.sft import load_demonstrations, sft
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

import dataclasses
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch

from textgym import jsonl, seeds
from textgym.policy import Decision, Policy
from textgym.rollout import Episode, decisions_of, turn_system_prompt, turn_valid_actions
from textgym.trainers.engine.optimization import optimizer_step
from textgym.trainers.engine.train_config import SFTConfig, TrainConfig

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
    valid_actions: list[str] | None = None
    """The env's valid actions at this turn: a score-mode policy learns to rank the answer first
    among them (``None``: the answer's tokens alone)."""
    earlier: list[tuple[str, str]] | None = None
    """Conversation mode (an env with a :class:`~textgym.wrappers.History` window): the episode's
    earlier turns, ``(observation, answer)`` oldest first, which a rollout reads as chat turns
    before ``prompt`` (``None``: the prompt alone)."""
    window: int | None = None
    """With ``earlier``: the History window, whose rule decides which earlier turns the context keeps."""


def load_demonstrations(path: str | Path) -> list[Demonstration]:
    """Read demonstrations from a JSONL file (prompt/answer or observation/action pairs).

    Raises:
        ValueError: naming the line, when a line is not JSON or lacks the fields.
    """
    demos: list[Demonstration] = []
    for number, line in jsonl.numbered_lines(Path(path).read_text(encoding="utf-8")):
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
        valid = row.get("valid_actions")
        if valid is not None and (not isinstance(valid, list) or answer not in valid
                                  or not all(isinstance(a, str) for a in valid)):
            raise ValueError(f"{path}:{number}: valid_actions must be a list of strings holding the answer")
        demos.append(Demonstration(prompt, answer, row.get("system_prompt"), valid))
    if not demos:
        raise ValueError(f"{path}: no demonstrations")
    return demos


def demonstration_decisions(policy: Policy, demos: Sequence[Demonstration],
                            system_prompt: str = "") -> list[Decision]:
    """Turn demonstrations into decisions the policy can evaluate: the chat-formatted prompt ids and
    the answer's token ids (with the end-of-turn token, as the policy emits and scores it). A
    generate-mode policy with a ``prefill``: an answer that starts with it is learned as the policy
    writes it, the prefill in the prompt and the rest as the answer. A generate-mode answer ends
    with the end-of-turn token, as a sampled answer does (the policy learns to stop), unless the
    policy stops at ``stop`` strings. A
    demonstration with ``earlier`` turns: its prompt is the conversation a rollout reads at that
    turn (:class:`~textgym.policy.conversation.Conversation`). A score-mode policy and a
    demonstration with ``valid_actions``: a score-mode decision choosing the answer among them."""
    score = policy.config.mode == "score"
    prefill = policy.config.prefill if not score else ""
    # A generated answer ends with the end-of-turn token it samples (kept in its ids), unless the
    # policy stops at stop strings; score mode: the answer's tokens as scored.
    ends_turn = True if not score and not policy.config.stop else None
    decisions: list[Decision | None] = []
    chosen: list[tuple[int, Demonstration, str]] = []  # score-mode demonstrations: acted on below
    for demo in demos:
        system = demo.system_prompt if demo.system_prompt is not None else system_prompt
        if score and demo.valid_actions and demo.answer in demo.valid_actions:
            chosen.append((len(decisions), demo, system))
            decisions.append(None)
            continue
        prompt_ids, answer = _context_ids(policy, demo, system, ends_turn), demo.answer
        if prefill and answer.startswith(prefill) and len(answer) > len(prefill):
            prompt_ids, answer = prompt_ids + policy.prefill_ids, answer[len(prefill):]
        answer_ids = policy.candidate_ids(answer, end=ends_turn)
        decisions.append(Decision(text=demo.answer, prompt_ids=prompt_ids,
                                  answer_ids=list(answer_ids), token_logprobs=[0.0] * len(answer_ids),
                                  logprob=0.0))
    # Score mode: the decisions the policy itself would make on these turns (prompt, candidates,
    # and the frozen layers' output when it trains the top layers only, so every epoch re-scores
    # the top alone), choosing the demonstrated action.
    for start in range(0, len(chosen), _ACT_CHUNK):
        part = chosen[start:start + _ACT_CHUNK]
        acted = policy.act([demo.prompt for _, demo, _ in part], [system for _, _, system in part],
                           [demo.valid_actions for _, demo, _ in part], greedy=True)
        for (i, demo, _), decision in zip(part, acted):
            k = demo.valid_actions.index(demo.answer)
            answer_ids = list(decision.candidates[k])
            decisions[i] = dataclasses.replace(decision, text=demo.answer, answer_ids=answer_ids, action_index=k,
                                               token_logprobs=[0.0] * len(answer_ids), logprob=0.0)
    return decisions


#: Demonstrations acted on per forward pass (score mode).
_ACT_CHUNK = 32


def _context_ids(policy: Policy, demo: Demonstration, system_prompt: str, end: bool | None) -> list[int]:
    """The prompt ids a policy acts on at the demonstrated turn: the observation alone, or with
    ``earlier`` turns the conversation so far, built by the rollout's own rule (its window)."""
    from textgym.policy.conversation import Conversation, ConversationWindow

    if demo.earlier is None:
        return policy.prompt_ids(system_prompt, demo.prompt)
    conversation = Conversation(ConversationWindow(demo.window, policy.config.history_tokens))
    for observation, answer in demo.earlier:
        conversation.add_observation(observation, system_prompt, policy.prompts)
        conversation.add_answer(policy.candidate_ids(answer, end=end))
    return conversation.add_observation(demo.prompt, system_prompt, policy.prompts)


def sft_on_decisions(policy: Policy, decisions: Sequence[Decision], optimizer: torch.optim.Optimizer,
                     batch_size: int = SFTConfig.batch_size, epochs: int = 1,
                     max_grad_norm: float | None = SFTConfig.max_grad_norm,
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
                loss = _answer_nll(policy, batch).mean()  # per answer token of each example, then over examples
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


def _answer_nll(policy: Policy, batch: Sequence[Decision]) -> torch.Tensor:
    """Each decision's mean NLL per answer token, with grad. A batch may mix score-mode and token
    decisions (demonstrations with and without valid actions): each kind is evaluated on its own."""
    kinds = [[d for d in batch if d.candidates is not None], [d for d in batch if d.candidates is None]]
    nll = []
    for kind in filter(None, kinds):
        ev = policy.evaluate(kind)
        mask = ev.mask.float()
        nll.append(-(ev.logprobs * mask).sum(1) / mask.sum(1).clamp(min=1))
    return torch.cat(nll)


def sft(policy: Policy, demonstrations: Sequence[Demonstration] | str | Path, system_prompt: str = "",
        config: SFTConfig | None = None, *, epochs: int | None = None,
        parameters: Sequence[torch.nn.Parameter] | None = None,
        process: ProcessContext | None = None,
        on_epoch: Callable[[int, int, float], Any] | None = None) -> list[float]:
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
        on_epoch: called after each epoch with (epoch, epochs, its mean loss): progress.
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
    total = epochs or config.epochs
    for epoch in range(total):
        history.append(sft_on_decisions(policy, decisions, optimizer, batch_size=config.batch_size, epochs=1,
                                        max_grad_norm=config.max_grad_norm, seed=config.seed + epoch,
                                        process=process))
        if on_epoch is not None:
            on_epoch(epoch + 1, total, history[-1])
    return history


def player_demonstrations(env: str, player: str = "scripted", episodes: int = 100, *, seed: int = 0,
                          env_kwargs: Mapping[str, Any] | None = None) -> tuple[list[Demonstration], dict[str, Any]]:
    """Record one of the env's reference players (``textgym eval --baseline`` names: ``scripted``
    ...) playing ``episodes`` episodes from seeds ``seed, seed + 1, ...``: every decision as a
    :class:`Demonstration` (the observation and system prompt a policy would read, the player's
    answer, the valid actions), and the player's statistics (:func:`textgym.baselines.evaluate_reference`).

    The observation is the newest one alone, as a policy without ``history`` reads it; an env with
    its own :class:`~textgym.wrappers.History` window is read as a rollout reads it, a
    conversation (each demonstration carries the episode's ``earlier`` turns). An answer
    that is not among the valid actions as written is matched to one ignoring case and spaces
    (kept as written when none matches). A self-play ``opponent`` plays the env's default one.

    Example:
        >>> demos, stats = player_demonstrations("bandit", "scripted", episodes=2)
        >>> len(demos), demos[0].answer in demos[0].valid_actions, stats["return_mean"]
        (2, True, 1.0)

    Raises:
        ValueError: the env has no reference player by that name (naming those it has).
    """
    import textgym
    from textgym.baselines import evaluate_reference, reference_policy_names
    from textgym.registry import held_out, reference_policy, resolve_id

    env_id = resolve_id(env)
    policy = reference_policy(env_id, player)
    if policy is None:
        raise ValueError(f"{env_id} has no reference player {player!r}; it has: "
                         f"{', '.join(reference_policy_names(env_id))}")
    made = textgym.make(env_id, **held_out(dict(env_kwargs or {})))
    demos: list[Demonstration] = []
    window = _history_window(made)
    turns: list[tuple[str, str]] = []  # the episode so far (conversation mode)

    def record(observation: str, info: dict[str, Any], answer: str) -> None:
        valid = [str(a) for a in turn_valid_actions(made, info)]
        if valid and answer not in valid:
            same = [a for a in valid if a.strip().lower() == answer.strip().lower()]
            answer = same[0] if same else answer
        system = turn_system_prompt(made, info)
        if window is None:
            demos.append(Demonstration(observation, answer, system, valid or None))
            return
        newest = info.get("newest_observation", observation)
        demos.append(Demonstration(newest, answer, system, valid or None, earlier=list(turns), window=window))
        turns.append((newest, answer))

    played = made if window is None else _OnReset(made, turns.clear)
    try:
        stats = evaluate_reference(played, policy, episodes, seed, on_step=record)
    finally:
        made.close()
    return demos, stats


def _history_window(env: Any) -> int | None:
    """The window of an env's own :class:`~textgym.wrappers.History` wrapper (``None``: none)."""
    try:
        window = env.get_wrapper_attr("history_window")
    except AttributeError:
        return None
    return None if window is None else int(window)


class _OnReset(gym.Wrapper):
    """Calls ``on_reset()`` before each reset: where a recorded episode's turns start."""

    def __init__(self, env: gym.Env, on_reset: Callable[[], Any]):
        super().__init__(env)
        self.on_reset = on_reset

    def reset(self, **kwargs: Any):
        self.on_reset()
        return self.env.reset(**kwargs)


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
                                seed=seeds.rollout_seed(cfg.seed, update_count),  # reruns, resumes: the same order
                                process=self.process)
        if self.process is not None and self.process.is_distributed:
            return {"sft_loss": loss, "sft_decisions": int(self.process.reduce_sum([len(decisions)])[0])}
        return {"sft_loss": loss, "sft_decisions": len(decisions)}


__all__ = ["Demonstration", "OnlineSFT", "demonstration_decisions", "load_demonstrations",
           "player_demonstrations", "sft", "sft_on_decisions"]
