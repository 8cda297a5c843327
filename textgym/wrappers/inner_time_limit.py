"""InnerTimeLimit: Gymnasium's TimeLimit applied by a text env's entry point, inside its text wrappers."""

from __future__ import annotations

import copy

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

__all__ = ["InnerTimeLimit"]


class InnerTimeLimit(gym.wrappers.TimeLimit):
    """:class:`gymnasium.wrappers.TimeLimit` for the entry point of a registered text env.

    A built-in text env applies its step limit *inside* its text wrappers, so that
    ``EpisodeStats`` sees the truncation. Gymnasium's ``TimeLimit`` would write the limit into
    ``env.spec.max_episode_steps``, and ``gym.make(env.spec)`` would then add a second
    ``TimeLimit`` outside. This one records the limit as the entry point's
    ``max_episode_steps`` keyword argument instead, so ``gym.make(env.spec)`` passes it back
    to the entry point and rebuilds the same stack.

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = textgym.make("cartpole", max_episode_steps=50)
        >>> env.spec.max_episode_steps, env.spec.kwargs["max_episode_steps"]
        (None, 50)
        >>> str(gym.make(env.spec)) == str(env)
        True

    Args:
        env: the env to limit (the base env, under the text wrappers).
        max_episode_steps: steps before ``truncated``.
    """

    @property
    def spec(self) -> EnvSpec | None:
        if self._cached_spec is not None:
            return self._cached_spec
        env_spec = self.env.spec
        if env_spec is not None:
            env_spec = copy.deepcopy(env_spec)
            env_spec.kwargs = {**env_spec.kwargs, "max_episode_steps": self._max_episode_steps}
        self._cached_spec = env_spec
        return env_spec
