"""Any OpenEnv server as a textgym env: ``textgym.make("openenv:http://HOST:PORT")``.

Built on OpenEnv's own client (``openenv.core.GenericEnvClient``, one WebSocket session per env;
``pip install textgym[openenv]``). Two kinds of server:

* **a textgym server** (``textgym serve``, :mod:`textgym.serve`): the answer text is sent as it
  is and parsed by the served env; observation, reward, ``terminated``/``truncated`` and ``info``
  come back unchanged (the env is the same as in-process, only further away);
* **any other OpenEnv server**: its observation is rendered to text (its text field if it has
  one, :data:`TEXT_FIELDS`, else a compact ``field: value`` rendering), and the answer is parsed
  against the action schema it publishes at ``/schema`` (an enum or small integer range gives
  the valid actions, parsed by textgym's parser chain; one free string field takes the answer
  text; several fields take a JSON object). An answer that fits no action is not sent: the
  observation is repeated with a feedback line (``invalid_policy="retry"``, then the episode
  ends with ``invalid_penalty``).

``make_vec("openenv:URL", num_envs=16)`` opens 16 sessions; ``"openenv:URL1,URL2"`` spreads them
across servers (sub-env ``i`` on URL ``(offset + i) % len(urls)``, where a process of a
multi-process run offsets by its rank times ``num_envs``).

Faults (each an :class:`OpenEnvError`, a :class:`textgym.vector.SubEnvError`, naming the URL,
raised within ``step_timeout`` seconds): the server died or closed the session, did not answer in
time, answered something malformed, or is full (OpenEnv's ``CAPACITY_REACHED``). The session is
dropped; the next ``reset()`` opens a new one (a rollout drops the episode and goes on).

A server started with a token (``textgym serve --token``) is sent the ``TEXTGYM_TOKEN``
environment variable as ``Authorization: Bearer`` (OpenEnv's client ``headers=``).
"""

from __future__ import annotations

import json
import os
import re
from contextlib import suppress
from typing import Any, ClassVar

import gymnasium as gym

from textgym.spaces import TextSpace
from textgym.vector import SubEnvError

__all__ = ["DEFAULT_STEP_TIMEOUT", "PREFIX", "TEXT_FIELDS", "OpenEnvError", "OpenEnvTextEnv", "is_remote",
           "make", "make_vec", "urls_of"]

#: The env-id prefix of a remote env: ``"openenv:http://127.0.0.1:8000"``.
PREFIX = "openenv:"
#: Seconds a reset or step may take (connecting included) before it is an :class:`OpenEnvError`.
DEFAULT_STEP_TIMEOUT = 30.0
#: Observation fields read as the observation's text, in this order (a foreign server).
TEXT_FIELDS = ("text", "prompt", "observation", "message", "content", "question", "board", "output")
#: The environment variable holding a server's token (``textgym serve --token``).
TOKEN_VARIABLE = "TEXTGYM_TOKEN"
_METADATA_KEY = "textgym"  # textgym.serve.METADATA_KEY (not imported: that module needs the server side)
_SMALL_RANGE = 32  # an integer action field with at most this many values lists them as valid actions


class OpenEnvError(SubEnvError):
    """An OpenEnv server failed a session (died, too slow, malformed reply, full); names the URL."""


def is_remote(env_id: Any) -> bool:
    """Whether ``env_id`` names an OpenEnv server (``"openenv:URL[,URL...]"``)."""
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


def urls_of(env_id: str) -> list[str]:
    """The server URLs of an ``"openenv:URL[,URL...]"`` id.

    Example:
        >>> urls_of("openenv:http://127.0.0.1:8000, http://10.0.0.2:8000/")
        ['http://127.0.0.1:8000', 'http://10.0.0.2:8000']
    """
    urls = [u.strip().rstrip("/") for u in env_id[len(PREFIX):].split(",") if u.strip()]
    if not urls or not all(re.match(r"^(https?|wss?)://[^/\s]+", u) for u in urls):
        raise ValueError(f"{env_id!r}: expected openenv:http://HOST:PORT (several separated by commas)")
    return urls


def _openenv_client():
    try:
        from openenv.core.generic_client import GenericEnvClient
    except ImportError:
        raise ImportError("OpenEnv envs need OpenEnv: pip install 'textgym[openenv]'") from None
    return GenericEnvClient


def _auth_headers() -> dict[str, str] | None:
    """``Authorization: Bearer $TEXTGYM_TOKEN`` when the variable is set."""
    token = os.environ.get(TOKEN_VARIABLE)
    return {"Authorization": f"Bearer {token}"} if token else None


def _describe_error(url: str, exc: BaseException, timeout: float) -> str:
    """One line saying what went wrong with the server at ``url``."""
    text = str(exc)
    if "HTTP 401" in text:
        return f"OpenEnv server {url} refused the connection: set {TOKEN_VARIABLE} to its --token"
    if isinstance(exc, TimeoutError) or type(exc).__name__ == "TimeoutError":
        return f"OpenEnv server {url} did not answer within {timeout:g} s (--step-timeout)"
    if "CAPACITY_REACHED" in text:
        return f"OpenEnv server {url} is full: {text.removeprefix('Server error: ')}"
    if type(exc).__name__.startswith("ConnectionClosed"):
        return f"OpenEnv server {url} closed the session (did it stop?): {text or type(exc).__name__}"
    if isinstance(exc, (ConnectionError, OSError)):
        return f"cannot reach OpenEnv server {url}: {text}"
    if isinstance(exc, (ValueError, KeyError, TypeError)):
        return f"malformed reply from OpenEnv server {url}: {type(exc).__name__}: {text}"
    return f"OpenEnv server {url} failed: {text or type(exc).__name__}"


class OpenEnvTextEnv(gym.Env):
    """An OpenEnv server's env as a text env: one session on it (opened at the first reset).

    Args:
        url: the server, ``http://HOST:PORT``.
        step_timeout: seconds a reset or step may take before it raises :class:`OpenEnvError`.
        invalid_penalty: a foreign server: the reward of an answer that fits no action once the
            retries are used up (the episode then ends).
        max_retries: a foreign server: answers that fit no action asked again before that.
        render_mode: ``"ansi"``: ``render()`` returns the last observation text.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(self, url: str, *, step_timeout: float = DEFAULT_STEP_TIMEOUT, invalid_penalty: float = -1.0,
                 max_retries: int = 2, render_mode: str | None = None):
        from textgym.wrappers.invalid_answer import AnswerCounter, InvalidAnswerRule

        if not step_timeout > 0:
            raise ValueError(f"step_timeout must be > 0 seconds, got {step_timeout!r}")
        self.url = url.rstrip("/")
        self.step_timeout = float(step_timeout)
        self.render_mode = render_mode
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self.rule = InvalidAnswerRule(policy="retry", penalty=invalid_penalty, max_retries=max_retries,
                                      retry_fallback="terminate")
        self._answers = AnswerCounter(self.rule)  # a foreign server's invalid answers (the §1 sequence)
        self._client = None
        self._textgym: bool | None = None   # decided by the first reset's reply
        self._schema: dict[str, Any] | None = None
        self.action_names: list[str] | None = None
        self.history_window: int | None = None
        self.system_prompt = ""
        self._last = ""
        self._episode: dict[str, Any] = {}

    # --- the session -------------------------------------------------------------------------

    def _call(self, what: str, *args: Any, **kwargs: Any):
        """``client.what(...)`` on the open session (opened first if needed); any failure closes it
        and raises :class:`OpenEnvError` naming the URL."""
        client_class = _openenv_client()  # a missing package is not the server's fault
        try:
            if self._client is None:
                self._client = client_class(base_url=self.url, connect_timeout_s=self.step_timeout,
                                            message_timeout_s=self.step_timeout,
                                            headers=_auth_headers()).sync()
                self._client.connect()
            return getattr(self._client, what)(*args, **kwargs)
        except Exception as exc:  # every failure of the session is the server's
            if what == "step" and "VALIDATION_ERROR" in str(exc):
                raise _Rejected(str(exc)) from exc  # the server refused this action: an invalid answer
            self._drop_session()
            raise OpenEnvError(_describe_error(self.url, exc, self.step_timeout)) from exc

    def _drop_session(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with suppress(Exception):  # the session is gone either way
                client.close()

    def close(self) -> None:
        self._drop_session()

    # --- gymnasium API -------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        kwargs = {} if seed is None else {"seed": int(seed)}
        if options:
            kwargs["options"] = options
        result = self._call("reset", **kwargs)
        record = self._record(result)
        if self._textgym is None:
            self._textgym = record is not None
        if self._textgym:
            if record is None:
                raise self._malformed("a reset reply without textgym's metadata")
            described = record.get("env") or {}
            self.action_names = described.get("action_names")
            self.history_window = described.get("history_window")
            obs, info = self._text(result), dict(record.get("info") or {})
            self.system_prompt = info.get("system_prompt", "")
        else:
            obs, info = self._foreign_reset(result)
        self._last = obs
        return obs, info

    def step(self, action: Any):
        from textgym.wrappers.invalid_answer import as_answer_text

        text = as_answer_text(action)
        if self._textgym is None:
            raise RuntimeError("call reset() before step()")
        if not self._textgym:
            return self._foreign_step(text)
        result = self._call("step", {"text": text})
        record = self._record(result)
        if record is None:
            raise self._malformed("a step reply without textgym's metadata")
        obs, info = self._text(result), dict(record.get("info") or {})
        self._last = obs
        reward = 0.0 if result.reward is None else float(result.reward)
        return obs, reward, bool(record.get("terminated")), bool(record.get("truncated")), info

    def render(self) -> str | None:
        return self._last if self.render_mode == "ansi" else None

    # --- replies -----------------------------------------------------------------------------

    def _malformed(self, what: str) -> OpenEnvError:
        self._drop_session()
        return OpenEnvError(f"malformed reply from OpenEnv server {self.url}: {what}")

    def _record(self, result: Any) -> dict[str, Any] | None:
        if not isinstance(getattr(result, "observation", None), dict):
            raise self._malformed(f"an observation that is not an object ({type(result).__name__})")
        record = (result.metadata or {}).get(_METADATA_KEY) if isinstance(result.metadata, dict) else None
        if record is not None and not isinstance(record, dict):
            raise self._malformed(f"metadata[{_METADATA_KEY!r}] is not an object")
        return record

    def _text(self, result: Any) -> str:
        text = result.observation.get("text")
        if not isinstance(text, str):
            raise self._malformed("an observation without its text")
        return text

    # --- a server that is not textgym's ------------------------------------------------------

    def _fetch_schema(self) -> dict[str, Any]:
        import requests

        try:
            reply = requests.get(f"{self.url}/schema", timeout=self.step_timeout, headers=_auth_headers())
            reply.raise_for_status()
            schema = reply.json()["action"]
        except Exception as exc:
            raise OpenEnvError(f"cannot read the action schema at {self.url}/schema: {exc}") from exc
        return schema

    def _action_fields(self) -> dict[str, dict[str, Any]]:
        if self._schema is None:
            self._schema = self._fetch_schema()
        defs = self._schema.get("$defs", {})
        fields = {}
        for name, spec in (self._schema.get("properties") or {}).items():
            if name == "metadata":
                continue
            ref = spec.get("$ref", "").rsplit("/", 1)[-1]
            fields[name] = {**defs.get(ref, {}), **spec} if ref else spec
        return fields

    def _valid_actions(self) -> list[str]:
        fields = self._action_fields()
        if len(fields) != 1:
            return []
        (spec,) = fields.values()
        if "enum" in spec:
            return [str(v) for v in spec["enum"]]
        if spec.get("type") == "boolean":
            return ["true", "false"]
        low, high = spec.get("minimum"), spec.get("maximum")
        if spec.get("type") == "integer" and low is not None and high is not None and high - low < _SMALL_RANGE:
            return [str(v) for v in range(int(low), int(high) + 1)]
        return []

    def _instructions(self, valid: list[str]) -> str:
        from textgym.wrappers.answer_format import answer_format

        fields = self._action_fields()
        if valid:
            return answer_format("word").instructions(valid)
        if len(fields) == 1:
            (name,) = fields
            return f"Answer with the {name}."
        return f"Answer with a JSON object with the fields {', '.join(fields)}."

    def _render(self, observation: dict[str, Any]) -> str:
        shown = {k: v for k, v in observation.items() if k not in ("metadata", "reward", "done")}
        for name in TEXT_FIELDS:
            if isinstance(shown.get(name), str):
                return shown[name]
        strings = [v for v in shown.values() if isinstance(v, str)]
        if len(strings) == 1 and len(shown) == 1:
            return strings[0]
        return "\n".join(f"{k}: {v if isinstance(v, str) else json.dumps(v, default=str)}" for k, v in shown.items())

    def _foreign_info(self, result: Any) -> dict[str, Any]:
        valid = self._valid_actions()
        return {"system_prompt": self.system_prompt, "valid_actions": valid,
                "openenv_metadata": result.metadata or {}}

    def _foreign_reset(self, result: Any) -> tuple[str, dict[str, Any]]:
        valid = self._valid_actions()
        self.action_names = valid or None
        self.system_prompt = f"You act in an environment served at {self.url}. {self._instructions(valid)}"
        self._episode = {"return": 0.0, "length": 0, "invalid_count": 0}
        self._answers.reset()
        return self._render(result.observation), self._foreign_info(result)

    def _parse(self, text: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The action a foreign server gets for ``text`` (``None``: it fits none), and the legal
        action it named and the parser that read it (``action_name``, ``parser``)."""
        from textgym.wrappers.parsers import default_parser

        fields = self._action_fields()
        valid = self._valid_actions()
        record: dict[str, Any] = {"action_name": None, "parser": None}
        if len(fields) == 1:
            (name, spec), = fields.items()
            if valid:
                found = default_parser()(text, valid)
                if found is None or found.action_index is None:
                    return None, record
                value: Any = spec.get("enum", valid)[found.action_index] if "enum" in spec else found.action_name
                record.update(action_name=found.action_name, parser=found.parser)
            else:
                value = text.strip()
                record["parser"] = "text"
            kind = spec.get("type")
            if kind in ("integer", "number", "boolean") and isinstance(value, str):
                match = re.search(r"-?\d+(\.\d+)?", value) if kind != "boolean" else None
                if kind == "boolean":
                    value = value.strip().lower() == "true"
                elif match is None:
                    return None, record
                else:
                    value = int(float(match.group())) if kind == "integer" else float(match.group())
            action = {name: value}
        else:
            match = re.search(r"\{.*\}", text, re.DOTALL)
            try:
                action = json.loads(match.group()) if match else None
            except json.JSONDecodeError:
                action = None
            if not isinstance(action, dict):
                return None, record
            record["parser"] = "json"
        return action, record

    def _foreign_step(self, text: str):
        episode = self._episode
        action, named = self._parse(text)
        if action is not None:
            try:
                result = self._call("step", action)
            except _Rejected:
                action = None
        if action is None:  # not sent: asked again, then the episode ends (the §1 rule)
            verdict, record = self._answers.refuse(text, parser=named["parser"])
            episode["invalid_count"] = self._answers.invalid_count
            info = {"system_prompt": self.system_prompt, "valid_actions": self._valid_actions(),
                    "parse": record.to_dict()}
            obs = self._last
            if verdict.asks_again:
                info["feedback"] = self.rule.feedback_line(self._valid_actions() or ["a valid action"],
                                                           verdict.retries, text)
                obs = f"{self._last}\n{info['feedback']}"
            return self._foreign_end(obs, verdict.reward, verdict.ends_episode, info)
        record = self._answers.accept(text, action=action, **named)
        info = {**self._foreign_info(result), "parse": record.to_dict()}
        self._last = self._render(result.observation)
        reward = 0.0 if result.reward is None else float(result.reward)
        return self._foreign_end(self._last, reward, bool(result.done), info)

    def _foreign_end(self, obs: str, reward: float, done: bool, info: dict[str, Any]):
        from textgym.wrappers.episode_stats import EPISODE_STATS_KEY

        episode = self._episode
        episode["return"] += reward
        episode["length"] += 1
        if done:
            info[EPISODE_STATS_KEY] = {k: episode[k] for k in ("return", "length", "invalid_count")}
        return obs, reward, done, False, info


class _Rejected(Exception):
    """The server refused an action (OpenEnv's ``VALIDATION_ERROR``): the answer was invalid."""


def make(env_id: str, max_episode_steps: int | None = None, **kwargs: Any) -> gym.Env:
    """The env ``"openenv:URL"`` names (the first URL of a list); ``kwargs`` go to
    :class:`OpenEnvTextEnv`. ``max_episode_steps`` adds Gymnasium's ``TimeLimit`` (the server's
    own limit stays)."""
    env: gym.Env = OpenEnvTextEnv(urls_of(env_id)[0], **kwargs)
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    return env


def _process_rank() -> int:
    # The launcher's rank (torchrun, accelerate): each process opens its own share of sessions.
    return int(os.environ.get("RANK", "0") or 0)


def make_vec(env_id: str, num_envs: int, seed: int | None = None, **kwargs: Any):
    """``num_envs`` sessions (one per sub-env), spread over the URLs of ``env_id``."""
    from textgym.vector import TextVectorEnv

    urls = urls_of(env_id)
    offset = _process_rank() * num_envs
    envs = [lambda i=i: make(f"{PREFIX}{urls[(offset + i) % len(urls)]}", **kwargs) for i in range(num_envs)]
    return TextVectorEnv(envs, seed=seed)
