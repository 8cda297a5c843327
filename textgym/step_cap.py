"""The step cap of every loop that plays an env: an episode is cut after so many steps.

An env that never ends (a plugin without a time limit) must not hang a training update, an
evaluation, a baseline, a warm start's recorded demonstrations, a self-play game or ``textgym
play``. Every loop that steps an env asks a :class:`StepCap` after each step whether to cut the
episode there: the env's own limit ends it first when it has one; otherwise the cap given
(``max_episode_steps``), or :data:`DEFAULT_MAX_EPISODE_STEPS`. Cut episodes are counted
(``cut_episodes`` in a rollout's, a baseline's and a trainer's statistics) and, when the default
cap did the cutting, one warning says so.

Example:
    >>> cap = StepCap.of(3)
    >>> [cap.cuts(length, ended=False) for length in (1, 2, 3)]
    [False, False, True]
    >>> cap.cut
    1
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_EPISODE_STEPS", "StepCap"]

logger = logging.getLogger("textgym.rollout")

#: The steps after which a play loop cuts an episode (its last step marked truncated) when the
#: caller gives no ``max_episode_steps``: a safety cap, so that an env that never ends cannot hang
#: anything. It is far above every built-in env's own limit (the longest, CartPole's and
#: Acrobot's, is 500 steps); an env that needs longer episodes says so with its own limit,
#: ``textgym train/eval --max-episode-steps N`` or ``collect(max_episode_steps=N)``.
DEFAULT_MAX_EPISODE_STEPS = 1000


@dataclass
class StepCap:
    """The step cap of one play loop, and the episodes it cut.

    Args:
        limit: the most steps an episode takes in this loop.
        default: ``limit`` is :data:`DEFAULT_MAX_EPISODE_STEPS` (no cap was given): a cut
            episode means the env has no limit of its own, worth a warning.
    """

    limit: int
    default: bool = False
    cut: int = 0
    """Episodes cut so far."""

    @classmethod
    def of(cls, max_episode_steps: int | None = None) -> StepCap:
        """The cap for ``max_episode_steps`` (``None``: :data:`DEFAULT_MAX_EPISODE_STEPS`)."""
        if max_episode_steps is None:
            return cls(DEFAULT_MAX_EPISODE_STEPS, default=True)
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        return cls(int(max_episode_steps))

    def cuts(self, length: int, ended: bool) -> bool:
        """Whether an episode that has now taken ``length`` steps, and that the env did not end
        (``ended``: terminated or truncated), is cut here (counted in :attr:`cut`)."""
        if ended or length < self.limit:
            return False
        self.cut += 1
        return True

    def warn(self, env: str) -> None:
        """One warning when the default cap cut episodes of ``env`` (the env has no limit)."""
        if self.cut and self.default:
            logger.warning("%d episode(s) of %s cut at %d steps: the env has no step limit of its own "
                           "(give one: max_episode_steps, textgym --max-episode-steps N)",
                           self.cut, env, self.limit)
