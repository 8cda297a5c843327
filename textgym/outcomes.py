"""Game outcomes: two-player game envs put ``"win"``, ``"draw"`` or ``"loss"`` in the last
step's ``info["outcome"]``; trainers, evaluations and baselines report their rates (and means of
per-episode values with their standard error, :func:`mean_and_stderr`).

Example:
    >>> outcome_rates(["win", "loss", "win", None])
    {'win_rate': 0.6666666666666666, 'draw_rate': 0.0, 'loss_rate': 0.3333333333333333}
    >>> outcome_rates([None, None])
    {}
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

OUTCOMES = ("win", "draw", "loss")


def outcome_of(episode: Any) -> str | None:
    """The outcome an episode's last ``info`` reports, else ``None``."""
    outcome = (getattr(episode, "info", None) or {}).get("outcome")
    return outcome if outcome in OUTCOMES else None


def outcome_rates(outcomes: Sequence[str | None]) -> dict[str, float]:
    """``win_rate``, ``draw_rate``, ``loss_rate`` over the episodes that report an outcome
    (empty when none does)."""
    known = [o for o in outcomes if o in OUTCOMES]
    if not known:
        return {}
    return {f"{o}_rate": known.count(o) / len(known) for o in OUTCOMES}


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Sample mean and its standard error, ``sqrt(var / n)`` with the ``n - 1`` variance (0 for one
    value; NaN for none). For 0/1 values: ``sqrt(p (1 - p) / (n - 1))``.

    Example:
        >>> mean_and_stderr([1.0, 0.0, 1.0, 0.0])
        (0.5, 0.28867513459481287)
    """
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
