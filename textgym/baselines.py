"""Reference policies to put beside a model's numbers: ``random`` for every env, ``scripted`` where
the env has a hand-written or planned player.

A reference policy (:data:`textgym.registry.ReferencePolicy`) makes a player for one env,
``policy(env, seed) -> player``; ``player(info) -> str`` answers with an action name. The answer
goes through the env's own parser, exactly as a model's would, so the statistics of
:func:`evaluate_reference` compare with a model's greedy evaluation
(:meth:`textgym.trainers.Trainer.evaluate`). Each env's scripted player lives with the env
(:mod:`textgym.envs.classic`, :mod:`textgym.envs.bandit`, :mod:`textgym.envs.games`,
:mod:`textgym.envs.textworld`) and is registered with it; find it with
:func:`textgym.registry.reference_policy`.

Example:
    >>> import textgym
    >>> from textgym.baselines import evaluate_reference
    >>> env = textgym.make("bandit")
    >>> evaluate_reference(env, textgym.registry.reference_policy("bandit", "scripted"),
    ...                    episodes=20, seed=0)["return_mean"]
    1.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from textgym.outcomes import outcome_rates
from textgym.registry import ReferencePlayer, ReferencePolicy, list_envs, reference_policy
from textgym.step_cap import StepCap
from textgym.tools import is_tool_env_info, is_valid_tool_call, tool_call_rates
from textgym.wrappers.episode_stats import episode_stats

__all__ = ["BaselineNotApplicable", "evaluate_baseline", "evaluate_reference", "random_policy"]


class BaselineNotApplicable(ValueError):
    """A reference policy cannot play this env (``random`` on an env that answers in free text)."""


def random_policy(env: gym.Env, seed: int | None = None) -> ReferencePlayer:
    """A uniformly random valid action at every step (``info["valid_actions"]``).

    An env with free-text answers and no action list (``reasoning_gym/...`` without
    ``candidates``, ``textarena/GuessTheNumber-v0``) has nothing to pick from: the player raises
    :class:`BaselineNotApplicable`."""
    rng = np.random.default_rng(seed)

    def player(info: dict[str, Any]) -> str:
        actions = info.get("valid_actions")
        if not actions:
            raise BaselineNotApplicable("the random baseline picks one of info['valid_actions'], and "
                                        "this env lists none: it takes free-text answers")
        return str(rng.choice(actions))

    return player


#: What :func:`evaluate_reference` hands ``on_step`` before each step: the observation the
#: player answers, the info it answers from, and its answer.
OnStep = Callable[[str, dict[str, Any], str], None]


def evaluate_reference(env: gym.Env, policy: ReferencePolicy, episodes: int,
                       seed: int = 0, on_step: OnStep | None = None,
                       max_episode_steps: int | None = None) -> dict[str, Any]:
    """Play ``episodes`` episodes of ``env`` (seeds ``seed``, ``seed + 1``, ...) with ``policy``.

    Returns the statistics of a model's greedy evaluation: ``episodes``, ``return_mean``,
    ``return_std`` (numpy's, ``ddof=0``), ``length_mean``, ``invalid_rate`` (invalid answers per
    decision), ``decisions``, ``seed``, for games ``win_rate``/``draw_rate``/``loss_rate`` and for
    a tool env its tool use (:func:`textgym.tools.tool_call_rates`).
    The return is the env's own (``EpisodeStats``' unshaped return when the env records it).
    ``on_step(observation, info, answer)`` sees every decision (recording demonstrations:
    :func:`textgym.trainers.engine.sft.player_demonstrations`). An episode the env does not end
    is cut at ``max_episode_steps`` steps (``None``:
    :data:`textgym.step_cap.DEFAULT_MAX_EPISODE_STEPS`), as a model's rollout is; cut episodes are
    counted in ``cut_episodes``.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    cap = StepCap.of(max_episode_steps)
    player = policy(env, seed)
    returns, lengths, outcomes = [], [], []
    tools: list[tuple[int, int]] = []  # a tool env's (valid tool calls, decisions) per episode
    invalid = decisions = 0
    for episode in range(episodes):
        observation, info = env.reset(seed=seed + episode)
        total, length, calls, done = 0.0, 0, 0, False
        while not done:
            answer = player(info)
            if on_step is not None:
                on_step(observation, info, answer)
            observation, reward, terminated, truncated, info = env.step(answer)
            total += float(reward)
            length += 1
            invalid += not (info.get("parse") or {}).get("valid", True)
            calls += is_valid_tool_call(info.get("parse"))
            done = terminated or truncated or cap.cuts(length, terminated or truncated)
        decisions += length
        stats = episode_stats(info) or {}
        returns.append(float(stats.get("return", total)))
        lengths.append(length)
        outcomes.append(info.get("outcome"))
        if is_tool_env_info(info):
            tools.append((calls, length, info.get("answer_reward")))
    cap.warn(env.spec.id if env.spec is not None else type(env.unwrapped).__name__)
    return {
        "episodes": episodes,
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
        "invalid_rate": invalid / decisions if decisions else 0.0,
        "decisions": decisions,
        "seed": seed,
        **outcome_rates(outcomes),
        **tool_call_rates(tools),
        **({"cut_episodes": cap.cut} if cap.cut else {}),
    }


def evaluate_baseline(env: gym.Env, name: str, episodes: int,
                      seed: int = 0) -> dict[str, Any] | None:
    """:func:`evaluate_reference` with the env's registered reference policy ``name``
    (``"random"``, ``"scripted"``...); ``None`` when the env has no policy by that name.

    Raises:
        BaselineNotApplicable: the policy cannot play the env (one line naming the env and the
            baselines that apply to it).
    """
    if env.spec is None:  # a served env ("openenv:URL"): every env has the random policy
        if name != "random":
            return None
        policy: ReferencePolicy | None = random_policy
    else:
        policy = reference_policy(env.spec.id, name)
    if policy is None:
        return None
    try:
        return evaluate_reference(env, policy, episodes, seed)
    except BaselineNotApplicable as error:
        names = reference_policy_names(env.spec.id) if env.spec is not None else ["random"]
        others = [other for other in names if other != name]
        applies = f"baselines that apply: {', '.join(others)}" if others else "no baseline applies to it"
        where = env.spec.id if env.spec is not None else "this env"
        raise BaselineNotApplicable(f"{where}: {error}; {applies}") from None


def reference_policy_names(env_id: str) -> list[str]:
    """The names of the reference policies registered for ``env_id`` (``["random", "scripted"]``...)."""
    infos = {info.id: info for info in list_envs()}
    info = infos.get(env_id)
    return list(info.reference_policies) if info is not None else ["random"]
