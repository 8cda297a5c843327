"""MiniGrid and BabyAI as text envs: ``minigrid/<any MiniGrid or BabyAI id>``.

The renderer follows BabyAI-Text (Carta et al. 2023, "Grounding LLMs in interactive
environments with online RL"): the mission, then what the agent sees, each object with its
colour and its position relative to the agent ("a red ball 2 steps forward and 1 step left"),
the nearest wall straight ahead, left and right, doors with their state, and what the agent
carries. No arrays. The actions are MiniGrid's own names (``left``, ``right``, ``forward``,
``pickup``, ``drop``, ``toggle``, ``done``).

``minigrid`` is imported when an env is made (``pip install 'textgym[minigrid]'``).

Example:
    >>> import numpy as np
    >>> view = np.zeros((7, 7, 3), dtype=np.uint8); view[:, :, 0] = 1     # all empty
    >>> view[2, 4] = (6, 0, 0)                                            # a red ball
    >>> view[3, 3] = (2, 5, 0)                                            # a wall ahead
    >>> print(MiniGridText()({"image": view, "direction": 0, "mission": "go to the red ball"}))
    Mission: go to the red ball.
    You see a red ball 2 steps forward and 1 step left, a wall 3 steps forward.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from textgym.registry import ReferencePlayer, ReferencePolicy, TrainingDefaults
from textgym.wrappers.text_observation import Renderer

__all__ = ["SYSTEM_PROMPT", "TRAINING_DEFAULTS", "MiniGridText", "describer", "list_ids", "make",
           "target_distance_potential"]

# MiniGrid's encoding (minigrid.core.constants), kept here so that rendering needs no import.
_OBJECTS = ("unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava", "agent")
_COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
_DOOR_STATES = ("open", "closed", "locked")

SYSTEM_PROMPT = ("You are an agent in a grid world. Each message gives your mission and what you "
                 "see; positions are relative to you. left/right turn you, forward moves one "
                 "step, toggle opens a door in front of you, pickup takes the object in front of you.")

#: Recommended settings: BabyAI/MiniGrid rewards come once, on success (gamma 0.99 keeps shorter
#: paths better), so episodes are the unit of the budget.
TRAINING_DEFAULTS = TrainingDefaults(updates=16, num_envs=8, trainer={"episodes_per_update": 16, "gamma": 0.99})


def _steps(n: int, word: str) -> str:
    return f"{n} step{'s' if n != 1 else ''} {word}"


def _where(forward: int, side: int) -> str:
    parts = [_steps(forward, "forward")] if forward else []
    if side:
        parts.append(_steps(abs(side), "right" if side > 0 else "left"))
    return " and ".join(parts) if parts else "here"


def _name(obj: int, color: int, state: int) -> str:
    kind = _OBJECTS[obj] if obj < len(_OBJECTS) else f"object {obj}"
    colour = _COLORS[color] if color < len(_COLORS) else ""
    if kind == "goal":
        return "the goal"
    if kind in ("wall", "lava"):
        return f"a {kind}" if kind == "wall" else "lava"
    if kind == "door":
        return f"a{'n' if state == 0 else ''} {_DOOR_STATES[min(state, 2)]} {colour} door"
    return f"a {colour} {kind}"


class MiniGridText(Renderer):
    """A MiniGrid observation (``{"image", "direction", "mission"}``, the agent's egocentric view)
    as a few lines of text, BabyAI-Text style (see the module docstring).

    Args:
        max_objects: the most objects listed (nearest first), walls included.
    """

    def __init__(self, max_objects: int = 8):
        self.max_objects = int(max_objects)

    def constructor_kwargs(self) -> dict[str, Any]:
        return {"max_objects": self.max_objects}

    def __call__(self, observation: Any) -> str:
        image = np.asarray(observation["image"])
        width, height = image.shape[0], image.shape[1]
        ax, ay = width // 2, height - 1          # the agent's cell, facing "up" (decreasing y)
        seen: list[tuple[int, int, str]] = []
        walls: dict[str, tuple[int, str]] = {}
        for x in range(width):
            for y in range(height):
                obj, color, state = (int(v) for v in image[x, y])
                if (x, y) == (ax, ay) or obj in (0, 1, 10):  # the agent's cell, unseen, empty
                    continue
                forward, side = ay - y, x - ax
                if obj == 2:                       # walls: only the nearest straight ahead, left, right
                    way = "forward" if side == 0 else ("right" if side > 0 else "left") if forward == 0 else None
                    if way is not None and (way not in walls or abs(forward + side) < walls[way][0]):
                        walls[way] = (abs(forward + side), f"a wall {_where(forward, side)}")
                    continue
                seen.append((forward + abs(side), side, f"{_name(obj, color, state)} {_where(forward, side)}"))
        seen.sort()
        things = [text for _, _, text in seen] + [text for _, text in sorted(walls.values())]
        lines = [f"Mission: {str(observation.get('mission', '')).rstrip('.')}."]
        lines.append(f"You see {', '.join(things[: self.max_objects])}." if things else "You see nothing.")
        carried = image[ax, ay]
        if int(carried[0]) not in (0, 1, 10):
            lines.append(f"You carry {_name(*(int(v) for v in carried))}.")
        return "\n".join(lines)


def describer(env: gym.Env) -> dict[str, Any]:
    """What :func:`textgym.wrap` uses for a MiniGrid env: the renderer and the system prompt."""
    space = env.observation_space
    if isinstance(space, gym.spaces.Dict) and "image" in space.spaces and "mission" in space.spaces:
        return {"formatter": MiniGridText(), "system_prompt": SYSTEM_PROMPT}
    return {"system_prompt": SYSTEM_PROMPT}   # an observation wrapper changed the view: no renderer


def list_ids() -> list[str]:
    """Every MiniGrid and BabyAI id (imports ``minigrid``, which registers them with Gymnasium)."""
    import minigrid  # noqa: F401

    return sorted(i for i in gym.registry
                  if gym.spec(i).entry_point is not None and str(gym.spec(i).entry_point).startswith("minigrid"))


def target_distance_potential(env: gym.Env) -> float:
    """Minus the steps (``|dx| + |dy|``, walls ignored) from the agent of an unwrapped MiniGrid env
    to where its mission is met, over the grid's width plus height: next to the nearest object
    the BabyAI instruction names (go to, pick up, open; the cell in front of it), or on the
    nearest goal square (MiniGrid's own missions). A shaping potential: 0 where the mission is met.

    Raises:
        ValueError: the mission names no object (BabyAI's sequences, "put next to") and the grid has no goal.
    """
    description = getattr(getattr(env, "instrs", None), "desc", None)
    if description is not None:
        targets, reach = description.obj_poss, 1
    else:
        targets = [(x, y) for x in range(env.grid.width) for y in range(env.grid.height)
                   if getattr(env.grid.get(x, y), "type", None) == "goal"]
        reach = 0
    if not targets:
        raise ValueError(f"shaping: {env.spec.id if env.spec else type(env).__name__}'s mission names no "
                         "one object to reach and its grid has no goal square")
    x, y = env.agent_pos
    steps = min(abs(x - tx) + abs(y - ty) for tx, ty in targets)
    return -max(steps - reach, 0) / (env.grid.width + env.grid.height)


def make(name: str, max_episode_steps: int | None = None, shaping: float = 0.0, **kwargs: Any) -> gym.Env:
    """The text env of MiniGrid id ``name``: ``textgym.wrap`` with the renderer above.

    Args:
        name: a MiniGrid or BabyAI id, e.g. ``"BabyAI-GoToRedBall-v0"``.
        max_episode_steps: a step limit below the env's own ``max_steps`` (``None``: its own).
        shaping: the weight of potential-based shaping toward the mission's object
            (:func:`target_distance_potential`, Ng et al. 1999): every step also gets ``shaping``
            x the change of the potential, so a step toward the object is credited at once
            instead of only the mission's reward at its end. An episode's terms add up to
            ``shaping`` x how much closer it ended (a failed ending earns nothing by ending), and
            which policies are optimal stays the same. 0: the env's reward alone (evaluate with
            0: returns are then the env's).
        **kwargs: :func:`textgym.wrap` keywords (``history``, ``invalid_policy``...) and the
            MiniGrid env's own (``size``...).
    """
    import inspect

    import minigrid  # noqa: F401

    from textgym.wrap import POLICY_KEYS, wrap

    if shaping < 0:
        raise ValueError(f"shaping must be >= 0, got {shaping}")
    wrap_keys = set(inspect.signature(wrap).parameters) - {"env", "policy"}
    wrap_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in wrap_keys or k in POLICY_KEYS}
    if shaping:
        if "reward_terms" in wrap_kwargs:
            raise ValueError("give either shaping= or reward_terms=, not both")
        from textgym.wrappers import Potential, Scale

        wrap_kwargs["reward_terms"] = [Scale(1.0), Potential(target_distance_potential, zero_terminal=False,
                                                             weight=shaping, name="distance")]
    env = gym.make(name, max_episode_steps=max_episode_steps, **kwargs)
    return wrap(env, **wrap_kwargs)


def babyai_bot_player(env: gym.Env, seed: int | None = None) -> ReferencePlayer:
    """minigrid's BabyAI bot (``minigrid.utils.baby_ai_bot.BabyAIBot``), which plans from the
    full grid and solves every BabyAI level: the ``"scripted"`` reference player of the BabyAI
    ids. A new bot starts at each episode's first turn."""
    from minigrid.utils.baby_ai_bot import BabyAIBot

    bot: list[BabyAIBot] = []

    def player(info: dict[str, Any]) -> str:
        if "parse" not in info or not bot:  # a reset's info: a new mission
            bot[:] = [BabyAIBot(env.unwrapped)]
        return bot[0].replan().name

    return player


def reference_policies(name: str) -> dict[str, ReferencePolicy]:
    """The reference players of MiniGrid id ``name`` besides random: BabyAI levels have the bot."""
    return {"scripted": babyai_bot_player} if name.startswith("BabyAI-") else {}


#: BabyAI levels: a warm start on the bot's play (100 missions, 6 epochs at lr 1e-3: return 0.915 on
#: GoToRedBallNoDists, the bot 0.934; 8 REINFORCE updates after it keep 0.914). Plain REINFORCE never
#: finds the reward (the model never samples ``forward``); GRPO with the exploration floor, its
#: draws weighed at least 1, and clip-higher does, on the env's own reward (the ``rl`` benchmark
#: suite's row, textgym/benchmark.py: 0.93 in 16 updates on GoToRedBallNoDists; ``shaping`` made no
#: difference there). docs/results.md, "BabyAI".
BABYAI_TRAINING_DEFAULTS = TrainingDefaults(
    updates=8, num_envs=8, sft_player="scripted", sft_episodes=100, sft_epochs=6,
    trainer={"episodes_per_update": 16, "gamma": 0.99, "sft_lr": 1e-3, "lora_layers": 8})


def training_defaults(name: str) -> TrainingDefaults:
    """The recommended training settings of MiniGrid/BabyAI id ``name`` (BabyAI levels start
    from the bot's play)."""
    return BABYAI_TRAINING_DEFAULTS if name.startswith("BabyAI-") else TRAINING_DEFAULTS
