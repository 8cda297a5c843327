"""RenderText: ``render()`` returns the text the model sees (``render_mode="ansi"``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["RenderText"]


class RenderText(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Renders a text env as the text its agent reads: ``render()`` returns the last observation
    (after reset or step; retry feedback and history included), and ``render_mode`` is
    ``"ansi"``. The system prompt, the same for the whole episode, is in ``info["system_prompt"]``.

    :func:`textgym.wrap` puts it outermost when given ``render_mode="ansi"``, and so do the
    built-in envs: ``textgym.make(id, render_mode="ansi")`` or ``gym.make(id, render_mode="ansi")``.

    Example:
        >>> import textgym
        >>> env = textgym.make("textgym/Bandit-v0", render_mode="ansi")
        >>> obs, info = env.reset(seed=1)
        >>> env.render() == obs, env.render()
        (True, 'Color: red.')

    Args:
        env: the text env to render.
    """

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        modes = list(env.metadata.get("render_modes") or [])
        self.metadata = {**env.metadata, "render_modes": [*modes, "ansi"] if "ansi" not in modes else modes,
                         "render_fps": env.metadata.get("render_fps") or 4}
        self._text: str | None = None

    @property
    def render_mode(self) -> str:
        return "ansi"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._text = obs
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._text = obs
        return obs, reward, terminated, truncated, info

    def render(self) -> str | None:
        return self._text
