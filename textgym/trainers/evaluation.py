"""Greedy evaluation of a policy on held-out seeds.

Example:
    >>> import textgym
    >>> from textgym.trainers.evaluation import evaluate_greedy
    >>> policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
    >>> venv = textgym.make_vec("textgym/Bandit-v0", num_envs=4)
    >>> result = evaluate_greedy(policy, venv, episodes=8, seed=1_000_000)
    >>> result["episodes"], 0.0 <= result["return_mean"] <= 1.0
    (8, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from textgym.outcomes import outcome_of, outcome_rates
from textgym.rollout import Envs, SupportsAct, collect

__all__ = ["evaluate_greedy"]


def evaluate_greedy(policy: SupportsAct, envs: Envs, episodes: int, seed: int) -> dict[str, Any]:
    """Play ``episodes`` episodes greedily from seeds ``seed, seed + 1, ...``: mean return (the
    env's own, unshaped), its std, mean length, invalid answers per decision, and win/draw/loss
    rates when the env reports outcomes (games)."""
    rollout = collect(policy, envs, episodes=episodes, seed=seed, greedy=True)
    eps = rollout.episodes[:episodes]
    returns = np.array([ep.env_return for ep in eps])
    lengths = np.array([ep.length for ep in eps])
    invalid = sum(ep.invalid_count for ep in eps)
    return {
        "episodes": len(eps),
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "length_mean": float(lengths.mean()),
        "invalid_rate": invalid / max(1, int(lengths.sum())),
        **outcome_rates([outcome_of(ep) for ep in eps]),
        "seed": seed,
    }
