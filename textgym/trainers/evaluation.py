"""Greedy evaluation of a policy on held-out seeds.

Example:
    >>> import textgym
    >>> from textgym.trainers.evaluation import evaluate_greedy
    >>> policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
    >>> venv = textgym.make_vec("textgym/Bandit-v0", num_envs=4)
    >>> from textgym.seeds import EVAL_BASE
    >>> result = evaluate_greedy(policy, venv, episodes=8, seed=EVAL_BASE)
    >>> result["episodes"], 0.0 <= result["return_mean"] <= 1.0
    (8, True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from textgym.outcomes import outcome_of, outcome_rates
from textgym.rollout import Envs, Episode, SupportsAct, collect

if TYPE_CHECKING:
    from textgym.distributed import ProcessContext

__all__ = ["EVAL_MAX_ENVS", "eval_envs", "evaluate_greedy"]

#: The most envs greedy evaluation (``textgym eval``, a trainer's greedy checks) runs in one
#: forward pass. Measured with bench/fast_eval.py (docs/results.md, "Fast evaluation"): on 2 CPU
#: cores SmolLM2-135M's greedy CartPole decisions/s still rise from 16 to 50 envs per pass.
EVAL_MAX_ENVS = 64


def eval_envs(episodes: int) -> int:
    """Envs per forward pass for an evaluation of ``episodes`` episodes: all side by side (every
    vector step one pass over them), up to :data:`EVAL_MAX_ENVS`.

    Example:
        >>> eval_envs(8), eval_envs(50), eval_envs(500)
        (8, 50, 64)
    """
    return max(1, min(episodes, EVAL_MAX_ENVS))


def evaluate_greedy(policy: SupportsAct, envs: Envs, episodes: int, seed: int,
                    process: ProcessContext | None = None,
                    on_episodes: Callable[[list[Episode]], Any] | None = None) -> dict[str, Any]:
    """Play ``episodes`` episodes greedily from seeds ``seed, seed + 1, ...``: mean return (the
    env's own, unshaped), its std, mean length, invalid answers per decision, and win/draw/loss
    rates when the env reports outcomes (games).

    With several data-parallel processes (``process``), each plays its consecutive share of the
    episodes (episode ``j`` still from seed ``seed + j``) and every one returns the result over all.
    ``on_episodes`` is handed this process's played episodes (their transcripts).
    """
    shard = process.shard(episodes) if process is not None else range(episodes)
    played = []
    cut = 0
    if len(shard):
        evaluating = getattr(policy, "evaluating", contextlib.nullcontext)  # a Policy: its eval precision
        with evaluating():
            rollout = collect(policy, envs, episodes=len(shard), seed=seed + shard.start, greedy=True)
        played = [(ep.env_return, ep.length, ep.invalid_count, outcome_of(ep)) for ep in rollout.episodes[:len(shard)]]
        if on_episodes is not None:
            on_episodes(rollout.episodes[:len(shard)])
        cut = int(rollout.stats.get("cut_episodes", 0))
    if process is not None:
        played = process.gather(played)
    returns = np.array([r[0] for r in played])
    lengths = np.array([r[1] for r in played])
    invalid = sum(r[2] for r in played)
    return {
        "episodes": len(played),
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "length_mean": float(lengths.mean()),
        "invalid_rate": invalid / max(1, int(lengths.sum())),
        **outcome_rates([r[3] for r in played]),
        **({"cut_episodes": cut} if cut else {}),  # this process's, ended by the rollout's step cap
        "seed": seed,
    }
