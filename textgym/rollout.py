"""Play text envs with a policy, one batched ``policy.act`` call per vector step.

Example:
    >>> import textgym
    >>> from textgym.policy import Policy
    >>> from textgym.rollout import collect
    >>> policy = Policy(*textgym.models.load("tiny"), mode="score")
    >>> venv = textgym.make_vec("textgym/Bandit-v0", num_envs=4)
    >>> rollout = collect(policy, venv, episodes=8, seed=0)
    >>> len(rollout.episodes), rollout.stats["decisions"]
    (8, 8)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from textgym.policy import Decision
from textgym.wrappers.episode_stats import episode_stats

__all__ = ["Episode", "Rollout", "Step", "collect"]


@dataclass
class Step:
    """One decision and what the env answered."""

    decision: Decision
    reward: float
    terminated: bool
    truncated: bool
    parse: dict[str, Any] | None
    """The env's ``info["parse"]`` record (``None`` if the env has no ParseAction wrapper)."""
    observation: str
    """The observation the decision was made on."""
    env_index: int
    """Which sub-env played it."""


@dataclass
class Episode:
    """A finished episode (or, in ``Rollout.unfinished``, one cut off by a step budget)."""

    steps: list[Step] = field(default_factory=list)
    seed: int | None = None
    """The seed its env was reset with (``None``: the env's generator continued)."""
    system_prompt: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    """The last step's info (with ``info["episode_stats"]`` from ``EpisodeStats``, unshaped return)."""

    @property
    def return_(self) -> float:
        """Sum of the rewards the agent received (shaped, if the env shapes rewards)."""
        return float(sum(s.reward for s in self.steps))

    @property
    def env_return(self) -> float:
        """The env's own return (``EpisodeStats``' ``info["episode_stats"]["return"]``: before
        reward shaping), or :attr:`return_` when the env does not record it."""
        record = episode_stats(self.info)
        return float(record["return"]) if record and "return" in record else self.return_

    @property
    def length(self) -> int:
        return len(self.steps)

    @property
    def invalid_count(self) -> int:
        """Answers that named no legal action."""
        return sum(1 for s in self.steps if s.parse is not None and not s.parse.get("valid", True))

    @property
    def decisions(self) -> list[Decision]:
        return [s.decision for s in self.steps]


@dataclass
class Rollout:
    """What :func:`collect` returns."""

    episodes: list[Episode]
    """Completed episodes, in order of completion."""
    stats: dict[str, float]
    """``decisions``, ``episodes``, ``prompt_tokens`` (new prompt tokens run through the model: the
    cached prefix is not counted again), ``prompt_tokens_total`` (full prompt lengths),
    ``answer_tokens``, ``model_tokens`` (all real tokens run through the model), ``seconds``,
    ``act_seconds`` (inside ``policy.act``), ``decisions_per_s``."""
    unfinished: list[Episode] = field(default_factory=list)
    """``steps=`` mode: episodes still running when the budget was spent."""

    @property
    def steps(self) -> list[Step]:
        return [s for ep in self.episodes for s in ep.steps]


def _sub_envs(venv: Any) -> list[Any]:
    if hasattr(venv, "envs"):
        return list(venv.envs)
    if isinstance(venv, (list, tuple)):
        return list(venv)
    return [venv]  # a single text env


def _wrapper_attr(env: Any, name: str, default: Any) -> Any:
    try:
        return env.get_wrapper_attr(name)
    except (AttributeError, Exception):  # noqa: BLE001 - any env without the attribute
        return default


def collect(policy: Any, venv: Any, episodes: int | None = None, steps: int | None = None,
            seed: int | Sequence[int | None] | None = None, greedy: bool = False) -> Rollout:
    """Play episodes with ``policy`` on the sub-envs of ``venv``; one ``policy.act`` call per vector step.

    ``episodes=N``: episode ``j`` is played by sub-env ``j % num_envs``, so every sub-env plays its
    share from start to end and a sub-env whose share is done drops out of the batch: long episodes
    are not under-represented (as they would be if the first N to finish were kept), and episodes
    of different lengths finish independently. ``steps=N``: exactly N decisions; episodes still
    running at the end go to ``Rollout.unfinished``.

    Args:
        policy: a :class:`textgym.Policy` (anything with ``act(observations, system_prompts,
            valid_actions, greedy)`` and, optionally, ``seed()`` and ``counters``).
        venv: a :class:`textgym.vector.TextVectorEnv`, a list of text envs or one text env.
        episodes: how many complete episodes to play.
        steps: how many decisions to make (instead of ``episodes``).
        seed: int: episode ``j`` resets its env with ``seed + j`` (sub-env ``i``'s first episode:
            ``seed + i``, as in ``make_vec``) and the policy's sampling is seeded with ``seed``, so the
            same call replays the same episodes. A list: the first episode of sub-env ``i`` uses
            ``seed[i]`` and later ones continue that env's generator. ``None``: the envs' own
            generators continue (a ``TextVectorEnv``'s constructor seed applies on its first reset).
        greedy: act greedily (evaluation).
    """
    if (episodes is None) == (steps is None):
        raise ValueError("give exactly one of episodes= or steps=")
    budget = int(episodes if episodes is not None else steps)
    if budget < 1:
        raise ValueError(f"episodes/steps must be >= 1, got {budget}")
    envs = _sub_envs(venv)
    n = len(envs)
    seeds = list(seed) if seed is not None and not isinstance(seed, int) else None
    if seeds is not None and len(seeds) != n:
        raise ValueError(f"got {len(seeds)} seeds for {n} sub-envs")
    if seed is not None and hasattr(policy, "seed"):
        policy.seed(int(seed) if seeds is None else int(next((s for s in seeds if s is not None), 0)))
    counters = getattr(policy, "counters", {})
    start_counters = dict(counters)
    started = time.perf_counter()

    def episode_seed(j: int, env_index: int) -> int | None:
        if seeds is not None:
            return seeds[env_index] if j < n else None
        return None if seed is None else int(seed) + j

    # Episode j goes to sub-env j % n; next_episode[i] is the global index of env i's next episode.
    next_episode = list(range(n))
    observations: list[str] = [""] * n
    infos: list[dict[str, Any]] = [{} for _ in range(n)]
    current: list[Episode | None] = [None] * n
    system_prompts = [""] * n

    def start(i: int, first_obs: str | None = None, first_info: dict | None = None) -> None:
        j = next_episode[i]
        next_episode[i] += n
        episode_seed_j = episode_seed(j, i)
        if first_obs is None:
            first_obs, first_info = envs[i].reset(seed=episode_seed_j)
        observations[i], infos[i] = first_obs, first_info
        system_prompts[i] = first_info.get("system_prompt", _wrapper_attr(envs[i], "system_prompt", ""))
        current[i] = Episode(seed=episode_seed_j, system_prompt=system_prompts[i])

    def wanted(i: int) -> bool:  # does sub-env i still have an episode to play?
        return steps is not None or next_episode[i] < budget

    # First episodes. A TextVectorEnv is reset through its own reset() so its constructor seed applies.
    if hasattr(venv, "envs") and hasattr(venv, "reset") and seeds is None and seed is None:
        first_obs, first_infos = venv.reset()
        for i in range(n):
            if wanted(i):
                start(i, first_obs[i], first_infos[i])
    else:
        for i in range(n):
            if wanted(i):
                start(i)

    finished: list[Episode] = []
    decisions_made = 0
    env_seconds = 0.0
    while True:
        active = [i for i in range(n) if current[i] is not None]
        if steps is not None:
            active = active[:max(0, budget - decisions_made)]
        if not active:
            break
        valid = [infos[i].get("valid_actions") or list(_wrapper_attr(envs[i], "action_names", []))
                 for i in active]
        decisions = policy.act([observations[i] for i in active], [system_prompts[i] for i in active],
                               valid, greedy=greedy)
        decisions_made += len(active)
        env_started = time.perf_counter()
        for i, decision in zip(active, decisions):
            obs, reward, terminated, truncated, info = envs[i].step(decision.text)
            episode = current[i]
            episode.steps.append(Step(decision=decision, reward=float(reward), terminated=bool(terminated),
                                      truncated=bool(truncated), parse=info.get("parse"),
                                      observation=observations[i], env_index=i))
            observations[i], infos[i] = obs, info
            if "system_prompt" in info:
                system_prompts[i] = info["system_prompt"]
            if terminated or truncated:
                episode.info = info
                finished.append(episode)
                current[i] = None
                if wanted(i):
                    start(i)
        env_seconds += time.perf_counter() - env_started

    seconds = time.perf_counter() - started
    stats: dict[str, float] = {"decisions": decisions_made, "episodes": len(finished)}
    for key in ("prompt_tokens", "prompt_tokens_total", "answer_tokens", "model_tokens", "act_seconds"):
        if key in counters:
            stats[key] = counters[key] - start_counters.get(key, 0)
    stats.update(seconds=seconds, env_seconds=env_seconds,
                 decisions_per_s=decisions_made / seconds if seconds > 0 else 0.0)
    unfinished = [ep for ep in current if ep is not None and ep.steps]
    return Rollout(episodes=finished, stats=stats, unfinished=unfinished)
