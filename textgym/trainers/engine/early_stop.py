"""Stop training once the env is solved: a cheap greedy check every few updates.

``trainer.train(updates=..., early_stop=EarlyStop(until=195))`` plays ``episodes`` greedy
episodes after every ``every``-th update, from held-out seeds that are neither training seeds
nor the final evaluation's, and stops the run when their mean (unshaped) return reaches
``until``. The check is kept cheap: its episodes are played in one batch (one forward pass per
step for all of them) and may be capped at ``max_steps`` steps. A capped episode counts the
return it had at the cap, which cannot exceed its full return when rewards are non-negative
(CartPole's check plays 200 steps, as CartPole-v0 did for its "195 over 200 steps" threshold),
so a check passed on capped episodes is passed on full ones too; the final evaluation
(``trainer.evaluate``) plays them uncapped.

The result of every check goes in the metrics line of its update (``check``, a
:class:`CheckResult`); with several processes each plays its share of the episodes and all of
them get the same result, so all stop after the same update.

Example:
    >>> import textgym
    >>> from textgym.trainers import make_trainer
    >>> policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
    >>> trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0",
    ...                        config={"num_envs": 8, "episodes_per_update": 16})
    >>> history = trainer.train(updates=2, early_stop=EarlyStop(until=0.0, every=1, episodes=8))
    >>> len(history), trainer.stopped_by, history[0]["check"]["solved"]   # 0.0 is reached at once
    (1, 'solved', True)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from textgym import seeds

__all__ = ["CHECK_SEED", "CheckResult", "EarlyStop", "registered_until"]

#: The first seed of the check's episodes (:data:`textgym.seeds.CHECK_BASE`; the layout is there).
CHECK_SEED = seeds.CHECK_BASE


@dataclass(frozen=True)
class EarlyStop:
    """When and how to check whether the policy has solved the env.

    Args:
        until: stop once the mean greedy return of the check's episodes is at least this.
        every: check after every this many updates (counted over the whole run, so a resumed run
            checks at the same updates).
        episodes: greedy episodes per check, played together (one batch).
        max_steps: cap each check episode at this many steps (``None``: the env's own limit).
            Applies to trainers made from an env id.
        seed: the first seed of the check's episodes (the same ones at every check, so checks
            compare policies on the same starts).

    Raises:
        ValueError: ``every``, ``episodes`` or ``max_steps`` below 1, or ``until`` not finite.
    """

    until: float
    every: int = 2
    episodes: int = 8
    max_steps: int | None = None
    seed: int = CHECK_SEED

    def __post_init__(self) -> None:
        if not isinstance(self.until, (int, float)) or self.until != self.until or abs(self.until) == float("inf"):
            raise ValueError(f"until must be a finite number, got {self.until!r}")
        for name in ("every", "episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"early stop: {name} must be at least 1, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"early stop: max_steps must be at least 1 or None, got {self.max_steps}")

    def due(self, update: int) -> bool:
        """Whether the check runs after update number ``update`` (1-based, over the whole run)."""
        return update % self.every == 0

    def seeds(self) -> range:
        """The seeds of the check's episodes."""
        return seeds.check_seeds(self.episodes, self.seed)


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one greedy check (written as ``check`` in its update's metrics line).

    Args:
        update: the update after which it ran.
        return_mean: the mean greedy return of its episodes (the env's own, unshaped).
        episodes: how many episodes it played.
        max_steps: the cap on their length it played with (the tighter of the early stop's and the
            run's own ``max_episode_steps``; ``None``: the env's own limit).
        until: the threshold.
        solved: ``return_mean >= until``.
        seconds: how long it took.
    """

    update: int
    return_mean: float
    episodes: int
    max_steps: int | None
    until: float
    solved: bool
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def registered_until(env_id: str | None) -> float | None:
    """The env's solved threshold, registered with its training defaults (``None``: it has none,
    or there is no env id): the collapse alarms' reference when no early stop gives one."""
    if env_id is None:
        return None
    import gymnasium as gym

    from textgym.registry import training_defaults

    try:
        return training_defaults(env_id).until
    except gym.error.Error:  # an env textgym's registry does not know
        return None
