"""ParseAction: the model's raw answer (a str) -> an env action, with a policy for invalid answers."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium import logger, spaces

from textgym.spaces import TextSpace
from textgym.wrappers.invalid_answer import (
    DEFAULT_FEEDBACK,
    INVALID_POLICIES,
    AnswerCounter,
    InvalidAnswerRule,
    ParseRecord,
    as_answer_text,
)
from textgym.wrappers.parsers import ParseResult, ParserLike, as_parser, box_grid, parse_numbers

__all__ = ["DEFAULT_FEEDBACK", "INVALID_POLICIES", "MAX_MULTIBINARY", "ActionTable", "ParseAction",
           "env_action_names", "resolve_actions"]

#: MultiBinary action spaces are enumerated; above this many bits the list gets too long.
MAX_MULTIBINARY = 8


def env_action_names(env: gym.Env, n: int) -> list[str] | None:
    """The env's own names for its ``n`` actions, where it has them, else ``None``.

    Looks on the unwrapped env for ``get_action_meanings()`` (Atari), an ``action_names``
    attribute, an ``Actions`` or ``actions`` enum (MiniGrid: ``left``, ``right``, ``forward``...)
    and any other ``*_names`` attribute with ``n`` names.

    Example:
        >>> import enum, gymnasium as gym
        >>> class Moves(enum.IntEnum):
        ...     up = 0
        ...     down = 1
        >>> env = gym.make("CartPole-v1")
        >>> env.unwrapped.actions = Moves
        >>> env_action_names(env, 2)
        ['up', 'down']
    """
    import enum

    base = env.unwrapped

    def enum_names(value):
        if isinstance(value, type) and issubclass(value, enum.Enum):
            members = sorted(value, key=lambda m: m.value) if issubclass(value, enum.IntEnum) else list(value)
            return [m.name for m in members]
        return None

    getters = [
        lambda: base.get_action_meanings(),
        lambda: base.action_names,
        lambda: enum_names(getattr(base, "Actions", None)),
        lambda: enum_names(getattr(base, "actions", None)),
    ]
    getters += [(lambda attr=attr: getattr(base, attr)) for attr in sorted(vars(base))
                if attr.endswith("_names") and attr not in ("action_names", "observation_names")]
    for getter in getters:
        try:
            names = getter()
        except Exception:  # noqa: BLE001 - any failure just means "no names"
            continue
        if isinstance(names, (list, tuple)) and len(names) == n and all(isinstance(x, str) for x in names):
            return [str(x) for x in names]
    return None


class ActionTable(NamedTuple):
    """The named actions of an env, as :func:`resolve_actions` finds them."""

    names: list[str]
    """Every action name, in env-action order."""
    env_actions: list[Any]
    """The env action of each name (an int, or an array for ``MultiBinary``)."""
    mask_index: list[int] | None
    """Each name's index into the env's action mask, or ``None`` when masks do not apply."""


def resolve_actions(env: gym.Env, action_names: Sequence[str] | Mapping[str, Any] | None = None
                    ) -> ActionTable:
    """The action names of ``env`` and the env action each one stands for.

    ``action_names`` as :class:`ParseAction` takes it: ``None`` (the env's own names, else
    ``"0".."n-1"``), a list of names, or a dict ``{name: env_action}``.

    Example:
        >>> import gymnasium as gym
        >>> resolve_actions(gym.make("CartPole-v1"), ["LEFT", "RIGHT"]).names
        ['LEFT', 'RIGHT']

    Raises:
        ValueError: the action space is not supported or the names do not fit it.
    """
    space = env.action_space
    if isinstance(action_names, Mapping):
        names = [str(k) for k in action_names]
        env_actions = [a if isinstance(space, spaces.Discrete) or np.isscalar(a)
                       else np.asarray(a, dtype=space.dtype) for a in action_names.values()]
        for name, a in zip(names, env_actions):
            if not space.contains(a):
                raise ValueError(f"action {name!r} -> {a!r} is not in the env's action space {space}")
        if isinstance(space, spaces.Discrete):
            env_actions = [int(a) for a in env_actions]
            return ActionTable(names, env_actions, [a - int(space.start) for a in env_actions])
        return ActionTable(names, env_actions, None)
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        if action_names is None:
            names = env_action_names(env, n) or [str(start + i) for i in range(n)]
        else:
            names = [str(x) for x in action_names]
            if len(names) != n:
                raise ValueError(f"got {len(names)} action names for Discrete({n}): {names}")
        return ActionTable(names, [start + i for i in range(n)], list(range(n)))
    if isinstance(space, spaces.MultiBinary):
        shape = tuple(np.atleast_1d(space.n)) if not isinstance(space.n, int) else (space.n,)
        if len(shape) != 1 or shape[0] > MAX_MULTIBINARY:
            raise ValueError(
                f"MultiBinary action spaces are supported up to {MAX_MULTIBINARY} bits in 1-D "
                f"(every combination becomes a named action); got shape {shape}. Pass "
                f"action_names={{name: action_array}} to name the combinations you need.")
        n = shape[0]
        if action_names is None:
            bits = env_action_names(env, n) or [str(i) for i in range(n)]
        else:
            bits = [str(x) for x in action_names]
            if len(bits) != n:
                raise ValueError(
                    f"for MultiBinary({n}) give the {n} bit names (combinations are named "
                    f"'A+B'), got {len(bits)}: {bits}")
        names, env_actions = [], []
        for combo in itertools.product((0, 1), repeat=n):
            set_bits = [bits[i] for i in range(n) if combo[i]]
            names.append("+".join(set_bits) if set_bits else "NONE")
            env_actions.append(np.array(combo, dtype=space.dtype))
        return ActionTable(names, env_actions, None)
    if isinstance(space, spaces.Box):
        if action_names is not None:
            raise ValueError("a Box action space takes numbers, not action names; give "
                             "action_names={name: action_array} to name chosen actions")
        names, env_actions = box_grid(space)
        return ActionTable(names, env_actions, None)
    raise ValueError(
        f"ParseAction supports Discrete, 1-D MultiBinary and Box action spaces (optionally with an "
        f"action mask), or action_names={{name: env_action}}; got {space}.")


class ParseAction(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Turns the action into text: ``step(answer: str)`` parses the answer into an env action.

    The parser (by default JSON, then regex, then keyword; see
    :mod:`textgym.wrappers.parsers`) maps the answer to one of ``action_names``. An answer
    is *valid* when it names a legal action: one that the current action mask allows
    (``info["action_mask"]``, as in Taxi, or an ``action_mask`` attribute of the env).
    An invalid answer is handled by the :class:`~textgym.wrappers.InvalidAnswerRule` made of
    ``invalid_policy``, ``invalid_penalty``, ``max_retries``, ``retry_fallback`` and ``feedback``:

    * ``"penalty"``: apply the default action and add ``invalid_penalty`` to the env's reward.
    * ``"default"``: apply the default action.
    * ``"retry"``: do not step the env; return the previous observation with a feedback
      line, reward 0, not terminated. After ``max_retries`` consecutive retries the
      ``retry_fallback`` policy applies.
    * ``"terminate"``: do not step the env; end the episode (``terminated=True``) with
      reward ``invalid_penalty``.

    The default action is ``default_action``, or the first legal action when that one is
    masked. ``step`` never raises on a bad answer (empty, 1 MB, unicode, control characters,
    malformed JSON); a non-``str`` action is read as text by
    :func:`~textgym.wrappers.as_answer_text` (``str()``, or ``""`` when that fails).

    ``info["valid_actions"]`` (legal names now) is set by ``reset`` and ``step``, and
    ``step`` sets ``info["parse"]``: ``raw``, ``action`` (the env action applied, ``None``
    if none was), ``action_name``, ``parser``, ``valid``, ``invalid_count`` (this
    episode), ``policy`` (``None`` when valid) and ``retries`` (consecutive retries of
    this decision). If a user parser raises, the answer counts as unparsed and
    ``info["parse"]["error"]`` holds the exception.

    Action spaces: ``Discrete(n, start)`` (names default to the env's own, else
    ``"0".."n-1"`` shifted by ``start``) and 1-D ``MultiBinary(n)`` with
    ``n <= MAX_MULTIBINARY``: ``action_names`` then names the ``n`` bits and every
    combination is an action, named by its set bits joined with ``"+"`` in bit order
    (``"UP+FIRE"``), ``"NONE"`` for all zeros. ``action_names`` may also be a dict
    ``{name: env_action}`` for any action space (e.g. a subset of Atari actions).

    ``Box`` action spaces: the answer's numbers are the action (a JSON list, else the last numbers
    of the text; :func:`~textgym.wrappers.parsers.parse_numbers`), clipped to the bounds; an answer
    without them is invalid. The action names (score mode's candidates, and the default action)
    are the grid of :func:`~textgym.wrappers.parsers.box_grid`; the default action is its centre.

    Example:
        >>> import gymnasium as gym
        >>> env = ParseAction(gym.make("CartPole-v1"), action_names=["LEFT", "RIGHT"])
        >>> obs, info = env.reset(seed=0)
        >>> info["valid_actions"]
        ['LEFT', 'RIGHT']
        >>> obs, reward, terminated, truncated, info = env.step('{"action": "RIGHT"}')
        >>> info["parse"]["action"], info["parse"]["parser"], reward
        (1, 'json', 1.0)
        >>> obs, reward, terminated, truncated, info = env.step("I'd rather dance.")
        >>> info["parse"]["valid"], info["parse"]["policy"], reward
        (False, 'penalty', 0.0)

    Args:
        env: the env to wrap.
        action_names: the action names, a dict ``{name: env_action}``, or ``None`` for
            the defaults described above.
        parser: a :class:`~textgym.wrappers.parsers.Parser`, a function
            ``f(text, action_names)``, a list of them (a chain), or ``None`` for the default chain.
        invalid_policy: ``"penalty"``, ``"default"``, ``"retry"`` or ``"terminate"``.
        invalid_penalty: the reward added for an invalid answer (``penalty``, ``terminate``).
        default_action: the action applied for an invalid answer: an index into
            ``action_names`` or a name (``None``: the first one; for a Box space, the centre).
        max_retries: consecutive retries allowed before ``retry_fallback`` applies.
        retry_fallback: the policy after ``max_retries``: ``"penalty"``, ``"default"`` or ``"terminate"``.
        feedback: the retry feedback line; ``{valid_actions}``, ``{retries_left}`` and
            ``{answer}`` are filled in.
        max_length: the longest answer the action space declares (longer ones are still parsed).
    """

    def __init__(
        self,
        env: gym.Env,
        action_names: Sequence[str] | Mapping[str, Any] | None = None,
        parser: ParserLike | Sequence[ParserLike] | None = None,
        invalid_policy: str = "penalty",
        invalid_penalty: float = -1.0,
        default_action: int | str | None = None,
        max_retries: int = 2,
        retry_fallback: str = "penalty",
        feedback: str = DEFAULT_FEEDBACK,
        max_length: int = 4096,
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, action_names=action_names, parser=parser, invalid_policy=invalid_policy,
            invalid_penalty=invalid_penalty, default_action=default_action,
            max_retries=max_retries, retry_fallback=retry_fallback, feedback=feedback,
            max_length=max_length,
        )
        gym.Wrapper.__init__(self, env)
        self.rule = InvalidAnswerRule(policy=invalid_policy, penalty=invalid_penalty,
                                      max_retries=max_retries, retry_fallback=retry_fallback,
                                      feedback=feedback)
        self.parser = as_parser(parser)
        self.answers = AnswerCounter(self.rule)  # this episode's invalid answers and retries

        self._names, self._env_actions, self._mask_index = resolve_actions(env, action_names)
        space = env.action_space
        self._box = space if isinstance(space, spaces.Box) and not isinstance(action_names, Mapping) else None
        if default_action is None:
            default_action = len(self._names) // 2 if self._box is not None else 0
        self._names_tuple = tuple(self._names)
        self._default_index = self._resolve_default(default_action)
        self.action_space = TextSpace(max_length=max_length)

        self._legal = [True] * len(self._names)
        self._mask_from_attr = False
        self._last_obs: Any = None
        self._last_info: dict = {}
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ set-up

    def _resolve_default(self, default_action) -> int:
        if isinstance(default_action, str):
            if default_action not in self._names:
                raise ValueError(f"default_action {default_action!r} is not one of {self._names}")
            return self._names.index(default_action)
        index = int(default_action)
        if not 0 <= index < len(self._names):
            raise ValueError(
                f"default_action must index action_names (0..{len(self._names) - 1}), got {default_action}")
        return index

    # ------------------------------------------------------------------ public attributes

    @property
    def action_names(self) -> list[str]:
        """All action names (legal or not), in env-action order."""
        return list(self._names)

    @property
    def valid_actions(self) -> list[str]:
        """The names of the actions that are legal now."""
        return [n for n, ok in zip(self._names, self._legal) if ok]

    @property
    def invalid_count(self) -> int:
        """Invalid answers so far in this episode."""
        return self.answers.invalid_count

    def env_action(self, name_or_index: str | int) -> Any:
        """The env action for an action name or index."""
        i = self._names.index(name_or_index) if isinstance(name_or_index, str) else int(name_or_index)
        a = self._env_actions[i]
        return a.copy() if isinstance(a, np.ndarray) else a

    # ------------------------------------------------------------------ Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.answers.reset()
        self._update_legal(info)
        self._remember(obs, info)
        info = dict(info)
        info["valid_actions"] = self.valid_actions
        return obs, info

    def step(self, action: Any):
        if self._mask_from_attr:  # a live mask attribute may have changed since the last step
            self._update_legal({})
        raw = as_answer_text(action)
        result, error = self._parse(raw)
        index = result.action_index if result is not None else None
        if self._box is not None:
            values = parse_numbers(raw, int(np.prod(self._box.shape)))
            if values is not None:   # a continuous action: the numbers, clipped to the bounds
                value = np.clip(np.asarray(values, dtype=np.float64).reshape(self._box.shape),
                                self._box.low, self._box.high).astype(self._box.dtype)
                record = self.answers.accept(raw, None, raw.strip()[:64], "numbers", error)
                return self._apply(value, record, penalty=0.0)
        if index is not None and self._legal[index]:
            record = self.answers.accept(raw, None, self._names[index], result.parser, error)
            return self._apply(index, record, penalty=0.0)

        # Invalid: unparsed, or a masked (illegal) action.
        verdict, record = self.answers.refuse(raw, result.parser if result is not None else None, error)
        if verdict.asks_again:
            return self._retry(record, raw)
        if verdict.ends_episode:
            info = self._copy_last_info()
            info["valid_actions"] = self.valid_actions
            info["parse"] = record.to_dict()
            return copy.deepcopy(self._last_obs), verdict.reward, True, False, info
        return self._apply(self._fallback_index(), record, penalty=verdict.reward)

    # ------------------------------------------------------------------ helpers

    def _parse(self, raw: str) -> tuple[ParseResult | None, str | None]:
        try:
            result = self.parser(raw, self._names_tuple)
        except Exception as e:  # noqa: BLE001 - a user parser's bug must not kill a rollout
            if "parser" not in self._warned:
                self._warned.add("parser")
                logger.warn(f"textgym ParseAction: the parser {self.parser!r} raised {e!r}; "
                            f"the answer counts as unparsed (see info['parse']['error'])")
            return None, repr(e)
        if result is None:
            return None, None
        index = result.action_index
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)) \
                or not 0 <= int(index) < len(self._names):
            return None, None
        return ParseResult(int(index), self._names[int(index)], result.parser), None

    def _apply(self, index: int | np.ndarray, record: ParseRecord, penalty: float):
        env_action = index if isinstance(index, np.ndarray) else self.env_action(index)
        obs, reward, terminated, truncated, info = self.env.step(env_action)
        self._update_legal(info)
        self._remember(obs, info)
        applied = env_action.tolist() if isinstance(env_action, np.ndarray) else env_action
        info = dict(info)
        info["valid_actions"] = self.valid_actions
        info["parse"] = dataclasses.replace(record, action=applied).to_dict()
        return obs, float(reward) + penalty, terminated, truncated, info

    def _retry(self, record: ParseRecord, raw: str):
        valid = self.valid_actions
        line = self.rule.feedback_line(valid, self.answers.retries, raw)
        obs = copy.deepcopy(self._last_obs)
        if isinstance(obs, str):
            obs = f"{obs}\n{line}" if obs else line
            limit = getattr(self.observation_space, "max_length", None)
            if limit is not None and len(obs) > limit:
                obs = obs[-limit:]
        info = self._copy_last_info()
        info["valid_actions"] = valid
        info["parse"] = record.to_dict()
        info["feedback"] = line
        return obs, 0.0, False, False, info

    def _fallback_index(self) -> int:
        if self._legal[self._default_index]:
            return self._default_index
        return next((i for i, ok in enumerate(self._legal) if ok), self._default_index)

    def _remember(self, obs, info) -> None:
        self._last_obs = obs
        self._last_info = info

    def _copy_last_info(self) -> dict:
        # Only the reset-time and env keys; never re-emit the episode summary or the last parse.
        info = {k: v for k, v in self._last_info.items() if k not in ("parse", "episode")}
        return copy.deepcopy(info)

    def _update_legal(self, info: dict) -> None:
        if self._mask_index is None:
            return
        mask = self._find_mask(info)
        if mask is None:
            self._legal = [True] * len(self._names)
            return
        self._legal = [0 <= j < len(mask) and bool(mask[j]) for j in self._mask_index]

    def _find_mask(self, info: dict):
        mask = info.get("action_mask") if isinstance(info, dict) else None
        self._mask_from_attr = False
        if mask is None:
            attr = getattr(self.env.unwrapped, "action_mask", None)
            if attr is None:
                return None
            if callable(attr):
                try:
                    attr = attr()
                except TypeError:  # e.g. Taxi's action_mask(state): it puts the mask in info instead
                    return None
            mask = attr
            self._mask_from_attr = True
        try:
            mask = np.asarray(mask).reshape(-1)
        except Exception:  # noqa: BLE001
            return None
        expected = int(self.env.action_space.n) if isinstance(self.env.action_space, spaces.Discrete) else None
        if expected is not None and mask.shape[0] != expected:
            if "mask" not in self._warned:
                self._warned.add("mask")
                logger.warn(f"textgym ParseAction: ignoring an action mask of length {mask.shape[0]} "
                            f"for an action space of {expected} actions")
            return None
        return mask

