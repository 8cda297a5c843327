"""Tool-calling envs as text envs: ``textgym.tool_env(...)``.

The model's actions are tool calls. A tool env is made from

* a TRL ``environment_factory``-style class or instance: its public methods with typed arguments
  and an ``Args:`` docstring are the tools, ``reset(**kwargs)`` returns the first observation
  (the task), ``get_reward()`` the episode's reward (given the final answer if its signature
  takes an argument). The same class serves TRL's ``GRPOTrainer(environment_factory=...)``;
* plain functions: ``tool_env(tools=[add, multiply], reset=..., reward=...)``;
* an OpenEnv MCP server (``textgym.make("openenv:URL")`` detects one; :mod:`textgym.remote`).

The system prompt lists the tools the way a tool-calling chat template renders them
(``transformers.utils.get_json_schema`` describes each tool, the template given as
``chat_template``, TRL's Qwen2.5 one by default, renders them). An answer is read as a tool
call in the native format (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) or as a
plain JSON object with ``name`` and ``arguments``; the arguments are checked against the tool's
JSON schema (``"3"`` becomes ``3`` where an integer is expected). The tool's result is the next
observation (``<tool_response>...</tool_response>``, as the template shows a tool message); an
answer with no tool call is the final answer and ends the episode with the reward.

Faults are answers, not crashes: an unknown tool, bad arguments or broken JSON is an invalid
answer (the env's invalid-answer policy, the validation message as the feedback line); a tool
that raises returns its error as the observation; one that runs past ``step_timeout`` seconds
returns a timeout message; results are cut at ``max_result_chars`` and NUL bytes removed; after
``max_tool_calls`` calls (a call refused without a retry counts too) the episode is truncated
(reward as for a final answer).

Example:
    >>> import textgym
    >>> def add(a: int, b: int) -> int:
    ...     '''Add two integers.
    ...
    ...     Args:
    ...         a: the first number
    ...         b: the second number
    ...     '''
    ...     return a + b
    >>> env = textgym.tool_env(tools=[add], reset=lambda: "What is 2 + 3?",
    ...                        reward=lambda answer: float(answer.strip() == "5"))
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step('<tool_call>{"name": "add", "arguments": {"a": 2, "b": "3"}}</tool_call>')
    >>> obs, info["parse"]["action"]
    ('<tool_response>\\n5\\n</tool_response>', {'name': 'add', 'arguments': {'a': 2, 'b': 3}})
    >>> env.step("5")[1:3]
    (1.0, True)
"""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import gymnasium as gym

from textgym.outcomes import mean_and_stderr
from textgym.spaces import TextSpace

__all__ = ["DEFAULT_MAX_RESULT_CHARS", "DEFAULT_MAX_TOOL_CALLS", "FunctionToolbox", "ObjectToolbox",
           "ToolCall", "ToolEnv", "ToolResult", "Toolbox", "is_tool_env_info", "is_valid_tool_call",
           "parse_tool_call", "tool_call_rates", "tool_env", "tool_prompt"]

#: Tool calls an episode may make before it is truncated.
DEFAULT_MAX_TOOL_CALLS = 8
#: A tool result longer than this (characters) is cut, saying how much was left out.
DEFAULT_MAX_RESULT_CHARS = 4000
#: Seconds a tool call may take before its result is a timeout message.
DEFAULT_STEP_TIMEOUT = 30.0
#: Methods of an environment class that are not tools (TRL's environment_factory protocol).
NOT_TOOLS = frozenset({"reset", "get_reward", "close", "step", "render"})


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gave: its text, and (a served env) the server's reward and end of episode."""

    text: str
    reward: float = 0.0
    done: bool = False


class Toolbox(Protocol):
    """The tools of one episode at a time: what :class:`ToolEnv` plays."""

    def schemas(self) -> list[dict[str, Any]]:
        """The tools as JSON schemas (``{"type": "function", "function": {name, description, parameters}}``)."""

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> str:
        """Start an episode; returns its first observation (the task)."""

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run one (validated) tool call; an exception is the tool's error."""

    def reward(self, answer: str) -> float:
        """The episode's reward for its final answer (``""`` when the tool calls ran out)."""

    def close(self) -> None:
        """Release what the toolbox holds."""


def _schema_of(function: Callable[..., Any], where: str) -> dict[str, Any]:
    from transformers.utils import get_json_schema

    try:
        return get_json_schema(function)
    except Exception as error:  # noqa: BLE001 - transformers' own message says which part is missing
        raise TypeError(f"{where} cannot be a tool: {error} (a tool needs typed arguments and a "
                        "docstring with an Args: section)") from None


def _takes_an_argument(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)


def _reset_kwargs(function: Callable[..., Any], seed: int | None, options: dict[str, Any] | None) -> dict[str, Any]:
    """The keyword arguments a ``reset`` takes: ``seed`` and the options, where its signature has them."""
    kwargs = {"seed": seed, **(options or {})}
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in parameters}


class FunctionToolbox:
    """Plain functions as tools, with a ``reset`` (the task) and a ``reward`` (of the final answer).

    Args:
        tools: the tool functions (typed arguments, a docstring with ``Args:``).
        reset: returns the first observation; takes ``seed`` (and options) if its signature does.
        reward: the episode's reward; takes the final answer if its signature does.
    """

    def __init__(self, tools: Sequence[Callable[..., Any]], reset: Callable[..., Any] | None = None,
                 reward: Callable[..., Any] | None = None):
        if not tools:
            raise ValueError("a tool env needs at least one tool")
        self.functions = {}
        self._schemas = []
        for function in tools:
            schema = _schema_of(function, getattr(function, "__name__", repr(function)))
            self.functions[schema["function"]["name"]] = function
            self._schemas.append(schema)
        self._reset, self._reward = reset, reward

    def schemas(self) -> list[dict[str, Any]]:
        return self._schemas

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> str:
        if self._reset is None:
            return ""
        first = self._reset(**_reset_kwargs(self._reset, seed, options))
        return "" if first is None else str(first)

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(_result_text(self.functions[name](**arguments)))

    def reward(self, answer: str) -> float:
        if self._reward is None:
            return 0.0
        return float(self._reward(answer) if _takes_an_argument(self._reward) else self._reward())

    def close(self) -> None:
        pass


class ObjectToolbox(FunctionToolbox):
    """A TRL ``environment_factory``-style env: its public methods (other than ``reset``,
    ``get_reward``, ``close``) are the tools; a class is instantiated once per toolbox.

    Args:
        environment: the class (called with no arguments) or an instance.
    """

    def __init__(self, environment: Any):
        self.environment = environment() if isinstance(environment, type) else environment
        methods = [getattr(self.environment, name) for name in dir(type(self.environment))
                   if not name.startswith("_") and name not in NOT_TOOLS
                   and callable(getattr(type(self.environment), name, None))]
        where = type(self.environment).__name__
        if not methods:
            raise ValueError(f"{where} has no public methods to call as tools")
        super().__init__(methods, reset=getattr(self.environment, "reset", None),
                         reward=getattr(self.environment, "get_reward", None))

    def close(self) -> None:
        close = getattr(self.environment, "close", None)
        if callable(close):
            close()


def _result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


@dataclass(frozen=True)
class ToolCall:
    """A tool call read from an answer (:func:`parse_tool_call`): the tool's name and arguments,
    the format it was written in (``"tool_call"``: the native tags, ``"json"``: a plain object),
    or ``error``: why the call that was there could not be read."""

    name: str | None
    arguments: dict[str, Any]
    parser: str
    error: str | None = None


_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def parse_tool_call(text: str) -> ToolCall | None:
    """The first tool call in ``text``, or ``None`` when it has none (a final answer).

    Example:
        >>> parse_tool_call('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
        ToolCall(name='add', arguments={'a': 1}, parser='tool_call', error=None)
        >>> parse_tool_call('{"name": "add", "arguments": {"a": 1}}').parser
        'json'
        >>> parse_tool_call("<tool_call>{name: add}</tool_call>").error
        'the tool call is not JSON: Expecting property name enclosed in double quotes (column 2)'
        >>> parse_tool_call("The answer is 3.") is None
        True
    """
    tagged = _TOOL_CALL.search(text)
    if tagged is not None:
        try:
            call = json.loads(tagged.group(1))
        except (json.JSONDecodeError, RecursionError) as error:
            reason = f"{error.msg} (column {error.colno})" if isinstance(error, json.JSONDecodeError) else "nested too deep"
            return ToolCall(None, {}, "tool_call", f"the tool call is not JSON: {reason}")
        return _read_call(call, "tool_call")
    start = text.find("{")
    if start < 0:
        return None
    try:
        call, _ = json.JSONDecoder().raw_decode(text[start:])
    except (json.JSONDecodeError, RecursionError):
        return None  # no JSON object: free text, the final answer
    if not isinstance(call, dict) or "name" not in call:
        return None
    return _read_call(call, "json")


def _read_call(call: Any, parser: str) -> ToolCall:
    if not isinstance(call, dict):
        return ToolCall(None, {}, parser, 'a tool call is a JSON object {"name": ..., "arguments": {...}}')
    name = call.get("name")
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            pass
    if not isinstance(name, str) or not name:
        return ToolCall(None, {}, parser, "the tool call has no name")
    if not isinstance(arguments, dict):
        return ToolCall(name, {}, parser, "the arguments are not a JSON object")
    return ToolCall(name, arguments, parser)


def check_arguments(arguments: dict[str, Any], parameters: dict[str, Any],
                    tool: str = "the tool") -> tuple[dict[str, Any], str | None]:
    """``arguments`` checked against a tool's JSON schema, with safe coercions (``"3"`` -> 3 for an
    integer, ``3`` -> ``3.0`` for a number, ``"true"`` -> ``True``); ``(arguments, None)`` or
    ``(arguments, the validation message)``.

    Example:
        >>> schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
        >>> check_arguments({"a": "7"}, schema)
        ({'a': 7}, None)
        >>> check_arguments({"a": "seven"}, schema)[1]
        "argument a: 'seven' is not of type 'integer'"
    """
    import jsonschema

    properties = parameters.get("properties") or {}
    unknown = [name for name in arguments if name not in properties]
    if unknown and parameters.get("additionalProperties") is not True:
        takes = ", ".join(properties) or "no arguments"
        return arguments, f"unknown argument {unknown[0]!r}; {tool} takes {takes}"
    coerced = {name: _coerce(value, properties.get(name) or {}) for name, value in arguments.items()}
    errors = sorted(jsonschema.Draft202012Validator(parameters).iter_errors(coerced), key=lambda e: list(e.path))
    if not errors:
        return coerced, None
    error = errors[0]
    where = f"argument {'.'.join(str(p) for p in error.path)}: " if error.path else ""
    return coerced, f"{where}{error.message}"[:300]


def _coerce(value: Any, spec: dict[str, Any]) -> Any:
    kind = spec.get("type")
    if isinstance(value, str):
        text = value.strip()
        if kind == "integer" and re.fullmatch(r"[-+]?\d+", text):
            return int(text)
        if kind == "number" and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
            return float(text)
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def tool_prompt(description: str, schemas: list[dict[str, Any]], chat_template: Any = None) -> str:
    """The system prompt: ``description`` and the tools, as the chat template renders a system
    message with ``tools=`` (``chat_template``: a template string, a tokenizer with a tool-calling
    template, or ``None`` for TRL's Qwen2.5 template, the one TRL gives ChatML models without one).
    Only the system message's text is kept: the policy wraps it in the model's own template."""
    from transformers.utils.chat_template_utils import render_jinja_template

    template = getattr(chat_template, "chat_template", chat_template)
    if template is None:
        from trl.chat_template_utils import qwen2_5_chat_template as template
    mark = "\x00TEXTGYM-SYSTEM\x00"

    def system(tools: list[dict[str, Any]] | None) -> str:
        rendered, _ = render_jinja_template([[{"role": "system", "content": mark}]], tools=tools,
                                            chat_template=template)
        return rendered[0]

    plain, with_tools = system(None), system(schemas)
    before, after = plain.split(mark)
    if not with_tools.startswith(before) or not with_tools.endswith(after) or mark not in with_tools:
        raise ValueError("the chat template does not render tools in its system message")
    body = with_tools[len(before):len(with_tools) - len(after)]
    return body.replace(mark, description)


class ToolEnv(gym.Env):
    """A text env whose actions are tool calls on a :class:`Toolbox` (see the module docstring).

    ``info["parse"]`` records ``action`` (``{"name", "arguments"}``, or ``{"answer"}`` for the final
    answer), ``action_name`` (the tool), ``parser`` and ``valid``; ``info["tool_result"]`` the
    result shown; ``info["tools"]`` the tools' JSON schemas.

    Args:
        toolbox: the tools.
        description: the task's description, before the tool list in the system prompt.
        max_tool_calls: calls per episode before it is truncated.
        step_timeout: seconds a tool call may take.
        max_result_chars: a longer result is cut.
        chat_template: how the tools are listed (:func:`tool_prompt`).
        invalid_policy, invalid_penalty, max_retries, retry_fallback, feedback: the invalid-answer
            rule (:class:`textgym.wrappers.invalid_answer.InvalidAnswerRule`; ``"retry"`` by
            default, the validation message as the feedback line). ``"penalty"``/``"default"``
            make no call and show the message as the observation.
        render_mode: ``"ansi"``: ``render()`` returns the last observation.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(self, toolbox: Toolbox, *, description: str = "Use the tools to solve the task, "
                 "then give your final answer without a tool call.",
                 max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS, step_timeout: float = DEFAULT_STEP_TIMEOUT,
                 max_result_chars: int = DEFAULT_MAX_RESULT_CHARS, chat_template: Any = None,
                 invalid_policy: str = "retry", invalid_penalty: float = -1.0, max_retries: int = 2,
                 retry_fallback: str = "penalty", feedback: str = "Invalid tool call: {error}",
                 render_mode: str | None = None):
        from textgym.wrappers.invalid_answer import AnswerCounter, InvalidAnswerRule

        if not (isinstance(max_tool_calls, int) and max_tool_calls >= 1):
            raise ValueError(f"max_tool_calls must be an int >= 1, got {max_tool_calls!r}")
        if not step_timeout > 0 or not max_result_chars >= 1:
            raise ValueError("step_timeout and max_result_chars must be > 0")
        self.toolbox = toolbox
        self.rule = InvalidAnswerRule(policy=invalid_policy, penalty=invalid_penalty, max_retries=max_retries,
                                      retry_fallback=retry_fallback, feedback=feedback)
        self._answers = AnswerCounter(self.rule)
        self.max_tool_calls, self.step_timeout = max_tool_calls, float(step_timeout)
        self.max_result_chars = int(max_result_chars)
        self.tools = {schema["function"]["name"]: schema for schema in toolbox.schemas()}
        self.system_prompt = tool_prompt(description, list(self.tools.values()), chat_template)
        self.action_names = None  # free text: score mode has nothing to rank
        self.observation_space, self.action_space = TextSpace(max_length=1_000_000), TextSpace(max_length=1_000_000)
        self.render_mode = render_mode
        self._calls = 0
        self._last = ""

    def _info(self, **more: Any) -> dict[str, Any]:
        return {"system_prompt": self.system_prompt, "valid_actions": [], "tools": list(self.tools.values()), **more}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._answers.reset()
        self._calls = 0
        if seed is None:  # the next of the env's seeded stream, as gymnasium's check_env expects
            seed = int(self.np_random.integers(2**31 - 1))
        self._last = _clean(self.toolbox.reset(seed, options), self.max_result_chars)
        return self._last, self._info()

    def step(self, action: Any):
        from textgym.wrappers.invalid_answer import as_answer_text

        text = as_answer_text(action)
        call = parse_tool_call(text)
        if call is None:  # no tool call: the final answer
            record = self._answers.accept(text, action={"answer": text}, action_name=None, parser="final")
            return self._end(text, self._last, record, truncated=False)
        arguments, error = call.arguments, call.error
        if error is None and call.name not in self.tools:
            error = f"unknown tool {call.name!r}; the tools are {', '.join(self.tools)}"
        if error is None:
            parameters = self.tools[call.name]["function"].get("parameters") or {}
            arguments, error = check_arguments(call.arguments, parameters, call.name)
        if error is not None:
            return self._invalid(text, call, error)
        self._calls += 1
        record = self._answers.accept(text, action={"name": call.name, "arguments": arguments},
                                      action_name=call.name, parser=call.parser)
        result = self._run(call.name, arguments)
        self._last = f"<tool_response>\n{result.text}\n</tool_response>"
        info = self._info(parse=record.to_dict(), tool_result=result.text)
        if result.done:
            return self._last, float(result.reward), True, False, info
        if self._calls >= self.max_tool_calls:
            return self._end("", self._last, record, truncated=True, reward=float(result.reward))
        return self._last, float(result.reward), False, False, info

    def _end(self, answer: str, obs: str, record: Any, truncated: bool, reward: float = 0.0):
        try:
            answer_reward = float(self.toolbox.reward(answer))
        except Exception as error:  # a user's reward function failing is their bug, said once
            raise RuntimeError(f"the tool env's reward function failed: {type(error).__name__}: {error}") from error
        return (obs, reward + answer_reward, not truncated, truncated,
                self._info(parse=record.to_dict(), answer_reward=answer_reward))

    def _invalid(self, text: str, call: ToolCall, error: str):
        import dataclasses

        verdict, record = self._answers.refuse(text, parser=call.parser, error=None)
        record = dataclasses.replace(record, action={"name": call.name, "arguments": call.arguments},
                                     action_name=None)
        line = self._feedback(error, verdict.retries)
        info = self._info(parse=record.to_dict(), feedback=line)
        if verdict.asks_again:
            return f"{self._last}\n{line}", verdict.reward, False, False, info
        if verdict.ends_episode:
            return self._last, verdict.reward, True, False, info
        self._last = line  # no call was made: the message is what the model sees
        # A refused call counts against the cap as a call does: a model that writes invalid calls
        # forever ends its episode at max_tool_calls, not at the rollout's step cap.
        self._calls += 1
        if self._calls >= self.max_tool_calls:
            return self._end("", line, record, truncated=True, reward=float(verdict.reward))
        return line, verdict.reward, False, False, info

    def _feedback(self, error: str, retries: int) -> str:
        """The rule's feedback line with ``{error}`` (the validation message), ``{tools}`` and the
        rule's own fields filled in."""
        try:
            return self.rule.feedback.format(error=error, tools=", ".join(self.tools), valid_actions=", ".join(self.tools),
                                             retries_left=max(0, self.rule.max_retries - retries), answer="")
        except (KeyError, IndexError, ValueError):  # a user template with other fields
            return self.rule.feedback

    def _run(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """The tool's result, its error as text, or a timeout message; never raises."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["result"] = self.toolbox.call(name, arguments)
            except Exception as error:  # noqa: BLE001 - a tool's error is its result
                box["error"] = error

        worker = threading.Thread(target=run, name=f"tool {name}", daemon=True)
        worker.start()
        worker.join(self.step_timeout)
        if worker.is_alive():  # a thread cannot be killed: it is left to finish on its own
            return ToolResult(f"Error: the tool {name} did not return within {self.step_timeout:g} s")
        if "error" in box:
            error = box["error"]
            from textgym.vector import SubEnvError

            if isinstance(error, SubEnvError):  # the server behind the tools is gone: the episode is lost
                raise error
            return ToolResult(_clean(f"Error: {type(error).__name__}: {error}", self.max_result_chars))
        result = box["result"]
        return ToolResult(_clean(result.text, self.max_result_chars), result.reward, result.done)

    def render(self) -> str | None:
        return self._last if self.render_mode == "ansi" else None

    def close(self) -> None:
        self.toolbox.close()


def _clean(text: Any, limit: int) -> str:
    """Text for the model: NUL bytes removed, cut at ``limit`` characters saying how much was left out."""
    text = _result_text(text).replace("\x00", "")
    if len(text) > limit:
        text = f"{text[:limit]}\n[... {len(text) - limit:,} more characters cut]"
    return text


def is_tool_env_info(info: dict[str, Any] | None) -> bool:
    """Whether a step's ``info`` comes from a tool env (:class:`ToolEnv` lists its tools in every info)."""
    return isinstance(info, dict) and isinstance(info.get("tools"), list)


def is_valid_tool_call(parse: dict[str, Any] | None) -> bool:
    """Whether a step's ``info["parse"]`` record is a tool call that the env ran: a valid answer
    naming a tool (not the final answer, not a call refused by the schema check)."""
    if not isinstance(parse, dict) or parse.get("valid") is not True:
        return False
    action = parse.get("action")
    return isinstance(action, dict) and isinstance(action.get("name"), str)


def tool_call_rates(episodes: Sequence[tuple[int, int, float | None]]) -> dict[str, float]:
    """Tool use over episodes, each given as ``(valid tool calls, decisions, answer reward)``:
    ``valid_tool_call_rate`` (valid tool calls per decision, as ``invalid_rate`` counts invalid
    answers), ``tool_use_rate`` (episodes with at least one valid tool call) and its standard
    error (``sqrt(p (1 - p) / (n - 1))``, as ``return_stderr`` is computed), and
    ``answer_reward_mean`` with its standard error: the reward of the final answer alone
    (``info["answer_reward"]``, tool results and invalid-answer penalties apart; ``None``, an
    episode ended without one, counts 0), for a 0/1 scorer the rate of solved episodes.

    Example:
        >>> rates = tool_call_rates([(2, 3, 1.0), (0, 1, 0.0), (1, 2, 1.0), (0, 2, None)])
        >>> rates["valid_tool_call_rate"], rates["tool_use_rate"], round(rates["tool_use_rate_stderr"], 3)
        (0.375, 0.5, 0.289)
        >>> rates["answer_reward_mean"], round(rates["answer_reward_stderr"], 3)
        (0.5, 0.289)
    """
    if not episodes:
        return {}
    calls, decisions = sum(e[0] for e in episodes), sum(e[1] for e in episodes)
    used, used_stderr = mean_and_stderr([float(e[0] > 0) for e in episodes])
    answer_reward, answer_stderr = mean_and_stderr([0.0 if e[2] is None else float(e[2]) for e in episodes])
    return {"valid_tool_call_rate": calls / max(1, decisions), "tool_use_rate": used,
            "tool_use_rate_stderr": used_stderr, "answer_reward_mean": answer_reward,
            "answer_reward_stderr": answer_stderr}


def tool_env(environment: Any = None, *, tools: Sequence[Callable[..., Any]] | None = None,
             reset: Callable[..., Any] | None = None, reward: Callable[..., Any] | None = None,
             history: int = 0, **kwargs: Any) -> gym.Env:
    """A text env whose actions are tool calls (see the module docstring).

    Args:
        environment: a TRL ``environment_factory``-style class or instance (its public methods
            are the tools), or a :class:`Toolbox`; or ``None`` with ``tools``.
        tools: plain functions as the tools (with ``reset`` and ``reward``).
        reset: the first observation (``tools`` only).
        reward: the final answer's reward (``tools`` only).
        history: if > 0, the model sees the last ``history`` turns (its calls and their results:
            :class:`~textgym.wrappers.History`).
        **kwargs: :class:`ToolEnv`'s settings (``max_tool_calls``, ``step_timeout``,
            ``invalid_policy``, ``chat_template``, ``render_mode``...).
    """
    from textgym.wrappers import EpisodeStats, History, RenderText

    if (environment is None) == (tools is None):
        raise TypeError("tool_env takes an environment (class or instance) or tools=[...], not both")
    if tools is not None:
        toolbox: Any = FunctionToolbox(tools, reset=reset, reward=reward)
    elif all(hasattr(environment, m) for m in ("schemas", "call", "reward", "reset")):
        toolbox = environment
    else:
        toolbox = ObjectToolbox(environment)
    render_mode = kwargs.get("render_mode")
    env: gym.Env = EpisodeStats(ToolEnv(toolbox, **kwargs))
    if history:
        env = History(env, window=int(history))
    if render_mode == "ansi":
        env = RenderText(env)
    return env
