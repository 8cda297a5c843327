"""Game outcomes: two-player game envs put ``"win"``, ``"draw"`` or ``"loss"`` in the last
step's ``info["outcome"]``; trainers, evaluations and baselines report their rates.

Example:
    >>> outcome_rates(["win", "loss", "win", None])
    {'win_rate': 0.6666666666666666, 'draw_rate': 0.0, 'loss_rate': 0.3333333333333333}
    >>> outcome_rates([None, None])
    {}
"""

from __future__ import annotations

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
