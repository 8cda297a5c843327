"""The built-in text envs, registered with Gymnasium under ``textgym/`` when textgym is imported.

Registration is cheap: entry points are ``"module:function"`` strings, imported on the first
``make``. Each env wraps the real Gymnasium env (see :mod:`textgym.envs.classic`) or is the
contextual bandit of :mod:`textgym.envs.bandit`.

=========================  ==========================================  ====================
id                         task                                        answers
=========================  ==========================================  ====================
textgym/CartPole-v1        balance a pole on a cart                    LEFT RIGHT
textgym/MountainCar-v0     drive out of a valley                       LEFT NONE RIGHT
textgym/Acrobot-v1         swing a two-link chain up                   LEFT NONE RIGHT
textgym/Blackjack-v1       beat the dealer                             STICK HIT
textgym/FrozenLake-v1      cross the ice to the goal                   LEFT DOWN RIGHT UP
textgym/Taxi-v4            pick up and drop off a passenger            SOUTH NORTH EAST WEST
                                                                       PICKUP DROPOFF
textgym/CliffWalking-v1    walk along a cliff to the goal              UP RIGHT DOWN LEFT
textgym/Bandit-v0          name the right animal for a color           cat dog (...)
=========================  ==========================================  ====================
"""

from __future__ import annotations

from textgym.envs import bandit, classic
from textgym.registry import register

# id suffix -> (entry point, description). Every entry point applies max_episode_steps itself,
# inside the text wrappers (the ``max_episode_steps=None`` kwarg says so to textgym.make).
_CLASSIC = {
    "CartPole-v1": ("make_cartpole", "Balance a pole on a moving cart"),
    "MountainCar-v0": ("make_mountaincar", "Drive an underpowered car out of a valley"),
    "Acrobot-v1": ("make_acrobot", "Swing a two-link chain up above its pivot"),
    "Blackjack-v1": ("make_blackjack", "Beat the dealer at blackjack"),
    "FrozenLake-v1": ("make_frozenlake", "Cross a frozen lake to the goal without falling in a hole"),
    "Taxi-v4": ("make_taxi", "Pick up a passenger and drop them at their destination"),
    "CliffWalking-v1": ("make_cliffwalking", "Walk to the goal along a cliff edge"),
}

for _name, (_function, _description) in _CLASSIC.items():
    register(f"textgym/{_name}", f"textgym.envs.classic:{_function}", description=_description,
             action_names=classic.ACTION_NAMES[_name], source="textgym",
             kwargs={"max_episode_steps": None},
             training_defaults=classic.TRAINING_DEFAULTS.get(_name),
             reference_policies=classic.REFERENCE_POLICIES[_name],
             exact_return=classic.EXACT_RETURNS.get(_name))

register("textgym/Bandit-v0", "textgym.envs.bandit:make_bandit",
         description="Name the right animal for a color (one-step contextual bandit)",
         action_names=bandit.ANIMALS[:2], source="textgym", kwargs={"max_episode_steps": None},
         training_defaults=bandit.TRAINING_DEFAULTS,
         reference_policies={"scripted": "textgym.envs.bandit:scripted_bandit"})

# A tool env: reasoning-gym's arithmetic with a calculator (reasoning_gym is imported on make).
from textgym.envs import calculator as _calculator

register("textgym/Calculator-v0", "textgym.envs.calculator:make_calculator",
         description="Arithmetic with calculator tools (tool calls; reasoning-gym's basic_arithmetic)",
         source="textgym", kwargs={"max_episode_steps": None}, free_text=True,
         training_defaults=_calculator.TRAINING_DEFAULTS,
         reference_policies={"scripted": "textgym.envs.calculator:scripted_calculator"})

# PettingZoo board games as single-agent text envs (PettingZoo itself is imported on make).
from textgym.envs import games as _games

_games.register_envs()

# TextWorld adventures (textworld itself is imported on make).
from textgym.envs import textworld as _textworld

_textworld.register_envs()

# Families of other packages' ids (minigrid/..., textarena/..., reasoning_gym/...), made on demand.
from textgym.envs import families as _families

_families.register_families()
