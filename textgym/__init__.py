"""textgym: any Gymnasium or PettingZoo environment as a text environment, and online RL for LLM agents.

``import textgym`` is cheap: it registers the built-in ``textgym/...`` envs with Gymnasium and
imports torch, transformers and peft only when a model, policy or trainer is first used.

Example:
    >>> import gymnasium as gym, textgym
    >>> env = gym.make("textgym/CartPole-v1")
    >>> obs, info = env.reset(seed=0)
    >>> info["valid_actions"]
    ['LEFT', 'RIGHT']
"""

from __future__ import annotations

import importlib
from typing import Any

from textgym.registry import list_envs, make, make_vec, register
from textgym.spaces import TextSpace
from textgym.wrap import wrap

__version__ = "0.1.0"

# name -> module; resolved on first attribute access so that heavy dependencies load lazily.
_LAZY = {
    "TextVectorEnv": "textgym.vector",
    "wrappers": "textgym.wrappers",
    "models": "textgym.models",
    "Policy": "textgym.policy",
    "Decision": "textgym.policy",
    "collect": "textgym.rollout",
    "trainers": "textgym.trainers",
    "Agent": "textgym.agent",
    "wrap_pettingzoo": "textgym.envs.pettingzoo",
    "baselines": "textgym.baselines",
    "tool_env": "textgym.tools",
}

__all__ = ["TextSpace", "list_envs", "make", "make_vec", "register", "wrap", *_LAZY]


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'textgym' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if module_name.endswith("." + name) else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


# Register the built-in envs with Gymnasium (cheap: entry points are strings).
import textgym.envs  # noqa: E402,F401
