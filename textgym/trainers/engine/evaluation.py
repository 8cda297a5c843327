"""Greedy evaluation of a policy on held-out seeds.

Example:
    >>> import textgym
    >>> from textgym.trainers.engine.evaluation import evaluate_greedy
    >>> policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
    >>> venv = textgym.make_vec("textgym/Bandit-v0", num_envs=4)
    >>> from textgym.seeds import EVAL_BASE
    >>> result = evaluate_greedy(policy, venv, episodes=8, seed=EVAL_BASE)
    >>> result["episodes"], 0.0 <= result["return_mean"] <= 1.0
    (8, True)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from textgym.outcomes import outcome_of, outcome_rates
from textgym.rollout import Envs, Episode, SupportsAct, collect
from textgym.tools import is_tool_env_info, is_valid_tool_call, tool_call_rates
from textgym.trainers.engine.early_stop import CheckResult

if TYPE_CHECKING:
    from textgym.distributed import ProcessContext
    from textgym.trainers.engine.early_stop import EarlyStop

__all__ = ["EVAL_MAX_ENVS", "HeldOut", "eval_envs", "evaluate_greedy"]

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
    env's own, unshaped), its std, mean length, invalid answers per decision, win/draw/loss
    rates when the env reports outcomes (games), a tool env's tool use
    (:func:`textgym.tools.tool_call_rates`), and ``episode_returns``: each episode's return in the
    order of its seed, so that two evaluations on the same seeds compare episode by episode (the
    paired standard error of ``textgym benchmark``'s RL gain).

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
        played = [(ep.env_return, ep.length, ep.invalid_count, outcome_of(ep), _tool_use(ep), ep.seed)
                  for ep in rollout.episodes[:len(shard)]]
        if on_episodes is not None:
            on_episodes(rollout.episodes[:len(shard)])
        cut = int(rollout.stats.get("cut_episodes", 0))
    if process is not None:
        played = process.gather(played)
    played.sort(key=lambda r: r[5])  # episodes end in any order; their seeds are seed + j
    returns = np.array([r[0] for r in played])
    lengths = np.array([r[1] for r in played])
    invalid = sum(r[2] for r in played)
    tools = [(r[4][0], r[1], r[4][1]) for r in played if r[4] is not None]
    return {
        "episodes": len(played),
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "length_mean": float(lengths.mean()),
        "invalid_rate": invalid / max(1, int(lengths.sum())),
        **outcome_rates([r[3] for r in played]),
        **tool_call_rates(tools),
        **({"cut_episodes": cut} if cut else {}),  # this process's, ended by the rollout's step cap
        "seed": seed,
        "episode_returns": returns.tolist(),
    }


def _tool_use(episode: Episode) -> tuple[int, float | None] | None:
    """A tool env's episode: its valid tool calls and its final answer's reward (``None`` when it
    ended without one); ``None`` for any other env."""
    if not is_tool_env_info(episode.info):
        return None
    return (sum(1 for step in episode.steps if is_valid_tool_call(step.parse)),
            episode.info.get("answer_reward"))


class HeldOut:
    """Where a trainer plays its held-out episodes greedily: :meth:`evaluate` and :meth:`check`.

    Made from the trainer's env id (``env_id``, with its ``env_kwargs``; ``opponent="self"``
    dropped: :func:`textgym.registry.held_out`) with enough sub-envs for
    this process's share of the episodes (:func:`eval_envs`), else
    the trainer's own vector env (``envs``). A check's envs are made once and reused, by size and
    step cap: the episodes' seeds make every check play the same starts.
    """

    def __init__(self, env_id: str | None, env_kwargs: dict[str, Any], envs: Envs | None,
                 process: ProcessContext):
        from textgym.registry import held_out

        # a self-play run's held-out games are against the env's default opponent
        self.env_id, self.env_kwargs, self.envs, self.process = env_id, held_out(env_kwargs), envs, process
        self._checks: dict[tuple[int, int | None], Envs] = {}

    def _size(self, episodes: int) -> int:
        return eval_envs(max(1, len(self.process.shard(episodes))))

    def evaluate(self, policy: SupportsAct, episodes: int, seed: int, num_envs: int | None = None,
                 on_episodes: Callable[[list[Episode]], Any] | None = None) -> dict[str, Any]:
        """:func:`evaluate_greedy` of ``episodes`` episodes from ``seed`` on new envs of
        ``num_envs`` sub-envs (default: :func:`eval_envs` of this process's share)."""
        envs = self.envs
        if self.env_id is not None:
            import textgym

            envs = textgym.make_vec(self.env_id, num_envs=num_envs or self._size(episodes), seed=seed,
                                    **self.env_kwargs)
        return evaluate_greedy(policy, envs, episodes=episodes, seed=seed, process=self.process,
                               on_episodes=on_episodes)

    def check(self, policy: SupportsAct, early_stop: EarlyStop, update: int,
              on_episodes: Callable[[list[Episode]], Any] | None = None) -> CheckResult:
        """Play ``early_stop``'s held-out episodes greedily, all together and capped at the tighter
        of its ``max_steps`` and the run's ``max_episode_steps`` (with an env id), and compare their
        mean return with its ``until`` (``update``: the update it follows)."""
        started = time.monotonic()
        envs, cap = self.envs, None
        if self.env_id is not None:
            kwargs = dict(self.env_kwargs)
            if early_stop.max_steps is not None:
                cap = min(early_stop.max_steps, kwargs.get("max_episode_steps") or early_stop.max_steps)
                kwargs["max_episode_steps"] = cap
            key = (self._size(early_stop.episodes), cap)
            if key not in self._checks:
                import textgym

                self._checks[key] = textgym.make_vec(self.env_id, num_envs=key[0], seed=early_stop.seed, **kwargs)
            envs = self._checks[key]
        result = evaluate_greedy(policy, envs, episodes=early_stop.episodes, seed=early_stop.seed,
                                 process=self.process, on_episodes=on_episodes)
        return CheckResult(update=update, return_mean=result["return_mean"], episodes=result["episodes"],
                           max_steps=cap, until=float(early_stop.until), solved=result["return_mean"] >= early_stop.until,
                           seconds=round(time.monotonic() - started, 3))
