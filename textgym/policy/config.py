"""PolicyConfig: every setting of a :class:`textgym.Policy`, documented where it is declared.

A policy's settings are saved by :meth:`Policy.save` and in every trainer checkpoint as
``PolicyConfig.to_dict()``, so a loaded policy or a resumed run acts exactly as the original.
:meth:`PolicyConfig.for_model` applies the model registry's defaults (generation settings,
``system_role``, stop strings) for a model name: the one place they are applied.

Example:
    >>> from textgym.policy import PolicyConfig
    >>> config = PolicyConfig(mode="generate", temperature=0.7)
    >>> PolicyConfig.from_dict(config.to_dict()) == config
    True
    >>> PolicyConfig.for_model("tiny").max_new_tokens      # the registry's default for "tiny"
    16
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["ACT_DTYPES", "MODES", "NORMALIZATIONS", "UPDATE_DTYPES", "PolicyConfig"]

from textgym.settings import check, setting

MODES = ("score", "generate")
NORMALIZATIONS = ("sum", "token", "word")
ACT_DTYPES = ("auto", "float32", "bfloat16", "int8")
UPDATE_DTYPES = ("float32", "bfloat16")
#: The longest answer a policy may generate, in tokens (beyond the context of any model textgym
#: supports: a larger limit only lets a runaway answer run for hours).
MAX_NEW_TOKENS = 32_768
#: The ``--help`` panel of the policy settings that ``textgym train`` and ``eval`` take as flags.
POLICY_PANEL = "Policy (default: the model's)"


@dataclass(frozen=True)
class PolicyConfig:
    """How a :class:`textgym.Policy` turns prompts into decisions."""

    mode: str = setting("score", choices=MODES)
    """``"score"``: rank the env's valid actions by their log-likelihood as the answer (the
    answer is always a valid action). ``"generate"``: sample free text, parsed by the env."""
    temperature: float = setting(1.0, above=0, flag=True, panel=POLICY_PANEL)
    """Sampling temperature over the candidates (score) or the tokens (generate).
    It is the softmax temperature of the acting distribution. :meth:`Policy.evaluate` uses the
    same definition, so recorded and recomputed log-probs agree. Use ``greedy=True`` for the argmax, not a temperature of 0."""
    top_p: float = setting(1.0, above=0, at_most=1, flag=True, panel=POLICY_PANEL)
    """Generate mode: nucleus sampling threshold. The recorded log-probs are those of
    ``softmax(logits / temperature)`` without the top-p cut (what :meth:`Policy.evaluate` computes)."""
    max_new_tokens: int = setting(32, at_least=1, at_most=MAX_NEW_TOKENS, flag=True,
                                  panel=POLICY_PANEL)
    """Generate mode: the answer length limit in tokens."""
    stop: tuple[str, ...] = ()
    """Generate mode: strings that end an answer (kept in the answer, as Hugging Face ``generate``
    does); the tokenizer's end-of-turn token always ends it. They are looked for in the sampled
    text only, never in ``prefill``."""
    prefill: str = ""
    """Generate mode: text that opens every answer, written into the assistant turn before
    sampling starts (e.g. ``'{"action": "'`` makes a small model name an action at once). Its
    tokens are part of ``Decision.prompt_ids`` (re-scoring conditions on them; training never
    trains on them) and ``Decision.text`` is ``prefill`` + the sampled text, so the env's parser
    reads the whole answer. ``""``: none."""
    normalization: str = setting("sum", choices=NORMALIZATIONS, flag=True, panel=POLICY_PANEL)
    """Score mode: how a candidate's token log-probs make its score.
    ``"sum"``, ``"token"`` (mean per token) or ``"word"`` (sum divided by the number of words)."""
    score_end: bool | str = "auto"
    """Score mode: append the end-of-turn token to the candidates: ``True`` always, ``False``
    never, ``"auto"`` only for an env whose candidates are not prefix-free (``"1"`` and ``"10"``:
    without the end token ``"1"`` would score at least as high as ``"10"``). Prefix-free
    single-token actions (``LEFT``/``RIGHT``) then need no extra pass."""
    chat_template: str | None = setting(None, flag=True, panel=POLICY_PANEL, metavar="FILE")
    """A Jinja chat template replacing the tokenizer's (a file on the command line).
    ``None``: the tokenizer's own."""
    system_role: bool = setting(True)
    """Whether the chat template takes a ``system`` message; if not, the system prompt goes in
    front of the user message (also done automatically when the template raises an error about
    the system role)."""
    seed: int | None = setting(None, at_least=0, at_most=2**32 - 1)
    """Seed of the sampling generator (``None``: a random seed); reseed with :meth:`Policy.seed`."""
    prefix_cache_size: int = setting(4, at_least=1)
    """How many shared-prefix KV caches to keep (one per distinct system prompt)."""
    score_chunk_bytes: int = setting(256 * 2**20, at_least=1)
    """Score mode: memory budget of the candidate logits computed at once (rows are split into
    chunks when many long candidates would exceed it)."""
    score_memo_bytes: int = setting(0, at_least=0)
    """Score mode: memory budget of the answers kept for prompts already run with the same weights
    (:mod:`textgym.policy.score_memo`): an env that revisits a state between two updates is scored
    once, not once per visit. 0 (the default: most envs' prompts do not repeat, and a kept row is a
    copy): every prompt runs through the model."""
    candidate_cache_size: int = setting(4096, at_least=1)
    """How many action texts keep their token ids cached (least recently used ones are dropped:
    envs with free-form commands would otherwise grow the cache without limit)."""
    history: int | str | None = None
    """Conversation mode: what the policy reads of an episode. ``None``: the newest observation
    alone (after the system prompt). ``"full"``: the whole episode as a chat (each observation a
    user turn, each answer an assistant turn), up to ``history_tokens``. ``N``: at least the last
    ``N`` turns (at most ``2N`` before the context is rebuilt; the rule is in
    :mod:`textgym.policy.conversation`). Each env's KV cache is kept across its turns, so a
    decision runs only its new tokens. An env wrapped in :class:`textgym.wrappers.History` uses
    that wrapper's window instead."""
    act_dtype: str = setting("float32", choices=ACT_DTYPES, flag=True, panel=POLICY_PANEL, metavar="DTYPE")
    """The precision the policy acts in: auto, float32, bfloat16 or int8. ``"float32"`` (the weights themselves), ``"bfloat16"``,
    ``"int8"`` (dynamically quantized Linear layers) or ``"auto"`` (the fastest of these whose
    greedy decisions agree with float32's, measured once per machine and model). Acting runs on a
    copy of the weights in that precision, rebuilt after each update; :meth:`Policy.evaluate` and
    the update keep the weights' own precision (see :mod:`textgym.policy.precision`)."""
    eval_act_dtype: str = setting("auto", choices=ACT_DTYPES, flag=True, panel=POLICY_PANEL, metavar="DTYPE")
    """The precision of greedy evaluations. Those within :meth:`Policy.evaluating` (``textgym
    eval``, a trainer's greedy checks). ``"auto"``: ``act_dtype``'s when that is not float32, else
    the fastest precision whose greedy decisions agree with float32's (measured as
    ``act_dtype="auto"`` does); ``"float32"`` keeps evaluation on the weights themselves."""
    trunk_in_act_dtype: bool = setting(True)
    """Update from the acting copy's frozen layers. With an adapter on the top layers only
    (``lora_layers``) and an ``act_dtype`` other than float32, the update runs the trained top
    layers from the frozen layers' output recorded while acting, in the acting precision, instead
    of running the whole model again in float32 (the mismatch this adds is part of the one measured
    and corrected; see :mod:`textgym.policy.frozen_trunk`). Off: the frozen layers run in float32
    in the update, 2-4x slower (docs/results.md, "Frozen layers in bf16"); CartPole solved as
    often and sooner with it on (docs/results.md, "Time to solve CartPole")."""
    update_dtype: str = setting("float32", choices=UPDATE_DTYPES, flag=True, panel=POLICY_PANEL, metavar="DTYPE")
    """The precision of the update's pass: float32 or bfloat16 (autocast). ``"bfloat16"`` runs
    :meth:`Policy.evaluate` (the re-scoring with grad, and the reference and correction passes
    that share it) under ``torch.autocast``: the decoder's matmuls in bf16, the output head and
    the log-probs in float32, the trained weights, their gradients and the optimizer in float32.
    On a CPU with bf16 units (AVX512-BF16, AMX) the re-scoring with grad of SmolLM2's top 8
    layers ran 2.1x faster (``bench/update_precision.py``); a model loaded in bf16 (on a GPU) is
    there already. The log-probs then carry bf16's rounding, as acting in bf16 does (the
    trainers measure and correct the acting copy's mismatch)."""
    history_tokens: int = setting(4096, at_least=1)
    """Conversation mode: the most tokens an env's context holds; beyond it the context is rebuilt
    with the most recent turns that fit in half of it (bounds the KV cache and the work per decision)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop or ()))
        if self.score_end not in (True, False, "auto"):
            raise ValueError(f"score_end must be True, False or 'auto', got {self.score_end!r}")
        if isinstance(self.temperature, (int, float)) and self.temperature == 0:
            raise ValueError("temperature must be > 0 (use greedy=True for argmax), got 0")
        if isinstance(self.max_new_tokens, float) and self.max_new_tokens.is_integer():
            object.__setattr__(self, "max_new_tokens", int(self.max_new_tokens))
        check(self)  # every field's range, as declared above
        if self.history is not None and self.history != "full" and (
                isinstance(self.history, bool) or not isinstance(self.history, int) or self.history < 0):
            raise ValueError(f"history must be None, 'full' or a number of turns >= 0, got {self.history!r}")
        if self.chat_template is not None:  # a template that ignores the messages: one prompt for all
            from textgym.policy.prompts import check_chat_template

            check_chat_template(self.chat_template)

    def to_dict(self) -> dict[str, Any]:
        """Every setting, JSON-able (``stop`` as a list)."""
        data = dataclasses.asdict(self)
        data["stop"] = list(self.stop)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyConfig:
        """The config from :meth:`to_dict`'s output (missing keys take their defaults).

        Raises:
            ValueError: a key that is not a setting.
        """
        unknown = set(data) - _field_names()
        if unknown:
            raise ValueError(f"PolicyConfig has no setting(s) {sorted(unknown)}")
        return cls(**data)

    def replace(self, **overrides: Any) -> PolicyConfig:
        """A copy with ``overrides`` applied (an unknown name is a ``TypeError``, as for a keyword)."""
        unknown = set(overrides) - _field_names()
        if unknown:
            raise TypeError(f"unknown policy setting(s) {sorted(unknown)}; "
                            f"PolicyConfig has {sorted(_field_names())}")
        return dataclasses.replace(self, **overrides) if overrides else self

    @classmethod
    def for_model(cls, name: str | None, config: PolicyConfig | None = None, **overrides: Any) -> PolicyConfig:
        """The settings of a policy on model ``name``: the one place the model registry's defaults apply.

        Args:
            name: the model's registered name, hub id or folder (``None``: no registry defaults).
            config: complete settings to start from (e.g. a saved policy's); the registry's
                defaults then do not apply. ``None``: :class:`PolicyConfig`'s defaults with the
                registry's generation defaults (``temperature``, ``top_p``, ``max_new_tokens``),
                ``system_role`` and stop strings for ``name`` on top.
            **overrides: settings that win over both.
        """
        if config is None:
            config = cls()
            if name is not None:
                config = config.replace(**registry_defaults(name))
        return config.replace(**overrides)


def registry_defaults(name: str) -> dict[str, Any]:
    """The policy settings the model registry gives model ``name`` (see :class:`textgym.models.ModelSpec`)."""
    from textgym import models

    entry = models.spec(name)
    defaults: dict[str, Any] = {k: v for k, v in entry.generation.items()
                                if k in ("temperature", "top_p", "max_new_tokens")}
    defaults["system_role"] = entry.system_role
    if entry.stop:
        defaults["stop"] = tuple(entry.stop)
    return defaults


def _field_names() -> set[str]:
    return {f.name for f in dataclasses.fields(PolicyConfig)}
