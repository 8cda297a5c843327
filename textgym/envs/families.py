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

from typing import Any

from textgym.registry import register_family


def register_families() -> None:
    """Register the ``minigrid``, ``textarena`` and ``reasoning_gym`` families."""
    register_family("minigrid", "textgym.envs.minigrid_text:make", "textgym.envs.minigrid_text:list_ids",
                    description="MiniGrid/BabyAI grid world, BabyAI-Text style (minigrid package)",
                    install="textgym[minigrid]", package="minigrid", source="minigrid",
                    training_defaults="textgym.envs.minigrid_text:training_defaults",
                    reference_policies="textgym.envs.minigrid_text:reference_policies")
    register_family("textarena", "textgym.envs.textarena_games:make", "textgym.envs.textarena_games:list_ids",
                    description="TextArena game (textarena package)", install="textgym[textarena]", package="textarena",
                    source="textarena", training_defaults="textgym.envs.textarena_games:training_defaults",
                    unavailable="textgym.envs.textarena_games:unavailable")
    register_family("reasoning_gym", "textgym.envs.reasoning:make", "textgym.envs.reasoning:list_ids",
                    description="reasoning-gym task, one item per episode (reasoning-gym package)",
                    install="textgym[reasoning]", package="reasoning_gym", source="reasoning-gym",
                    training_defaults="textgym.envs.reasoning:training_defaults",
                    free_text="textgym.envs.reasoning:free_text")
    route_gym_lookups()


def route_gym_lookups() -> None:
    """Let Gymnasium's own ``gym.make``/``gym.make_vec`` accept any family id after ``import textgym``.

    A family's ids are registered on first use (listing them imports the package, too slow for
    ``import textgym``), but Gymnasium looks ids up in its registry only. So its id lookup is
    wrapped: an id it does not know whose prefix is a family's is resolved by
    :func:`textgym.registry.resolve_id` first (which registers it, or raises
    :class:`~textgym.registry.UnknownEnvError` naming the family's closest ids); every other
    lookup is Gymnasium's, unchanged.

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = gym.make("minigrid/BabyAI-GoToRedBall-v0")
        >>> env.reset(seed=0)[0].splitlines()[0]
        'Mission: go to the red ball.'
    """
    from gymnasium.envs import registration

    find_spec = getattr(registration, "_find_spec", None)
    if find_spec is None or getattr(find_spec, "textgym_families", False):
        return   # a Gymnasium without the hook, or already routed

    def find_family_spec(env_id: Any) -> Any:
        name = env_id.split(":", 1)[-1] if isinstance(env_id, str) else None
        if name and "/" in name and name not in registration.registry:
            from textgym.registry import list_families, resolve_id

            if name.split("/", 1)[0].strip().lower() in {f.prefix.lower() for f in list_families()}:
                env_id = resolve_id(env_id)
        return find_spec(env_id)

    find_family_spec.textgym_families = True  # type: ignore[attr-defined]
    registration._find_spec = find_family_spec
