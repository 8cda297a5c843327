"""Answer formats: how an env asks for its answer, and how a generating policy opens and ends it.

Three things must agree, so they are kept together: the sentence an env puts at the end of its
system prompt (:meth:`AnswerFormat.instructions`), the text a generate-mode policy writes at the
start of the answer (``prefill``) and the strings that end it (``stop``). The default parser
chain (:func:`textgym.wrappers.default_parser`) reads every format: a JSON object, an answer tag
or a bare word.

* ``"word"``: ``Answer with one word: LEFT or RIGHT.`` What score mode is measured with.
* ``"json"``: ``Answer with JSON: {"action": "LEFT"} or {"action": "RIGHT"}.``, the answer
  prefilled with ``{"action": "`` and stopped at the closing quote. Generate mode's default: a
  small instruct model then names an action at once (``bench/probes/generate_prior.py``).
* ``"think"``: a few sentences of reasoning first, then ``<answer>LEFT</answer>`` (stopped at
  the closing tag; the last tag decides).

Example:
    >>> fmt = ANSWER_FORMATS["json"]
    >>> fmt.instructions(["LEFT", "RIGHT"])
    'Answer with JSON: {"action": "LEFT"} or {"action": "RIGHT"}.'
    >>> fmt.policy_settings()
    {'prefill': '{"action": "', 'stop': ['"'], 'max_new_tokens': 8}
    >>> answer_format("word").instructions(["cat", "dog", "fox"])
    'Answer with one word: cat, dog or fox.'
    >>> fmt.instructions(["1", "2"], what="the number of one empty square")
    'Answer with the number of one empty square, in JSON: {"action": "1"}.'
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ANSWER_FORMATS", "AnswerFormat", "answer_format", "generate_mode_defaults"]


def _alternatives(names: Sequence[str]) -> str:
    """``"A"``, ``"A or B"``, ``"A, B or C"``."""
    names = [str(n) for n in names]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _word(names: Sequence[str], what: str | None) -> str:
    return f"Answer with {what}." if what else f"Answer with one word: {_alternatives(names)}."


def _json(names: Sequence[str], what: str | None) -> str:
    if what:
        return f"Answer with {what}, in JSON: {json.dumps({'action': str(names[0])})}."
    return f"Answer with JSON: {_alternatives([json.dumps({'action': str(n)}) for n in names])}."


def _think(names: Sequence[str], what: str | None) -> str:
    return (f"First think it through in a few sentences. Then answer {what or _alternatives(names)} "
            f"inside answer tags, like <answer>{names[0]}</answer>.")


@dataclass(frozen=True)
class AnswerFormat:
    """One way of answering, as the env asks for it and as a generating policy writes it.

    Args:
        name: the format's name (``answer_format=`` of the built-in envs and :func:`textgym.wrap`).
        describe: ``describe(action_names, what) -> str``: the instructions sentence (``what``:
            a description of the answer instead of the list of names, or ``None``).
        prefill: what a generate-mode policy writes at the start of every answer
            (:attr:`textgym.policy.PolicyConfig.prefill`).
        stop: the strings that end an answer (:attr:`textgym.policy.PolicyConfig.stop`).
        max_new_tokens: a length limit that leaves room for the format's longest sensible answer
            with short action names.
    """

    name: str
    describe: Callable[[Sequence[str], str | None], str]
    prefill: str = ""
    stop: tuple[str, ...] = ()
    max_new_tokens: int | None = None

    def instructions(self, action_names: Sequence[str], what: str | None = None) -> str:
        """The sentence that asks for an answer in this format, naming ``action_names``, or, when
        the legal ones change (a board's empty squares), describing them as ``what`` (``"the
        number of one empty square"``; ``action_names[0]`` is then the example)."""
        if not action_names:
            raise ValueError("an answer format needs at least one action name")
        return self.describe(action_names, what)

    def policy_settings(self) -> dict[str, Any]:
        """The :class:`textgym.policy.PolicyConfig` settings a generate-mode policy answers this
        format with (JSON-able: ``stop`` is a list)."""
        settings: dict[str, Any] = {"prefill": self.prefill, "stop": list(self.stop)}
        if self.max_new_tokens is not None:
            settings["max_new_tokens"] = self.max_new_tokens
        return settings


#: The answer formats by name.
ANSWER_FORMATS: dict[str, AnswerFormat] = {
    "word": AnswerFormat("word", _word),
    # '{"action": "' then a name and the closing quote: a name of up to ~4 tokens fits
    "json": AnswerFormat("json", _json, prefill='{"action": "', stop=('"',), max_new_tokens=8),
    "think": AnswerFormat("think", _think, stop=("</answer>",), max_new_tokens=128),
}


def answer_format(name: str | AnswerFormat) -> AnswerFormat:
    """The format named ``name`` (a format is returned as it is).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if isinstance(name, AnswerFormat):
        return name
    try:
        return ANSWER_FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown answer format {name!r}; the formats are {sorted(ANSWER_FORMATS)}") from None


def generate_mode_defaults(name: str = "json", *, temperature: float | None = None,
                           max_new_tokens: int | None = None, format_bonus: float = 0.0,
                           format_bonus_steps: int | None = None) -> dict[str, dict[str, Any]]:
    """The ``env_kwargs`` and ``policy`` tables of an env's generate-mode training defaults
    (``TrainingDefaults(modes={"generate": ...})``) for answering in format ``name``: the env asks
    for the format (with format shaping), the policy answers it (prefill, stop strings, length
    limit, temperature).

    Example:
        >>> generate_mode_defaults(temperature=0.7, format_bonus=0.5, format_bonus_steps=16)["env_kwargs"]
        {'answer_format': 'json', 'format_bonus': 0.5, 'format_bonus_steps': 16}

    Args:
        name: the answer format.
        temperature: the sampling temperature (``None``: the model registry's).
        max_new_tokens: the answer length limit (``None``: the format's).
        format_bonus: what a valid answer earns on top of the env's reward
            (``textgym.wrap(format_bonus=)``).
        format_bonus_steps: the bonus falls to 0 over this many steps of each env.
    """
    fmt = answer_format(name)
    env_kwargs: dict[str, Any] = {"answer_format": fmt.name}
    if format_bonus:
        env_kwargs["format_bonus"] = float(format_bonus)
        if format_bonus_steps is not None:
            env_kwargs["format_bonus_steps"] = int(format_bonus_steps)
    policy = fmt.policy_settings()
    if max_new_tokens is not None:
        policy["max_new_tokens"] = int(max_new_tokens)
    if temperature is not None:
        policy["temperature"] = float(temperature)
    return {"env_kwargs": env_kwargs, "policy": policy}
