"""The :class:`Policy`: acts for a batch of text envs in one call, and re-scores its decisions.

It composes the pieces of this package: chat prompts (:mod:`.prompts`), the shared-prefix KV
cache (:mod:`.kv_cache`), candidate scoring (:mod:`.scoring`), sampling and the generate loop
(:mod:`.sampling`), re-scoring (:mod:`.rescoring`), the reference weights (:mod:`.reference`) and
saving/loading (:mod:`.persistence`). Its settings are one :class:`PolicyConfig`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from textgym import models
from textgym.lora import is_peft_model
from textgym.policy import persistence
from textgym.policy.config import PolicyConfig
from textgym.policy.conversation import Conversation, ConversationCache, ConversationWindow
from textgym.policy.decision import Decision, Evaluation, TrunkRecord
from textgym.policy.frozen_trunk import (
    TopRescorer,
    Trunk,
    acting_trunk,
    find_trunk,
    own_records,
    recording,
    trunk_records,
)
from textgym.policy.kv_cache import (
    BatchState,
    PrefixCache,
    contiguous_output_head,
    run_prompts,
    shared_prefix_length,
    unique_rows,
    weights_version,
)
from textgym.policy.memory import check_acting_memory
from textgym.policy.precision import (
    ActingCopy,
    PrecisionChoice,
    check_acting_device,
    choose_act_dtype,
    float32_output_head,
    update_precision,
)
from textgym.policy.prompts import ChatPrompts, end_token_ids
from textgym.policy.reference import ReferenceWeights
from textgym.policy.rescoring import (
    conversation_chains,
    rescore_candidates,
    rescore_candidates_from_trunk,
    rescore_conversation_candidates,
    rescore_conversation_tokens,
    rescore_tokens,
    same_evaluation,
)
from textgym.policy.sampling import StopStrings, generate, sample_candidates
from textgym.policy.score_memo import ScoreMemo, rows_of, stack_rows
from textgym.policy.scoring import CandidateTokens, ScoredBatch, score_batch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["Policy"]

_COUNTERS = ("decisions", "prompt_tokens", "prompt_tokens_total", "answer_tokens", "model_tokens",
             "padded_tokens", "prefix_misses", "memo_rows", "act_seconds")


class Policy:
    """A language model acting in text envs: batched, with the shared prompt prefix cached.

    Args:
        model: a Hugging Face causal LM (optionally wrapped by a PEFT adapter).
        tokenizer: its tokenizer; the chat template comes from it (or from ``chat_template``).
        mode: ``"score"`` or ``"generate"`` (a shortcut for the ``mode`` setting).
        config: the settings (:class:`PolicyConfig`; default: its defaults).
        device: where inputs go; default the model's device.
        name: the model name it was loaded from (recorded by :meth:`save` and in checkpoints).
        **overrides: settings of :class:`PolicyConfig` that replace ``config``'s (temperature,
            normalization, seed, ...). Every setting also reads as an attribute
            (``policy.temperature``).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, mode: str | None = None, *,
                 config: PolicyConfig | None = None, device: str | torch.device | None = None,
                 name: str | None = None, **overrides: Any):
        if mode is not None:
            overrides["mode"] = mode
        self._config = (config if config is not None else PolicyConfig()).replace(**overrides)
        settings = self._config
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.pad_id = tokenizer.pad_token_id
        self.end_ids = end_token_ids(tokenizer, model)
        self.prompts = ChatPrompts(tokenizer, settings.chat_template, settings.system_role)
        self.candidate_tokens = CandidateTokens(tokenizer, settings.score_end, settings.candidate_cache_size)
        self.prefix_cache = PrefixCache(settings.prefix_cache_size)
        self.score_memo = ScoreMemo(settings.score_memo_bytes)  # score mode: prompts met again
        self.conversation_cache = ConversationCache()  # conversation mode: a KV row per conversation
        #: Generate mode: the tokens of ``prefill``, appended to every prompt.
        self.prefill_ids: list[int] = (tokenizer(settings.prefill, add_special_tokens=False)["input_ids"]
                                       if settings.prefill else [])
        self.stop_strings = StopStrings(tokenizer, settings.stop)
        for dtype in (settings.act_dtype, settings.eval_act_dtype):
            check_acting_device(dtype, self.device)
        self._memory_checked_rows = 0  # the largest batch checked against the GPU's free memory
        self.generator = torch.Generator(device=self.device)  # sampling draws stay on the model's device
        self.seed(settings.seed)
        self.model.eval()  # no dropout: acting and re-scoring must see the same function
        contiguous_output_head(self.model)
        if settings.update_dtype != "float32":  # the head stays float32 under the update's autocast
            float32_output_head(self.model)
        self._reference = ReferenceWeights()
        self._top_rescorer = TopRescorer()
        self._acting: ActingCopy | None = None  # resolved at the first act (auto measures then)
        self._eval_acting: ActingCopy | None = None  # within evaluating(); may be _acting itself
        self._evaluating = False
        self._explore_floor = 0.0  # within exploring()
        #: What ``"auto"`` measured, for act_dtype or eval_act_dtype (``None`` until then, or unused).
        self.precision_choice: PrecisionChoice | None = None
        #: Running totals: decisions, prompt_tokens (new prompt tokens run through the model, after
        #: prefix-cache reuse), prompt_tokens_total (full prompt lengths), answer_tokens, model_tokens
        #: (every real token run through the model), padded_tokens (padding slots run),
        #: prefix_misses, act_seconds.
        self.counters: dict[str, float] = dict.fromkeys(_COUNTERS, 0)
        self.counters["act_seconds"] = 0.0

    @property
    def config(self) -> PolicyConfig:
        """The policy's settings (read-only: build a new policy to change them)."""
        return self._config

    def __repr__(self) -> str:
        c = self._config
        extra = (f"normalization={c.normalization!r}" if c.mode == "score"
                 else f"top_p={c.top_p}, max_new_tokens={c.max_new_tokens}")
        return (f"Policy({self.name or type(self.model).__name__!r}, mode={c.mode!r}, "
                f"temperature={c.temperature}, {extra}, lora={self.is_lora}, device={self.device})")

    # ------------------------------------------------------------------ construction & persistence
    @classmethod
    def from_pretrained(cls, name_or_path: str = models.DEFAULT_MODEL, mode: str | None = None, *,
                        config: PolicyConfig | None = None, device: str | torch.device | None = None,
                        dtype: torch.dtype | str | None = None, quantize: str | None = None,
                        lora: bool | None = None, **overrides: Any) -> Policy:
        """Load a model by name and wrap it in a policy, with the model registry's defaults
        (see :func:`textgym.policy.persistence.from_pretrained`). LoRA is added by the trainer."""
        return persistence.from_pretrained(cls, name_or_path, mode, config=config, device=device, dtype=dtype,
                                           quantize=quantize, lora=lora, **overrides)

    def save(self, directory: str | os.PathLike) -> Path:
        """Save the adapter or full model, the tokenizer and the settings (atomically)."""
        return persistence.save(self, directory)

    @classmethod
    def load(cls, directory: str | os.PathLike, device: str | torch.device | None = None,
             dtype: torch.dtype | str | None = None, quantize: str | None = None,
             **overrides: Any) -> Policy:
        """Load a policy written by :meth:`save` (the base model is loaded by name for an adapter)."""
        return persistence.load(cls, directory, device=device, dtype=dtype, quantize=quantize,
                                **overrides)

    def seed(self, seed: int | None) -> None:
        """Reseed the sampling generator (``None``: a fresh random seed)."""
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))

    def clear_cache(self) -> None:
        """Drop the cached prefix and conversation KV (also dropped automatically when the weights change)."""
        self.prefix_cache.clear()
        self.conversation_cache.clear()
        self.score_memo.clear()

    @property
    def conversation_window(self) -> ConversationWindow | None:
        """The window of the ``history`` setting (``None``: single-observation mode)."""
        return ConversationWindow.from_history(self._config.history, self._config.history_tokens)

    # ------------------------------------------------------------------ training hooks
    @property
    def is_lora(self) -> bool:
        """Whether the model is wrapped by a PEFT adapter."""
        return is_peft_model(self.model)

    def parameters_to_train(self) -> list[torch.nn.Parameter]:
        """The parameters an optimizer should update: the adapter's with LoRA, else all.

        Without LoRA this also snapshots the current weights as the frozen :meth:`reference` policy
        (once), since the weights are about to change.
        """
        if not self.is_lora:
            self._reference.take_snapshot(self.model)
            for p in self.model.parameters():
                p.requires_grad_(True)
        return [p for p in self.model.parameters() if p.requires_grad]

    def rebase_reference(self) -> None:
        """Make the policy as it is now the :meth:`reference` policy (``Trainer.warm_start`` does,
        so a KL penalty keeps RL near the imitation rather than the untrained model)."""
        self._reference.rebase(self.model)

    def reference_state(self) -> dict[str, torch.Tensor] | None:
        """The reference's own weights, to checkpoint: a rebased adapter's, or a full fine-tune's
        frozen copy (``None``: the base model under the adapter, nothing to save)."""
        return self._reference.state()

    def load_reference_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore the reference from :meth:`reference_state`'s weights."""
        self._reference.load_state(self.model, tensors)

    @property
    def reference_version(self) -> int:
        """Changes whenever the :meth:`reference` policy's weights do (a rebase, a restore): what
        was computed with the reference under another version is stale."""
        return self._reference.version

    @contextlib.contextmanager
    def reference(self) -> Iterator[Policy]:
        """Within this block the policy is the reference policy: the LoRA adapter is disabled (no
        second copy of the model); without LoRA, a frozen copy of the weights taken when
        :meth:`parameters_to_train` was first called (or now, if never). After
        :meth:`rebase_reference`: the policy as it was then (see :mod:`textgym.policy.reference`)."""
        if self._reference.active:
            yield self
            return
        with self._reference.use(self.model) as reference_model:
            trained, self.model = self.model, reference_model
            try:
                yield self
            finally:
                self.model = trained

    def _measured_precision(self) -> str:
        if self.precision_choice is None:
            self.precision_choice = choose_act_dtype(self.model, self.tokenizer,
                                                     self.name or self.model.config.name_or_path, self.device)
        return self.precision_choice.dtype

    @property
    def act_precision(self) -> str:
        """The precision the policy acts in (``act_dtype``, with ``"auto"`` resolved: measured
        on the first call, or read from the machine's cache; see :mod:`textgym.policy.precision`)."""
        if self._acting is None:
            dtype = self._config.act_dtype
            self._acting = ActingCopy(self._measured_precision() if dtype == "auto" else dtype)
        return self._acting.dtype

    @property
    def eval_precision(self) -> str:
        """The precision greedy evaluation acts in (``eval_act_dtype`` resolved; see
        :meth:`evaluating`)."""
        if self._eval_acting is None:
            dtype = self._config.eval_act_dtype
            if dtype == "auto":
                dtype = self.act_precision if self.act_precision != "float32" else self._measured_precision()
            self._eval_acting = self._acting if dtype == self.act_precision else ActingCopy(dtype)
        return self._eval_acting.dtype

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[str]:
        """Within the block the policy acts in :attr:`eval_precision` (yielded): greedy
        evaluation, whose decisions train nothing, at the machine's fastest agreeing precision."""
        dtype = self.eval_precision
        before, self._evaluating = self._evaluating, True
        try:
            yield dtype
        finally:
            self._evaluating = before

    @contextlib.contextmanager
    def exploring(self, floor: float) -> Iterator[None]:
        """Within the block, score-mode sampling (not greedy play) draws from ``(1 - floor) *
        policy + floor * uniform`` over each env's valid actions, and records that mixture's
        log-prob of every sampled action in ``Decision.behaviour_logprobs`` (the trainers' rollouts,
        ``TrainConfig.explore_floor``; the update corrects for it). ``floor`` 0: the policy itself.

        Example:
            >>> policy = Policy(*models.load("tiny"), mode="score")
            >>> with policy.exploring(1.0):
            ...     d = policy.act(["obs"], ["sys"], [["A", "B", "C", "D"]])[0]
            >>> import math
            >>> round(math.exp(d.behaviour_logprobs[0]), 4)   # uniform over the 4 actions
            0.25
        """
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"exploration floor must be in [0, 1], got {floor}")
        before, self._explore_floor = self._explore_floor, float(floor)
        try:
            yield
        finally:
            self._explore_floor = before

    def acting_model(self) -> torch.nn.Module:
        """The model :meth:`act` runs: the weights themselves in float32, else their copy in
        :attr:`act_precision` (:attr:`eval_precision` within :meth:`evaluating`), rebuilt when the
        weights have changed since it was made."""
        self.act_precision  # noqa: B018 - resolves the precision once
        acting = self._eval_acting if self._evaluating else self._acting
        return acting.model_for(self.model, self._weights_version())

    def _acting_version(self) -> tuple:
        """The key of what the acting model computed (KV caches): the weights and the precision."""
        return (*self._weights_version(), self.eval_precision if self._evaluating else self.act_precision)

    def _weights_version(self) -> tuple:
        return weights_version(self.model, self._reference.active)

    # ------------------------------------------------------------------ prompts and candidates
    def prompt_ids(self, system_prompt: str, observation: str) -> list[int]:
        """Token ids of the chat-formatted prompt: system prompt, user observation, assistant header."""
        return self.prompts.prompt_ids(system_prompt, observation)

    def candidate_ids(self, action: str, end: bool | None = None) -> list[int]:
        """Token ids an action is scored by (followed by the end-of-turn token when ``end``;
        default: when ``score_end is True``)."""
        return self.candidate_tokens.ids(action, end)

    def candidate_set(self, actions: Sequence[str]) -> list[list[int]]:
        """Token ids of one env's valid actions, as scored (see ``score_end``)."""
        return self.candidate_tokens.candidate_set(actions)

    # ------------------------------------------------------------------ acting
    def act(self, observations: Sequence[str], system_prompts: Sequence[str],
            valid_actions: Sequence[Sequence[str]] | None = None, greedy: bool = False, *,
            conversations: Sequence[Conversation] | None = None) -> list[Decision]:
        """Decide for a batch of envs in one call.

        Args:
            observations: each env's newest user-message text.
            system_prompts: each env's system prompt (``info["system_prompt"]``).
            valid_actions: each env's legal action names (``info["valid_actions"]``); required in
                score mode, ignored in generate mode.
            greedy: argmax (score) / greedy decoding (generate) instead of sampling.
            conversations: conversation mode: each env's :class:`Conversation` (its episode so
                far). The observation becomes its next user turn, the decision acts on the whole
                conversation (``Decision.prompt_ids``) and its answer is recorded in it; only the
                tokens an env's KV row does not hold yet are run. ``None``: each observation alone.
        """
        n = len(observations)
        if len(system_prompts) != n or (valid_actions is not None and len(valid_actions) != n):
            raise ValueError("observations, system_prompts and valid_actions must have the same length")
        if conversations is not None and (len(conversations) != n or len({id(c) for c in conversations}) != n):
            raise ValueError("conversations must hold one distinct Conversation per observation")
        if n == 0:
            return []
        score = self._config.mode == "score"
        if score:
            if valid_actions is None:
                raise ValueError("score mode needs valid_actions for every env")
            for i, actions in enumerate(valid_actions):
                if not actions:
                    raise ValueError(f"env {i} has no valid actions to score: its answers are free text "
                                     "(use generate mode, --mode generate)")
        if conversations is not None:
            return self._act_in_conversations(observations, system_prompts, valid_actions, greedy, conversations)
        started = time.perf_counter()
        if self.model.training:
            self.model.eval()
        model = self.acting_model()
        prompts = self.prompts.batch_prompt_ids(system_prompts, observations)
        if not score and self.prefill_ids:  # the answer's opening, written for the model
            prompts = [p + self.prefill_ids for p in prompts]
        self._check_memory(model, prompts)
        # One system prompt for the whole batch: cache exactly its prefix, so the key is stable.
        same_system = all(s == system_prompts[0] for s in system_prompts)
        prefix_length = shared_prefix_length(
            prompts, self.prompts.system_prefix(system_prompts[0]) if same_system else None)
        keys = [(tuple(p), tuple(v)) if score else tuple(p)
                for p, v in zip(prompts, valid_actions or [None] * n)]
        firsts, row_of = unique_rows(keys)  # identical rows are run through the model once
        # Training an adapter on the top layers only: keep what the frozen layers give (re-scoring
        # then runs the top alone); from an acting copy only when trunk_in_act_dtype says so.
        trunk = find_trunk(self.model) if score else None
        if trunk is not None and model is not self.model:
            trunk = acting_trunk(trunk, model) if self._config.trunk_in_act_dtype else None
        with torch.inference_mode():
            if score:
                scored, records = self._score_prompts(model, trunk, prompts, valid_actions,
                                                      [keys[i] for i in firsts], firsts, prefix_length)
                decisions = self._act_score(scored, prompts, valid_actions, greedy, row_of)
                for decision, u in zip(decisions, row_of):  # a prompt's visits share its record
                    decision.trunk = records[u]
            else:
                batch, _ = run_prompts(model, [prompts[i] for i in firsts], prefix_length, pad_id=self.pad_id,
                                       device=self.device, counters=self.counters,
                                       prefix_cache=self.prefix_cache, version=self._acting_version())
                if len(firsts) < n:  # duplicates sample independently: give each its own KV row
                    batch = batch.select_rows(row_of)
                decisions = self._act_generate(model, batch, prompts, greedy)
        self.counters["decisions"] += n
        self.counters["prompt_tokens_total"] += sum(len(p) for p in prompts)
        self.counters["answer_tokens"] += sum(len(d.answer_ids) for d in decisions)
        self.counters["act_seconds"] += time.perf_counter() - started
        return decisions

    def _act_in_conversations(self, observations: Sequence[str], system_prompts: Sequence[str],
                              valid_actions: Sequence[Sequence[str]] | None, greedy: bool,
                              conversations: Sequence[Conversation]) -> list[Decision]:
        """Conversation mode (see :meth:`act`): each observation becomes the next user turn of its
        conversation; only the tokens each conversation's KV row does not hold yet are run, on the
        conversation cache, and the answers are scored or generated from there as usual."""
        started = time.perf_counter()
        if self.model.training:
            self.model.eval()
        contexts = [c.add_observation(o, s, self.prompts)
                    for c, o, s in zip(conversations, observations, system_prompts)]
        same_system = all(s == system_prompts[0] for s in system_prompts)
        prefix = self.prompts.system_prefix(system_prompts[0]) if same_system else []
        every = list(range(len(contexts)))  # every conversation keeps its own row
        with torch.inference_mode():
            model = self.acting_model()
            self._check_memory(model, contexts)
            batch = self.conversation_cache.run(model, conversations, contexts, prefix,
                                                version=self._acting_version(), prefix_cache=self.prefix_cache,
                                                pad_id=self.pad_id, device=self.device, counters=self.counters)
            if self._config.mode == "score":
                decisions = self._act_score(self._score(model, batch, valid_actions), contexts, valid_actions,
                                            greedy, every)
            else:
                decisions = self._act_generate(model, batch, contexts, greedy)
        for conversation, decision in zip(conversations, decisions):
            conversation.add_answer(decision.answer_ids)
        self.counters["decisions"] += len(decisions)
        self.counters["prompt_tokens_total"] += sum(len(c) for c in contexts)
        self.counters["answer_tokens"] += sum(len(d.answer_ids) for d in decisions)
        self.counters["act_seconds"] += time.perf_counter() - started
        return decisions

    def _check_memory(self, model: torch.nn.Module, prompts: Sequence[Sequence[int]]) -> None:
        """On a GPU, before the first batch of this many rows runs: a ``MemoryError`` naming the
        largest number of envs that fits, when these rows would not (:mod:`.memory`)."""
        if self.device.type != "cuda" or len(prompts) <= self._memory_checked_rows:
            return
        new_tokens = self._config.max_new_tokens if self._config.mode == "generate" else 8
        check_acting_memory(model, self.device, len(prompts), max(len(p) for p in prompts), new_tokens)
        self._memory_checked_rows = len(prompts)

    def _score_prompts(self, model: torch.nn.Module, trunk: Trunk | None, prompts: list[list[int]],
                       valid_actions: Sequence[Sequence[str]], keys: list, firsts: list[int],
                       prefix_length: int) -> tuple[ScoredBatch, list[TrunkRecord | None]]:
        """Score mode: the scored candidates and trunk record of each distinct prompt (``keys``,
        first met at rows ``firsts``): from the memo where one was run with these weights, the
        others run now in one batch (and kept, when the memo is on)."""
        c = self._config
        # the records' first position is the batch's shared prefix: part of what a kept row is
        version = (self._acting_version(), prefix_length)
        rows = self.score_memo.lookup(version, keys) if c.score_memo_bytes else [None] * len(keys)
        missing = [u for u, row in enumerate(rows) if row is None]
        self.counters["memo_rows"] += len(rows) - len(missing)
        if not missing:
            return stack_rows(rows), [row.trunk for row in rows]
        new = [firsts[u] for u in missing]
        with recording(trunk) as seen:
            batch, _ = run_prompts(model, [prompts[i] for i in new], prefix_length, pad_id=self.pad_id,
                                   device=self.device, counters=self.counters, prefix_cache=self.prefix_cache,
                                   version=self._acting_version())
        with recording(trunk) as later:  # the candidates' later tokens, after the prompts
            scored = self._score(model, batch, [valid_actions[i] for i in new])
        records = trunk_records(seen, trunk, range(len(new)), [len(prompts[i]) for i in new], prefix_length,
                                later, scored.later_at)
        if not c.score_memo_bytes:
            return scored, records
        kept = rows_of(scored, records)
        self.score_memo.store([keys[u] for u in missing], kept)
        if len(missing) == len(rows):  # nothing from the memo: the batch as it ran
            return scored, records
        for u, row in zip(missing, kept):
            rows[u] = row
        return stack_rows(rows), [row.trunk for row in rows]

    def _score(self, model: torch.nn.Module, batch: BatchState, valid_actions: Sequence[Sequence[str]]) -> ScoredBatch:
        """Every row of ``batch`` scored on its own valid actions (one row per prompt)."""
        c = self._config
        texts = [list(actions) for actions in valid_actions] if c.normalization == "word" else None
        return score_batch(model, batch, [self.candidate_set(actions) for actions in valid_actions], c.normalization,
                           texts, pad_id=self.pad_id, chunk_bytes=c.score_chunk_bytes, counters=self.counters)

    def _act_score(self, scored: ScoredBatch, prompts: list[list[int]], valid_actions: Sequence[Sequence[str]],
                   greedy: bool, row_of: list[int]) -> list[Decision]:
        """Sample (or take the best of) each row's candidates from ``scored``, one row per distinct
        prompt (``row_of``: each decision's)."""
        c = self._config
        candidates = [self.candidate_set(actions) for actions in valid_actions]
        # Every row samples on its own (duplicates too), in row order, all rows in one go.
        index = None if len(scored.counts) == len(row_of) else torch.tensor(row_of, device=scored.scores.device)
        scores = scored.scores if index is None else scored.scores.index_select(0, index)
        chosen, logp, behaviour = sample_candidates(scores, [scored.counts[u] for u in row_of], c.temperature,
                                                    greedy, self.generator, floor=self._explore_floor)
        unique = torch.arange(len(row_of), device=chosen.device) if index is None else index
        chosen_tokens = scored.token_logprobs[unique, chosen]  # [rows, longest candidate]
        # What the decisions record crosses to the host in one copy per tensor.
        ks = chosen.tolist()
        logp_rows = logp.tolist()  # every candidate's (Decision.candidate_logprobs), -inf past a row's own
        token_rows = chosen_tokens.tolist()
        behaviours = None if behaviour is None else behaviour.tolist()
        decisions = []
        for i, actions in enumerate(valid_actions):
            k = ks[i]
            decisions.append(Decision(
                text=actions[k], prompt_ids=prompts[i], answer_ids=list(candidates[i][k]),
                token_logprobs=token_rows[i][:scored.lengths[row_of[i]][k]], logprob=logp_rows[i][k],
                candidates=[list(cand) for cand in candidates[i]], action_index=k,
                candidate_logprobs=logp_rows[i][:len(actions)],
                behaviour_logprobs=None if behaviours is None else [behaviours[i]]))
        return decisions

    def _act_generate(self, model: torch.nn.Module, batch: BatchState, prompts: list[list[int]],
                      greedy: bool) -> list[Decision]:
        c = self._config
        answers = generate(model, batch, max_new_tokens=c.max_new_tokens, temperature=c.temperature,
                           top_p=c.top_p, greedy=greedy, generator=self.generator, end_ids=self.end_ids,
                           stop=self.stop_strings, tokenizer=self.tokenizer, counters=self.counters)
        texts = self.tokenizer.batch_decode([answer for answer, _, _ in answers], skip_special_tokens=True)
        return [Decision(text=c.prefill + text, prompt_ids=prompt, answer_ids=answer, token_logprobs=logprobs,
                         logprob=float(sum(logprobs)), behaviour_logprobs=drawn)
                for prompt, text, (answer, logprobs, drawn) in zip(prompts, texts, answers)]

    # ------------------------------------------------------------------ training
    def evaluate(self, decisions: Sequence[Decision]) -> Evaluation:
        """Recompute the log-probs of ``decisions`` under the current weights, with grad.

        Same definition as :meth:`act` (same temperature, same candidate scores), so with unchanged
        weights ``logprobs`` equal ``old_logprobs`` (to float precision). Call it on minibatches; it
        respects the caller's grad mode (wrap in ``torch.no_grad()`` for reference log-probs).
        Turns of one conversation (conversation mode) are re-scored in one pass over the longest
        context among them. ``update_dtype`` "bfloat16": under bf16 autocast, the head in float32.
        """
        if not decisions:
            raise ValueError("evaluate() needs at least one decision")
        with update_precision(self._config.update_dtype, self.device):
            return self._evaluate(decisions)

    def _evaluate(self, decisions: Sequence[Decision]) -> Evaluation:
        score = decisions[0].candidates is not None
        if any((d.candidates is not None) != score for d in decisions):
            raise ValueError("cannot evaluate score-mode and generate-mode decisions together")
        c = self._config
        chains = conversation_chains(self.model, decisions)
        if chains is not None:  # turns of conversations: one pass per conversation
            if score:
                return rescore_conversation_candidates(
                    self.model, decisions, chains, temperature=c.temperature, normalization=c.normalization,
                    tokenizer=self.tokenizer, pad_id=self.pad_id, device=self.device,
                    chunk_bytes=c.score_chunk_bytes, counters=self.counters)
            return rescore_conversation_tokens(self.model, decisions, chains, temperature=c.temperature,
                                               pad_id=self.pad_id, device=self.device, counters=self.counters)
        prefix_length = shared_prefix_length([d.prompt_ids for d in decisions])
        trunk = self._top_rescorer.trunk_for(self.model, decisions, prefix_length) if score else None
        if trunk is not None:
            return self._rescore_top(trunk, decisions, prefix_length)
        if score:
            return rescore_candidates(self.model, decisions, prefix_length, temperature=c.temperature,
                                      normalization=c.normalization, tokenizer=self.tokenizer,
                                      pad_id=self.pad_id, device=self.device,
                                      chunk_bytes=c.score_chunk_bytes, counters=self.counters)
        return rescore_tokens(self.model, decisions, prefix_length, temperature=c.temperature,
                              pad_id=self.pad_id, device=self.device, counters=self.counters)

    def _rescore_top(self, trunk: Trunk, decisions: Sequence[Decision], prefix_length: int) -> Evaluation:
        """Score-mode re-scoring by the top layers alone (:mod:`.frozen_trunk`); the first time for
        a model, checked against the full pass first."""
        c = self._config
        settings = {"temperature": c.temperature, "normalization": c.normalization, "tokenizer": self.tokenizer,
                    "device": self.device}
        # The shared prefix (computed once, no grad) and the check in the weights' own precision,
        # whatever update_dtype: the check asks whether the decoder can run its top alone, which
        # bf16's rounding would hide.
        with torch.autocast(device_type=self.device.type, enabled=False):
            prefix = self._top_rescorer.prefix_output(self.model, trunk, decisions[0].prompt_ids[:prefix_length],
                                                      self.device)
            if self._top_rescorer.needs_check(self.model):
                self._check_top(trunk, decisions, prefix_length, prefix, settings)
        if not self._top_rescorer.trunk_for(self.model, decisions, prefix_length):
            return rescore_candidates(self.model, decisions, prefix_length, pad_id=self.pad_id,
                                      chunk_bytes=c.score_chunk_bytes, counters=self.counters, **settings)
        return rescore_candidates_from_trunk(self.model, trunk, decisions, prefix, **settings)

    def _check_top(self, trunk: Trunk, decisions: Sequence[Decision], prefix_length: int, prefix: torch.Tensor,
                   settings: dict[str, Any]) -> None:
        """Whether the top path reproduces the full pass for this model, on a few decisions."""
        c = self._config
        sample = list(decisions[:8])
        if c.trunk_in_act_dtype and self.act_precision != "float32":  # records in the copy's precision
            sample = own_records(self.model, trunk, sample)
        with torch.no_grad():
            full = rescore_candidates(self.model, sample, prefix_length, pad_id=self.pad_id,
                                      chunk_bytes=c.score_chunk_bytes, counters=self.counters, **settings)
            try:
                top = rescore_candidates_from_trunk(self.model, trunk, sample, prefix, **settings)
            except (TypeError, ValueError, RuntimeError, AttributeError, IndexError):
                top = None  # a decoder whose layers are called otherwise: the full pass it is
        self._top_rescorer.record_check(self.model, top is not None and same_evaluation(top, full))


# Every setting reads as an attribute: policy.temperature is policy.config.temperature (read-only;
# ``seed`` stays the method that reseeds the generator).
for _field in dataclasses.fields(PolicyConfig):
    if not hasattr(Policy, _field.name):
        setattr(Policy, _field.name, property(lambda self, _name=_field.name: getattr(self._config, _name),
                                              doc=f"The ``{_field.name}`` setting (see :class:`PolicyConfig`)."))
del _field
