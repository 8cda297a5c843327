"""An LLM policy that acts for a batch of text envs in one call, and re-scores its decisions for training.

Two modes:

* ``score``: the log-likelihood of each valid action's text as the continuation of the chat prompt
  (the lamorel/TWOSOME approach: the answer is always a valid action). The chosen action is sampled
  from ``softmax(score / temperature)`` while training and is the argmax when ``greedy``.
* ``generate``: free text sampled token by token (temperature, top-p, max new tokens, stop strings);
  the env's ``ParseAction`` wrapper turns it into an action.

Speed: the prompt's shared prefix (the chat header and system prompt, identical for every env of a
task) is run through the model once and its KV cache is kept across calls; each call runs only the
per-env suffixes (the observation), batched on top of it, and then scores the candidate actions (or
samples tokens) on that KV cache. Every :class:`Decision` keeps the exact prompt and answer token ids
and their log-probs, so training never re-tokenizes sampled text.

Example:
    >>> from textgym import models
    >>> from textgym.policy import Policy
    >>> model, tokenizer = models.load("tiny")
    >>> policy = Policy(model, tokenizer, mode="score", seed=0)
    >>> [d] = policy.act(["Pole leans left."], ["Answer LEFT or RIGHT."], [["LEFT", "RIGHT"]])
    >>> d.text in ("LEFT", "RIGHT")
    True
    >>> ev = policy.evaluate([d])        # with grad: what a trainer differentiates
    >>> abs(ev.logprobs[0, 0].item() - d.logprob) < 1e-4
    True
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from textgym import models as _models

__all__ = ["Decision", "Evaluation", "Policy"]

_NORMALIZATIONS = ("sum", "token", "word")
_POLICY_FILE = "policy.json"


@dataclass
class Decision:
    """One action taken by the policy, with everything training needs (no re-tokenization)."""

    text: str
    """The answer passed to ``env.step`` (score mode: the chosen action name)."""
    prompt_ids: list[int]
    """The full chat-formatted prompt: system + user + assistant header."""
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


@dataclass
class _Batch:
    """The state after running a batch of prompts on top of a shared prefix."""

    cache: Any                   # DynamicCache, B rows, length prefix + padded suffix
    attention_mask: torch.Tensor  # [B, cache length]
    next_position: torch.Tensor   # [B]: position id of each row's next token
    last_logits: torch.Tensor     # [B, V]: next-token logits after each prompt
    hidden: torch.Tensor | None   # [B, H]: last hidden state at the last prompt position


def _expand_batch(batch: _Batch, row_of: list[int]) -> _Batch:
    """The batch state with row ``i`` a copy of unique row ``row_of[i]``."""
    index = torch.tensor(row_of, device=batch.attention_mask.device)
    batch.cache.batch_select_indices(index)  # repeated indices copy the rows
    return _Batch(cache=batch.cache, attention_mask=batch.attention_mask.index_select(0, index),
                  next_position=batch.next_position.index_select(0, index),
                  last_logits=batch.last_logits.index_select(0, index),
                  hidden=None if batch.hidden is None else batch.hidden.index_select(0, index))


class _CandidateTrie:
    """The tokens of a row's candidates that must be run through the model (all but each one's
    last token), shared between candidates with a common start. Column ``q`` holds token
    ``tokens[q]`` at depth ``depths[q]`` (0: right after the prompt) below column ``parents[q]``."""

    def __init__(self, candidates: list[list[int]]):
        self.tokens: list[int] = []
        self.depths: list[int] = []
        self.parents: list[int] = []
        self._column: dict[tuple[int, ...], int] = {}
        for cand in candidates:
            for depth in range(len(cand) - 1):
                key = tuple(cand[:depth + 1])
                if key not in self._column:
                    self._column[key] = len(self.tokens)
                    self.tokens.append(cand[depth])
                    self.depths.append(depth)
                    self.parents.append(self._column[key[:-1]] if depth else -1)

    def ancestry(self) -> torch.Tensor:
        """``[n, n]`` bool: column ``q`` may attend to column ``c`` (``c`` is ``q`` or an ancestor)."""
        n = len(self.tokens)
        allowed = torch.zeros((n, n), dtype=torch.bool)
        for q, parent in enumerate(self.parents):  # parents come before their children
            if parent >= 0:
                allowed[q] = allowed[parent]
            allowed[q, q] = True
        return allowed

    def columns(self, candidate: list[int]) -> list[int]:
        """The columns whose outputs predict ``candidate[1:]``."""
        return [self._column[tuple(candidate[:j])] for j in range(1, len(candidate))]


def _unique_rows(keys: Sequence[Any]) -> tuple[list[int], list[int]]:
    """``(firsts, row_of)``: the first row of every distinct key, and for each row the index of its
    key in ``firsts``. Identical rows (a GRPO group's shared first observation) are run once."""
    seen: dict[Any, int] = {}
    firsts: list[int] = []
    row_of = []
    for i, key in enumerate(keys):
        if key not in seen:
            seen[key] = len(firsts)
            firsts.append(i)
        row_of.append(seen[key])
    return firsts, row_of


def _common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Policy:
    """A language model acting in text envs: batched, with the shared prompt prefix cached.

    Args:
        model: a Hugging Face causal LM (optionally wrapped by a PEFT adapter).
        tokenizer: its tokenizer; the chat template comes from it (or from ``chat_template``).
        mode: ``"score"`` (rank the valid actions) or ``"generate"`` (sample free text).
        temperature: softmax temperature of the acting distribution; the same definition is used by
            :meth:`evaluate`, so recorded and recomputed log-probs agree.
        normalization: score mode: how a candidate's token log-probs become its score: ``"sum"``,
            ``"token"`` (mean per token) or ``"word"`` (sum divided by the number of words).
        score_end: score mode: append the end-of-turn token to the candidates: ``True`` always,
            ``False`` never, ``"auto"`` (default) only for an env whose candidates are not prefix-free
            (``"1"`` and ``"10"``: without the end token ``"1"`` would score at least as high as
            ``"10"``). Prefix-free single-token actions (``LEFT``/``RIGHT``) then need no extra pass.
        top_p: generate mode: nucleus sampling threshold. The recorded log-probs are those of
            ``softmax(logits / temperature)`` without the top-p cut (what :meth:`evaluate` computes).
        max_new_tokens: generate mode: the answer length limit.
        stop: generate mode: strings that end an answer (kept in the answer, as HF ``generate`` does);
            the tokenizer's end-of-turn token always ends it.
        seed: seed of the sampling generator (reseed with :meth:`seed`).
        device: where inputs go; default the model's device.
        chat_template: a Jinja chat template overriding the tokenizer's.
        prefix_cache_size: how many shared-prefix KV caches to keep (one per distinct system prompt).
        score_chunk_bytes: score mode: memory budget of the candidate logits computed at once
            (rows are split into chunks when many long candidates would exceed it).
        system_role: whether the chat template takes a ``system`` message; if not, the system
            prompt goes in front of the user message (also done automatically when the template
            raises an error about the system role).
        name: the model name it was loaded from (recorded by :meth:`save`).
    """

    def __init__(self, model: Any, tokenizer: Any, mode: str = "score", *, temperature: float = 1.0,
                 normalization: str = "sum", score_end: bool | str = "auto", top_p: float = 1.0,
                 max_new_tokens: int = 32, stop: Sequence[str] | None = None, seed: int | None = None,
                 device: str | torch.device | None = None, chat_template: str | None = None,
                 prefix_cache_size: int = 4, score_chunk_bytes: int = 256 * 2**20, system_role: bool = True,
                 name: str | None = None):
        if mode not in ("score", "generate"):
            raise ValueError(f"mode must be 'score' or 'generate', got {mode!r}")
        if score_end not in (True, False, "auto"):
            raise ValueError(f"score_end must be True, False or 'auto', got {score_end!r}")
        if normalization not in _NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {_NORMALIZATIONS}, got {normalization!r}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 (use greedy=True for argmax), got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.temperature = float(temperature)
        self.normalization = normalization
        self.score_end = score_end
        self.top_p = float(top_p)
        self.max_new_tokens = int(max_new_tokens)
        self.stop = tuple(stop or ())
        self.chat_template = chat_template
        self.prefix_cache_size = prefix_cache_size
        self.score_chunk_bytes = score_chunk_bytes
        self.system_role = system_role
        self.name = name
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.pad_id = tokenizer.pad_token_id
        self.end_ids = self._end_token_ids()
        self.generator = torch.Generator(device="cpu")
        self.seed(seed)
        self.model.eval()  # no dropout: acting and re-scoring must see the same function
        self._prefix_cache: OrderedDict[tuple, tuple] = OrderedDict()
        self._system_prefix_ids: dict[str, list[int]] = {}
        self._candidate_ids: dict[str, list[int]] = {}
        self._reference_model: Any = None
        self._reference_active = False
        #: Running totals: decisions, prompt_tokens (new prompt tokens run through the model, after
        #: prefix-cache reuse), prompt_tokens_total (full prompt lengths), answer_tokens, model_tokens
        #: (every real token run through the model), padded_tokens (padding slots run), act_seconds.
        self.counters: dict[str, float] = dict.fromkeys(
            ("decisions", "prompt_tokens", "prompt_tokens_total", "answer_tokens", "model_tokens",
             "padded_tokens", "prefix_misses", "act_seconds"), 0)
        self.counters["act_seconds"] = 0.0

    def __repr__(self) -> str:
        extra = (f"normalization={self.normalization!r}" if self.mode == "score"
                 else f"top_p={self.top_p}, max_new_tokens={self.max_new_tokens}")
        return (f"Policy({self.name or type(self.model).__name__!r}, mode={self.mode!r}, "
                f"temperature={self.temperature}, {extra}, lora={self.is_lora}, device={self.device})")

    # ------------------------------------------------------------------ construction & persistence
    @classmethod
    def from_pretrained(cls, name_or_path: str = _models.DEFAULT_MODEL, mode: str = "score", *,
                        lora: bool = False, lora_r: int = 8, lora_alpha: int | None = None,
                        lora_dropout: float = 0.0, lora_target_modules: Sequence[str] | None = None,
                        device: str | torch.device | None = None,
                        dtype: str | torch.dtype | None = None, quantize: str | None = None,
                        **policy_kwargs: Any) -> Policy:
        """Load a model by name (see :func:`textgym.models.load`) and wrap it in a policy.

        Args:
            name_or_path: registered name, hub id or folder.
            mode: ``"score"`` or ``"generate"``.
            lora: wrap the model in a PEFT LoRA adapter (target modules from the model registry);
                only the adapter is trained and :meth:`reference` disables it.
            lora_r: LoRA rank. lora_alpha: LoRA scale numerator (default ``2 * lora_r``).
            lora_dropout: LoRA dropout (default 0: acting and re-scoring see the same function).
            lora_target_modules: override the registry's target modules.
            device, dtype, quantize: see :func:`textgym.models.load` (default: CUDA if available,
                else CPU; bf16 on a bf16-capable GPU, else fp32; not quantized).
            **policy_kwargs: passed to :class:`Policy` (temperature, normalization, seed, ...);
                generate-mode defaults come from the registry.
        """
        model, tokenizer = _models.load(name_or_path, device=device, dtype=dtype, quantize=quantize)
        entry = _models.spec(name_or_path)
        if lora:
            model = _wrap_lora(model, r=lora_r, alpha=lora_alpha or 2 * lora_r, dropout=lora_dropout,
                               targets=tuple(lora_target_modules or entry.lora_target_modules))
        defaults = {k: v for k, v in entry.generation.items()
                    if k in ("temperature", "top_p", "max_new_tokens")}
        defaults["system_role"] = entry.system_role
        if entry.stop:
            defaults["stop"] = entry.stop
        return cls(model, tokenizer, mode, name=name_or_path, **{**defaults, **policy_kwargs})

    @property
    def is_lora(self) -> bool:
        """Whether the model is wrapped by a PEFT adapter."""
        return hasattr(self.model, "disable_adapter") and hasattr(self.model, "peft_config")

    def parameters_to_train(self) -> list[torch.nn.Parameter]:
        """The parameters an optimizer should update: the adapter's with LoRA, else all.

        Without LoRA this also snapshots the current weights as the frozen :meth:`reference` policy
        (once), since the weights are about to change.
        """
        if not self.is_lora:
            self._snapshot_reference()
            for p in self.model.parameters():
                p.requires_grad_(True)
        return [p for p in self.model.parameters() if p.requires_grad]

    def _snapshot_reference(self) -> None:
        if self._reference_model is None:
            self._reference_model = copy.deepcopy(self.model).eval().requires_grad_(False)

    @contextlib.contextmanager
    def reference(self) -> Iterator[Policy]:
        """Within this block the policy is the reference policy: the LoRA adapter is disabled (no
        second copy of the model); without LoRA, a frozen copy of the weights taken when
        :meth:`parameters_to_train` was first called (or now, if never)."""
        if self._reference_active:
            yield self
            return
        self._reference_active = True
        try:
            if self.is_lora:
                with self.model.disable_adapter():
                    yield self
            else:
                self._snapshot_reference()
                trained, self.model = self.model, self._reference_model
                try:
                    yield self
                finally:
                    self.model = trained
        finally:
            self._reference_active = False

    def save(self, directory: str | os.PathLike) -> Path:
        """Save the adapter (LoRA) or the full model, the tokenizer and the policy settings.

        Written to ``<directory>.tmp`` and renamed, so a crash leaves any previous save intact.
        Layout: ``adapter/`` (PEFT, safetensors) or ``model/`` (a full model folder with its
        tokenizer), ``tokenizer/``, ``policy.json``.
        """
        target = Path(directory)
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        weights = tmp / ("adapter" if self.is_lora else "model")
        self.model.save_pretrained(weights)
        self.tokenizer.save_pretrained(tmp / "tokenizer")
        if not self.is_lora:  # a full model folder loads by itself (textgym.models.load(folder))
            self.tokenizer.save_pretrained(weights)
        settings = {"name": self.name, "lora": self.is_lora, "mode": self.mode,
                    "temperature": self.temperature, "normalization": self.normalization,
                    "score_end": self.score_end, "top_p": self.top_p,
                    "max_new_tokens": self.max_new_tokens, "stop": list(self.stop),
                    "chat_template": self.chat_template, "system_role": self.system_role}
        (tmp / _POLICY_FILE).write_text(json.dumps(settings, indent=2))
        if target.exists():
            old = target.with_name(target.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
        return target

    @classmethod
    def load(cls, directory: str | os.PathLike, device: str | torch.device | None = None,
             dtype: str | torch.dtype | None = None, quantize: str | None = None,
             **overrides: Any) -> Policy:
        """Load a policy written by :meth:`save` (the base model is loaded by name for an adapter;
        ``device``, ``dtype`` and ``quantize`` as in :func:`textgym.models.load`)."""
        folder = Path(directory)
        settings_file = folder / _POLICY_FILE
        if not settings_file.is_file():
            raise FileNotFoundError(f"{folder} is not a saved policy (no {_POLICY_FILE})")
        settings = json.loads(settings_file.read_text())
        name, lora = settings.pop("name"), settings.pop("lora")
        if lora:
            if name is None:
                raise ValueError(f"{folder}: the adapter's base model name was not recorded")
            model, _ = _models.load(name, device=device, dtype=dtype, quantize=quantize)
            from transformers import AutoTokenizer
            tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
            from peft import PeftModel  # lazy: importing peft takes seconds
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                model = PeftModel.from_pretrained(model, folder / "adapter", is_trainable=True)
        else:
            model, tokenizer = _models.load(str(folder / "model"), device=device, dtype=dtype,
                                            quantize=quantize)
        model.eval()
        return cls(model, tokenizer, name=name, **{**settings, **overrides})

    def seed(self, seed: int | None) -> None:
        """Reseed the sampling generator (``None``: a fresh random seed)."""
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))

    def clear_cache(self) -> None:
        """Drop the cached prefix KV (it is also dropped automatically when the weights change)."""
        self._prefix_cache.clear()

    # ------------------------------------------------------------------ prompts
    def _end_token_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id}
        config = getattr(self.model, "generation_config", None)
        eos = getattr(config, "eos_token_id", None)
        ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
        return {i for i in ids if i is not None}

    def _messages(self, system_prompt: str, observation: str) -> list[dict[str, str]]:
        if not system_prompt:
            return [{"role": "user", "content": observation}]
        if not self.system_role:
            return [{"role": "user", "content": f"{system_prompt}\n\n{observation}"}]
        return [{"role": "system", "content": system_prompt}, {"role": "user", "content": observation}]

    def _render(self, messages: list[dict[str, str]]) -> str:
        if self.chat_template is None and not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(
                "the tokenizer has no chat template; use an instruct/chat model or pass "
                "Policy(..., chat_template=<jinja template>)")
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, chat_template=self.chat_template)

    def prompt_ids(self, system_prompt: str, observation: str) -> list[int]:
        """Token ids of the chat-formatted prompt: system prompt, user observation, assistant header."""
        try:
            text = self._render(self._messages(system_prompt, observation))
        except Exception as error:  # a template without a system role: put it in the user message
            if not system_prompt or "system" not in str(error).lower():
                raise
            text = self._render([{"role": "user", "content": f"{system_prompt}\n\n{observation}"}])
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _system_prefix(self, system_prompt: str) -> list[int]:
        """The prompt tokens that do not depend on the observation (found by rendering two
        different observations: templates need not split cleanly at the system/user boundary)."""
        ids = self._system_prefix_ids.get(system_prompt)
        if ids is None:
            a = self.prompt_ids(system_prompt, "A")
            b = self.prompt_ids(system_prompt, "Z")
            ids = a[:_common_prefix_length(a, b)]
            if len(self._system_prefix_ids) > 1024:
                self._system_prefix_ids.clear()
            self._system_prefix_ids[system_prompt] = ids
        return ids

    def candidate_ids(self, action: str, end: bool | None = None) -> list[int]:
        """Token ids an action is scored by (followed by the end-of-turn token when ``end``;
        default: when ``score_end is True``)."""
        ids = self._candidate_ids.get(action)
        if ids is None:
            ids = self.tokenizer(action, add_special_tokens=False)["input_ids"]
            self._candidate_ids[action] = ids
        if end is None:
            end = self.score_end is True
        if end:
            return ids + [self.tokenizer.eos_token_id]
        if not ids:
            raise ValueError(f"action {action!r} has no tokens (score_end=False)")
        return list(ids)

    def candidate_set(self, actions: Sequence[str]) -> list[list[int]]:
        """Token ids of one env's valid actions, as scored (see ``score_end``)."""
        if self.score_end != "auto":
            return [self.candidate_ids(a) for a in actions]
        bare = [self.candidate_ids(a, end=False) if a else [] for a in actions]
        prefix_free = all(bare) and not any(
            i != j and len(a) <= len(b) and b[:len(a)] == a
            for i, a in enumerate(bare) for j, b in enumerate(bare))
        return bare if prefix_free else [self.candidate_ids(a, end=True) for a in actions]

    # ------------------------------------------------------------------ model plumbing
    def _weights_version(self) -> tuple:
        # Every in-place update of a parameter (optimizer.step, load_state_dict) bumps its _version,
        # so a cached prefix KV computed with other weights is never reused.
        return (id(self.model), self._reference_active,
                sum(p._version for p in self.model.parameters()))

    def _run_prefix(self, prefix: list[int]) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        ids = torch.tensor([prefix], device=self.device)
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
        self.counters["model_tokens"] += len(prefix)
        return tuple((layer.keys, layer.values) for layer in out.past_key_values.layers)

    def _prefix_kv(self, prefix: list[int], cached: bool):
        if not prefix:
            return None
        if not cached:
            self.counters["prompt_tokens"] += len(prefix)
            return self._run_prefix(prefix)
        key = (tuple(prefix), self._weights_version())
        kv = self._prefix_cache.get(key)
        if kv is None:
            self.counters["prompt_tokens"] += len(prefix)
            self.counters["prefix_misses"] += 1
            kv = self._run_prefix(prefix)
            self._prefix_cache[key] = kv
            while len(self._prefix_cache) > self.prefix_cache_size:
                self._prefix_cache.popitem(last=False)
        else:
            self._prefix_cache.move_to_end(key)
        return kv

    def _new_cache(self, kv, rows: int):
        from transformers import DynamicCache
        if kv is None:
            return DynamicCache(config=self.model.config)
        return DynamicCache([(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in kv])

    def _run_batch(self, prompts: list[list[int]], prefix_length: int, *, cached: bool,
                   answers: list[list[int]] | None = None, want_hidden: bool = False,
                   ) -> tuple[_Batch, torch.Tensor | None]:
        """Run ``prompts`` (all starting with the same ``prefix_length`` tokens) as one batch.

        Layout per row: ``[prefix | padding | suffix | answer | padding]``. The padding between the
        prefix and the suffix (attention mask 0, explicit position ids) aligns every prompt's end in
        the same column, so next-token logits, candidates and sampled tokens line up across rows.
        Returns the batch state and, when ``answers`` are given, the logits at the answer positions
        ``[B, A, V]`` (the logits predicting answer token j are in column j).
        """
        rows = len(prompts)
        prefix = prompts[0][:prefix_length]
        kv = self._prefix_kv(prefix, cached)
        suffixes = [p[prefix_length:] for p in prompts]
        width = max(len(s) for s in suffixes)
        answers = answers or [[] for _ in prompts]
        answer_width = max(len(a) for a in answers)
        total = width + answer_width
        input_ids = torch.full((rows, total), self.pad_id, dtype=torch.long)
        mask = torch.zeros((rows, prefix_length + total), dtype=torch.long)
        mask[:, :prefix_length] = 1
        positions = torch.full((rows, total), prefix_length, dtype=torch.long)
        for i, (suffix, answer) in enumerate(zip(suffixes, answers)):
            start = width - len(suffix)
            tokens = suffix + answer
            input_ids[i, start:start + len(tokens)] = torch.tensor(tokens)
            mask[i, prefix_length + start:prefix_length + start + len(tokens)] = 1
            positions[i, start:start + len(tokens)] = torch.arange(
                prefix_length, prefix_length + len(tokens))
        real = sum(len(s) + len(a) for s, a in zip(suffixes, answers))
        self.counters["prompt_tokens"] += sum(len(s) for s in suffixes)
        self.counters["model_tokens"] += real
        self.counters["padded_tokens"] += rows * total - real
        cache = self._new_cache(kv, rows)
        out = self.model(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                         position_ids=positions.to(self.device), past_key_values=cache, use_cache=True,
                         logits_to_keep=answer_width + 1, output_hidden_states=want_hidden)
        logits = out.logits.float()
        hidden = out.hidden_states[-1][:, width - 1] if want_hidden else None
        batch = _Batch(cache=out.past_key_values, attention_mask=mask.to(self.device),
                       next_position=torch.tensor([prefix_length + len(s) for s in suffixes],
                                                  device=self.device),
                       last_logits=logits[:, 0], hidden=hidden)
        return batch, (logits[:, :answer_width] if answer_width else None)

    def _batch_prefix_length(self, prompts: list[list[int]], system_prompts: list[str] | None) -> int:
        """The longest prefix shared by all prompts (at most the system part when known, so the cache
        key is stable across calls), leaving at least one suffix token per prompt."""
        reference = self._system_prefix(system_prompts[0]) if system_prompts else prompts[0]
        length = min(len(p) for p in prompts) - 1
        length = min(length, len(reference))
        for p in prompts:
            length = _common_prefix_length(reference[:length], p)
        return max(length, 0)

    def _score_candidates(self, batch: _Batch, candidates: list[list[list[int]]]):
        """Per candidate token log-probs ``list[list[Tensor[L]]]`` on top of each row's prompt KV.

        A candidate's first token is scored from the prompt's next-token logits. The other tokens
        need the candidate's earlier tokens run through the model: they are laid out as a token trie
        per row (``go north`` / ``go south`` share ``go``) appended to that row's own KV cache, with
        a tree-shaped attention mask (each token sees the prompt and its own ancestors) and explicit
        position ids. The prompt's KV is therefore never copied per candidate.
        """
        first = torch.log_softmax(batch.last_logits, dim=-1)  # [B, V]
        token_logprobs = [[first[row, cand[0]].reshape(1) for cand in cands]
                          for row, cands in enumerate(candidates)]
        tries = [_CandidateTrie(cands) for cands in candidates]
        rows = [i for i, trie in enumerate(tries) if trie.tokens]
        if not rows:
            return token_logprobs
        vocab = batch.last_logits.shape[-1]
        width = max(len(tries[i].tokens) for i in rows)
        per_chunk = max(1, self.score_chunk_bytes // (width * vocab * 4 * 2))
        past = batch.attention_mask.shape[1]
        dtype = next(self.model.parameters()).dtype
        blocked = torch.finfo(dtype).min
        from transformers import DynamicCache
        for start in range(0, len(rows), per_chunk):
            chunk = rows[start:start + per_chunk]
            index = torch.tensor(chunk, device=self.device)
            w = max(len(tries[i].tokens) for i in chunk)
            ids = torch.full((len(chunk), w), self.pad_id, dtype=torch.long)
            positions = torch.zeros((len(chunk), w), dtype=torch.long)
            allowed = torch.zeros((len(chunk), 1, w, past + w), dtype=torch.bool)
            allowed[:, 0, :, :past] = batch.attention_mask.index_select(0, index)[:, None, :].bool().cpu()
            for r, i in enumerate(chunk):
                trie = tries[i]
                n = len(trie.tokens)
                ids[r, :n] = torch.tensor(trie.tokens)
                positions[r, :n] = int(batch.next_position[i]) + torch.tensor(trie.depths)
                allowed[r, 0, :n, past:past + n] = trie.ancestry()
            real = sum(len(tries[i].tokens) for i in chunk)
            self.counters["model_tokens"] += real
            self.counters["padded_tokens"] += len(chunk) * w - real
            mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, blocked)
            cache = DynamicCache([(layer.keys.index_select(0, index), layer.values.index_select(0, index))
                                  for layer in batch.cache.layers])
            out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                             position_ids=positions.to(self.device), past_key_values=cache,
                             use_cache=False)
            logits = out.logits.float()  # [rows, w, V]
            normaliser = torch.logsumexp(logits, dim=-1)  # [rows, w]
            for r, i in enumerate(chunk):
                for k, cand in enumerate(candidates[i]):
                    if len(cand) < 2:
                        continue
                    columns = torch.tensor(tries[i].columns(cand), device=self.device)
                    targets = torch.tensor(cand[1:], device=self.device)
                    rest = logits[r, columns, targets] - normaliser[r, columns]
                    token_logprobs[i][k] = torch.cat([token_logprobs[i][k], rest])
        return token_logprobs

    def _scores(self, token_logprobs: list[torch.Tensor], texts: list[str] | None) -> torch.Tensor:
        sums = torch.stack([t.sum() for t in token_logprobs])
        if self.normalization == "sum":
            return sums
        if self.normalization == "token":
            return sums / torch.tensor([len(t) for t in token_logprobs], device=sums.device)
        if texts is None:
            raise ValueError("word normalization needs the candidate texts")
        return sums / torch.tensor([max(1, len(t.split())) for t in texts], device=sums.device,
                                   dtype=sums.dtype)

    # ------------------------------------------------------------------ acting
    def act(self, observations: Sequence[str], system_prompts: Sequence[str],
            valid_actions: Sequence[Sequence[str]] | None = None, greedy: bool = False) -> list[Decision]:
        """Decide for a batch of envs in one call.

        Args:
            observations: each env's newest user-message text.
            system_prompts: each env's system prompt (``info["system_prompt"]``).
            valid_actions: each env's legal action names (``info["valid_actions"]``); required in
                score mode, ignored in generate mode.
            greedy: argmax (score) / greedy decoding (generate) instead of sampling.
        """
        n = len(observations)
        if len(system_prompts) != n or (valid_actions is not None and len(valid_actions) != n):
            raise ValueError("observations, system_prompts and valid_actions must have the same length")
        if n == 0:
            return []
        if self.mode == "score":
            if valid_actions is None:
                raise ValueError("score mode needs valid_actions for every env")
            for i, actions in enumerate(valid_actions):
                if not actions:
                    raise ValueError(f"env {i} has no valid actions to score")
        started = time.perf_counter()
        if self.model.training:
            self.model.eval()
        prompts = [self.prompt_ids(s, o) for s, o in zip(system_prompts, observations)]
        same_system = all(s == system_prompts[0] for s in system_prompts)
        prefix_length = self._batch_prefix_length(prompts, list(system_prompts) if same_system else None)
        score = self.mode == "score"
        keys = [(tuple(p), tuple(v)) if score else tuple(p)
                for p, v in zip(prompts, valid_actions or [None] * n)]
        firsts, row_of = _unique_rows(keys)  # identical rows are run through the model once
        with torch.inference_mode():
            batch, _ = self._run_batch([prompts[i] for i in firsts], prefix_length, cached=True)
            if score:
                decisions = self._act_score(batch, prompts, valid_actions, greedy, firsts, row_of)
            else:
                if len(firsts) < n:  # duplicates sample independently: give each its own KV row
                    batch = _expand_batch(batch, row_of)
                decisions = self._act_generate(batch, prompts, greedy)
        self.counters["decisions"] += n
        self.counters["prompt_tokens_total"] += sum(len(p) for p in prompts)
        self.counters["answer_tokens"] += sum(len(d.answer_ids) for d in decisions)
        self.counters["act_seconds"] += time.perf_counter() - started
        return decisions

    def _act_score(self, batch: _Batch, prompts, valid_actions, greedy, firsts, row_of) -> list[Decision]:
        candidates = [self.candidate_set(actions) for actions in valid_actions]
        per_unique = self._score_candidates(batch, [candidates[i] for i in firsts])
        unique_scores = [self._scores(token_lps, list(valid_actions[i])).cpu()
                         for i, token_lps in zip(firsts, per_unique)]
        decisions = []
        for i, actions in enumerate(valid_actions):
            token_lps, scores = per_unique[row_of[i]], unique_scores[row_of[i]]
            logp = torch.log_softmax(scores / self.temperature, dim=-1)
            if greedy:
                k = int(torch.argmax(scores))
            else:
                k = int(torch.multinomial(logp.exp(), 1, generator=self.generator))
            decisions.append(Decision(
                text=actions[k], prompt_ids=prompts[i], answer_ids=list(candidates[i][k]),
                token_logprobs=token_lps[k].cpu().tolist(), logprob=float(logp[k]),
                candidates=[list(c) for c in candidates[i]], action_index=k))
        return decisions

    def _sample(self, logits: torch.Tensor, greedy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Next tokens ``[B]`` and their log-probs under ``softmax(logits / temperature)``."""
        logp = torch.log_softmax(logits.float().cpu() / self.temperature, dim=-1)
        if greedy:
            tokens = logp.argmax(dim=-1)
        else:
            probs = logp.exp()
            if self.top_p < 1.0:
                sorted_probs, order = probs.sort(dim=-1, descending=True)
                # keep the smallest set whose mass reaches top_p (always at least the top token)
                drop = sorted_probs.cumsum(-1) - sorted_probs >= self.top_p
                sorted_probs[drop] = 0.0
                probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
            tokens = torch.multinomial(probs, 1, generator=self.generator)[:, 0]
        return tokens, logp.gather(-1, tokens[:, None])[:, 0]

    def _act_generate(self, batch: _Batch, prompts, greedy) -> list[Decision]:
        rows = len(prompts)
        answers: list[list[int]] = [[] for _ in range(rows)]
        logprobs: list[list[float]] = [[] for _ in range(rows)]
        active = list(range(rows))  # original row index of each row still in the cache
        cache, mask, position, logits = (batch.cache, batch.attention_mask, batch.next_position,
                                         batch.last_logits)
        for step in range(self.max_new_tokens):
            tokens, token_lps = self._sample(logits, greedy)
            still = []
            for j, row in enumerate(active):
                token = int(tokens[j])
                answers[row].append(token)
                logprobs[row].append(float(token_lps[j]))
                if token in self.end_ids or self._hit_stop(answers[row]):
                    continue
                still.append(j)
            if not still or step == self.max_new_tokens - 1:
                break
            keep = torch.tensor(still, device=self.device)
            if len(still) < len(active):  # drop finished rows from the batch
                cache.batch_select_indices(keep)
                mask, position = mask.index_select(0, keep), position.index_select(0, keep)
                tokens = tokens.index_select(0, keep.cpu())
                active = [active[j] for j in still]
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=self.device)], 1)
            out = self.model(input_ids=tokens[:, None].to(self.device), attention_mask=mask,
                             position_ids=position[:, None], past_key_values=cache, use_cache=True)
            self.counters["model_tokens"] += len(active)
            cache, logits, position = out.past_key_values, out.logits[:, -1], position + 1
        return [Decision(text=self.tokenizer.decode(answers[i], skip_special_tokens=True),
                         prompt_ids=prompts[i], answer_ids=answers[i], token_logprobs=logprobs[i],
                         logprob=float(sum(logprobs[i]))) for i in range(rows)]

    def _hit_stop(self, answer: list[int]) -> bool:
        if not self.stop:
            return False
        text = self.tokenizer.decode(answer[-16:], skip_special_tokens=True)
        return any(s in text for s in self.stop)

    # ------------------------------------------------------------------ training
    def evaluate(self, decisions: Sequence[Decision]) -> Evaluation:
        """Recompute the log-probs of ``decisions`` under the current weights, with grad.

        Same definition as :meth:`act` (same temperature, same candidate scores), so with unchanged
        weights ``logprobs`` equal ``old_logprobs`` (to float precision). Call it on minibatches; it
        respects the caller's grad mode (wrap in ``torch.no_grad()`` for reference log-probs).
        """
        if not decisions:
            raise ValueError("evaluate() needs at least one decision")
        prompts = [list(d.prompt_ids) for d in decisions]
        prefix_length = self._batch_prefix_length(prompts, None)
        score = decisions[0].candidates is not None
        if any((d.candidates is not None) != score for d in decisions):
            raise ValueError("cannot evaluate score-mode and generate-mode decisions together")
        if score:
            return self._evaluate_score(decisions, prompts, prefix_length)
        return self._evaluate_generate(decisions, prompts, prefix_length)

    def _evaluate_score(self, decisions, prompts, prefix_length) -> Evaluation:
        firsts, row_of = _unique_rows([(tuple(p), tuple(map(tuple, d.candidates)))
                                       for p, d in zip(prompts, decisions)])
        batch, _ = self._run_batch([prompts[i] for i in firsts], prefix_length, cached=False,
                                   want_hidden=True)
        per_unique = self._score_candidates(batch, [decisions[i].candidates for i in firsts])
        unique_logp, unique_entropy = [], []
        for i, token_lps in zip(firsts, per_unique):
            texts = [self.tokenizer.decode(c, skip_special_tokens=True) for c in decisions[i].candidates] \
                if self.normalization == "word" else None
            logp = torch.log_softmax(self._scores(token_lps, texts) / self.temperature, dim=-1)
            unique_logp.append(logp)
            unique_entropy.append(-(logp.exp() * logp).sum())
        device = batch.last_logits.device
        index = torch.tensor(row_of, device=device)
        chosen = [unique_logp[u][d.action_index] for u, d in zip(row_of, decisions)]
        return Evaluation(
            logprobs=torch.stack(chosen)[:, None],
            mask=torch.ones((len(decisions), 1), dtype=torch.bool, device=device),
            old_logprobs=torch.tensor([[d.logprob] for d in decisions], device=device),
            entropy=torch.stack(unique_entropy).index_select(0, index),
            hidden=batch.hidden.index_select(0, index),
            candidate_logprobs=[unique_logp[u] for u in row_of])

    def _evaluate_generate(self, decisions, prompts, prefix_length) -> Evaluation:
        answers = [list(d.answer_ids) for d in decisions]
        if any(not a for a in answers):
            raise ValueError("a generate-mode decision has no answer tokens")
        firsts, row_of = _unique_rows([(tuple(p), tuple(a)) for p, a in zip(prompts, answers)])
        batch, answer_logits = self._run_batch([prompts[i] for i in firsts], prefix_length,
                                               cached=False, answers=[answers[i] for i in firsts],
                                               want_hidden=True)
        # the logits predicting answer token j: column j (the first from the prompt's last position)
        logp = torch.log_softmax(answer_logits / self.temperature, dim=-1)  # [U, A, V]
        device = logp.device
        index = torch.tensor(row_of, device=device)
        rows, width = len(answers), answer_logits.shape[1]
        targets = torch.zeros((len(firsts), width), dtype=torch.long, device=device)
        for u, i in enumerate(firsts):
            targets[u, :len(answers[i])] = torch.tensor(answers[i], device=device)
        mask = torch.zeros((rows, width), dtype=torch.bool, device=device)
        old = torch.zeros((rows, width), device=device)
        for i, (a, d) in enumerate(zip(answers, decisions)):
            mask[i, :len(a)] = True
            recorded = list(d.token_logprobs or [])[:len(a)]  # e.g. demonstrations record none
            old[i, :len(recorded)] = torch.tensor(recorded, device=device, dtype=old.dtype)
        logprobs = logp.gather(-1, targets[..., None])[..., 0].index_select(0, index) * mask
        token_entropy = (-(logp.exp() * logp).sum(-1)).index_select(0, index)
        entropy = (token_entropy * mask).sum(-1) / mask.sum(-1)
        return Evaluation(logprobs=logprobs, mask=mask, old_logprobs=old, entropy=entropy,
                          hidden=batch.hidden.index_select(0, index))


def _wrap_lora(model: Any, r: int, alpha: int, dropout: float, targets: tuple[str, ...]) -> Any:
    try:
        from peft import LoraConfig, get_peft_model  # lazy: importing peft takes seconds
    except ImportError:
        raise ImportError("lora=True needs peft: pip install 'textgym[train]'") from None
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets),
                        task_type="CAUSAL_LM")
    with warnings.catch_warnings():  # transformers' deprecation chatter from inside peft
        warnings.simplefilter("ignore", FutureWarning)
        model = get_peft_model(model, config)
    model.eval()
    return model
