"""ShapeReward: the reward as a weighted sum of composable terms, each weight on a schedule."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "Clip",
    "Constant",
    "ExponentialDecay",
    "FormatBonus",
    "LinearDecay",
    "Potential",
    "RewardFn",
    "RewardTerm",
    "Scale",
    "ShapeReward",
    "as_schedule",
    "from_record",
]

Schedule = Callable[[int], float]


class _EqualByValue:
    """Schedules and terms compare equal when their settings are (running state, in ``_``
    attributes, is not a setting): ``env.spec.make()``, which Gymnasium's env checker calls,
    rebuilds an env and requires its wrappers' constructor kwargs to compare equal.

    They are also recorded in ``env.spec`` as ``{"class": "module:Class", "kwargs": {...}}``
    (:meth:`to_record`), so ``env.spec.to_json()`` works, as for a text env's
    :class:`~textgym.wrappers.text_observation.Renderer`. A setting that is a function is
    recorded by its import path when it is a module-level function; a lambda or closure cannot
    be recorded (``to_json`` then fails with Gymnasium's error, as for any unserializable kwarg).
    """

    def _settings(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def constructor_kwargs(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this object (default: its settings, named as the
        constructor's parameters)."""
        return self._settings()

    def to_record(self) -> dict[str, Any]:
        """``{"class": "module:Class", "kwargs": ...}``, JSON-serializable (TypeError otherwise)."""
        cls = type(self)
        return {"class": f"{cls.__module__}:{cls.__qualname__}",
                "kwargs": {k: _encode(v) for k, v in self.constructor_kwargs().items()}}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._settings() == self._settings()

    def __hash__(self) -> int:
        return hash(type(self))


def _encode(value: Any) -> Any:
    """A setting in JSON form: schedules and terms as records, module-level functions by path."""
    if isinstance(value, _EqualByValue):
        return value.to_record()
    if isinstance(value, (frozenset, set)):
        return sorted(value)
    if callable(value):
        module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
        if module is None or "<" in name or not _importable(module, name, value):
            raise TypeError(f"{value!r} is not a module-level function: it cannot be recorded")
        return {"function": f"{module}:{name}"}
    return value


def _resolve(path: str) -> Any:
    module, _, name = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _importable(module: str, name: str, value: Any) -> bool:
    try:
        return _resolve(f"{module}:{name}") is value
    except (ImportError, AttributeError):
        return False


def _decode(value: Any) -> Any:
    """The inverse of :func:`_encode`."""
    if isinstance(value, Mapping) and set(value) == {"class", "kwargs"}:
        return from_record(value)
    if isinstance(value, Mapping) and set(value) == {"function"}:
        return _resolve(str(value["function"]))
    return value


def from_record(record: Mapping[str, Any]) -> Any:
    """The schedule or reward term a ``to_record()`` record stands for (TypeError for a class
    that is neither)."""
    cls = _resolve(str(record["class"]))
    if not (isinstance(cls, type) and issubclass(cls, _EqualByValue)):
        raise TypeError(f"{record['class']!r} is not a textgym reward term or schedule")
    return cls(**{k: _decode(v) for k, v in dict(record.get("kwargs") or {}).items()})


# --------------------------------------------------------------------------- schedules


class Constant(_EqualByValue):
    """A weight that never changes.

    Example:
        >>> Constant(0.5)(1000)
        0.5
    """

    def __init__(self, value: float):
        self.value = float(value)

    def __call__(self, step: int) -> float:
        return self.value

    def __repr__(self) -> str:
        return f"Constant({self.value})"


class LinearDecay(_EqualByValue):
    """From ``start`` to ``end`` linearly over ``steps`` steps, then ``end``.

    Example:
        >>> s = LinearDecay(1.0, 0.0, steps=100)
        >>> s(0), s(50), s(100), s(1000)
        (1.0, 0.5, 0.0, 0.0)

    Args:
        start: the weight at step 0.
        end: the weight from step ``steps`` on.
        steps: the length of the decay.
    """

    def __init__(self, start: float, end: float = 0.0, steps: int = 1000):
        if steps <= 0:
            raise ValueError(f"LinearDecay needs steps > 0, got {steps}")
        self.start, self.end, self.steps = float(start), float(end), int(steps)

    def __call__(self, step: int) -> float:
        fraction = min(max(step, 0) / self.steps, 1.0)
        return self.start + (self.end - self.start) * fraction

    def __repr__(self) -> str:
        return f"LinearDecay({self.start}, {self.end}, steps={self.steps})"


class ExponentialDecay(_EqualByValue):
    """``end + (start - end) * decay ** step``.

    Example:
        >>> s = ExponentialDecay(1.0, decay=0.5)
        >>> s(0), s(1), s(3)
        (1.0, 0.5, 0.125)

    Args:
        start: the weight at step 0.
        decay: the factor per step, in (0, 1].
        end: the limit.
    """

    def __init__(self, start: float, decay: float = 0.999, end: float = 0.0):
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"ExponentialDecay needs 0 < decay <= 1, got {decay}")
        self.start, self.decay, self.end = float(start), float(decay), float(end)

    def __call__(self, step: int) -> float:
        return self.end + (self.start - self.end) * self.decay ** max(step, 0)

    def __repr__(self) -> str:
        return f"ExponentialDecay({self.start}, decay={self.decay}, end={self.end})"


def as_schedule(weight: float | Schedule) -> Schedule:
    """A number -> :class:`Constant`; a schedule (any ``f(step) -> float``) is kept."""
    if isinstance(weight, (int, float, np.number)) and not isinstance(weight, bool):
        return Constant(float(weight))
    if callable(weight):
        return weight
    raise TypeError(f"a weight must be a number or a schedule f(step) -> float, got {weight!r}")


# --------------------------------------------------------------------------- terms


class RewardTerm(_EqualByValue):
    """One term of a shaped reward: ``weight(step) * value(observation, action, reward, info)``.

    Subclass it and implement :meth:`value`.

    Args:
        weight: a number or a schedule over steps.
        name: the key of this term in ``info["reward_terms"]``.
    """

    name = "term"

    def __init__(self, weight: float | Schedule = 1.0, name: str | None = None):
        self.weight = as_schedule(weight)
        if name is not None:
            self.name = name

    def value(self, observation: Any, action: Any, reward: float, info: dict) -> float:
        raise NotImplementedError

    def on_reset(self, env: gym.Env) -> None:
        """Called by :class:`ShapeReward` after each reset (``env`` is the env it wraps)."""

    def on_step(self, env: gym.Env, terminated: bool) -> None:
        """Called by :class:`ShapeReward` after each step, before :meth:`value`."""

    def __call__(self, observation: Any, action: Any, reward: float, info: dict, step: int) -> float:
        return float(self.weight(step)) * float(self.value(observation, action, reward, info))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weight={self.weight!r})"


class Scale(RewardTerm):
    """The env's reward times ``factor`` (a number or a schedule).

    Example:
        >>> Scale(0.1)(None, "LEFT", 1.0, {}, step=0)
        0.1
    """

    name = "scale"

    def __init__(self, factor: float | Schedule = 1.0, name: str | None = None):
        super().__init__(factor, name)

    def constructor_kwargs(self) -> dict[str, Any]:
        kwargs = {"factor": self.weight}
        return {**kwargs, "name": self.name} if "name" in vars(self) else kwargs

    def value(self, observation, action, reward, info) -> float:
        return float(reward)


class Clip(RewardTerm):
    """The env's reward clipped to ``[low, high]`` (times ``weight``).

    Example:
        >>> Clip(-1.0, 1.0)(None, "LEFT", -7.0, {}, step=0)
        -1.0
    """

    name = "clip"

    def __init__(self, low: float = -1.0, high: float = 1.0, weight: float | Schedule = 1.0,
                 name: str | None = None):
        if low > high:
            raise ValueError(f"Clip needs low <= high, got {low} > {high}")
        super().__init__(weight, name)
        self.low, self.high = float(low), float(high)

    def value(self, observation, action, reward, info) -> float:
        return min(max(float(reward), self.low), self.high)


class FormatBonus(RewardTerm):
    """``+bonus`` for a valid answer, ``-penalty`` for an invalid one (from ``info["parse"]``).

    With ``parsers``, only answers matched by those parsers earn the bonus (e.g.
    ``parsers=("json",)`` rewards following a JSON answer format).

    Example:
        >>> term = FormatBonus(bonus=0.1, penalty=0.5, parsers=("json",))
        >>> term(None, "", 0.0, {"parse": {"valid": True, "parser": "json"}}, step=0)
        0.1
        >>> term(None, "", 0.0, {"parse": {"valid": True, "parser": "keyword"}}, step=0)
        0.0
        >>> term(None, "", 0.0, {"parse": {"valid": False, "parser": None}}, step=0)
        -0.5

    Args:
        bonus: added for a valid answer.
        penalty: subtracted for an invalid answer.
        parsers: the parser names that earn the bonus (default: any).
        weight: a number or a schedule over steps.
    """

    name = "format"

    def __init__(self, bonus: float = 0.1, penalty: float = 0.0, parsers: Iterable[str] | None = None,
                 weight: float | Schedule = 1.0, name: str | None = None):
        super().__init__(weight, name)
        self.bonus, self.penalty = float(bonus), float(penalty)
        self.parsers = None if parsers is None else frozenset(parsers)

    def value(self, observation, action, reward, info) -> float:
        parse = info.get("parse") if isinstance(info, dict) else None
        if not isinstance(parse, dict):
            return 0.0
        if not parse.get("valid"):
            return -self.penalty
        if self.parsers is None or parse.get("parser") in self.parsers:
            return self.bonus
        return 0.0


class RewardFn(RewardTerm):
    """A user function ``f(observation, action, reward, info) -> float`` as a term.

    Example:
        >>> short = RewardFn(lambda obs, action, reward, info: -len(action) / 100, name="brevity")
        >>> short(None, "LEFT", 1.0, {}, step=0)
        -0.04

    Args:
        fn: the function; ``observation`` is the new observation, ``action`` the raw answer.
        weight: a number or a schedule over steps.
        name: the key in ``info["reward_terms"]`` (default: the function's name).
    """

    def __init__(self, fn: Callable[[Any, Any, float, dict], float], weight: float | Schedule = 1.0,
                 name: str | None = None):
        super().__init__(weight, name or getattr(fn, "__name__", "fn"))
        self.fn = fn

    def value(self, observation, action, reward, info) -> float:
        return float(self.fn(observation, action, reward, info))


class Potential(RewardTerm):
    """Potential-based shaping (Ng, Harada & Russell, 1999): ``gamma * phi(s') - phi(s)``.

    Dense credit for every step that does not change which policy is optimal (for a discount
    equal to ``gamma``; with ``gamma=1`` an episode's shaping terms add up to
    ``phi(last) - phi(first)``, whatever the policy did in between). ``phi`` of a terminal state
    is 0 (Ng et al.'s form) unless ``zero_terminal=False``: with a negative potential, zeroing
    pays the last step for ending the episode, which a trainer with a short discount credits to
    the action that failed. ``potential`` reads the state from the *unwrapped* env, since the
    observation a text env returns is already text.

    Example:
        >>> import gymnasium as gym
        >>> from textgym.wrappers import ParseAction
        >>> # CartPole: credit every push for slowing the pole's rotation (state[3], rad/s).
        >>> spin = Potential(lambda env: -abs(env.state[3]), name="spin")
        >>> env = ShapeReward(ParseAction(gym.make("CartPole-v1"), ["LEFT", "RIGHT"]), [Scale(1.0), spin])
        >>> _ = env.reset(seed=0)
        >>> _, reward, *_, info = env.step("LEFT")
        >>> info["reward_terms"]["scale"], round(info["reward_terms"]["spin"], 3)
        (1.0, -0.181)

    Args:
        potential: ``phi(unwrapped_env) -> float``, higher for better states.
        gamma: the discount of the shaping (match the trainer's for exact policy invariance).
        zero_terminal: take ``phi`` of a terminal state as 0.
        weight: a number or a schedule over steps.
        name: the key in ``info["reward_terms"]``.
    """

    name = "potential"

    def __init__(self, potential: Callable[[gym.Env], float], gamma: float = 1.0,
                 zero_terminal: bool = True, weight: float | Schedule = 1.0, name: str | None = None):
        super().__init__(weight, name)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"Potential needs gamma in [0, 1], got {gamma}")
        self.potential, self.gamma, self.zero_terminal = potential, float(gamma), bool(zero_terminal)
        self._last: float | None = None
        self._value = 0.0

    def _phi(self, env: gym.Env) -> float:
        return float(self.potential(env.unwrapped))

    def on_reset(self, env: gym.Env) -> None:
        self._last = self._phi(env)

    def on_step(self, env: gym.Env, terminated: bool) -> None:
        if self._last is None:
            raise RuntimeError("Potential: step before reset")
        new = 0.0 if terminated and self.zero_terminal else self._phi(env)
        self._value, self._last = self.gamma * new - self._last, new

    def value(self, observation, action, reward, info) -> float:
        return self._value


# --------------------------------------------------------------------------- wrapper


TermLike = RewardTerm | Callable[[Any, Any, float, dict], float]


def _recorded(terms: Sequence[TermLike] | None) -> Any:
    """What ``env.spec`` records of the terms: their records when all can be recorded, else the
    terms themselves (the spec still rebuilds the env in this process; ``to_json`` fails)."""
    if terms is None:
        return None
    try:
        return [t.to_record() if isinstance(t, RewardTerm) else _encode(t) for t in terms]
    except TypeError:
        return list(terms)


class ShapeReward(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Replaces the reward by ``sum(term(observation, action, reward, info, step))``.

    The shaped reward is exactly the weighted sum of the terms: include :class:`Scale` or
    :class:`Clip` to keep the env's reward. ``step`` counts this wrapper's steps across
    episodes (it drives the schedules). ``info["reward_env"]`` keeps the unshaped reward and
    ``info["reward_terms"]`` each term's weighted value.

    Example:
        >>> import gymnasium as gym
        >>> from textgym.wrappers import ParseAction
        >>> env = ShapeReward(ParseAction(gym.make("CartPole-v1"), ["LEFT", "RIGHT"]),
        ...                   terms=[Scale(0.1), FormatBonus(bonus=0.05, penalty=0.5,
        ...                          weight=LinearDecay(1.0, 0.0, steps=1000))])
        >>> _ = env.reset(seed=0)
        >>> _, reward, *_, info = env.step("LEFT")
        >>> round(reward, 3), info["reward_env"], info["reward_terms"]
        (0.15, 1.0, {'scale': 0.1, 'format': 0.05})

    Args:
        env: the env to wrap (usually the text env stack).
        terms: :class:`RewardTerm` objects or plain functions ``f(observation, action, reward,
            info)`` (weight 1), or their records (``term.to_record()``, what ``env.spec``
            holds). Default: ``[Scale(1.0)]``. Duplicate names get a ``_2``.. suffix.
    """

    def __init__(self, env: gym.Env, terms: Sequence[TermLike | Mapping[str, Any]] | None = None):
        terms = None if terms is None else [_decode(t) for t in terms]
        gym.utils.RecordConstructorArgs.__init__(self, terms=_recorded(terms))
        gym.Wrapper.__init__(self, env)
        terms = [Scale(1.0)] if terms is None else list(terms)
        self.terms: list[RewardTerm] = [t if isinstance(t, RewardTerm) else RewardFn(t) for t in terms]
        if not self.terms:
            raise ValueError("ShapeReward needs at least one term (e.g. Scale(1.0) for the env reward)")
        self.term_names: list[str] = []
        for term in self.terms:
            name, k = term.name, 2
            while name in self.term_names:
                name, k = f"{term.name}_{k}", k + 1
            self.term_names.append(name)
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        result = self.env.reset(seed=seed, options=options)
        for term in self.terms:
            term.on_reset(self.env)
        return result

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        for term in self.terms:
            term.on_step(self.env, terminated)
        values = {name: term(obs, action, reward, info, self.steps)
                  for name, term in zip(self.term_names, self.terms)}
        self.steps += 1
        shaped = math.fsum(values.values())
        info = dict(info)
        info["reward_env"] = float(reward)
        info["reward_terms"] = values
        return obs, shaped, terminated, truncated, info
