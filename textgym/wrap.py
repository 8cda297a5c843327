"""textgym.wrap: any Gymnasium env with a discrete, binary or Box action space -> a text env, in one call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium import spaces

__all__ = ["MAX_TEXT_LENGTH", "POLICY_KEYS", "wrap"]

#: The longest observation text a wrapped env gives (and the rollout hands a policy), in characters.
MAX_TEXT_LENGTH = 8192

#: The keyword arguments of :func:`wrap` that go to :class:`~textgym.wrappers.ParseAction`.
POLICY_KEYS = ("invalid_policy", "invalid_penalty", "default_action", "max_retries",
               "retry_fallback", "feedback", "parser")


def wrap(
    env: gym.Env | str,
    actions: Sequence[str] | Mapping[str, Any] | None = None,
    formatter: Any = None,
    system_prompt: str | None = None,
    instructions: str | None = None,
    history: int = 0,
    reward_terms: Sequence[Any] | None = None,
    *,
    answer_format: str | None = None,
    format_bonus: float = 0.0,
    format_bonus_steps: int | None = None,
    observation_names: Sequence[str] | None = None,
    max_length: int = MAX_TEXT_LENGTH,
    render_mode: str | None = None,
    **policy: Any,
) -> gym.Env:
    """Turns a Gymnasium env into a text env (``str`` observations, ``str`` actions).

    Stacks, inner to outer: ``TextObservation -> ParseAction -> EpisodeStats
    [-> ShapeReward] [-> History] [-> RenderText]``. The result follows the text-env contract of
    ``docs/design.md``: ``info["system_prompt"]`` and ``info["valid_actions"]`` at reset,
    ``info["valid_actions"]`` and ``info["parse"]`` at every step, ``info["episode"]``
    at episode end.

    Supported action spaces: ``Discrete`` (with or without an action mask in
    ``info["action_mask"]``), 1-D ``MultiBinary`` (each combination is an action named
    ``"A+B"``), ``Box`` (the numbers of the answer, clipped to the bounds; the named actions,
    for score mode, are a grid: see :func:`~textgym.wrappers.parsers.box_grid`), or any space
    with ``actions={name: env_action}``. Where a describer is registered for the env
    (:mod:`textgym.wrappers.describers`, e.g. MiniGrid's), its renderer and system prompt are
    the defaults of ``formatter`` and ``system_prompt``.

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = textgym.wrap(gym.make("CartPole-v1"), actions=["LEFT", "RIGHT"])
        >>> obs, info = env.reset(seed=0)
        >>> obs
        '[0.01, -0.02, -0.05, -0.05]'
        >>> info["system_prompt"].splitlines()[-1]
        'Actions: LEFT, RIGHT. Answer with one action name.'
        >>> obs, reward, terminated, truncated, info = env.step("Action: RIGHT")
        >>> info["parse"]["action"], reward
        (1, 1.0)

    Args:
        env: a Gymnasium env, or an env id for ``gym.make``.
        actions: the action names (for ``MultiBinary``: the bit names), or a dict
            ``{name: env_action}``. Default: the env's own names (``get_action_meanings()``
            as in Atari, an ``action_names`` or other ``*_names`` attribute, an ``Actions``
            enum as in MiniGrid), else ``"0".."n-1"``.
        formatter: observation -> text: ``None`` (a generic description of Box, Discrete,
            MultiBinary, Dict and Tuple observations), a function ``f(obs) -> str``, or a
            format string (see :class:`~textgym.wrappers.TextObservation`).
        system_prompt: the task description. Default: names the env.
        instructions: the answer format appended to the system prompt. Default: lists the actions.
        answer_format: instead of ``instructions``, a named format (``"word"``, ``"json"``,
            ``"think"``; :mod:`textgym.wrappers.answer_format`) whose sentence names the actions.
            A generate-mode policy answers it with the format's ``policy_settings()``.
        format_bonus: format shaping: a valid answer earns this much more (a
            :class:`~textgym.wrappers.FormatBonus` term added to ``reward_terms``, or to the env's
            own reward), so a model that does not follow the answer format yet learns it fast.
        format_bonus_steps: the bonus falls linearly to 0 over this many steps of the env (then the
            env's reward and the invalid penalty remain); ``None``: it stays.
        history: if > 0, the model sees the last ``history`` turns (:class:`~textgym.wrappers.History`:
            a conversation in rollouts, rendered into the observation when stepping by hand).
        reward_terms: if given, the reward is shaped by these terms (:class:`~textgym.wrappers.ShapeReward`).
        observation_names: names of the observation values for the generic description.
        max_length: the longest observation text.
        render_mode: ``"ansi"``: ``render()`` returns the text the model sees
            (:class:`~textgym.wrappers.RenderText`). Other render modes belong to the Gymnasium
            env: make it with them.
        **policy: the invalid-answer handling of :class:`~textgym.wrappers.ParseAction`:
            ``invalid_policy``, ``invalid_penalty``, ``default_action``, ``max_retries``,
            ``retry_fallback``, ``feedback``, ``parser``.

    Raises:
        ValueError: the action space is not supported (e.g. ``Text``), or ``render_mode`` is not
            ``None`` or ``"ansi"``.
        TypeError: an unknown keyword argument.
    """
    from textgym.wrappers import (
        EpisodeStats,
        History,
        ParseAction,
        RenderText,
        ShapeReward,
        TextObservation,
        resolve_actions,
    )

    unknown = sorted(set(policy) - set(POLICY_KEYS))
    if unknown:
        raise TypeError(f"textgym.wrap() got unexpected keyword argument(s) {unknown}; "
                        f"the invalid-answer options are {list(POLICY_KEYS)}")
    if render_mode not in (None, "ansi"):
        raise ValueError(f"textgym.wrap renders render_mode='ansi' (the text the model sees); "
                         f"for render_mode={render_mode!r}, make the Gymnasium env with it")
    if isinstance(env, str):
        env = gym.make(env)
    space = env.action_space
    if not isinstance(actions, Mapping) and not isinstance(space, (spaces.Discrete, spaces.MultiBinary, spaces.Box)):
        raise ValueError(
            f"textgym.wrap supports Discrete, 1-D MultiBinary and Box action spaces (optionally with "
            f"an action mask in info['action_mask']), or actions={{name: env_action}} for any space; "
            f"got {space}.")
    names = resolve_actions(env, actions).names
    # What the env's family knows (its renderer, its task), for the arguments not given here.
    from textgym.wrappers.describers import describer_settings

    known = describer_settings(env)
    formatter = known.get("formatter") if formatter is None else formatter
    system_prompt = known.get("system_prompt") if system_prompt is None else system_prompt

    if system_prompt is None:
        env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
        system_prompt = (f"You control an agent in the {env_id} environment. "
                         f"Each message describes the current state.")
    if answer_format is not None:
        if instructions is not None:
            raise TypeError("give either instructions= or answer_format=, not both")
        from textgym.wrappers.answer_format import answer_format as format_named

        instructions = format_named(answer_format).instructions(names)
    if instructions is None:
        instructions = _default_instructions(names, space, actions)
        if isinstance(space, spaces.Box) and not isinstance(actions, Mapping):
            from textgym.wrappers.parsers import box_instructions

            instructions = box_instructions(space)

    env = TextObservation(env, formatter=formatter, system_prompt=system_prompt,
                          instructions=instructions, max_length=max_length,
                          observation_names=observation_names)
    env = ParseAction(env, action_names=actions, **policy)
    env = EpisodeStats(env)
    if format_bonus:
        reward_terms = _with_format_bonus(reward_terms, format_bonus, format_bonus_steps)
    if reward_terms is not None:
        env = ShapeReward(env, terms=reward_terms)
    if history:
        env = History(env, window=int(history))
    if render_mode == "ansi":
        env = RenderText(env)
    return env


def _default_instructions(names: list[str], space: spaces.Space, actions: Any) -> str:
    if isinstance(space, spaces.MultiBinary) and not isinstance(actions, Mapping) and len(names) > 16:
        bits = [n for n in names if n != "NONE" and "+" not in n]
        return (f"Actions: any combination of {', '.join(bits)} joined with '+' in that order "
                f"(e.g. {bits[0]}+{bits[1]}), or NONE. Answer with one action.")
    return f"Actions: {', '.join(names)}. Answer with one action name."


def _with_format_bonus(reward_terms: Sequence[Any] | None, bonus: float, steps: int | None) -> list[Any]:
    """``reward_terms`` (default: the env's reward) plus a valid-answer bonus, decaying over ``steps``."""
    from textgym.wrappers import FormatBonus, LinearDecay, Scale

    weight = LinearDecay(1.0, 0.0, steps=steps) if steps else 1.0
    terms = list(reward_terms) if reward_terms is not None else [Scale(1.0)]
    return [*terms, FormatBonus(bonus=bonus, weight=weight)]
