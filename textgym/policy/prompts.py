"""Chat prompts: (system prompt, observation) -> the token ids the model reads.

The tokenizer's chat template (or the policy's ``chat_template``) renders the messages, so no
model's format is hard-coded. :meth:`ChatPrompts.system_prefix` finds the tokens that do not
depend on the observation: the prefix whose KV cache every env of a task shares.
:meth:`ChatPrompts.turn_ids` renders what follows an answer in a conversation (the end of the
assistant's turn, the next observation, the assistant header), so a conversation is built turn by
turn from pieces of the same template, and a sampled answer is never re-tokenized.

Example:
    >>> from textgym import models
    >>> from textgym.policy.prompts import ChatPrompts
    >>> _, tokenizer = models.load("tiny")
    >>> prompts = ChatPrompts(tokenizer)
    >>> ids = prompts.prompt_ids("Answer LEFT or RIGHT.", "Pole leans left.")
    >>> ids[:len(prompts.system_prefix("Answer LEFT or RIGHT."))] == prompts.system_prefix("Answer LEFT or RIGHT.")
    True
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["ChatPrompts", "check_chat_template", "common_prefix_length", "end_token_ids"]

# Placeholders rendered in place of an earlier turn's texts (private-use characters: no real
# observation or answer contains them); only the template text after the answer is kept.
_PLACEHOLDER = "\ue000"
_ANSWER_MARK = "\ue001"
# An observation that a template which trims, escapes or otherwise rewrites its messages changes.
_PROBE = " \n\t<b>'x' & \"{{ y }}\"</b> \n "


def check_chat_template(template: str) -> None:
    """Refuse a Jinja chat template that does not render the messages: rendered (as transformers
    renders it: a sandbox, ``trim_blocks``, ``lstrip_blocks``) on a system and a user message, its
    text must contain the user's, or every prompt would be the same text.

    Example:
        >>> check_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
        >>> check_chat_template("You are a helpful assistant.")
        Traceback (most recent call last):
        ...
        ValueError: the chat template does not render the messages (it ignores `messages`): every prompt would be the same text

    Raises:
        ValueError: a syntax error, an error when rendering, or the user message is not in the text.
    """
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    user = "\ue002 the observation \ue003"  # private-use marks: no template writes them itself
    try:
        compiled = env.from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"the chat template has a syntax error at line {exc.lineno}: {exc.message}") from None
    rendered, error = None, None
    for messages in ([{"role": "system", "content": "Answer."}, {"role": "user", "content": user}],
                     [{"role": "user", "content": user}]):  # a template may refuse the system role
        try:
            rendered = compiled.render(messages=messages, add_generation_prompt=True, bos_token="",
                                       eos_token="")
            break
        except Exception as exc:  # noqa: BLE001 - any error the template raises is its own
            error = exc
    if rendered is None:
        raise ValueError(f"the chat template fails to render a user message: {type(error).__name__}: {error}")
    if user not in rendered:
        raise ValueError("the chat template does not render the messages (it ignores `messages`): every "
                         "prompt would be the same text")


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case (a prompt and its system prefix), compared in C
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def end_token_ids(tokenizer: PreTrainedTokenizerBase, model: torch.nn.Module) -> set[int]:
    """The tokens that end an answer: the tokenizer's end token and the model's generation ``eos``."""
    ids = {tokenizer.eos_token_id}
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
    return {i for i in ids if i is not None}


class ChatPrompts:
    """Renders a system prompt and an observation as chat-formatted prompt token ids.

    Args:
        tokenizer: the model's tokenizer (its chat template is used unless ``chat_template`` is given).
        chat_template: a Jinja chat template overriding the tokenizer's.
        system_role: whether the template takes a ``system`` message; if not, the system prompt
            goes in front of the user message (also done when the template raises an error about
            the system role).
        cache_size: how many system prompts keep their prefix ids cached.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, chat_template: str | None = None, system_role: bool = True,
                 cache_size: int = 1024):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.system_role = system_role
        self.cache_size = cache_size
        self._system_prefixes: OrderedDict[str, list[int]] = OrderedDict()
        self._frames: OrderedDict[str, tuple[str, str] | None] = OrderedDict()

    def messages(self, system_prompt: str, observation: str) -> list[dict[str, str]]:
        """The chat messages of one turn."""
        if not system_prompt:
            return [{"role": "user", "content": observation}]
        if not self.system_role:
            return [{"role": "user", "content": f"{system_prompt}\n\n{observation}"}]
        return [{"role": "system", "content": system_prompt}, {"role": "user", "content": observation}]

    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt text of ``messages``, ending with the assistant header."""
        if self.chat_template is None and not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(
                "the tokenizer has no chat template; use an instruct/chat model or pass "
                "Policy(..., chat_template=<jinja template>)")
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, chat_template=self.chat_template)

    def prompt_ids(self, system_prompt: str, observation: str) -> list[int]:
        """Token ids of the chat-formatted prompt: system prompt, user observation, assistant header."""
        return self.tokenizer(self.prompt_text(system_prompt, observation), add_special_tokens=False)["input_ids"]

    def batch_prompt_ids(self, system_prompts: Sequence[str], observations: Sequence[str]) -> list[list[int]]:
        """:meth:`prompt_ids` of every (system prompt, observation) pair, tokenized in one call (a
        fast tokenizer encodes the batch in Rust, without a Python round trip per prompt)."""
        texts = [self.prompt_text(s, o) for s, o in zip(system_prompts, observations)]
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []

    def prompt_text(self, system_prompt: str, observation: str) -> str:
        """The chat-formatted prompt text: the template's text around the observation, rendered
        once per system prompt (:meth:`frame`), else the whole template rendered."""
        frame = self.frame(system_prompt)
        if frame is None:
            return self._render_after(system_prompt, observation)
        return frame[0] + observation + frame[1]

    def frame(self, system_prompt: str) -> tuple[str, str] | None:
        """``(before, after)``: the prompt text is ``before + observation + after`` for every
        observation, or ``None`` when the template does not place the observation verbatim (it
        trims or escapes it, say): then every prompt is rendered. Checked once per system prompt
        on two probes, one with whitespace and markup at both ends."""
        if system_prompt in self._frames:
            self._frames.move_to_end(system_prompt)
            return self._frames[system_prompt]
        pieces = self._render_after(system_prompt, _PLACEHOLDER).split(_PLACEHOLDER)
        frame = (pieces[0], pieces[1]) if len(pieces) == 2 else None
        if frame is not None and self._render_after(system_prompt, _PROBE) != frame[0] + _PROBE + frame[1]:
            frame = None
        self._frames[system_prompt] = frame
        while len(self._frames) > self.cache_size:
            self._frames.popitem(last=False)
        return frame

    def _render_after(self, system_prompt: str, observation: str,
                      later: list[dict[str, str]] | None = None) -> str:
        """The rendered first turn (and ``later`` messages), ending with the assistant header."""
        try:
            return self.render(self.messages(system_prompt, observation) + (later or []))
        except Exception as error:  # a template without a system role: put it in the user message
            if not system_prompt or "system" not in str(error).lower():
                raise
            return self.render([{"role": "user", "content": f"{system_prompt}\n\n{observation}"}] + (later or []))

    def turn_ids(self, system_prompt: str, observation: str, after: Sequence[int] = ()) -> list[int]:
        """Token ids that follow an assistant answer in a conversation: the end of the answer's
        turn, the user ``observation`` and the assistant header (the template's own text between
        the answer and the next answer).

        Args:
            system_prompt: the conversation's system prompt (some templates need it to render).
            observation: the new user message.
            after: the answer it follows; when that answer already ends with the token that closes
                the turn (a sampled end-of-turn token), it is not repeated.
        """
        text = self._render_after(system_prompt, _PLACEHOLDER, [{"role": "assistant", "content": _ANSWER_MARK},
                                                                {"role": "user", "content": observation}])
        ids = self.tokenizer(text[text.index(_ANSWER_MARK) + len(_ANSWER_MARK):],
                             add_special_tokens=False)["input_ids"]
        if after and ids and ids[0] == after[-1] and ids[0] in self.tokenizer.all_special_ids:
            ids = ids[1:]
        return ids

    def system_prefix(self, system_prompt: str) -> list[int]:
        """The prompt tokens that do not depend on the observation (found by rendering two
        different observations: templates need not split cleanly at the system/user boundary)."""
        ids = self._system_prefixes.get(system_prompt)
        if ids is None:
            a = self.prompt_ids(system_prompt, "A")
            b = self.prompt_ids(system_prompt, "Z")
            ids = a[:common_prefix_length(a, b)]
            self._system_prefixes[system_prompt] = ids
            while len(self._system_prefixes) > self.cache_size:
                self._system_prefixes.popitem(last=False)
        else:
            self._system_prefixes.move_to_end(system_prompt)
        return ids
