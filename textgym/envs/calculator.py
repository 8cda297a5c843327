"""textgym/Calculator-v0: reasoning-gym's ``basic_arithmetic`` with a calculator, a tool env.

One class, :class:`ArithmeticCalculator`, serves both ways of training on tool calls: it is a
TRL ``environment_factory`` (``GRPOTrainer(environment_factory=ArithmeticCalculator)``: its
public methods ``add``, ``subtract``, ``multiply`` and ``divide`` are the tools, ``reset``
returns the question, ``get_reward`` the score) and textgym's tool env
(``textgym.tool_env(ArithmeticCalculator)``, registered as ``textgym/Calculator-v0``).

``reset(seed=s)`` asks item ``s`` of reasoning-gym's ``basic_arithmetic`` (as
``reasoning_gym/basic_arithmetic`` does, so the held-out seeds are the same items); the answer is
scored by the dataset's own ``score_answer``. The final answer is the text the model gives
without a tool call (an ``<answer>`` tag is read if there is one); TRL, which does not hand the
final answer to the env, scores the last calculator result.

The reference player ``scripted`` (:func:`scripted_calculator`, ``textgym train --sft-player
scripted``) uses the tools as the task asks: one call per operation of the question in evaluation
order, then the result in ``<answer>`` tags; :func:`tool_conversation` gives the same play of one
item as plain data (and as chat messages), for building SFT data outside textgym (TRL).

Example:
    >>> import textgym
    >>> env = textgym.make("textgym/Calculator-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs
    'Calculate -33 * -22 - -8.'
    >>> _ = env.step('<tool_call>{"name": "multiply", "arguments": {"a": -33, "b": -22}}</tool_call>')
    >>> obs, *_ = env.step('<tool_call>{"name": "subtract", "arguments": {"a": 726, "b": -8}}</tool_call>')
    >>> obs.splitlines()[-2]
    '734'
    >>> env.step("<answer>734</answer>")[1:3]
    (1.0, True)
"""

from __future__ import annotations

import ast
import json
import operator
from typing import Any

from textgym.registry import TrainingDefaults

__all__ = ["DEFAULT_CONFIG", "ArithmeticCalculator", "make_calculator", "scripted_calculator", "solution_calls",
           "task_prompt", "tool_conversation"]

#: basic_arithmetic's settings: two or three terms of up to two digits, + - * only, integers.
#: Parentheses stay allowed: without them reasoning-gym 0.1.25 answers "75 + 19 * 74" with
#: 6956, (75 + 19) * 74 (9 of 200 items), so a correct answer would score 0.
DEFAULT_CONFIG = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2,
                  "operators": ("+", "-", "*"), "allow_parentheses": True, "allow_negation": False}

_DESCRIPTION = ("Solve the arithmetic task with the calculator tools, one call at a time, then give "
                "the final result alone in <answer></answer> tags, without a tool call.")


def task_prompt() -> str:
    """What the model is asked to do (the tool env's description), as TRL's prompt: TRL appends
    ``reset()``'s question to it directly, hence the blank line."""
    return _DESCRIPTION + "\n\n"


def _number(x: float) -> int | float:
    """An integral result as an int (``60``, not ``60.0``): what basic_arithmetic's answers look like."""
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else x


class ArithmeticCalculator:
    """A calculator for reasoning-gym's ``basic_arithmetic`` items (see the module docstring).

    Args:
        **config: fields of basic_arithmetic's config (default :data:`DEFAULT_CONFIG`).
    """

    def __init__(self, **config: Any):
        self.config = {**DEFAULT_CONFIG, **config}
        self._data: Any = None
        self._entry: dict[str, Any] | None = None
        self.last_result: str = ""
        self.question: str = ""
        """The item's question (what ``reset`` returned)."""

    def reset(self, seed: int | None = None, **kwargs: Any) -> str:
        import random

        import reasoning_gym

        item_seed = int(seed) if seed is not None else random.randrange(2**31 - 1)
        self._data = reasoning_gym.create_dataset("basic_arithmetic", **self.config, seed=item_seed, size=1)
        self._entry = self._data[0]
        self.last_result = ""
        self.question = str(self._entry["question"]).split("\n")[0]
        return self.question

    def _result(self, value: float) -> str:
        self.last_result = str(_number(round(value, 6)))
        return self.last_result

    def add(self, a: float, b: float) -> str:
        """Add two numbers.

        Args:
            a: the first number
            b: the second number
        """
        return self._result(a + b)

    def subtract(self, a: float, b: float) -> str:
        """Subtract b from a.

        Args:
            a: the number to subtract from
            b: the number to subtract
        """
        return self._result(a - b)

    def multiply(self, a: float, b: float) -> str:
        """Multiply two numbers.

        Args:
            a: the first number
            b: the second number
        """
        return self._result(a * b)

    def divide(self, a: float, b: float) -> str:
        """Divide a by b.

        Args:
            a: the dividend
            b: the divisor
        """
        return self._result(a / b)

    def get_reward(self, answer: str | None = None) -> float:
        """The dataset's score of the final answer (``None``: of the last calculator result)."""
        if self._entry is None:
            return 0.0
        text = self.last_result if answer is None else answer
        if "<answer>" in text:
            text = text.rsplit("<answer>", 1)[1].split("</answer>", 1)[0]
        try:
            return float(self._data.score_answer(text.strip(), self._entry))
        except Exception:  # noqa: BLE001 - a scorer that chokes on garbage: the answer is wrong
            return 0.0


def make_calculator(max_episode_steps: int | None = None, history: int = 8, max_tool_calls: int = 4,
                    **kwargs: Any):
    """``textgym/Calculator-v0``: :class:`ArithmeticCalculator` as a tool env (the model sees its
    last ``history`` turns: its calls and their results; ``max_episode_steps`` caps the tool
    calls too). ``kwargs``: the calculator's config fields, or :class:`textgym.tools.ToolEnv`'s
    settings."""
    import inspect

    from textgym.tools import ToolEnv, tool_env

    env_settings = set(inspect.signature(ToolEnv).parameters) - {"toolbox", "description"}
    settings = {k: v for k, v in kwargs.items() if k in env_settings}
    config = {k: v for k, v in kwargs.items() if k not in env_settings}
    if max_episode_steps is not None:
        max_tool_calls = min(max_tool_calls, int(max_episode_steps))
    return tool_env(ArithmeticCalculator(**config), history=history, description=_DESCRIPTION,
                    max_tool_calls=max_tool_calls, **settings)


def _number_of(node: ast.AST) -> int | float | None:
    """A literal number (``-33`` is a negated constant), else ``None``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number_of(node.operand)
        return None if inner is None else -inner
    return None


#: The calculator's tool for each operator of an expression.
_TOOLS = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide"}
_OPERATIONS = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul, "divide": operator.truediv}


def _tool_value(name: str, a: float, b: float) -> int | float:
    """What the calculator's tool ``name`` returns for ``a`` and ``b``, as a number
    (:meth:`ArithmeticCalculator._result`'s rounding)."""
    return _number(round(_OPERATIONS[name](a, b), 6))


def solution_calls(expression: str) -> tuple[list[dict[str, Any]], int | float]:
    """The calculator calls that work ``expression`` out, one per binary operation in evaluation
    order (operands first, left to right), each on the numbers the earlier calls returned; and the
    result. A negated sub-expression is ``subtract(0, x)``.

    Example:
        >>> calls, result = solution_calls("-33 * -22 - -8")
        >>> calls
        [{'name': 'multiply', 'arguments': {'a': -33, 'b': -22}}, {'name': 'subtract', 'arguments': {'a': 726, 'b': -8}}]
        >>> result
        734

    Raises:
        ValueError: ``expression`` is not arithmetic on numbers with + - * / and parentheses.
    """
    calls: list[dict[str, Any]] = []

    def value(node: ast.AST) -> int | float:
        number = _number_of(node)
        if number is not None:
            return number
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return call("subtract", 0, value(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _TOOLS:
            left = value(node.left)
            return call(_TOOLS[type(node.op)], left, value(node.right))
        raise ValueError(f"not arithmetic: {ast.dump(node)}")

    def call(name: str, a: float, b: float) -> int | float:
        calls.append({"name": name, "arguments": {"a": a, "b": b}})
        return _tool_value(name, a, b)

    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not arithmetic: {expression!r}") from None
    return calls, value(tree.body)


def question_expression(question: str) -> str:
    """The expression of a basic_arithmetic question (``"Calculate 3 + 4."`` -> ``"3 + 4"``)."""
    return question.removeprefix("Calculate").strip().rstrip(".").replace("=", "").strip()


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """A tool call in the model-native format the tool env reads (:func:`textgym.tools.parse_tool_call`),
    written as the tool-calling chat template renders an assistant's ``tool_calls``."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def answer_text(result: float) -> str:
    """The final answer, as the env's description asks for it."""
    return f"<answer>{result}</answer>"


def tool_conversation(seed: int, **config: Any) -> dict[str, Any]:
    """Item ``seed``'s whole tool-calling solution as plain data (what the scripted player plays),
    the calls run through the calculator itself: ``question``; ``calls``, each ``{"name",
    "arguments", "result"}`` (the tool's text); ``answer`` (the final answer's text); ``reward``
    (the dataset's score of it); and ``messages``, the same in the chat format of
    ``tokenizer.apply_chat_template(messages, tools=...)`` (a user turn with the question, an
    assistant turn with ``tool_calls`` and a ``tool`` turn per call, the final assistant turn).
    ``config``: basic_arithmetic's fields (default :data:`DEFAULT_CONFIG`).

    Example:
        >>> item = tool_conversation(0)
        >>> item["question"], [c["result"] for c in item["calls"]], item["answer"], item["reward"]
        ('Calculate -33 * -22 - -8.', ['726', '734'], '<answer>734</answer>', 1.0)
        >>> [m["role"] for m in item["messages"]]
        ['user', 'assistant', 'tool', 'assistant', 'tool', 'assistant']
    """
    calculator = ArithmeticCalculator(**config)
    question = calculator.reset(seed=seed)
    planned, result = solution_calls(question_expression(question))
    calls, messages = [], [{"role": "user", "content": question}]
    for call in planned:
        text = getattr(calculator, call["name"])(**call["arguments"])
        calls.append({**call, "result": text})
        messages += [{"role": "assistant", "content": "",
                      "tool_calls": [{"type": "function", "function": {"name": call["name"],
                                                                       "arguments": call["arguments"]}}]},
                     {"role": "tool", "name": call["name"], "content": text}]
    answer = answer_text(result)
    messages.append({"role": "assistant", "content": answer})
    return {"question": question, "calls": calls, "answer": answer,
            "reward": calculator.get_reward(answer), "messages": messages}


def scripted_calculator(env: Any, seed: int | None = None):
    """The reference player (``scripted``; ``--sft-player scripted``): works the question out
    with the calculator, one tool call per operation in evaluation order
    (:func:`solution_calls`), then gives the result in ``<answer>`` tags. It uses the tools as
    the env's description asks, so imitating it teaches tool calls; it solves every item."""
    calculator = env.unwrapped.toolbox.environment
    played: dict[str, Any] = {"question": None, "answers": []}

    def player(info: dict[str, Any]) -> str:
        if calculator.question != played["question"] or not played["answers"]:  # a new episode
            calls, result = solution_calls(question_expression(calculator.question))
            played["question"] = calculator.question
            played["answers"] = [tool_call_text(c["name"], c["arguments"]) for c in calls] + [answer_text(result)]
        return played["answers"].pop(0)

    return player


#: Generate mode only (answers are free text). A warm start on the scripted player's tool calls
#: (imitation: the untrained model never calls a tool), then REINFORCE on the dataset's score.
#: Measured (200 held-out items; docs/results.md, "Tool-calling envs"): the warm start on 128
#: items, 2 epochs, solves 28-31% of the items at 3 seeds (untrained 0.4%) with a tool call in
#: 99-100% of them; 2 RL updates after it keep the tools (29.0% solved, seed 0). On 32 items the
#: model had not learnt the call format (tool names written as the expression, refused calls).
#: Every decision reads the ~520-token tool list: an adapter on the top 8 layers only keeps an
#: update affordable on a CPU.
TRAINING_DEFAULTS = TrainingDefaults(
    updates=2, num_envs=16, sft_player="scripted", sft_episodes=128, sft_epochs=2,
    trainer={"episodes_per_update": 16, "gamma": 1.0, "sft_lr": 1e-3, "lora_layers": 8},
    # a tool call or a final answer is short; one episode is a few turns
    modes={"generate": {"policy": {"max_new_tokens": 48}}})
