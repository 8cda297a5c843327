"""Any textgym env served as an OpenEnv env, on OpenEnv's own server (``textgym serve``).

OpenEnv (``pip install textgym[openenv]``) is the wire format that TRL, verifiers and others
consume. This module adapts a text env to its ``openenv.core.Environment`` interface and hands it
to OpenEnv's ``create_app``: its WebSocket route ``/ws`` (one session, i.e. one env, per client),
its HTTP routes (``/reset``, ``/step``, ``/state``, ``/schema``, ``/metadata``, ``/health``) and
its session limit (``max_concurrent_envs``) are OpenEnv's, not ours. What this module adds, each
with OpenEnv's, FastAPI's or uvicorn's own mechanism (a server subclass, ASGI middleware, app
settings):

* a step timeout (``step_timeout``): a reset or step that takes longer closes its session (the
  slot is freed, the client gets the error and the WebSocket is closed); the hung call's thread
  closes its env if it ever returns;
* request bodies capped at :data:`MAX_MESSAGE_BYTES`, as WebSocket messages are (413 beyond);
* ``token``: every HTTP request and WebSocket needs ``Authorization: Bearer TOKEN`` (401 without);
* ``POST /step`` over HTTP (stateless: a new env per request, never reset) answers 409 saying
  to step through the WebSocket session; env errors are logged (``textgym.serve``) and answered
  with their message, a client that leaves mid-step is no server error;
* no ``/docs`` or ``/redoc`` pages (they load their scripts from a CDN); ``/openapi.json`` stays.

What travels (the text-env contract of ``docs/design.md`` §1, nothing lost):

* the action: :class:`TextAction`, ``{"text": <the model's raw answer>}``;
* the observation: :class:`TextObservation`, ``text`` (what the model reads), ``reward``,
  ``done`` (terminated or truncated), and in ``metadata`` the keys of :data:`METADATA_KEY`:
  ``terminated``, ``truncated``, ``info`` (the env's info made JSON-safe: ``system_prompt``,
  ``valid_actions``, ``parse``, ``episode``...) and, at reset, ``env`` (the env id,
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

import asyncio
import functools
import hmac
import logging
import math
import os
import socket
import sys
import threading
from contextlib import suppress
from contextvars import ContextVar
from typing import Any

try:
    from fastapi import HTTPException, Request
    from fastapi.responses import JSONResponse
    from openenv.core import Action, Environment, Observation, State
    from openenv.core.env_server.http_server import HTTPEnvServer
    from openenv.core.env_server.types import EnvironmentMetadata
    from pydantic import Field, model_validator
    from starlette.websockets import WebSocket
except ImportError as _missing:  # pragma: no cover - depends on the installed extras
    raise ImportError("serving envs needs OpenEnv: pip install 'textgym[openenv]'") from _missing

from textgym.remote import DEFAULT_STEP_TIMEOUT

__all__ = ["DEFAULT_STEP_TIMEOUT", "MAX_MESSAGE_BYTES", "METADATA_KEY", "EnvFailure", "StepBeforeReset",
           "StepTimeout", "TextAction", "TextObservation", "TextgymEnvironment", "create_app", "jsonable",
           "listen", "run"]

#: The observation-metadata key under which a textgym server puts terminated/truncated/info.
METADATA_KEY = "textgym"
#: The largest WebSocket message and HTTP request body a server accepts (bytes).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: The WebSocket close code of a session closed by the server's step timeout (1011: server error).
TIMEOUT_CLOSE_CODE = 1011

logger = logging.getLogger("textgym.serve")


class EnvFailure(RuntimeError):
    """The served env raised at reset or step; the message names the env, the call and the error."""


class StepBeforeReset(RuntimeError):
    """A step on an env that was never reset: over HTTP, ``POST /step`` (each request gets a new
    env); the message says to play over the WebSocket session."""


class StepTimeout(RuntimeError):
    """A reset or step took longer than the server's step timeout; its session is closed."""


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
        self._was_reset = False

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

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` on the env; an error is logged and raised as :class:`EnvFailure`."""
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            logger.exception("env %s raised %s at %s", self.env_id, type(exc).__name__, what)
            raise EnvFailure(f"env {self.env_id} raised {type(exc).__name__} at {what}: {exc}") from exc

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> TextObservation:
        obs, info = self._call("reset", self.env.reset, seed=seed, options=kwargs.get("options"))
        self._was_reset = True
        self._state = State(episode_id=episode_id, step_count=0)
        return self._observation(obs, None, False, False, info, reset=True)

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        if not self._was_reset:
            raise StepBeforeReset(
                "step before reset: an HTTP POST /step gets a new env that was never reset (the "
                "HTTP routes keep no session); play over the WebSocket session at /ws (reset, then "
                "steps), e.g. textgym.make('openenv:URL')")
        obs, reward, terminated, truncated, info = self._call("step", self.env.step, action.text)
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


# --- the server ---------------------------------------------------------------------------------


class _Connection:
    """What :class:`_WebSocketGuard` knows of one WebSocket: whether the server closes it after its
    next reply (a step timeout) and whether it is gone (closed, or the client left)."""

    def __init__(self) -> None:
        self.close_after_reply: str | None = None  # the close reason
        self.gone = False


#: The WebSocket connection being served in this task (set by :class:`_WebSocketGuard`).
_CONNECTION: ContextVar[_Connection | None] = ContextVar("textgym_serve_connection", default=None)


class TextgymServer(HTTPEnvServer):
    """OpenEnv's server with a step timeout: a reset or step (WebSocket session or HTTP route) that
    takes longer than ``step_timeout`` seconds raises :class:`StepTimeout`; a session's is then
    closed and its slot freed at once (the hung call's thread closes the env if it ever returns)."""

    def __init__(self, *args: Any, step_timeout: float = DEFAULT_STEP_TIMEOUT, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.step_timeout = float(step_timeout)
        self.calls_running = 0  # env calls in a thread now (a timed-out one may never end)
        self._count_lock = threading.Lock()

    def _counted(self, func: Any) -> Any:
        """``func`` counting itself in :attr:`calls_running` while it runs (in its thread)."""

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._count_lock:
                self.calls_running += 1
            try:
                return func(*args, **kwargs)
            finally:
                with self._count_lock:
                    self.calls_running -= 1

        return call

    def _timed_out(self, func: Any) -> StepTimeout:
        what = getattr(func, "__name__", "call")
        return StepTimeout(f"the env's {what} took longer than {self.step_timeout:g} s (the server's "
                           "--step-timeout): its session is closed; connect again for a new one")

    async def _run_in_session_executor(self, session_id: str, func: Any, *args: Any, **kwargs: Any):
        try:
            return await asyncio.wait_for(super()._run_in_session_executor(
                session_id, self._counted(func), *args, **kwargs), self.step_timeout)
        except TimeoutError:
            error = self._timed_out(func)
            logger.error("%s", error)
            await self._abandon_session(session_id)
            if (connection := _CONNECTION.get()) is not None:
                connection.close_after_reply = "step timeout"
            raise error from None

    async def _run_sync_in_thread_pool(self, func: Any, *args: Any, **kwargs: Any):
        try:
            return await asyncio.wait_for(
                super()._run_sync_in_thread_pool(self._counted(func), *args, **kwargs), self.step_timeout)
        except TimeoutError:
            error = self._timed_out(func)
            logger.error("%s (HTTP)", error)
            raise error from None

    async def _abandon_session(self, session_id: str) -> None:
        """Free the slot of a session whose env hangs: OpenEnv's own clean-up would close the env
        in the session's thread, which the hung call holds, and so wait as long."""
        async with self._session_lock:
            env = self._sessions.pop(session_id, None)
            executor = self._session_executors.pop(session_id, None)
            stack = self._session_stacks.pop(session_id, None)
            self._session_info.pop(session_id, None)
        if stack is not None:
            with suppress(Exception):
                await stack.aclose()
        if executor is not None:
            if env is not None:
                executor.submit(env.close)  # after the hung call, in the env's own thread
            executor.shutdown(wait=False)


class _WebSocketGuard:
    """ASGI middleware around OpenEnv's WebSocket route: closes the WebSocket after the reply that
    reports a step timeout, and treats a client that left (a send fails) as a normal end of the
    session, not a server error (OpenEnv's route would try to send the error again, and fail)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        connection = _Connection()
        _CONNECTION.set(connection)

        async def guarded_receive() -> dict[str, Any]:
            if connection.gone:
                return {"type": "websocket.disconnect", "code": 1000}
            message = await receive()
            connection.gone = message["type"] == "websocket.disconnect"
            return message

        async def guarded_send(message: dict[str, Any]) -> None:
            if connection.gone:
                return
            try:
                await send(message)
            except OSError:  # uvicorn's ClientDisconnected: nobody to answer any more
                connection.gone = True
                return
            if message["type"] == "websocket.close":
                connection.gone = True
            elif message["type"] == "websocket.send" and connection.close_after_reply:
                connection.gone = True
                with suppress(OSError):
                    await send({"type": "websocket.close", "code": TIMEOUT_CLOSE_CODE,
                                "reason": connection.close_after_reply})

        await self.app(scope, guarded_receive, guarded_send)


class _BodyLimit:
    """ASGI middleware: an HTTP request body over ``limit`` bytes is a 413, whether its
    Content-Length says so or its chunks add up to it (nothing beyond the limit is kept)."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    def _too_large(self) -> str:
        return f"request body over {self.limit} bytes (the server's limit, as for WebSocket messages)"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await JSONResponse({"detail": self._too_large()}, status_code=413)(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:  # FastAPI answers an HTTPException raised while reading
                    raise HTTPException(status_code=413, detail=self._too_large())
            return message

        await self.app(scope, limited_receive, send)


class _TokenCheck:
    """ASGI middleware: every HTTP request and WebSocket must carry ``Authorization: Bearer
    TOKEN`` (OpenEnv's client sends it with ``headers=``); otherwise 401 (a WebSocket is refused
    at the handshake)."""

    def __init__(self, app: Any, token: str):
        self.app, self.token = app, token.encode()

    def _authorized(self, scope: dict[str, Any]) -> bool:
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, value = given.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self.token)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        refusal = JSONResponse({"detail": "missing or wrong token (Authorization: Bearer TOKEN; "
                                          "textgym: TEXTGYM_TOKEN)"},
                               status_code=401, headers={"WWW-Authenticate": "Bearer"})
        if scope["type"] == "http":
            await refusal(scope, receive, send)
            return
        websocket = WebSocket(scope, receive, send)
        if "websocket.http.response" in scope.get("extensions", {}):
            await websocket.send_denial_response(refusal)
        else:
            await websocket.close(code=1008, reason="missing or wrong token")


async def _answer_env_failure(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=500)


async def _answer_step_before_reset(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=409)


async def _answer_timeout(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=504)


def create_app(env_id: str, env_kwargs: dict[str, Any] | None = None, max_sessions: int = 64,
               step_timeout: float = DEFAULT_STEP_TIMEOUT, token: str | None = None):
    """OpenEnv's FastAPI app serving ``env_id``: up to ``max_sessions`` concurrent sessions (a
    client beyond that gets OpenEnv's ``CAPACITY_REACHED`` error), each reset or step at most
    ``step_timeout`` seconds, ``token`` (if given) required on every request. The env is made once
    here, so a bad id or kwarg fails before anything listens. Built as OpenEnv's
    ``create_fastapi_app`` builds it, without the pages that load scripts from a CDN."""
    from fastapi import FastAPI

    if not step_timeout > 0:
        raise ValueError(f"step_timeout must be > 0 seconds, got {step_timeout!r}")
    TextgymEnvironment(env_id, env_kwargs).close()
    factory = functools.partial(TextgymEnvironment, env_id, dict(env_kwargs or {}))
    app = FastAPI(title=f"textgym: {env_id} (OpenEnv)", docs_url=None, redoc_url=None)
    server = TextgymServer(factory, TextAction, TextObservation, max_concurrent_envs=max_sessions,
                           env_name=env_id.replace("/", "-"), step_timeout=step_timeout)
    server.register_routes(app)
    app.state.textgym_server = server
    app.add_exception_handler(EnvFailure, _answer_env_failure)
    app.add_exception_handler(StepBeforeReset, _answer_step_before_reset)
    app.add_exception_handler(StepTimeout, _answer_timeout)
    app.add_middleware(_WebSocketGuard)
    app.add_middleware(_BodyLimit, limit=MAX_MESSAGE_BYTES)
    if token:
        app.add_middleware(_TokenCheck, token=token)  # added last: it runs first
    return app


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` for the server (as uvicorn binds it); ``OSError`` (a port
    in use, an address not of this machine) before anything is served."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _log_config() -> dict[str, Any]:
    """uvicorn's logging settings, with ``textgym.serve`` (env errors, timeouts) on its handler."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["textgym.serve"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config


def run(env_id: str, env_kwargs: dict[str, Any] | None = None, host: str = "127.0.0.1", port: int = 8000,
        max_sessions: int = 64, log_level: str = "warning", step_timeout: float = DEFAULT_STEP_TIMEOUT,
        token: str | None = None, sock: socket.socket | None = None) -> None:
    """Serve ``env_id`` with uvicorn until interrupted (what ``textgym serve`` runs); ``sock``: a
    socket from :func:`listen` (default: bound here to ``host:port``)."""
    import uvicorn

    app = create_app(env_id, env_kwargs, max_sessions, step_timeout=step_timeout, token=token)
    sock = sock if sock is not None else listen(host, port)
    config = uvicorn.Config(app, log_level=log_level, log_config=_log_config(),
                            ws_max_size=MAX_MESSAGE_BYTES)
    class SignalledServer(uvicorn.Server):
        """uvicorn's server, remembering the first signal that stopped it: uvicorn raises a
        Ctrl-C again once it has shut down, but asyncio may swallow it when the signal lands as
        the serving task ends, so the exit code is taken from the signal itself."""

        stopped_by: int | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.stopped_by is None:
                self.stopped_by = int(sig)
            super().handle_exit(sig, frame)

    server = SignalledServer(config)
    exit_code = 1  # what an unexpected error leaves
    try:
        server.run(sockets=[sock])
        exit_code = 0
    except KeyboardInterrupt:  # uvicorn raises the Ctrl-C again once it has shut down
        exit_code = 130
        raise
    finally:
        if server.stopped_by is not None:  # 128 + N: a shell's code for "ended by signal N"
            exit_code = 128 + server.stopped_by
        _leave_hung_calls(app.state.textgym_server, exit_code)


def _leave_hung_calls(server: TextgymServer, exit_code: int) -> None:
    """After the server stopped: exit now if env calls that timed out still run. Their threads
    cannot be stopped, and Python would wait for them at exit (forever, for a hung step)."""
    if not server.calls_running:
        return
    logger.warning("%d env call(s) past the step timeout still running: exiting without them",
                   server.calls_running)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(exit_code)
