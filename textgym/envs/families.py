"""The env families that textgym ships: other packages' envs by their own ids, made on demand.

==============================  =====================================  ========================
ids                             what                                   install
==============================  =====================================  ========================
``minigrid/<id>``               MiniGrid and BabyAI grid worlds        ``textgym[minigrid]``
``textarena/<id>``              TextArena's games (1 and 2 players)    ``textgym[textarena]``
``reasoning_gym/<dataset>``     reasoning-gym's generated tasks        ``textgym[reasoning]``
==============================  =====================================  ========================

Nothing is imported until an id of a family is used (see
:func:`textgym.registry.register_family`); ``textgym envs --family PREFIX`` lists the ids.
"""

from __future__ import annotations

from textgym.registry import register_family


def register_families() -> None:
    """Register the ``minigrid``, ``textarena`` and ``reasoning_gym`` families."""
    register_family("minigrid", "textgym.envs.minigrid_text:make", "textgym.envs.minigrid_text:list_ids",
                    description="MiniGrid/BabyAI grid world, BabyAI-Text style (minigrid package)",
                    install="textgym[minigrid]", package="minigrid", source="minigrid",
                    training_defaults="textgym.envs.minigrid_text:training_defaults")
    register_family("textarena", "textgym.envs.textarena_games:make", "textgym.envs.textarena_games:list_ids",
                    description="TextArena game (textarena package)", install="textgym[textarena]", package="textarena",
                    source="textarena", training_defaults="textgym.envs.textarena_games:training_defaults")
    register_family("reasoning_gym", "textgym.envs.reasoning:make", "textgym.envs.reasoning:list_ids",
                    description="reasoning-gym task, one item per episode (reasoning-gym package)",
                    install="textgym[reasoning]", package="reasoning_gym", source="reasoning-gym",
                    training_defaults="textgym.envs.reasoning:training_defaults")
