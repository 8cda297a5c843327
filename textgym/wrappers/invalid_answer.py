"""InvalidAnswerRule: what happens to an answer that names no legal action, in every text env.

One rule, one vocabulary: :class:`~textgym.wrappers.ParseAction` (every Gymnasium env made
text), the PettingZoo wrappers (:func:`textgym.wrap_pettingzoo`), the board-game views
(``textgym/TicTacToe-v0``, ``textgym/ConnectFour-v3``) and ``textgym/TextWorld-v0`` all take the
keyword arguments ``invalid_policy``, ``invalid_penalty``, ``max_retries``, ``retry_fallback`` and
``feedback``, build an :class:`InvalidAnswerRule` from them and ask it what to do
(:meth:`InvalidAnswerRule.decide`). What "playing the fallback move" means is the env's own
business (ParseAction plays its ``default_action``, a board game a seeded random legal move,
TextWorld sends the typed text to the game); what happens to the reward, the turn and the episode
is decided here, once.

The policies:

* ``"penalty"``: the env's fallback move is played and ``invalid_penalty`` is added to the reward.
* ``"default"``: the env's fallback move is played, no penalty.
* ``"retry"``: nothing is played; the same decision is asked again with a feedback line. After
  ``max_retries`` retries in a row, ``retry_fallback`` applies instead.
* ``"terminate"``: nothing is played; the episode ends with reward ``invalid_penalty``.

Example:
    >>> rule = InvalidAnswerRule(policy="retry", penalty=-1.0, max_retries=1)
    >>> rule.decide(retries=0)
    InvalidAnswer(policy='retry', reward=0.0, retries=1)
    >>> rule.decide(retries=1)          # retries used up: the fallback, "penalty"
    InvalidAnswer(policy='penalty', reward=-1.0, retries=0)
    >>> rule.feedback_line(["LEFT", "RIGHT"], retries=1)
    'Invalid answer. Reply with one of: LEFT, RIGHT.'
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

__all__ = [
    "DEFAULT_FEEDBACK",
    "INVALID_POLICIES",
    "RETRY_FALLBACKS",
    "AnswerCounter",
    "InvalidAnswer",
    "InvalidAnswerRule",
    "ParseRecord",
    "as_answer_text",
    "renamed_invalid_kwargs",
]

#: The invalid-answer policies.
INVALID_POLICIES = ("penalty", "default", "retry", "terminate")
#: The policies ``"retry"`` may fall back to once ``max_retries`` is used up.
RETRY_FALLBACKS = ("penalty", "default", "terminate")
#: The line shown with the repeated observation when an answer is retried. The fields
#: ``{valid_actions}``, ``{retries_left}`` and ``{answer}`` (the answer, shortened) are filled in.
DEFAULT_FEEDBACK = "Invalid answer. Reply with one of: {valid_actions}."


@dataclass(frozen=True)
class InvalidAnswer:
    """The rule's verdict on one invalid answer.

    Args:
        policy: the policy that applies (``"retry"`` already replaced by its fallback once the
            retries are used up).
        reward: added to the step's reward: the penalty for ``"penalty"`` and ``"terminate"``, else 0.
        retries: consecutive retries of this decision after this answer (0 unless ``"retry"``).
    """

    policy: str
    reward: float
    retries: int

    @property
    def plays_fallback(self) -> bool:
        """The env plays its fallback move (``"penalty"``, ``"default"``)."""
        return self.policy in ("penalty", "default")

    @property
    def asks_again(self) -> bool:
        """Nothing is played and the same decision is asked again (``"retry"``)."""
        return self.policy == "retry"

    @property
    def ends_episode(self) -> bool:
        """Nothing is played and the episode ends (``"terminate"``)."""
        return self.policy == "terminate"


@dataclass(frozen=True)
class InvalidAnswerRule:
    """What an env does with an answer that names no legal action (see the module docstring).

    Envs take its settings as the keyword arguments ``invalid_policy``, ``invalid_penalty``,
    ``max_retries``, ``retry_fallback`` and ``feedback``.

    Args:
        policy: ``"penalty"``, ``"default"``, ``"retry"`` or ``"terminate"``.
        penalty: the reward added for an invalid answer (``"penalty"``, ``"terminate"``, and
            ``"retry"`` once it falls back to one of them).
        max_retries: retries in a row that ``"retry"`` allows before ``retry_fallback`` applies.
        retry_fallback: the policy after ``max_retries`` retries: ``"penalty"``, ``"default"`` or
            ``"terminate"``.
        feedback: the retry feedback line, a format string with the fields ``{valid_actions}``,
            ``{retries_left}`` and ``{answer}``.
        allow_retry: ``False`` for envs without turns to repeat (a parallel multi-agent env):
            ``policy="retry"`` is then an error.

    Raises:
        ValueError: an unknown policy or fallback, a negative ``max_retries``, a non-finite
            penalty, or ``"retry"`` where it is not allowed.
    """

    policy: str = "penalty"
    penalty: float = -1.0
    max_retries: int = 2
    retry_fallback: str = "penalty"
    feedback: str = DEFAULT_FEEDBACK
    allow_retry: bool = True

    def __post_init__(self) -> None:
        if self.policy not in INVALID_POLICIES:
            raise ValueError(f"invalid_policy={self.policy!r}: choose one of {', '.join(INVALID_POLICIES)}")
        if self.retry_fallback not in RETRY_FALLBACKS:
            raise ValueError(f"retry_fallback={self.retry_fallback!r}: choose one of "
                             f"{', '.join(RETRY_FALLBACKS)}")
        if not self.allow_retry and self.policy == "retry":
            raise ValueError("invalid_policy='retry' needs turns; this env steps every agent at once: "
                             "use 'penalty', 'default' or 'terminate'")
        try:
            penalty, max_retries = float(self.penalty), int(self.max_retries)
        except (TypeError, ValueError) as error:
            raise ValueError(f"invalid_penalty must be a number and max_retries an int, got "
                             f"{self.penalty!r} and {self.max_retries!r}") from error
        if not math.isfinite(penalty):
            raise ValueError(f"invalid_penalty must be finite, got {self.penalty!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries!r}")
        if not isinstance(self.feedback, str):
            raise TypeError(f"feedback must be a format string, got {type(self.feedback).__name__}")
        object.__setattr__(self, "penalty", penalty)
        object.__setattr__(self, "max_retries", max_retries)

    def decide(self, retries: int) -> InvalidAnswer:
        """The verdict on an invalid answer, given the retries of this decision so far."""
        policy = self.policy
        if policy == "retry":
            if retries < self.max_retries:
                return InvalidAnswer("retry", 0.0, retries + 1)
            policy = self.retry_fallback
        reward = self.penalty if policy in ("penalty", "terminate") else 0.0
        return InvalidAnswer(policy, reward, 0)

    def feedback_line(self, valid_actions: Sequence[str], retries: int, answer: Any = "") -> str:
        """The feedback line of a retry (``retries``: the retries so far, this one included)."""
        shown = as_answer_text(answer).strip().replace("\n", " ")
        if len(shown) > 40:
            shown = shown[:37] + "..."
        try:
            return self.feedback.format(valid_actions=", ".join(valid_actions), answer=shown,
                                        retries_left=max(0, self.max_retries - retries))
        except (KeyError, IndexError, ValueError):  # a user template with other fields
            return self.feedback


@dataclass(frozen=True)
class ParseRecord:
    """What an env made of one answer: ``info["parse"]`` (as a dict, :meth:`to_dict`) of every
    text env (ParseAction, the PettingZoo wrappers, TextWorld, the reasoning and TextArena envs,
    OpenEnv servers) and of :class:`textgym.Agent`.

    Build it through an :class:`AnswerCounter` (:meth:`AnswerCounter.accept`,
    :meth:`AnswerCounter.refuse`), which keeps ``invalid_count`` and ``retries``.
    """

    raw: str
    """The answer as text (:func:`as_answer_text`)."""
    action: Any = None
    """The env action applied (``None`` if none was)."""
    action_name: str | None = None
    """The legal action the answer named (``None`` for an invalid answer)."""
    parser: str | None = None
    """The parser that read it (``None``: none could)."""
    valid: bool = False
    """Whether the answer named a legal action."""
    invalid_count: int = 0
    """Invalid answers of this player so far in the episode (this one included)."""
    policy: str | None = None
    """The invalid-answer policy that applied (``None`` when valid)."""
    retries: int = 0
    """Consecutive retries of this decision after this answer."""
    error: str | None = None
    """The exception a user parser raised (the key is left out of the dict when ``None``)."""

    def to_dict(self) -> dict[str, Any]:
        """``info["parse"]``: a plain dict (``error`` only when a parser raised)."""
        record = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "error"}
        if self.error is not None:
            record["error"] = self.error
        return record


class AnswerCounter:
    """One player's invalid-answer sequence in an episode, the one implementation every env uses:
    a valid answer is accepted (its retries end), an invalid one is counted and the rule decides
    (retry, play the fallback, or end the episode).

    Example:
        >>> counter = AnswerCounter(InvalidAnswerRule(policy="retry", max_retries=1))
        >>> verdict, record = counter.refuse("dance")
        >>> verdict.policy, record.to_dict()["invalid_count"], record.retries
        ('retry', 1, 1)
        >>> counter.accept("LEFT", action=0, action_name="LEFT", parser="keyword").retries
        0
    """

    def __init__(self, rule: InvalidAnswerRule) -> None:
        self.rule = rule
        self.invalid_count = 0
        self.retries = 0

    def reset(self) -> None:
        """A new episode."""
        self.invalid_count = 0
        self.retries = 0

    def accept(self, answer: Any, action: Any, action_name: str | None, parser: str | None,
               error: str | None = None) -> ParseRecord:
        """The record of a valid answer (the decision's retries end)."""
        self.retries = 0
        return ParseRecord(raw=as_answer_text(answer), action=action, action_name=action_name,
                           parser=parser, valid=True, invalid_count=self.invalid_count, error=error)

    def refuse(self, answer: Any, parser: str | None = None,
               error: str | None = None) -> tuple[InvalidAnswer, ParseRecord]:
        """The rule's verdict on an invalid answer and its record (``action`` unset: the env
        fills in the fallback move it plays, with ``dataclasses.replace``)."""
        self.invalid_count += 1
        verdict = self.rule.decide(self.retries)
        self.retries = verdict.retries
        return verdict, ParseRecord(raw=as_answer_text(answer), parser=parser,
                                    invalid_count=self.invalid_count, policy=verdict.policy,
                                    retries=verdict.retries, error=error)


def as_answer_text(action: Any) -> str:
    """An answer as text, whatever was passed; never raises.

    ``str`` stays as it is, ``bytes`` are decoded (bad bytes replaced), ``None`` is ``""`` and
    anything else goes through ``str()`` (``""`` when that raises, e.g. an int with more digits
    than Python converts, or an object whose ``__str__`` fails).

    Example:
        >>> as_answer_text(b"LEFT"), as_answer_text(None), as_answer_text(10 ** 5000)
        ('LEFT', '', '')
    """
    if isinstance(action, str):
        return action
    if action is None:
        return ""
    if isinstance(action, (bytes, bytearray, memoryview)):
        return bytes(action).decode("utf-8", errors="replace")
    try:
        text = str(action)
    except Exception:  # noqa: BLE001 - a broken __str__ is just an unreadable answer
        return ""
    return text if isinstance(text, str) else ""


def renamed_invalid_kwargs(where: str, invalid: str | None, penalty: float | None,
                           invalid_policy: str | None, invalid_penalty: float | None,
                           defaults: tuple[str, float]) -> tuple[str, float]:
    """``(invalid_policy, invalid_penalty)`` from the new names or the old ``invalid=`` /
    ``penalty=`` ones, which still work with a ``DeprecationWarning``; giving both is a TypeError."""
    for old, new, old_value, new_value in (("invalid", "invalid_policy", invalid, invalid_policy),
                                           ("penalty", "invalid_penalty", penalty, invalid_penalty)):
        if old_value is None:
            continue
        if new_value is not None:
            raise TypeError(f"{where}: give {new}= only ({old}= is its old name)")
        warnings.warn(f"{where}: {old}= is deprecated, use {new}= (same meaning)",
                      DeprecationWarning, stacklevel=3)
    policy = invalid_policy if invalid_policy is not None else invalid
    reward = invalid_penalty if invalid_penalty is not None else penalty
    return (defaults[0] if policy is None else policy,
            defaults[1] if reward is None else reward)
