"""Finding and making text envs for the CLI, with one-line errors."""

from __future__ import annotations

from typing import Any

from textgym.cli.errors import CLIError


def text_env_ids() -> set[str]:
    import textgym

    return {info.id for info in textgym.list_envs()}


def resolve_env(name: str) -> str:
    """The registered text-env id for a short name or id (CLIError with close matches if none).

    A plain Gymnasium id such as ``CartPole-v1`` means the text env of the same name
    (``textgym/CartPole-v1``) when there is one.
    """
    from textgym import registry

    if name.startswith("openenv:"):  # an OpenEnv server's env (textgym.remote)
        return name
    module = name.split(":", 1)[0] if ":" in name else None
    if module is not None and not all(part.isidentifier() for part in module.split(".")):
        raise CLIError(f"{name!r}: {module[:200]!r} is not a Python module name (module:Env-v0 imports "
                       "the module, e.g. mygames.envs:Maze-v0)")
    try:
        env_id = registry.resolve_id(name)
    except ImportError as exc:
        raise CLIError(f"cannot import module {module!r} for the env {name!r}: {type(exc).__name__}: {exc}") from None
    except registry.UnknownEnvError as exc:
        message = str(exc).replace("textgym.list_envs() lists", "`textgym envs` lists")
        raise CLIError(message) from exc
    text_ids = text_env_ids()
    if env_id in text_ids:
        return env_id
    try:  # "CartPole-v1" (Gymnasium's) -> "textgym/CartPole-v1"
        text_id = registry.resolve_id(env_id.split("/")[-1].lower())
    except registry.UnknownEnvError:
        text_id = None
    if text_id in text_ids:
        return text_id
    raise CLIError(
        f"{env_id!r} is a Gymnasium env but not a text env; wrap it with textgym.wrap() and "
        f"textgym.register() it (`textgym envs` lists the text envs)"
    )


def recorded_env_id(name: str, env_id: str) -> str:
    """The env id a run records: ``env_id``, prefixed with the module that ``name`` imported
    (``"mygames.envs:Maze-v0"``), so a resumed run knows which module it needs again.

    Example:
        >>> recorded_env_id("mygames.envs:maze", "mygames/Maze-v0")
        'mygames.envs:mygames/Maze-v0'
        >>> recorded_env_id("cartpole", "textgym/CartPole-v1")
        'textgym/CartPole-v1'
    """
    return f"{name.split(':', 1)[0]}:{env_id}" if ":" in name and name != env_id else env_id


def refuse_env_import(name: str, source: str, command: str) -> None:
    """Raise CLIError if ``name``, an env id read from ``source`` (a file, not the command
    line), has the form ``module:Env``: textgym would import ``module`` to resolve it, and a
    downloaded run folder or config file must never choose code to import. ``command`` is what
    the user types to allow it (the same id on the command line)."""
    if ":" not in name or name.startswith("openenv:"):  # a server's URL imports nothing
        return
    module = name.split(":", 1)[0]
    raise CLIError(
        f"{source} names the env {name!r}, which would import the Python module {module!r}; "
        f"textgym imports a module only when you name it yourself. If you trust it, run: "
        f"{command}")


def _reason(exc: Exception) -> str:
    # Gymnasium appends "was raised from the environment creator for <id> with kwargs (...)".
    return str(exc).split(" was raised from the environment creator", 1)[0]


def make_env(env_id: str, **kwargs: Any) -> Any:
    """``textgym.make(env_id, **kwargs)``; a bad env kwarg, or an env that cannot be made here,
    becomes a CLIError."""
    import textgym
    from textgym.registry import EnvUnavailableError
    from textgym.vector import SubEnvError

    try:
        return textgym.make(env_id, **kwargs)
    except EnvUnavailableError as exc:
        raise CLIError(str(exc)) from exc
    except (TypeError, ValueError) as exc:
        raise CLIError(f"cannot make {env_id} with {kwargs}: {_reason(exc)}") from exc
    except SubEnvError as exc:  # a server that cannot be reached
        raise CLIError(str(exc)) from exc


def check_env_kwargs(env_id: str, env_kwargs: dict[str, Any], mode: str | None = None) -> None:
    """Make the env once with the run's ``[env_kwargs]`` and close it, so an unknown or bad
    setting fails in milliseconds, before a model loads or a run folder is written (making a
    text env is cheap: TextWorld, the costliest, generates its games at ``reset``). A served env
    is reset once; in score ``mode`` it must list the actions to score."""
    import textgym
    from textgym.registry import EnvUnavailableError
    from textgym.vector import SubEnvError

    try:
        env = textgym.make(env_id, **env_kwargs)
    except EnvUnavailableError as exc:
        raise CLIError(str(exc)) from exc
    except (TypeError, ValueError) as exc:
        raise CLIError(f"bad [env_kwargs] for {env_id}: {_reason(exc)}") from exc
    try:
        if env_id.startswith("openenv:"):  # a server: reach it now, not after the model loaded
            _, info = env.reset()
            if mode == "score" and not info.get("valid_actions"):
                raise CLIError(f"{env_id}: the server lists no actions to score (its answers are free "
                               "text or tool calls): train it with --mode generate")
    except SubEnvError as exc:
        raise CLIError(str(exc)) from exc
    finally:
        env.close()


def check_mode(env_id: str, mode: str | None, env_kwargs: dict[str, Any]) -> None:
    """Refuse score mode (CLIError, one line) on an env that takes free-text answers, as its
    registrant declared (:func:`textgym.registry.takes_free_text`): score mode picks one of the
    listed actions and there is none. Checked before a model loads or a run folder is written."""
    from textgym.registry import takes_free_text

    if (mode or "score") == "score" and takes_free_text(env_id, env_kwargs):
        raise CLIError(f"{env_id} takes free-text answers and lists no actions for score mode to "
                       f"pick from: use --mode generate")
