"""Register, find and make text envs; discover third-party envs through entry points.

Every id lives in Gymnasium's own registry, so ``gym.make(id)`` works after ``import textgym``.
This module keeps what Gymnasium does not: a description, the action names and the package
that registered each env (for ``list_envs()`` and the CLI), what the env knows about training on
it (:class:`TrainingDefaults`, read by ``textgym train`` and :func:`training_defaults`) and its
reference policies (``"random"``, ``"scripted"``...; :func:`reference_policy`, used by
``textgym eval --baseline``), short names (``"cartpole"``) and plugin discovery.

Plugins: a package declares an entry point in the group ``textgym.envs``::

    [project.entry-points."textgym.envs"]
    mygames = "mygames.envs"                 # a module: importing it registers its envs
    more = "mygames.extra:register_envs"     # a callable: calling it registers its envs

and calls :func:`register` there (with ``training_defaults=`` and ``reference_policies=`` if
it has them). textgym scans the group once, lazily, on the first :func:`make`,
:func:`resolve_id` or :func:`list_envs` (Gymnasium 1.x no longer loads plugins itself). A
plugin that fails to load (an exception, or ``sys.exit()``, at import or registration) gives a
:class:`PluginLoadWarning` naming it and its error; the others still load. Two sources
registering the same id raise :class:`DuplicateEnvError` naming both. Call ``load_plugins(force=True)`` to rescan after
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import parse_env_id

from textgym.training_defaults import TrainingDefaults

__all__ = [
    "GENERIC_TRAINING_DEFAULTS",
    "SELF_PLAY",
    "DuplicateEnvError",
    "EnvFamily",
    "EnvSpecInfo",
    "PluginLoadWarning",
    "ReferencePlayer",
    "ReferencePolicy",
    "TrainingDefaults",
    "UnknownEnvError",
    "exact_return",
    "family_ids",
    "held_out",
    "list_envs",
    "list_families",
    "load_plugins",
    "make",
    "make_vec",
    "reference_policy",
    "register",
    "register_family",
    "resolve_id",
    "training_defaults",
    "with_learner",
]

ENTRY_POINT_GROUP = "textgym.envs"

# Keyword arguments of gymnasium.register; any other keyword given to register() is an env kwarg.
_GYM_REGISTER_KEYS = frozenset({
    "reward_threshold", "nondeterministic", "max_episode_steps", "order_enforce",
    "disable_env_checker", "additional_wrappers", "vector_entry_point", "kwargs",
})


class UnknownEnvError(gym.error.UnregisteredEnv):
    """No env is registered under this id or short name; the message names close matches."""


class EnvUnavailableError(RuntimeError):
    """The env is registered but cannot be made on this machine (a family's id whose package
    downloads data at run time, missing offline: :attr:`EnvFamily.unavailable`); the message
    says why and what fixes it."""


class DuplicateEnvError(gym.error.RegistrationError):
    """Two different sources registered the same env id; the message names both."""


class PluginLoadWarning(UserWarning):
    """A ``textgym.envs`` entry point failed to load; its envs are missing, the others loaded."""


#: A reference player answers for the current state: ``player(info) -> answer text`` (an action
#: name, parsed by the env like a model's answer). It may read the env it was made for
#: (``env.unwrapped``); an ``info`` without ``"parse"`` is a reset info (a new episode begins).
ReferencePlayer = Callable[[dict[str, Any]], str]
#: A reference policy makes a player for one env: ``policy(env, seed) -> ReferencePlayer``.
ReferencePolicy = Callable[[gym.Env, "int | None"], ReferencePlayer]


SELF_PLAY = "self"
"""``opponent="self"``: the learner plays the other seat too. A trainer gives such an env its own
policy (:func:`with_learner`), which then answers for the opponent at every turn with its current
weights (self-play); held-out play is against the env's default opponent (:func:`held_out`)."""


def with_learner(env_kwargs: dict[str, Any], policy: Any) -> dict[str, Any]:
    """``env_kwargs`` with ``opponent="self"`` replaced by the learner's ``policy`` (self-play)."""
    return {**env_kwargs, "opponent": policy} if env_kwargs.get("opponent") == SELF_PLAY else env_kwargs


def held_out(env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``env_kwargs`` for held-out play: a self-play run is measured against the env's default
    opponent (random), not against itself."""
    return {k: v for k, v in env_kwargs.items() if not (k == "opponent" and v == SELF_PLAY)}


#: What :func:`training_defaults` gives for an env that registered none, and what fills the
#: settings an env leaves unset (``updates`` only when the env sets no budget at all).
GENERIC_TRAINING_DEFAULTS = TrainingDefaults(updates=8, num_envs=8)


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
        training_defaults: the training settings the env recommends (``None``: none registered;
            :func:`training_defaults` then gives :data:`GENERIC_TRAINING_DEFAULTS`).
        reference_policies: the names of its reference policies (:func:`reference_policy`);
            ``"random"`` is always one.
        free_text: the env takes free-text answers and lists no finite set of actions, so score
            mode has nothing to pick from (:func:`takes_free_text`); a callable ``(env_kwargs)
            -> bool`` where a make-time setting decides (``reasoning_gym/...`` given
            ``candidates``). ``False`` also where the registrant did not say.
    """

    id: str
    description: str = ""
    action_names: tuple[str, ...] | None = None
    source: str = "textgym"
    short_name: str = ""
    training_defaults: TrainingDefaults | None = dataclasses.field(default=None, hash=False)
    reference_policies: tuple[str, ...] = ("random",)
    free_text: bool | Callable[[dict[str, Any]], bool] = dataclasses.field(default=False, hash=False)


_lock = threading.RLock()
_INFOS: dict[str, EnvSpecInfo] = {}
_ORIGINS: dict[str, str] = {}                   # id -> human-readable origin for error messages
_REFERENCES: dict[str, dict[str, str | ReferencePolicy]] = {}   # id -> name -> policy or "module:attr"
_EXACT_RETURNS: dict[str, str | Callable[..., float]] = {}  # id -> exact_return(policy, env_kwargs)
#: The reference policy every env has: a uniformly random valid action at every step.
RANDOM_POLICY = "textgym.baselines:random_policy"
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
    training_defaults: TrainingDefaults | None = None,
    reference_policies: Mapping[str, str | ReferencePolicy] | None = None,
    exact_return: str | Callable[..., float] | None = None,
    free_text: bool | Callable[[dict[str, Any]], bool] = False,
    **kwargs: Any,
) -> None:
    """Register a text env with Gymnasium and record its textgym metadata.

    Example:
        >>> import textgym
        >>> textgym.register("example/Colors-v0", "textgym.envs.bandit:make_bandit",
        ...                  description="Four colors, four animals",
        ...                  action_names=["cat", "dog", "fox", "owl"], num_cues=4, num_arms=4)
        >>> textgym.make("example/Colors-v0").reset(seed=0)[1]["valid_actions"]
        ['cat', 'dog', 'fox', 'owl']

    Args:
        id: ``namespace/Name-vN``. Built-ins use ``textgym/``; a plugin uses its own namespace.
        entry_point: ``"module:function"`` (imported only when the env is made) or a callable
            returning a ``gym.Env``.
        description: one line for ``list_envs()`` and the CLI.
        action_names: the answers the env accepts, for listings.
        source: who registers it. ``None``: the plugin distribution being loaded, else the
            calling module's top-level package.
        training_defaults: the training settings the env recommends (:class:`TrainingDefaults`).
        reference_policies: ``{name: policy}`` to compare a model with, e.g. ``{"scripted":
            "mypackage.envs:scripted_player"}``: each a :data:`ReferencePolicy` or its
            ``"module:attribute"`` (imported when first used). ``"random"`` (a uniformly random
            valid action) is always there unless given here.
        exact_return: where a text policy's greedy play has an exact expected return (a small
            MDP whose every state can be rendered): ``exact_return(policy, env_kwargs) -> float``
            or its ``"module:attribute"`` (:func:`exact_return`).
        free_text: the env takes free-text answers, with no finite list of actions (score
            mode cannot play it: ``textgym train`` refuses it before loading a model); a callable
            ``(env_kwargs) -> bool`` when its make-time settings decide.
        **kwargs: Gymnasium's ``register`` arguments (``max_episode_steps``, ``reward_threshold``,
            ``kwargs``, ...); any other keyword is a default constructor kwarg of the env.
            Give ``kwargs={"max_episode_steps": None}`` to say that the entry point takes
            ``max_episode_steps`` and applies the limit itself, inside its text wrappers;
            :func:`make` then passes it there instead of adding Gymnasium's outer ``TimeLimit``.

    Raises:
        DuplicateEnvError: ``id`` is already registered by another source.
    """
    if training_defaults is not None and not isinstance(training_defaults, TrainingDefaults):
        raise TypeError(f"training_defaults must be a textgym.registry.TrainingDefaults, "
                        f"got {type(training_defaults).__name__}")
    references: dict[str, str | ReferencePolicy] = {"random": RANDOM_POLICY, **(reference_policies or {})}
    for name, policy in references.items():
        if not (isinstance(policy, str) and ":" in policy) and not callable(policy):
            raise TypeError(f"reference policy {name!r} must be a function (env, seed) -> player "
                            f"or its 'module:attribute', got {policy!r}")
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
        # Gymnasium's passive checker breaks an env for good after a failed first reset (see
        # PassiveEnvChecker below), so plain gym.make adds none to a text env unless asked to;
        # check_env does the checking (textgym's own envs are checked so in its tests).
        gym_kwargs.setdefault("disable_env_checker", True)
        gym.register(id, entry_point=entry_point, kwargs=env_kwargs, **gym_kwargs)
        _INFOS[id] = EnvSpecInfo(
            id=id, description=description,
            action_names=tuple(action_names) if action_names is not None else None,
            source=source, short_name=_short_name(id), training_defaults=training_defaults,
            reference_policies=tuple(references), free_text=free_text)
        _REFERENCES[id] = references
        if exact_return is not None:
            _EXACT_RETURNS[id] = exact_return
        else:
            _EXACT_RETURNS.pop(id, None)
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


def training_defaults(id: str, mode: str | None = None) -> TrainingDefaults:
    """The training settings an env recommends, in policy mode ``mode``.

    Settings the env leaves unset come from :data:`GENERIC_TRAINING_DEFAULTS`; an env that
    registered none gets those.

    Example:
        >>> import textgym
        >>> d = textgym.registry.training_defaults("bandit")
        >>> d.num_envs, d.trainer["episodes_per_update"]
        (16, 32)

    Args:
        id: a registered id or short name.
        mode: ``"score"``, ``"generate"`` or ``None`` (no mode's overrides).
    """
    env_id = resolve_id(id)
    with _lock:
        info = _INFOS.get(env_id)
    registered = info.training_defaults if info is not None else None
    if registered is None:
        return GENERIC_TRAINING_DEFAULTS.for_mode(mode)
    chosen = registered.for_mode(mode)
    unset = {name: getattr(GENERIC_TRAINING_DEFAULTS, name)
             for name in ("minutes", "num_envs", "lr") if getattr(chosen, name) is None}
    if chosen.updates is None and chosen.episodes is None:  # a budget the env chose stays the only one
        unset["updates"] = GENERIC_TRAINING_DEFAULTS.updates
    return dataclasses.replace(chosen, **unset)


def takes_free_text(id: str, env_kwargs: Mapping[str, Any] | None = None) -> bool:
    """Whether the env, made with ``env_kwargs``, takes free-text answers with no finite list of
    actions, as its registrant declared (:attr:`EnvSpecInfo.free_text`): score mode, which
    picks one of the listed actions, cannot play it. Nothing is made or imported but the
    declaration.

    Example:
        >>> takes_free_text("bandit")
        False

    Args:
        id: a registered id or short name.
        env_kwargs: the settings the env would be made with.
    """
    env_id = resolve_id(id)
    with _lock:
        info = _INFOS.get(env_id)
    declared = info.free_text if info is not None else False
    return bool(declared(dict(env_kwargs or {})) if callable(declared) else declared)


def reference_policy(id: str, name: str = "scripted") -> ReferencePolicy | None:
    """The reference policy ``name`` of an env, or ``None`` when it has none by that name.

    Every env has ``"random"``; built-ins also have ``"scripted"`` (a hand-written or planned
    player) where one exists. Play one with :func:`textgym.baselines.evaluate_reference`.

    Example:
        >>> import textgym
        >>> env = textgym.make("cartpole")
        >>> obs, info = env.reset(seed=0)
        >>> player = textgym.registry.reference_policy("cartpole", "scripted")(env, 0)
        >>> player(info) in info["valid_actions"]
        True

    Args:
        id: a registered id or short name.
        name: ``"random"``, ``"scripted"`` or any name the env registered.
    """
    env_id = resolve_id(id)
    with _lock:
        policy = _REFERENCES.get(env_id, {"random": RANDOM_POLICY}).get(name)
    if isinstance(policy, str):
        module, _, attribute = policy.partition(":")
        policy = getattr(importlib.import_module(module), attribute)
    return policy


def exact_return(id: str) -> Callable[..., float] | None:
    """The env's exact expected return of a policy's greedy play, ``fn(policy, env_kwargs=None)
    -> float`` (no sample of episodes, so no luck), or ``None`` when it registered none.

    Example:
        >>> import textgym
        >>> textgym.registry.exact_return("blackjack").__name__, textgym.registry.exact_return("cartpole")
        ('blackjack_exact_return', None)
    """
    env_id = resolve_id(id)
    with _lock:
        value = _EXACT_RETURNS.get(env_id)
    if isinstance(value, str):
        module, _, attribute = value.partition(":")
        value = getattr(importlib.import_module(module), attribute)
    return value


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


@dataclass(frozen=True)
class EnvFamily:
    """A family of envs made on demand from another package's own ids: ``prefix/<its id>``.

    Registered with :func:`register_family`; :func:`resolve_id` registers ``prefix/<id>`` (in
    textgym's and Gymnasium's registries) the first time it is asked for, so ``textgym.make``,
    ``make_vec`` and the CLI accept any of the package's ids without importing it at start-up.

    Args:
        prefix: the id prefix, e.g. ``"minigrid"`` (ids read ``minigrid/BabyAI-GoToRedBall-v0``).
        make: ``"module:function"`` or a callable ``make(name, max_episode_steps=None, **kwargs)
            -> gym.Env`` making the text env of the package's id ``name`` (it applies the step
            limit itself, inside its text wrappers).
        list_ids: ``"module:function"`` or a callable ``() -> list[str]``: the package's ids.
            Both import the package; an ``ImportError`` means it is not installed.
        description: one line for ``textgym envs``.
        install: what installs the package, for the one-line error (e.g. ``"textgym[minigrid]"``).
        package: its import name, to tell cheaply whether it is installed (``""``: unknown).
        training_defaults: a :class:`TrainingDefaults` for every id of the family, a callable
            ``(name) -> TrainingDefaults | None``, or the ``"module:attribute"`` of either.
        source: the ``source`` its ids are listed with (:class:`EnvSpecInfo`), e.g. the package
            the envs come from; default: who registers the family (as in :func:`register`).
        reference_policies: the reference players of its ids (as :func:`register`'s), a callable
            ``(name) -> {name: policy}`` or the ``"module:attribute"`` of either (``None``: random only).
        free_text: whether its ids take free-text answers (as :func:`register`'s): a bool, a
            callable ``(name) -> bool | (env_kwargs) -> bool``, or the ``"module:attribute"`` of
            either.
        unavailable: a callable ``(name) -> str | None`` (or its ``"module:attribute"``): why an
            id cannot be made on this machine (data its package downloads at run time and that
            is missing offline), shown by ``textgym envs --family PREFIX``; ``None``: all can.
    """

    prefix: str
    make: str | Callable[..., gym.Env]
    list_ids: str | Callable[[], list[str]]
    description: str = ""
    install: str = ""
    package: str = ""
    training_defaults: Any = None
    source: str = "textgym"
    reference_policies: Any = None
    free_text: Any = False
    unavailable: Any = None

    def why_unavailable(self, name: str) -> str | None:
        """Why ``prefix/name`` cannot be made here (``unavailable``), or ``None``."""
        check = _load(self.unavailable) if isinstance(self.unavailable, str) else self.unavailable
        return check(name) if callable(check) else None

    def ids(self) -> list[str]:
        """The package's ids (imports the package; a missing one raises :class:`UnknownEnvError`)."""
        try:
            return list(_load(self.list_ids)())
        except ImportError as error:
            raise UnknownEnvError(
                f"{self.prefix}/... envs need a package that is not installed ({error}); "
                f"install it with: pip install '{self.install}'") from error


_FAMILIES: dict[str, EnvFamily] = {}
_FAMILY_IDS: set[str] = set()   # the ids registered for a family (no short names: they would shadow others)


def _load(target: str | Callable[..., Any]) -> Callable[..., Any]:
    if isinstance(target, str):
        module, _, attribute = target.partition(":")
        return getattr(importlib.import_module(module), attribute)
    return target


def register_family(prefix: str, make: str | Callable[..., gym.Env], list_ids: str | Callable[[], list[str]],
                    **kwargs: Any) -> None:
    """Register a family of envs: ``prefix/<id>`` for every id that ``list_ids()`` gives.

    Plugins use it like :func:`register` (from their ``textgym.envs`` entry point). Keyword
    arguments are the other fields of :class:`EnvFamily`.

    Example:
        >>> import gymnasium as gym, textgym
        >>> textgym.registry.register_family(
        ...     "gymclassic", lambda name, max_episode_steps=None: textgym.wrap(
        ...         gym.make(name, max_episode_steps=max_episode_steps)),
        ...     lambda: ["CartPole-v1", "Acrobot-v1"], install="gymnasium")
        >>> textgym.make("gymclassic/CartPole-v1").reset(seed=0)[1]["valid_actions"]
        ['0', '1']
    """
    if "/" in prefix or ":" in prefix or not prefix:
        raise ValueError(f"a family prefix is a non-empty name without '/' or ':', got {prefix!r}")
    kwargs.setdefault("source", _loading[-1][0] if _loading else _caller_package(1))
    with _lock:
        _FAMILIES[prefix.lower()] = EnvFamily(prefix=prefix, make=make, list_ids=list_ids, **kwargs)


def list_families() -> list[EnvFamily]:
    """The registered env families (see :func:`register_family`), sorted by prefix."""
    load_plugins()
    with _lock:
        return sorted(_FAMILIES.values(), key=lambda family: family.prefix)


def family_ids(prefix: str, register_all: bool = False) -> list[str]:
    """The ids of family ``prefix`` (``"minigrid/..."``). ``register_all=True`` also registers each
    one with Gymnasium, so plain ``gym.make(id)`` accepts them from then on."""
    load_plugins()
    family = _FAMILIES.get(prefix.lower())
    if family is None:
        raise UnknownEnvError(f"no env family {prefix!r}; the families are "
                              f"{', '.join(sorted(_FAMILIES)) or 'none'}")
    ids = [f"{family.prefix}/{name}" for name in family.ids()]
    if register_all:
        for env_id in ids:
            _register_family_id(family, env_id.split("/", 1)[1])
    return ids


def make_family_env(family: str, name: str, **kwargs: Any) -> gym.Env:
    """The entry point of every ``family/name`` id: the family's ``make(name, **kwargs)``
    (:class:`EnvUnavailableError` first when the family says the id cannot be made here)."""
    found = _FAMILIES[family.lower()]
    reason = found.why_unavailable(name)
    if reason is not None:  # before the package's game module is imported (it would try to download)
        raise EnvUnavailableError(f"{found.prefix}/{name} is {reason}")
    return _load(found.make)(name, **kwargs)


def _register_family_id(family: EnvFamily, name: str) -> str:
    env_id = f"{family.prefix}/{name}"
    with _lock:
        if env_id not in _INFOS:
            defaults = family.training_defaults
            if isinstance(defaults, str):
                defaults = _load(defaults)
            if callable(defaults):
                defaults = defaults(name)
            references = family.reference_policies
            if isinstance(references, str):
                references = _load(references)
            if callable(references):
                references = references(name)
            free_text = _load(family.free_text) if isinstance(family.free_text, str) else family.free_text
            if callable(free_text):
                free_text = free_text(name)
            register(env_id, "textgym.registry:make_family_env", description=family.description,
                     source=family.source, training_defaults=defaults, reference_policies=references,
                     free_text=free_text,
                     kwargs={"family": family.prefix, "name": name, "max_episode_steps": None})
            _FAMILY_IDS.add(env_id)
            _INFOS[env_id] = dataclasses.replace(_INFOS[env_id], short_name=env_id)
    return env_id


def _resolve_family(family: EnvFamily, name: str) -> str:
    ids = family.ids()
    by_lower = {i.lower(): i for i in ids}
    found = name if name in ids else by_lower.get(name.strip().lower())
    if found is None:
        close = difflib.get_close_matches(name.strip().lower(), list(by_lower), n=3, cutoff=0.5)
        hint = (f" Did you mean: {', '.join(f'{family.prefix}/{by_lower[c]}' for c in close)}?"
                if close else "")
        raise UnknownEnvError(f"no {family.prefix} env {name!r}.{hint} `textgym envs --family "
                              f"{family.prefix}` lists its {len(ids)} ids.")
    return _register_family_id(family, found)


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
    short name. An unversioned Gymnasium id resolves to its newest version. An id of a family
    (``"minigrid/BabyAI-GoToRedBall-v0"``, see :func:`register_family`) is registered on first use.

    Raises:
        UnknownEnvError: nothing matches; the message names close matches.
    """
    if not isinstance(name, str):
        raise TypeError(f"env id must be a str, got {type(name).__name__}")
    if _remote_env(name):  # "openenv:URL": a server's env, not in any registry
        return name
    if ":" in name:      # Gymnasium's "module:Env-v0": import the module, which registers the env
        module, name = name.split(":", 1)
        importlib.import_module(module)
    load_plugins()
    if name in gym.registry:
        return name
    prefix, slash, rest = name.partition("/")
    family = _FAMILIES.get(prefix.strip().lower()) if slash else None
    if family is not None:   # "minigrid/BabyAI-GoToRedBall-v0": the family makes it on demand
        return _resolve_family(family, rest)
    query = name.strip().lower()
    with _lock:
        aliases: dict[str, list[str]] = {}
        for env_id in _INFOS:
            if env_id in _FAMILY_IDS:   # a family's id is only ever named in full
                aliases.setdefault(env_id.lower(), []).append(env_id)
                continue
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
    if (remote := _remote_env(id)) is not None:
        return remote.make(id, max_episode_steps=max_episode_steps, **kwargs)
    env_id = resolve_id(id)
    spec = gym.spec(env_id)
    if max_episode_steps is not None and "max_episode_steps" in spec.kwargs:
        spec = dataclasses.replace(
            spec, kwargs={**spec.kwargs, "max_episode_steps": max_episode_steps})
        return _reset_safe_checker(gym.make(spec, **kwargs))
    return _reset_safe_checker(gym.make(env_id, max_episode_steps=max_episode_steps, **kwargs))


class PassiveEnvChecker(gym.wrappers.PassiveEnvChecker):
    """Gymnasium's passive env checker, except that a first reset that raises leaves the check to
    the next reset. Gymnasium's marks its reset check done before the reset runs: after a failed
    first reset (``reset(seed=-5)``) and a good one, every first step failed unpacking ``None``.
    It has Gymnasium's name, so ``str(env)`` reads as ``gym.make``'s."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        first = not self.checked_reset
        try:
            return super().reset(seed=seed, options=options)
        except BaseException:
            if first:
                self.checked_reset = False
            raise


def _reset_safe_checker(env: gym.Env) -> gym.Env:
    """``env`` with the :class:`gymnasium.wrappers.PassiveEnvChecker` that ``gym.make`` put in
    its wrapper chain (if any) replaced by textgym's :class:`PassiveEnvChecker` around the same env."""
    outer, wrapper = None, env
    while isinstance(wrapper, gym.Wrapper):
        if type(wrapper) is gym.wrappers.PassiveEnvChecker:
            checker = PassiveEnvChecker(wrapper.env)
            if outer is None:
                return checker
            outer.env = checker
            return env
        outer, wrapper = wrapper, wrapper.env
    return env


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
    if (remote := _remote_env(id)) is not None:  # one session per sub-env, spread over the URLs
        return remote.make_vec(id, num_envs, seed=seed, **kwargs)
    env_id = resolve_id(id)
    return TextVectorEnv([lambda: make(env_id, **kwargs)] * num_envs, seed=seed)


def _remote_env(env_id: Any):
    """:mod:`textgym.remote` when ``env_id`` names an OpenEnv server (``"openenv:URL"``), else ``None``."""
    if isinstance(env_id, str) and env_id.startswith("openenv:"):
        from textgym import remote

        return remote
    return None
