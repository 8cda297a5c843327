"""textgym/Bandit-v0: a one-step contextual bandit in words, small enough to learn in seconds.

Each episode shows one color ("Color: red."); each color has exactly one right animal. The
answer earns reward 1 if it names that animal, else 0, and the episode ends. With ``num_arms``
animals a blind guess earns ``1 / num_arms`` on average, and so does a constant answer when
each animal is right for as many colors: only an agent that reads the color does well.
The mapping is learned by trial unless ``hint=True`` states it in the system prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from textgym.registry import ReferencePlayer, TrainingDefaults
from textgym.wrappers.answer_format import generate_mode_defaults
from textgym.wrappers.text_observation import Renderer

__all__ = ["ANIMALS", "COLORS", "TRAINING_DEFAULTS", "CueBanditEnv", "make_bandit", "scripted_bandit"]

# Every word here is a single token for common LLM tokenizers, with and without a leading space.
COLORS = ("red", "green", "blue", "yellow", "purple", "orange", "brown", "black", "white")
ANIMALS = ("cat", "dog", "fox", "owl", "pig", "bee")


class CueBanditEnv(gym.Env[int, int]):
    """A contextual bandit: observe a cue index, pick an arm, reward 1 if it is the cue's arm.

    Example:
        >>> env = CueBanditEnv(num_cues=2, num_arms=2)
        >>> cue, info = env.reset(seed=0)
        >>> env.step(env.mapping[cue])[1:3]
        (1.0, True)

    Args:
        num_cues: how many cues (colors), 1 to 9.
        num_arms: how many arms (animals), 2 to 6.
        mapping: the right arm index of each cue; default ``cue % num_arms``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, num_cues: int = 2, num_arms: int = 2, mapping: Sequence[int] | None = None):
        if not 1 <= num_cues <= len(COLORS):
            raise ValueError(f"num_cues must be in 1..{len(COLORS)}, got {num_cues}")
        if not 2 <= num_arms <= len(ANIMALS):
            raise ValueError(f"num_arms must be in 2..{len(ANIMALS)}, got {num_arms}")
        mapping = [cue % num_arms for cue in range(num_cues)] if mapping is None else list(mapping)
        if len(mapping) != num_cues or not all(0 <= arm < num_arms for arm in mapping):
            raise ValueError(f"mapping must give one arm in 0..{num_arms - 1} per cue "
                             f"({num_cues} cues), got {mapping}")
        self.num_cues, self.num_arms, self.mapping = num_cues, num_arms, mapping
        self.observation_space = spaces.Discrete(num_cues)
        self.action_space = spaces.Discrete(num_arms)
        self._cue: int | None = None

    @property
    def correct_arm(self) -> int | None:
        """The right arm for the current cue (``None`` before the first reset)."""
        return None if self._cue is None else self.mapping[self._cue]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(self.num_cues))
        return self._cue, {}

    def step(self, action: int):
        if self._cue is None:
            raise RuntimeError("call reset() before step()")
        correct = self.mapping[self._cue]
        reward = 1.0 if int(action) == correct else 0.0
        return self._cue, reward, True, False, {"correct_action": correct}


def make_bandit(num_cues: int = 2, num_arms: int = 2, mapping: Sequence[int] | None = None,
                hint: bool = False, formatter=None, system_prompt: str | None = None,
                max_episode_steps: int | None = None, **wrap_kwargs: Any) -> gym.Env:
    """The text env of ``textgym/Bandit-v0``.

    Example:
        >>> import textgym
        >>> env = textgym.make("textgym/Bandit-v0")
        >>> obs, info = env.reset(seed=1)
        >>> obs, info["valid_actions"]
        ('Color: red.', ['cat', 'dog'])
        >>> env.step("cat")[1]
        1.0

    Args:
        num_cues: how many colors (1-9). Default 2.
        num_arms: how many animals to choose from (2-6); chance reward is ``1 / num_arms``.
        mapping: the right animal index per color; default color ``i`` -> animal ``i % num_arms``.
        hint: state the mapping in the system prompt (a model that reads can then solve it
            without learning); default off: the mapping is learned from the reward.
        formatter: replaces the cue renderer (``cue_index -> str``).
        system_prompt: replaces the default system prompt.
        max_episode_steps: accepted for uniformity; an episode is one step (a retry policy may
            add steps).
        **wrap_kwargs: passed to :func:`textgym.wrap` (``invalid_policy=``, ``history=``, ...).
    """
    from textgym.wrap import wrap
    from textgym.wrappers.inner_time_limit import InnerTimeLimit

    base: gym.Env = CueBanditEnv(num_cues, num_arms, mapping)
    if max_episode_steps is not None and max_episode_steps > 0:
        base = InnerTimeLimit(base, max_episode_steps)
    arms = list(ANIMALS[:num_arms])
    colors = COLORS[:num_cues]
    if system_prompt is None:
        if hint:
            pairs = ", ".join(f"{c} {arms[a]}" for c, a in zip(colors, base.unwrapped.mapping))
            system_prompt = f"Name the animal of the color: {pairs}."
        else:
            system_prompt = "Each color has one right animal; find it."
    if "instructions" not in wrap_kwargs:  # the answer format's sentence ends the system prompt
        wrap_kwargs.setdefault("answer_format", "word")
    if formatter is None:
        formatter = CueText(colors)
    return wrap(base, actions=arms, formatter=formatter, system_prompt=system_prompt, **wrap_kwargs)


class CueText(Renderer):
    """Renders a cue index as ``"Color: red."``."""

    def __init__(self, colors: Sequence[str]):
        self.colors = tuple(colors)

    def constructor_kwargs(self) -> dict[str, Any]:
        return {"colors": list(self.colors)}

    def __call__(self, cue: int | np.integer) -> str:
        return f"Color: {self.colors[int(cue)]}."


def scripted_bandit(env: gym.Env, seed: int | None = None) -> ReferencePlayer:
    """The oracle: the right animal for the current color (reward 1 every episode)."""
    names = list(env.get_wrapper_attr("action_names"))
    return lambda info: names[env.unwrapped.correct_arm]


#: Recommended training settings: one-step episodes are cheap, so many per update (and 32 held-out
#: ones per greedy check); the reward is 0/1, so the return is averaged over a wide window.
#: Generate mode: the JSON answer format (prefilled, stopped at the closing quote) and a format
#: bonus that fades over the first half of the default budget (512 episodes on 16 envs: 32 steps
#: of each env).
TRAINING_DEFAULTS = TrainingDefaults(
    updates=16, until=0.9, check_every=2, check_episodes=32, num_envs=16, lr=3e-4,
    trainer={"episodes_per_update": 32, "metrics_window": 64},
    modes={"generate": generate_mode_defaults("json", temperature=0.7, format_bonus=0.5,
                                              format_bonus_steps=16)},
)
