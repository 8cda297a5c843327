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
import math
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


class MalformedReply(ValueError):
    """A server's reply has a field that is not what OpenEnv's wire format promises."""


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


#: The longest text a reply may carry in one field (characters): a server answering more has gone wrong.
MAX_REPLY_TEXT = 1_000_000


def check_reply(payload: Any) -> dict[str, Any]:
    """``payload``, the ``data`` of an OpenEnv reset/step reply, if every field is what OpenEnv's
    wire format promises: ``observation`` an object, ``reward`` a finite number or null, ``done``
    a bool, ``metadata`` an object if present, no string longer than :data:`MAX_REPLY_TEXT`.

    Raises:
        MalformedReply: the field that is not (the reply is malformed: the session is dropped, like a
            dead server's, and the rollout loses one episode, not the run).

    Example:
        >>> check_reply({"observation": {}, "reward": "abc", "done": False})
        Traceback (most recent call last):
        ...
        textgym.remote.MalformedReply: reward is 'abc', not a number
    """
    if not isinstance(payload, dict):
        raise MalformedReply(f"the reply is {type(payload).__name__}, not an object")
    if not isinstance(payload.get("observation"), dict):
        raise MalformedReply(f"observation is {_shown(payload.get('observation'))}, not an object")
    reward = payload.get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        raise MalformedReply(f"reward is {_shown(reward)}, not a number")
    if reward is not None and not math.isfinite(reward):
        raise MalformedReply(f"reward is {reward}, not a finite number")
    if not isinstance(payload.get("done"), bool):
        raise MalformedReply("done is missing" if "done" not in payload else
                         f"done is {_shown(payload['done'])}, not true or false")
    if payload.get("metadata") is not None and not isinstance(payload["metadata"], dict):
        raise MalformedReply(f"metadata is {_shown(payload['metadata'])}, not an object")
    _check_sizes(payload, "reply")
    return payload


def _check_sizes(value: Any, where: str, depth: int = 0) -> None:
    if isinstance(value, str):
        if len(value) > MAX_REPLY_TEXT:
            raise MalformedReply(f"{where} is a string of {len(value):,} characters (at most {MAX_REPLY_TEXT:,})")
    elif depth > 32:
        raise MalformedReply(f"{where} is nested more than 32 levels deep")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_sizes(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_sizes(item, where, depth + 1)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _openenv_client():
    """OpenEnv's ``GenericEnvClient``, checking every reply with :func:`check_reply`."""
    try:
        from openenv.core.client_types import StepResult
        from openenv.core.generic_client import GenericEnvClient
    except ImportError:
        raise ImportError("OpenEnv envs need OpenEnv: pip install 'textgym[openenv]'") from None

    class CheckedClient(GenericEnvClient):
        def _parse_result(self, payload: dict[str, Any]) -> StepResult:
            check_reply(payload)
            return StepResult(observation=payload["observation"], reward=payload.get("reward"),
                              done=payload["done"], metadata=payload.get("metadata"))

    return CheckedClient


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


class Session:
    """One session on an OpenEnv server (opened at the first call, through OpenEnv's client);
    any failure closes it and raises :class:`OpenEnvError` naming the URL, and the next call
    opens a new one.

    Args:
        url: the server, ``http://HOST:PORT``.
        step_timeout: seconds a call may take, connecting included.
    """

    def __init__(self, url: str, step_timeout: float = DEFAULT_STEP_TIMEOUT):
        self.url, self.step_timeout = url, step_timeout
        self._client = None

    def call(self, what: str, *args: Any, **kwargs: Any):
        """``client.what(...)`` (``"reset"``, ``"step"``) on the session."""
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
            self.drop()
            raise OpenEnvError(_describe_error(self.url, exc, self.step_timeout)) from exc

    def drop(self) -> None:
        """Close the session (the next call opens a new one)."""
        client, self._client = self._client, None
        if client is not None:
            with suppress(Exception):  # the session is gone either way
                client.close()


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
        self.session = Session(self.url, self.step_timeout)
        self._textgym: bool | None = None   # decided by the first reset's reply
        self._schema: ActionModel | None = None
        self._legal: dict[str, Any] = {}   # a foreign server: this step's legal actions, {name: value sent}
        self._listed = False               # ... listed by the server with each observation
        self.action_names: list[str] | None = None
        self.history_window: int | None = None
        self.system_prompt = ""
        self._last = ""
        self._episode: dict[str, Any] = {}

    # --- the session -------------------------------------------------------------------------

    def _call(self, what: str, *args: Any, **kwargs: Any):
        return self.session.call(what, *args, **kwargs)

    def _drop_session(self) -> None:
        self.session.drop()

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
        record = (result.metadata or {}).get(_METADATA_KEY)
        if record is None:
            return None
        if not isinstance(record, dict):
            raise self._malformed(f"metadata[{_METADATA_KEY!r}] is not an object")
        for key in ("terminated", "truncated"):
            if key in record and not isinstance(record[key], bool):
                raise self._malformed(f"{key} is {_shown(record[key])}, not true or false")
        if not isinstance(record.get("info") or {}, dict) or not isinstance(record.get("env") or {}, dict):
            raise self._malformed("info or env is not an object")
        names = (record.get("env") or {}).get("action_names")
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise self._malformed(f"action_names is {_shown(names)}, not a list of strings")
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
            if not isinstance(schema, dict):
                raise MalformedReply("the action schema is not an object")
        except Exception as exc:
            raise OpenEnvError(f"cannot read the action schema at {self.url}/schema: {exc}") from exc
        return schema

    @property
    def action_model(self) -> ActionModel:
        """The server's action model, read from its ``/schema`` once."""
        if self._schema is None:
            self._schema = ActionModel.from_schema(self._fetch_schema())
        return self._schema

    def _instructions(self, legal: dict[str, Any]) -> str:
        from textgym.wrappers.answer_format import answer_format

        model = self.action_model
        names = list(legal)
        if self._listed:  # the legal actions change: they are listed with each observation
            return answer_format("word").instructions(names or ["0"], "one of the legal actions listed")
        if names:
            return answer_format("word").instructions(names)
        if model.answer_field is not None:
            return f"Answer with the {model.answer_field}."
        return f"Answer with a JSON object with the fields {', '.join(model.required or model.fields)}."

    def _render(self, result: Any) -> str:
        text = render_observation(result)
        if self._listed:
            text += f"\nlegal actions: {', '.join(self._legal) or '(none)'}"
        return text

    def _read_legal(self, result: Any) -> None:
        """This step's legal actions (``{name: value sent}``): the observation's ``legal_actions``
        (or its metadata's) if it lists them, else the values the action schema allows."""
        listed = _legal_actions_of(result)
        self._listed = listed is not None
        self._legal = (self.action_model.named(listed) if listed is not None
                       else self.action_model.schema_values())

    def _foreign_info(self, result: Any) -> dict[str, Any]:
        return {"system_prompt": self.system_prompt, "valid_actions": list(self._legal),
                "openenv_metadata": result.metadata or {}}

    def _foreign_reset(self, result: Any) -> tuple[str, dict[str, Any]]:
        self._read_legal(result)
        self.action_names = list(self._legal) or None
        self.system_prompt = f"You act in an environment served at {self.url}. {self._instructions(self._legal)}"
        self._episode = {"return": 0.0, "length": 0, "invalid_count": 0}
        self._answers.reset()
        return self._render(result), self._foreign_info(result)

    def _parse(self, text: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The action a foreign server gets for ``text`` (``None``: it fits none), and the legal
        action it named and the parser that read it (``action_name``, ``parser``)."""
        from textgym.wrappers.parsers import default_parser

        model = self.action_model
        record: dict[str, Any] = {"action_name": None, "parser": None}
        if model.answer_field is None:  # several fields to fill: a JSON object
            match = re.search(r"\{.*\}", text, re.DOTALL)
            try:
                action = json.loads(match.group()) if match else None
            except (json.JSONDecodeError, RecursionError):
                action = None
            if not isinstance(action, dict):
                return None, record
            record["parser"] = "json"
            return action, record
        if self._legal or self._listed:
            names = list(self._legal)
            found = default_parser()(text, names) if names else None
            if found is None or found.action_index is None:
                return None, record
            record.update(action_name=found.action_name, parser=found.parser)
            return {model.answer_field: self._legal[found.action_name]}, record
        value = model.coerce(text.strip())
        if value is None:
            return None, record
        record["parser"] = "text"
        return {model.answer_field: value}, record

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
            info = {"system_prompt": self.system_prompt, "valid_actions": list(self._legal),
                    "parse": record.to_dict()}
            obs = self._last
            if verdict.asks_again:
                info["feedback"] = self.rule.feedback_line(list(self._legal) or ["a valid action"],
                                                           verdict.retries, text)
                obs = f"{self._last}\n{info['feedback']}"
            return self._foreign_end(obs, verdict.reward, verdict.ends_episode, info)
        record = self._answers.accept(text, action=action, **named)
        self._read_legal(result)
        info = {**self._foreign_info(result), "parse": record.to_dict()}
        self._last = self._render(result)
        reward = 0.0 if result.reward is None else float(result.reward)
        return self._foreign_end(self._last, reward, result.done, info)

    def _foreign_end(self, obs: str, reward: float, done: bool, info: dict[str, Any]):
        from textgym.wrappers.episode_stats import EPISODE_STATS_KEY

        episode = self._episode
        episode["return"] += reward
        episode["length"] += 1
        if done:
            info[EPISODE_STATS_KEY] = {k: episode[k] for k in ("return", "length", "invalid_count")}
        return obs, reward, done, False, info


#: Observation (or metadata) fields that list the legal actions of a step (OpenEnv's games).
LEGAL_ACTION_FIELDS = ("legal_actions", "valid_actions", "available_actions")


def render_observation(result: Any) -> str:
    """A reply's observation as text: its text field if it has one (:data:`TEXT_FIELDS`), else a
    compact ``field: value`` rendering (boards as grids); the metadata when the observation has
    nothing else (an MCP env's reset). The legal actions are left out (the env lists them)."""
    observation = result.observation
    shown = {k: v for k, v in observation.items()
             if k not in ("metadata", "reward", "done") and k not in LEGAL_ACTION_FIELDS}
    if not any(v not in (None, "", [], {}) for v in shown.values()):
        metadata = observation.get("metadata") or result.metadata or {}
        shown = {k: v for k, v in metadata.items() if k not in LEGAL_ACTION_FIELDS and k != _METADATA_KEY}
    for name in TEXT_FIELDS:
        if isinstance(shown.get(name), str):
            return shown[name]
    strings = [v for v in shown.values() if isinstance(v, str)]
    if len(strings) == 1 and len(shown) == 1:
        return strings[0]
    return "\n".join(_render_field(k, v) for k, v in shown.items())


def _legal_actions_of(result: Any) -> list[Any] | None:
    """The legal actions a reply lists (ints or strings), or ``None`` when it lists none."""
    for where in (result.observation, result.observation.get("metadata"), result.metadata):
        if not isinstance(where, dict):
            continue
        for name in LEGAL_ACTION_FIELDS:
            listed = where.get(name)
            if isinstance(listed, list) and all(isinstance(a, (int, str)) and not isinstance(a, bool)
                                                for a in listed):
                return listed
    return None


def _render_field(name: str, value: Any) -> str:
    """``name: value``; a list of equal-length rows (a board) as a grid, one row a line."""
    if (isinstance(value, list) and value and all(isinstance(row, list) and row for row in value)
            and len({len(row) for row in value}) == 1
            and all(isinstance(x, (int, float, str)) for row in value for x in row)):
        cells = [[str(x) for x in row] for row in value]
        width = max(len(c) for row in cells for c in row)
        return f"{name}:\n" + "\n".join(" ".join(c.rjust(width) for c in row) for row in cells)
    return f"{name}: {value if isinstance(value, str) else json.dumps(value, default=str)}"


_NAMED_VALUE = re.compile(r"(-?\d+)\s*(?:[:=]|->)\s*([A-Za-z][\w-]*)")


class ActionModel:
    """A foreign server's action model, from the JSON schema it publishes at ``/schema``.

    ``answer_field`` is the one field an answer fills: the only required field (the others keep
    the server's defaults, e.g. OpenSpiel's ``game_name``), or the only field; ``None`` when
    several fields are required (the answer is then a JSON object). ``names`` maps the values of
    that field to readable names where the schema gives them: an ``enum`` of names (legal actions
    listed as indices into it), or a description such as ``"0: UP, 1: DOWN"``.
    """

    def __init__(self, fields: dict[str, dict[str, Any]], required: list[str]):
        self.fields = fields
        self.required = required
        if len(required) == 1:
            self.answer_field: str | None = required[0]
        elif not required and len(fields) == 1:
            self.answer_field = next(iter(fields))
        else:
            self.answer_field = None
        self.spec = fields.get(self.answer_field, {}) if self.answer_field else {}
        described = dict(_NAMED_VALUE.findall(self.spec.get("description") or ""))
        self.names = {int(k): v for k, v in described.items()} if len(set(described.values())) == len(described) else {}
        self.is_mcp = {"tool_name", "arguments"} <= set(fields)

    @classmethod
    def from_schema(cls, schema: dict[str, Any]) -> ActionModel:
        defs = schema.get("$defs") or {}
        fields = {}
        for name, spec in (schema.get("properties") or {}).items():
            if name == "metadata" or not isinstance(spec, dict):
                continue
            ref = (spec.get("$ref") or "").rsplit("/", 1)[-1]
            fields[name] = {**defs.get(ref, {}), **spec} if ref else spec
        required = [n for n in schema.get("required") or [] if n in fields]
        return cls(fields, required)

    def named(self, legal: list[Any]) -> dict[str, Any]:
        """``{name: value}`` of legal actions as a server lists them (values, or indices into an enum)."""
        enum = self.spec.get("enum")
        found: dict[str, Any] = {}
        for value in legal:
            if isinstance(value, int) and enum and not any(isinstance(e, int) for e in enum) and 0 <= value < len(enum):
                found[str(enum[value])] = enum[value]
            elif isinstance(value, int) and value in self.names:
                found[self.names[value]] = value
            else:
                found[str(value)] = value
        return found

    def schema_values(self) -> dict[str, Any]:
        """``{name: value}`` of every value the answer field allows, when the schema lists them
        (an enum, a bool, a small integer range); ``{}`` otherwise."""
        spec = self.spec
        if self.answer_field is None:
            return {}
        if "enum" in spec:
            return {str(v): v for v in spec["enum"]}
        if spec.get("type") == "boolean":
            return {"true": True, "false": False}
        low, high = spec.get("minimum"), spec.get("maximum")
        if spec.get("type") == "integer" and low is not None and high is not None and high - low < _SMALL_RANGE:
            return self.named(list(range(int(low), int(high) + 1)))
        if self.names:
            return {name: value for value, name in sorted(self.names.items())}
        return {}

    def coerce(self, text: str) -> Any:
        """The answer field's value from free text (``None``: the text is no such value)."""
        kind = self.spec.get("type")
        if kind == "boolean":
            return text.lower() == "true" if text.lower() in ("true", "false") else None
        if kind in ("integer", "number"):
            match = re.search(r"-?\d+(\.\d+)?", text)
            if match is None:
                return None
            return int(float(match.group())) if kind == "integer" else float(match.group())
        return text


class MCPToolbox:
    """An OpenEnv MCP environment's tools (a :class:`textgym.tools.Toolbox`): listed with OpenEnv's
    ``ListToolsAction`` and called with its ``CallToolAction`` on one session. A server that dies
    or answers garbage raises :class:`OpenEnvError` (the episode is lost, as for any served env).

    Args:
        url: the server, ``http://HOST:PORT``.
        step_timeout: seconds a reset or tool call may take.
    """

    def __init__(self, url: str, step_timeout: float = DEFAULT_STEP_TIMEOUT):
        self.url = url
        self.session = Session(url, step_timeout)
        self._schemas: list[dict[str, Any]] | None = None

    def schemas(self) -> list[dict[str, Any]]:
        if self._schemas is None:
            result = self.session.call("step", {"type": "list_tools"})
            tools = result.observation.get("tools")
            if not (isinstance(tools, list) and tools and all(
                    isinstance(t, dict) and isinstance(t.get("name"), str)
                    and isinstance(t.get("input_schema", {}), dict) for t in tools)):
                self.session.drop()
                raise OpenEnvError(f"malformed reply from OpenEnv server {self.url}: the tool list is "
                                   f"{_shown(tools)}, not a list of tools")
            self._schemas = [{"type": "function", "function": {
                "name": t["name"], "description": str(t.get("description") or ""),
                "parameters": t.get("input_schema") or {"type": "object", "properties": {}}}} for t in tools]
        return self._schemas

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> str:
        kwargs: dict[str, Any] = {} if seed is None else {"seed": int(seed)}
        if options:
            kwargs["options"] = options
        return render_observation(self.session.call("reset", **kwargs))

    def call(self, name: str, arguments: dict[str, Any]):
        from textgym.tools import ToolResult

        try:
            result = self.session.call("step", {"type": "call_tool", "tool_name": name, "arguments": arguments})
        except _Rejected as refused:
            return ToolResult(f"Error: {refused}")
        observation = result.observation
        error = observation.get("error")
        if isinstance(error, dict):
            text = f"Error: {error.get('message', error)}"
        else:
            text = _tool_result_text(observation.get("result"))
        return ToolResult(text, 0.0 if result.reward is None else float(result.reward), result.done)

    def reward(self, answer: str) -> float:
        return 0.0  # an MCP env rewards its tool calls; a final answer is not sent to it

    def close(self) -> None:
        self.session.drop()


def _tool_result_text(result: Any) -> str:
    """An MCP ``CallToolResult`` (as OpenEnv sends it) as text: its text contents, else its data."""
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        texts = [c.get("text") for c in result["content"] if isinstance(c, dict) and isinstance(c.get("text"), str)]
        if texts:
            return ("Error: " if result.get("is_error") else "") + "\n".join(texts)
        if "data" in result:
            result = result["data"]
    return result if isinstance(result, str) else json.dumps(result, default=str)


def serves_mcp(url: str, timeout: float = DEFAULT_STEP_TIMEOUT) -> bool:
    """Whether the server at ``url`` is an MCP environment (its action schema is OpenEnv's
    ``CallToolAction``); ``False`` when its schema cannot be read (the env says why at reset)."""
    import requests

    try:
        reply = requests.get(f"{url}/schema", timeout=timeout, headers=_auth_headers())
        reply.raise_for_status()
        return ActionModel.from_schema(reply.json()["action"]).is_mcp
    except Exception:  # noqa: BLE001 - unreachable or not OpenEnv: the text env reports it at reset
        return False


class _Rejected(Exception):
    """The server refused an action (OpenEnv's ``VALIDATION_ERROR``): the answer was invalid."""


def make(env_id: str, max_episode_steps: int | None = None, **kwargs: Any) -> gym.Env:
    """The env ``"openenv:URL"`` names (the first URL of a list); ``kwargs`` go to
    :class:`OpenEnvTextEnv`. ``max_episode_steps`` adds Gymnasium's ``TimeLimit`` (the server's
    own limit stays)."""
    url = urls_of(env_id)[0]
    if serves_mcp(url, kwargs.get("step_timeout", DEFAULT_STEP_TIMEOUT)):
        return mcp_env(url, max_episode_steps=max_episode_steps, **kwargs)
    env: gym.Env = OpenEnvTextEnv(url, **kwargs)
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    return env


def mcp_env(url: str, max_episode_steps: int | None = None, step_timeout: float = DEFAULT_STEP_TIMEOUT,
            **kwargs: Any) -> gym.Env:
    """An OpenEnv MCP server as a tool env (:func:`textgym.tools.tool_env` on :class:`MCPToolbox`);
    ``kwargs`` go to :class:`textgym.tools.ToolEnv`."""
    from textgym.tools import tool_env

    # the session's own timeout fires first: a slow server loses the episode like any served env
    env = tool_env(MCPToolbox(url, step_timeout), step_timeout=step_timeout + 5.0, **kwargs)
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
