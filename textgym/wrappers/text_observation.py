"""TextObservation: any observation -> a short text, plus the env's system prompt."""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import logger, spaces

from textgym.spaces import TextSpace

__all__ = ["DEFAULT_SYSTEM_PROMPT", "Formatter", "Renderer", "TextObservation", "describe"]

#: The system prompt used when none is given.
DEFAULT_SYSTEM_PROMPT = "You control an agent in an environment. Each message describes the current state."

Formatter = str | Callable[[Any], str] | Mapping[str, Any] | None


class Renderer:
    """Base class of observation renderers that an env's spec can record.

    A renderer is recorded in ``env.spec`` by its class and :meth:`constructor_kwargs`
    (``{"renderer": "module:Class", "kwargs": {...}}``, see :meth:`to_record`), so
    ``env.spec.to_json()`` works and ``gym.make(env.spec)`` rebuilds the same text env. Two
    renderers of one class with equal kwargs are equal (Gymnasium's env checker compares them).
    Subclass it, implement ``__call__(observation) -> str`` and, when ``__init__`` takes
    arguments, :meth:`constructor_kwargs`.

    Example:
        >>> class Coins(Renderer):
        ...     def __init__(self, unit="coins"):
        ...         self.unit = unit
        ...     def constructor_kwargs(self):
        ...         return {"unit": self.unit}
        ...     def __call__(self, obs):
        ...         return f"You have {obs} {self.unit}."
        >>> Coins("gold pieces")(3), Coins("gold") == Coins("gold")
        ('You have 3 gold pieces.', True)
    """

    def constructor_kwargs(self) -> dict[str, Any]:
        """The JSON-serializable keyword arguments that rebuild this renderer."""
        return {}

    def __call__(self, observation: Any) -> str:
        raise NotImplementedError

    def to_record(self) -> dict[str, Any]:
        """``{"renderer": "module:Class", "kwargs": constructor_kwargs()}``."""
        cls = type(self)
        return {"renderer": f"{cls.__module__}:{cls.__qualname__}", "kwargs": self.constructor_kwargs()}

    @staticmethod
    def from_record(record: Mapping[str, Any]) -> Renderer:
        """The renderer a :meth:`to_record` record stands for."""
        module, _, name = str(record["renderer"]).partition(":")
        cls: Any = importlib.import_module(module)
        for part in name.split("."):
            cls = getattr(cls, part)
        if not (isinstance(cls, type) and issubclass(cls, Renderer)):
            raise TypeError(f"{record['renderer']!r} is not a textgym Renderer class")
        return cls(**dict(record.get("kwargs") or {}))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.constructor_kwargs() == self.constructor_kwargs()

    def __hash__(self) -> int:
        return hash((type(self), json.dumps(self.constructor_kwargs(), sort_keys=True, default=str)))

    def __repr__(self) -> str:
        kwargs = ", ".join(f"{k}={v!r}" for k, v in self.constructor_kwargs().items())
        return f"{type(self).__name__}({kwargs})"


def _number(x: Any, decimals: int) -> str:
    """A compact number: ints as ints, floats rounded with trailing zeros dropped."""
    if isinstance(x, (bool, np.bool_)):
        return str(int(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(f):
        return str(f)
    if abs(f) >= 1e6:
        return format(f, f".{max(decimals, 1) + 1}g")
    text = format(f, f".{decimals}f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _array(a: np.ndarray, decimals: int, max_items: int) -> str:
    if a.size > max_items:
        if a.dtype.kind in "biuf":
            return (f"array of shape {a.shape}: min {_number(a.min(), decimals)}, "
                    f"mean {_number(a.mean(), decimals)}, max {_number(a.max(), decimals)}")
        return f"array of shape {a.shape}"
    if a.ndim == 0 or (a.ndim == 1 and a.size == 1):
        return _number(a.reshape(-1)[0].item(), decimals)
    if a.ndim == 1:
        return "[" + ", ".join(_number(v, decimals) for v in a.tolist()) + "]"
    return "[" + ", ".join(_array(row, decimals, max_items) for row in a) + "]"


def describe(
    obs: Any,
    space: spaces.Space | None = None,
    names: Sequence[str] | None = None,
    decimals: int = 2,
    max_items: int = 64,
) -> str:
    """A generic, compact text for an observation of any common Gymnasium space.

    Numbers are rounded to ``decimals``; a 1-D Box or a Tuple with ``names`` gives
    ``name=value`` pairs; a Dict gives one ``key: value`` line per key; an array with more
    than ``max_items`` values is summarized.

    Example:
        >>> import numpy as np
        >>> describe(np.array([0.0312, -0.1, 0.5, 2.0], dtype=np.float32))
        '[0.03, -0.1, 0.5, 2]'
        >>> describe(np.array([0.0312, -0.1]), names=["position", "velocity"])
        'position=0.03, velocity=-0.1'
        >>> describe((14, 10, 0))
        '(14, 10, 0)'
        >>> describe({"agent": np.array([1, 2]), "target": np.array([3, 0])})
        'agent: [1, 2]\\ntarget: [3, 0]'

    Args:
        obs: the observation.
        space: its space (used to walk Dict and Tuple spaces; optional).
        names: names of the values of a 1-D Box or of a Tuple's entries.
        decimals: digits after the decimal point.
        max_items: arrays larger than this are summarized (shape, min, mean, max).
    """
    return _describe(obs, space, names, decimals, max_items, top=True)


def _describe(obs, space, names, decimals, max_items, top) -> str:
    if isinstance(obs, str):
        return obs
    if isinstance(obs, Mapping):
        subspaces = space.spaces if isinstance(space, spaces.Dict) else {}
        parts = [f"{k}: {_describe(v, subspaces.get(k), None, decimals, max_items, False)}"
                 for k, v in obs.items()]
        return "\n".join(parts) if top else "{" + ", ".join(parts) + "}"
    if isinstance(obs, tuple):
        subspaces = space.spaces if isinstance(space, spaces.Tuple) else (None,) * len(obs)
        values = [_describe(v, s, None, decimals, max_items, False) for v, s in zip(obs, subspaces)]
        if names is not None and len(names) == len(values):
            return ", ".join(f"{n}={v}" for n, v in zip(names, values))
        return "(" + ", ".join(values) + ")"
    if isinstance(obs, (np.ndarray, list)):
        a = np.asarray(obs)
        if names is not None and a.ndim == 1 and len(names) == a.size:
            return ", ".join(f"{n}={_number(v, decimals)}" for n, v in zip(names, a.tolist()))
        if a.dtype == object:
            return str(obs)[: max_items * 16]
        return _array(a, decimals, max_items)
    if isinstance(obs, (int, float, np.number, bool, np.bool_)):
        return _number(obs, decimals)
    return str(obs)[: max_items * 16]


class _Describe:
    """:func:`describe` bound to a space (a class, not a lambda, so that envs pickle)."""

    def __init__(self, space: spaces.Space, names: Sequence[str] | None, decimals: int):
        self.space, self.names, self.decimals = space, names, decimals

    def __call__(self, obs: Any) -> str:
        return describe(obs, self.space, self.names, self.decimals)


class _FormatString:
    """``str.format`` over an observation: ``{obs}``, positional ``{0}``.. for the items of a
    sequence, and ``{key}`` for the keys of a dict."""

    def __init__(self, template: str):
        self.template = template

    def __call__(self, obs: Any) -> str:
        if isinstance(obs, Mapping):
            return self.template.format(obs=obs, **{str(k): v for k, v in obs.items()})
        if isinstance(obs, (tuple, list)) or (isinstance(obs, np.ndarray) and obs.ndim == 1):
            return self.template.format(*list(obs), obs=obs)
        return self.template.format(obs, obs=obs)


class TextObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Renders every observation as text and puts the system prompt in the reset info.

    The observation becomes a ``str`` in a :class:`~textgym.spaces.TextSpace`.
    ``info["system_prompt"]`` (set by ``reset``) is ``system_prompt`` followed by
    ``instructions`` (the answer format); it is the same for the whole episode, so a
    policy caches it once. Keep the observation text short: it is paid for every step.

    Example:
        >>> import gymnasium as gym
        >>> env = TextObservation(gym.make("CartPole-v1"),
        ...                       formatter="Cart {0:.2f} m, pole {2:+.2f} rad.",
        ...                       instructions="Answer LEFT or RIGHT.")
        >>> obs, info = env.reset(seed=0)
        >>> obs
        'Cart 0.01 m, pole -0.05 rad.'
        >>> info["system_prompt"].endswith("Answer LEFT or RIGHT.")
        True

    Args:
        env: the env to wrap.
        formatter: ``None`` for :func:`describe`; a function ``f(obs) -> str`` (a
            :class:`Renderer` is recorded in ``env.spec`` by name and kwargs, so the spec stays
            JSON-serializable); a renderer's record (``Renderer.to_record()``); or a format
            string with ``{obs}``, ``{0}``, ``{1}``.. (items of a tuple/1-D array) and
            ``{key}`` (keys of a dict observation).
        system_prompt: the task description.
        instructions: the answer format, appended to the system prompt (optional).
        max_length: the longest observation text; longer texts are cut (with a warning).
        observation_names: names of the values for :func:`describe` (1-D Box or Tuple
            observations); default: the unwrapped env's ``observation_names`` if it has one.
        decimals: rounding of :func:`describe`.
    """

    def __init__(
        self,
        env: gym.Env,
        formatter: Formatter = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        instructions: str | None = None,
        max_length: int = 8192,
        observation_names: Sequence[str] | None = None,
        decimals: int = 2,
    ):
        if isinstance(formatter, Mapping):
            formatter = Renderer.from_record(formatter)
        gym.utils.RecordConstructorArgs.__init__(
            self, formatter=formatter.to_record() if isinstance(formatter, Renderer) else formatter,
            system_prompt=system_prompt, instructions=instructions,
            max_length=max_length, observation_names=observation_names, decimals=decimals,
        )
        gym.ObservationWrapper.__init__(self, env)
        inner_space = env.observation_space
        if observation_names is None:
            observation_names = getattr(env.unwrapped, "observation_names", None)
        self.observation_names = list(observation_names) if observation_names is not None else None
        self.decimals = int(decimals)
        if formatter is None:
            self.formatter: Callable[[Any], str] = _Describe(inner_space, self.observation_names, self.decimals)
        elif isinstance(formatter, str):
            self.formatter = _FormatString(formatter)
            self._check_format_string(formatter, inner_space)
        elif callable(formatter):
            self.formatter = formatter
        else:
            raise TypeError(f"formatter must be None, a format string or a function obs -> str, "
                            f"got {type(formatter).__name__}")
        self.instructions = instructions
        self._system_prompt = system_prompt if not instructions else f"{system_prompt}\n{instructions}"
        self.max_length = int(max_length)
        self.observation_space = TextSpace(max_length=self.max_length)
        self._warned_length = False

    @property
    def system_prompt(self) -> str:
        """The system prompt (task description and answer format) of this env."""
        return self._system_prompt

    def _check_format_string(self, template: str, space: spaces.Space) -> None:
        try:
            self.formatter(space.sample())
        except (IndexError, KeyError, ValueError, TypeError, AttributeError) as e:
            raise ValueError(
                f"the format string {template!r} does not fit this env's observations "
                f"({space}): {type(e).__name__}: {e}. Use {{obs}}, {{0}}, {{1}}.. for the items "
                f"of a tuple or 1-D array, or {{key}} for a dict observation.") from e

    def observation(self, observation: Any) -> str:
        text = self.formatter(observation)
        if not isinstance(text, str):
            text = str(text)
        if len(text) > self.max_length:
            if not self._warned_length:
                self._warned_length = True
                logger.warn(f"textgym TextObservation: an observation text of {len(text)} characters "
                            f"was cut to max_length={self.max_length}")
            text = text[: self.max_length]
        return text

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        info = dict(info)
        info["system_prompt"] = self._system_prompt
        return self.observation(obs), info
