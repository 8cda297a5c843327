"""Any textgym env served as an OpenEnv env, on OpenEnv's own server (``textgym serve``).

OpenEnv (``pip install textgym[openenv]``) is the wire format that TRL, verifiers and others
consume. This module adapts a text env to its ``openenv.core.Environment`` interface and hands it
to OpenEnv's ``create_app``: its WebSocket route ``/ws`` (one session, i.e. one env, per client),
its HTTP routes (``/reset``, ``/step``, ``/state``, ``/schema``, ``/metadata``, ``/health``) and
its session limit (``max_concurrent_envs``) are OpenEnv's, not ours.

What travels (the text-env contract of ``docs/design.md`` §1, nothing lost):

* the action: :class:`TextAction`, ``{"text": <the model's raw answer>}``;
* the observation: :class:`TextObservation`, ``text`` (what the model reads), ``reward``,
  ``done`` (terminated or truncated), and in ``metadata`` the keys of :data:`METADATA_KEY`:
  ``terminated``, ``truncated``, ``info`` (the env's info made JSON-safe: ``system_prompt``,
  ``valid_actions``, ``parse``, ``episode_stats``...) and, at reset, ``env`` (the env id,
  action names and the ``History`` window) so that a client knows it talks to a textgym env.

Example (no server: the adapter alone):
    >>> from textgym.serve import TextgymEnvironment, TextAction
    >>> env = TextgymEnvironment("cartpole")
    >>> first = env.reset(seed=0)
    >>> first.metadata["textgym"]["info"]["valid_actions"]
    ['LEFT', 'RIGHT']
    >>> after = env.step(TextAction(text="RIGHT"))
    >>> after.reward, after.done, after.metadata["textgym"]["info"]["parse"]["action_name"]
    (1.0, False, 'RIGHT')
"""

from __future__ import annotations

import functools
import math
from typing import Any

try:
    from openenv.core import Action, Environment, Observation, State
    from openenv.core.env_server.types import EnvironmentMetadata
    from pydantic import Field, model_validator
except ImportError as _missing:  # pragma: no cover - depends on the installed extras
    raise ImportError("serving envs needs OpenEnv: pip install 'textgym[openenv]'") from _missing

__all__ = ["METADATA_KEY", "TextAction", "TextObservation", "TextgymEnvironment", "create_app", "jsonable", "run"]

#: The observation-metadata key under which a textgym server puts terminated/truncated/info.
METADATA_KEY = "textgym"


class WrongStepFormat(TypeError):
    """A step that is not ``{"text": ...}``; a TypeError so that OpenEnv's server sends its message
    to the client (a ValueError would become its generic "Invalid message")."""


class TextAction(Action):
    """What a client sends: the model's raw answer text, parsed by the served env. A step is
    ``{"type": "step", "data": {"text": "LEFT"}}`` on the WebSocket (OpenEnv's ``GenericEnvClient``:
    ``client.step({"text": "LEFT"})``)."""

    text: str = Field(description="The answer text, parsed by the env like a model's answer")

    @model_validator(mode="before")
    @classmethod
    def _names_the_field(cls, data: Any) -> Any:
        fields = sorted(data) if isinstance(data, dict) else None
        if fields is None or "text" not in data or not isinstance(data["text"], str):
            got = f"the fields {', '.join(map(str, fields))}" if fields else type(data).__name__
            raise WrongStepFormat(f'a textgym server takes a step as {{"text": "<the answer>"}}; got {got}')
        return data


class TextObservation(Observation):
    """What a textgym server answers; ``metadata["textgym"]`` holds ``terminated``,
    ``truncated`` and ``info`` (see the module docstring)."""

    text: str = Field(default="", description="The observation text the model reads")


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: NumPy scalars and arrays as numbers and lists, tuples as
    lists, non-finite floats and anything else unknown as their ``str``.

    Example:
        >>> import numpy as np
        >>> jsonable({"a": np.int64(3), "b": (np.float32(0.5), "x"), "c": float("nan")})
        {'a': 3, 'b': [0.5, 'x'], 'c': 'nan'}
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):  # NumPy scalars and arrays
        return jsonable(value.tolist())
    return str(value)


class TextgymEnvironment(Environment):
    """One textgym env behind OpenEnv's ``Environment`` interface (one per session).

    Args:
        env_id: a registered id or short name (plugins and families too: ``textgym.make``).
        env_kwargs: passed to ``textgym.make``.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session makes its own env; nothing is shared

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None):
        super().__init__()
        import textgym

        self.env_id = textgym.registry.resolve_id(env_id)
        self.env = textgym.make(self.env_id, **(env_kwargs or {}))
        self._state = State(step_count=0)

    def _describe(self) -> dict[str, Any]:
        def attribute(name: str) -> Any:
            try:
                return self.env.get_wrapper_attr(name)
            except AttributeError:
                return None

        names = attribute("action_names")
        return {"id": self.env_id, "action_names": list(names) if names is not None else None,
                "history_window": attribute("history_window")}

    def _observation(self, obs: str, reward: float | None, terminated: bool, truncated: bool,
                     info: dict[str, Any], reset: bool = False) -> TextObservation:
        record = {"terminated": bool(terminated), "truncated": bool(truncated), "info": jsonable(info)}
        if reset:
            record["env"] = self._describe()
        return TextObservation(text=obs, reward=reward, done=bool(terminated or truncated),
                               metadata={METADATA_KEY: record})

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> TextObservation:
        obs, info = self.env.reset(seed=seed, options=kwargs.get("options"))
        self._state = State(episode_id=episode_id, step_count=0)
        return self._observation(obs, None, False, False, info, reset=True)

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        obs, reward, terminated, truncated, info = self.env.step(action.text)
        self._state.step_count += 1
        return self._observation(obs, float(reward), terminated, truncated, info)

    @property
    def state(self) -> State:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        from textgym.registry import list_envs

        description = next((i.description for i in list_envs() if i.id == self.env_id), "")
        return EnvironmentMetadata(name=self.env_id, description=description or self.env_id,
                                   author="textgym")

    def close(self) -> None:
        self.env.close()


def create_app(env_id: str, env_kwargs: dict[str, Any] | None = None, max_sessions: int = 64):
    """OpenEnv's FastAPI app serving ``env_id``: up to ``max_sessions`` concurrent sessions (a
    client beyond that gets OpenEnv's ``CAPACITY_REACHED`` error). The env is made once here, so
    a bad id or kwarg fails before anything listens."""
    from openenv.core import create_fastapi_app

    TextgymEnvironment(env_id, env_kwargs).close()
    factory = functools.partial(TextgymEnvironment, env_id, dict(env_kwargs or {}))
    return create_fastapi_app(factory, TextAction, TextObservation, max_concurrent_envs=max_sessions,
                              env_name=env_id.replace("/", "-"))


def run(env_id: str, env_kwargs: dict[str, Any] | None = None, host: str = "127.0.0.1", port: int = 8000,
        max_sessions: int = 64, log_level: str = "warning") -> None:
    """Serve ``env_id`` with uvicorn until interrupted (what ``textgym serve`` runs)."""
    import uvicorn

    app = create_app(env_id, env_kwargs, max_sessions)
    uvicorn.run(app, host=host, port=port, log_level=log_level, ws_max_size=16 * 1024 * 1024)
