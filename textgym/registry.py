"""Register, find and make text envs; discover third-party envs through entry points.

Every id lives in Gymnasium's own registry, so ``gym.make(id)`` works after ``import textgym``.
This module keeps what Gymnasium does not: a description, the action names and the package
that registered each env (for ``list_envs()`` and the CLI), short names (``"cartpole"``) and
plugin discovery.

Plugins: a package declares an entry point in the group ``textgym.envs``::

    [project.entry-points."textgym.envs"]
    mygames = "mygames.envs"                 # a module: importing it registers its envs
    more = "mygames.extra:register_envs"     # a callable: calling it registers its envs

and calls :func:`register` there. textgym scans the group once, lazily, on the first
:func:`make`, :func:`resolve_id` or :func:`list_envs` (Gymnasium 1.x no longer loads plugins
itself). A plugin that fails to load (an exception, or ``sys.exit()``, at import or
registration) gives a :class:`PluginLoadWarning` naming it and its error; the others still load. Two sources registering the same id raise
:class:`DuplicateEnvError` naming both. Call ``load_plugins(force=True)`` to rescan after
installing a package (or changing ``sys.path``) in a running process.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import parse_env_id

__all__ = [
    "DuplicateEnvError",
    "EnvSpecInfo",
    "PluginLoadWarning",
    "UnknownEnvError",
    "list_envs",
    "load_plugins",
    "make",
    "make_vec",
    "register",
    "resolve_id",
]

ENTRY_POINT_GROUP = "textgym.envs"

# Keyword arguments of gymnasium.register; any other keyword given to register() is an env kwarg.
_GYM_REGISTER_KEYS = frozenset({
    "reward_threshold", "nondeterministic", "max_episode_steps", "order_enforce",
    "disable_env_checker", "additional_wrappers", "vector_entry_point", "kwargs",
})


class UnknownEnvError(gym.error.UnregisteredEnv):
    """No env is registered under this id or short name; the message names close matches."""


class DuplicateEnvError(gym.error.RegistrationError):
    """Two different sources registered the same env id; the message names both."""


class PluginLoadWarning(UserWarning):
    """A ``textgym.envs`` entry point failed to load; its envs are missing, the others loaded."""


@dataclass(frozen=True)
class EnvSpecInfo:
    """What :func:`list_envs` reports about one registered text env.

    Args:
        id: the full Gymnasium id, e.g. ``"textgym/CartPole-v1"``.
        description: one line saying what the task is.
        action_names: the answers the env accepts (``None`` when the registrant did not say).
        source: the package that registered it (``"textgym"`` for built-ins, a plugin's
            distribution name, or the registering module's top-level package).
        short_name: the case-insensitive short name that :func:`resolve_id` accepts, e.g. ``"cartpole"``.
    """

    id: str
    description: str = ""
    action_names: tuple[str, ...] | None = None
    source: str = "textgym"
    short_name: str = ""


_lock = threading.RLock()
_INFOS: dict[str, EnvSpecInfo] = {}
_ORIGINS: dict[str, str] = {}                   # id -> human-readable origin for error messages
_loaded_entry_points: set[tuple[str, str, str]] = set()
_plugins_loaded = False
_loading: list[tuple[str, str]] = []            # stack of (distribution name, origin) being loaded


def _short_name(env_id: str) -> str:
    return parse_env_id(env_id)[1].lower()


def _caller_package(depth: int) -> str:
    name = sys._getframe(depth + 1).f_globals.get("__name__", "__main__")
    return name.split(".")[0]


def register(
    id: str,
    entry_point: str | Callable[..., gym.Env],
    *,
    description: str = "",
    action_names: list[str] | tuple[str, ...] | None = None,
    source: str | None = None,
    **kwargs: Any,
) -> None:
    """Register a text env with Gymnasium and record its textgym metadata.

    Example:
        >>> import textgym
        >>> textgym.register("mine/Colors-v0", "textgym.envs.bandit:make_bandit",
        ...                  description="Four colors, four animals",
        ...                  action_names=["cat", "dog", "fox", "owl"], num_cues=4, num_arms=4)
        >>> textgym.make("mine/Colors-v0").reset(seed=0)[1]["valid_actions"]
        ['cat', 'dog', 'fox', 'owl']

    Args:
        id: ``namespace/Name-vN``. Built-ins use ``textgym/``; a plugin uses its own namespace.
        entry_point: ``"module:function"`` (imported only when the env is made) or a callable
            returning a ``gym.Env``.
        description: one line for ``list_envs()`` and the CLI.
        action_names: the answers the env accepts, for listings.
        source: who registers it. ``None``: the plugin distribution being loaded, else the
            calling module's top-level package.
        **kwargs: Gymnasium's ``register`` arguments (``max_episode_steps``, ``reward_threshold``,
            ``kwargs``, ...); any other keyword is a default constructor kwarg of the env.
            Give ``kwargs={"max_episode_steps": None}`` to say that the entry point takes
            ``max_episode_steps`` and applies the limit itself, inside its text wrappers;
            :func:`make` then passes it there instead of adding Gymnasium's outer ``TimeLimit``.

    Raises:
        DuplicateEnvError: ``id`` is already registered by another source.
    """
    gym_kwargs = {k: v for k, v in kwargs.items() if k in _GYM_REGISTER_KEYS}
    env_kwargs = {k: v for k, v in kwargs.items() if k not in _GYM_REGISTER_KEYS}
    env_kwargs = {**(gym_kwargs.pop("kwargs", None) or {}), **env_kwargs}
    with _lock:
        if source is None:
            source = _loading[-1][0] if _loading else _caller_package(1)
        origin = _loading[-1][1] if _loading and _loading[-1][0] == source else f"package {source!r}"
        previous = _INFOS.get(id)
        if previous is not None and previous.source != source:
            raise DuplicateEnvError(
                f"env id {id!r} is registered twice: first by {_ORIGINS[id]}, then by {origin}. "
                "Uninstall one of them, or register the env under another namespace.")
        if previous is None and id in gym.registry:
            raise DuplicateEnvError(
                f"env id {id!r} is already in Gymnasium's registry (entry point "
                f"{gym.registry[id].entry_point!r}); {origin} cannot register it again. "
                "Use your own namespace, e.g. 'mypackage/Name-v0'.")
        gym.registry.pop(id, None)   # same source re-registering: replace quietly
        gym.register(id, entry_point=entry_point, kwargs=env_kwargs, **gym_kwargs)
        _INFOS[id] = EnvSpecInfo(
            id=id, description=description,
            action_names=tuple(action_names) if action_names is not None else None,
            source=source, short_name=_short_name(id))
        _ORIGINS[id] = origin


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def load_plugins(force: bool = False) -> None:
    """Load the envs of every installed ``textgym.envs`` entry point (once per process).

    Called for you by :func:`make`, :func:`resolve_id` and :func:`list_envs`.

    Args:
        force: scan the entry points again: loads plugins installed (or put on ``sys.path``)
            since the last scan and retries the ones that failed. Plugins already loaded are
            not loaded twice.

    Raises:
        DuplicateEnvError: a plugin registered an id that another source registered.
    """
    global _plugins_loaded
    with _lock:
        if (_plugins_loaded and not force) or _loading:
            return      # done already, or a plugin being loaded is calling back into textgym
        importlib.invalidate_caches()
        for ep in _entry_points():
            dist = ep.dist.name if ep.dist is not None else "<unknown distribution>"
            key = (dist, ep.name, ep.value)
            if key in _loaded_entry_points:
                continue
            origin = f"plugin {dist!r} (entry point {ep.name!r} = {ep.value!r})"
            before = set(gym.registry)
            _loading.append((dist, origin))
            try:
                target = ep.load()
                if ep.attr is not None:    # "module:function": call it to register
                    if not callable(target):
                        raise TypeError(f"{ep.value!r} is a {type(target).__name__}, not a callable")
                    target()
            except DuplicateEnvError:
                raise
            # Any plugin bug must not break the others, sys.exit() at import included (it would end
            # the process silently with the plugin's code); Ctrl-C still propagates.
            except (Exception, SystemExit) as error:  # noqa: BLE001
                warnings.warn(
                    f"textgym: {origin} failed to load and its envs are unavailable: "
                    f"{type(error).__name__}: {error}", PluginLoadWarning, stacklevel=3)
                continue
            finally:
                _loading.pop()
            _loaded_entry_points.add(key)
            # Envs the plugin registered with plain gymnasium.register are listed too.
            for env_id in set(gym.registry) - before - set(_INFOS):
                _INFOS[env_id] = EnvSpecInfo(id=env_id, source=dist, short_name=_short_name(env_id))
                _ORIGINS[env_id] = origin
        _plugins_loaded = True


def list_envs() -> list[EnvSpecInfo]:
    """All text envs registered through textgym (built-ins and plugins), sorted by id."""
    load_plugins()
    with _lock:
        return sorted(_INFOS.values(), key=lambda info: info.id)


def _pick(ids: list[str], name: str) -> str | None:
    """The one id that ``name`` means among ``ids``: the highest version, built-ins first."""
    if not ids:
        return None
    groups: dict[tuple[str | None, str], list[str]] = {}
    for env_id in ids:
        ns, base, _ = parse_env_id(env_id)
        groups.setdefault((ns, base), []).append(env_id)
    if len(groups) > 1:
        builtin = [key for key, members in groups.items() if _INFOS[members[0]].source == "textgym"]
        if len(builtin) != 1:
            raise UnknownEnvError(f"{name!r} matches several envs: {', '.join(sorted(ids))}; "
                                  "give the full id.")
        groups = {builtin[0]: groups[builtin[0]]}
    (members,) = groups.values()
    return max(members, key=lambda env_id: parse_env_id(env_id)[2] or -1)


def resolve_id(name: str) -> str:
    """The full registered id for an id or a case-insensitive short name.

    Example:
        >>> import textgym
        >>> textgym.registry.resolve_id("cartpole")
        'textgym/CartPole-v1'
        >>> textgym.registry.resolve_id("textgym/taxi")
        'textgym/Taxi-v4'

    An exact registered id is returned as it is (``"CartPole-v1"`` stays Gymnasium's own
    env). Otherwise ``name`` is matched, ignoring case, against each textgym env's id, its id
    without version (``"textgym/taxi"``) and its short name (``"taxi"``, ``"taxi-v4"``);
    several versions resolve to the newest, and built-ins win over plugins with the same
    short name. An unversioned Gymnasium id resolves to its newest version.

    Raises:
        UnknownEnvError: nothing matches; the message names close matches.
    """
    if not isinstance(name, str):
        raise TypeError(f"env id must be a str, got {type(name).__name__}")
    if ":" in name:      # Gymnasium's "module:Env-v0": import the module, which registers the env
        module, name = name.split(":", 1)
        importlib.import_module(module)
    load_plugins()
    if name in gym.registry:
        return name
    query = name.strip().lower()
    with _lock:
        aliases: dict[str, list[str]] = {}
        for env_id in _INFOS:
            ns, base, version = parse_env_id(env_id)
            versioned = f"{base}-v{version}" if version is not None else base
            for alias in {env_id, versioned, base, f"{ns}/{base}" if ns else base}:
                aliases.setdefault(alias.lower(), []).append(env_id)
        found = _pick(aliases.get(query, []), name)
        if found is not None:
            return found
        # An unversioned Gymnasium id ("CartPole") means its newest version, without the warning.
        versions = [env_id for env_id in gym.registry
                    if env_id.lower().rsplit("-v", 1)[0] == query and "-v" in env_id]
        if versions:
            return max(versions, key=lambda env_id: parse_env_id(env_id)[2] or -1)
        candidates = {alias: ids for alias, ids in aliases.items()}
        for env_id in gym.registry:
            candidates.setdefault(env_id.lower(), [env_id])
        close = difflib.get_close_matches(query, list(candidates), n=5, cutoff=0.6)
        suggestions = list(dict.fromkeys(i for alias in close for i in sorted(candidates[alias])))[:3]
    hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
    raise UnknownEnvError(
        f"no env registered as {name!r}.{hint} "
        "textgym.list_envs() lists the text envs (built-ins and installed plugins).")


def make(id: str, max_episode_steps: int | None = None, **kwargs: Any) -> gym.Env:
    """Make a registered env, like ``gym.make``, after plugin discovery and short-name lookup.

    Example:
        >>> import textgym
        >>> env = textgym.make("cartpole", max_episode_steps=50)
        >>> obs, info = env.reset(seed=0)
        >>> env.step("RIGHT")[1]
        1.0

    Args:
        id: a registered id or short name (see :func:`resolve_id`).
        max_episode_steps: episode step limit. Built-in text envs apply it inside their text
            wrappers, so ``info["episode"]`` also reports truncated episodes (``gym.make`` would
            put Gymnasium's ``TimeLimit`` outside them).
        **kwargs: passed to the env: e.g. ``formatter=``, ``render_mode=``, ``invalid_policy=``,
            ``history=``, or the Gymnasium env's own kwargs (``is_slippery=False``).

    Raises:
        UnknownEnvError: the id is not registered; the message names close matches.
    """
    env_id = resolve_id(id)
    spec = gym.spec(env_id)
    if max_episode_steps is not None and "max_episode_steps" in spec.kwargs:
        spec = dataclasses.replace(
            spec, kwargs={**spec.kwargs, "max_episode_steps": max_episode_steps})
        return gym.make(spec, **kwargs)
    return gym.make(env_id, max_episode_steps=max_episode_steps, **kwargs)


def make_vec(id: str, num_envs: int, seed: int | None = None, **kwargs: Any):
    """``num_envs`` copies of a text env stepped together (see :class:`textgym.vector.TextVectorEnv`).

    Example:
        >>> import textgym
        >>> venv = textgym.make_vec("textgym/CartPole-v1", num_envs=2, seed=0)
        >>> obs, infos = venv.reset()            # sub-env i seeded 0 + i
        >>> len(obs), infos[0]["valid_actions"]
        (2, ['LEFT', 'RIGHT'])

    Args:
        id: a registered id or short name.
        num_envs: how many sub-envs.
        seed: sub-env ``i`` is seeded ``seed + i`` at the first ``reset()``.
        **kwargs: passed to :func:`make` for every sub-env.
    """
    from textgym.vector import TextVectorEnv

    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    env_id = resolve_id(id)
    return TextVectorEnv([lambda: make(env_id, **kwargs)] * num_envs, seed=seed)
