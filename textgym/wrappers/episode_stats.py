"""EpisodeStats: the episode's return, length and invalid-answer count in the info at its end."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["EPISODE_STATS_KEY", "LEGACY_EPISODE_STATS_KEY", "EpisodeStats", "episode_stats"]

#: The info key of the episode summary: Gymnasium's name for it (what
#: :class:`gymnasium.wrappers.RecordEpisodeStatistics` writes). To stack that wrapper on a text
#: env as well, give it another key: ``RecordEpisodeStatistics(env, stats_key="gym_episode")``.
EPISODE_STATS_KEY = "episode"

#: The key of earlier releases, still written beside :data:`EPISODE_STATS_KEY` (the same dict)
#: for one release so that code reading it keeps working; it goes in the next one.
LEGACY_EPISODE_STATS_KEY = "episode_stats"


def episode_stats(info: dict[str, Any] | None) -> dict[str, Any] | None:
    """The summary :class:`EpisodeStats` put in an episode's last ``info`` (``info["episode"]``;
    an earlier release's ``info["episode_stats"]``, e.g. from an older server), else ``None``."""
    if not isinstance(info, dict):
        return None
    for key in (EPISODE_STATS_KEY, LEGACY_EPISODE_STATS_KEY):
        stats = info.get(key)
        if isinstance(stats, dict) and "return" in stats:
            return stats
    return None


class EpisodeStats(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Adds ``info["episode"] = {"return", "length", "invalid_count"}`` at episode end.

    ``return`` sums the rewards this wrapper sees (the env's reward plus invalid-answer
    penalties; reward shaping sits outside it), ``length`` counts ``step`` calls (retried
    answers included) and ``invalid_count`` comes from ``info["parse"]``. The key is the one
    Gymnasium's own :class:`~gymnasium.wrappers.RecordEpisodeStatistics` writes; to stack that
    wrapper too, give it another (``stats_key="gym_episode"``). The same dict is also under
    ``info["episode_stats"]``, the key of earlier releases, for one more release.

    Example:
        >>> import gymnasium as gym
        >>> from textgym.wrappers import ParseAction
        >>> env = EpisodeStats(ParseAction(gym.make("CartPole-v1"), ["LEFT", "RIGHT"]))
        >>> _ = env.reset(seed=0)
        >>> done = False
        >>> while not done:
        ...     _, _, terminated, truncated, info = env.step("LEFT")
        ...     done = terminated or truncated
        >>> info["episode"]
        {'return': 11.0, 'length': 11, 'invalid_count': 0}

    Args:
        env: the env to wrap (usually a :class:`~textgym.wrappers.ParseAction`).
    """

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self.episode_return = 0.0
        self.episode_length = 0
        self.episode_invalid_count = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.episode_return = 0.0
        self.episode_length = 0
        self.episode_invalid_count = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_return += float(reward)
        self.episode_length += 1
        parse = info.get("parse")
        if isinstance(parse, dict):
            if "invalid_count" in parse:
                self.episode_invalid_count = int(parse["invalid_count"])
            elif parse.get("valid") is False:
                self.episode_invalid_count += 1
        if terminated or truncated:
            info = dict(info)
            info[EPISODE_STATS_KEY] = info[LEGACY_EPISODE_STATS_KEY] = self.episode_summary()
        return obs, reward, terminated, truncated, info

    def episode_summary(self) -> dict[str, Any]:
        """The running episode's ``{"return", "length", "invalid_count"}`` so far (what the info at
        its end will hold; a rollout that cuts the episode early records it from here)."""
        return {"return": self.episode_return, "length": self.episode_length,
                "invalid_count": self.episode_invalid_count}
