"""Describers: what :func:`textgym.wrap` knows about an env class or an id prefix.

A describer gives the :func:`textgym.wrap` settings that suit an env (its renderer as
``formatter``, a ``system_prompt``...) for the arguments the caller left out. A family or a
plugin registers one for an env class (or ``"module:Class"``, matched without importing the
module) or for an id prefix, so ``textgym.wrap(gym.make("MiniGrid-Empty-5x5-v0"))`` reads as
text without touching the core.

Example:
    >>> import gymnasium as gym
    >>> register_describer("CartPole", lambda env: {"formatter": "Cart at {0:.1f}."})
    >>> describer_settings(gym.make("CartPole-v1"))["formatter"]
    'Cart at {0:.1f}.'
    >>> _ = _DESCRIBERS.pop("CartPole")
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

__all__ = ["Describer", "describer_settings", "register_describer"]

#: ``describer(env) -> {wrap keyword: value}`` (e.g. ``formatter``, ``system_prompt``).
Describer = Callable[[gym.Env], Mapping[str, Any]]

# key -> describer or its "module:function". A key is a class, a "module:Class" string, or an id prefix.
_DESCRIBERS: dict[Any, Describer | str] = {}


def register_describer(key: type | str, describer: Describer | str) -> None:
    """Register ``describer`` for the envs that ``key`` names.

    Args:
        key: an env class (its subclasses match too), a ``"module:Class"`` string (matched
            against the names of the unwrapped env's classes, nothing imported), or an id prefix
            (``"MiniGrid-"``, matched against ``env.spec.id``).
        describer: ``describer(env) -> {wrap keyword: value}``, or its ``"module:function"``
            (imported when an env first needs it).
    """
    _DESCRIBERS[key] = describer


def _class_names(env: gym.Env) -> set[str]:
    return {f"{c.__module__}:{c.__qualname__}" for c in type(env.unwrapped).__mro__}


def describer_settings(env: gym.Env) -> dict[str, Any]:
    """The :func:`textgym.wrap` settings the registered describer of ``env`` gives (``{}``: none).

    A class key wins over an id prefix; among prefixes, the longest.
    """
    base, names = type(env.unwrapped), _class_names(env)
    # env.unwrapped.spec: a wrapper's env.spec caches what it computes, and gym.make sets the
    # unwrapped spec of a text env only after its wrappers are built
    spec = env.unwrapped.spec
    env_id = spec.id if spec is not None else ""
    chosen = None
    for key, describer in list(_DESCRIBERS.items()):
        if isinstance(key, type) and issubclass(base, key) or isinstance(key, str) and key in names:
            chosen = describer
            break
    if chosen is None:
        prefixes = [k for k in _DESCRIBERS if isinstance(k, str) and ":" not in k and env_id.startswith(k)]
        if prefixes:
            chosen = _DESCRIBERS[max(prefixes, key=len)]
    if chosen is None:
        return {}
    if isinstance(chosen, str):
        module, _, attribute = chosen.partition(":")
        chosen = getattr(importlib.import_module(module), attribute)
    return dict(chosen(env))


# Families shipped with textgym (strings: nothing imported until such an env is wrapped).
register_describer("minigrid.minigrid_env:MiniGridEnv", "textgym.envs.minigrid_text:describer")
