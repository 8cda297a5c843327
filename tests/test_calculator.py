"""textgym/Calculator-v0's scripted tool player: it works each item out with the calculator's
tools, one valid call per operation, and solves it; its conversation as plain data."""

from __future__ import annotations

import re

import pytest

import textgym
from textgym.envs.calculator import solution_calls, tool_conversation
from textgym.tools import parse_tool_call


def _operators(question: str) -> int:
    """Binary operators in a question ("-33 * -22 - -8": 2; a minus sign of a number is none)."""
    expression = question.removeprefix("Calculate").rstrip(".")
    return len(re.findall(r"(?<=[\d)])\s*[-+*/]", expression))


def test_the_scripted_player_calls_a_tool_per_operation_and_solves_every_item():
    from textgym.baselines import evaluate_reference
    from textgym.registry import reference_policy

    env = textgym.make("textgym/Calculator-v0")
    answers: dict[str, list[str]] = {}

    def record(observation, info, answer):
        answers.setdefault(env.unwrapped.toolbox.environment.question, []).append(answer)

    stats = evaluate_reference(env, reference_policy("textgym/Calculator-v0", "scripted"), 60, seed=0,
                               on_step=record)
    assert stats["return_mean"] == 1.0 and stats["invalid_rate"] == 0.0
    assert len(answers) == 60
    for question, played in answers.items():
        calls, final = played[:-1], played[-1]
        assert len(calls) == _operators(question) >= 1, question
        assert all(parse_tool_call(c).name in {"add", "subtract", "multiply"} for c in calls)
        assert parse_tool_call(final) is None and final.startswith("<answer>")


def test_every_call_of_the_scripted_player_is_a_valid_tool_call_whose_result_feeds_the_next():
    env = textgym.make("textgym/Calculator-v0")
    player = textgym.registry.reference_policy("textgym/Calculator-v0", "scripted")(env, 0)
    obs, info = env.reset(seed=0)
    assert obs == "Calculate -33 * -22 - -8."
    steps = []
    done = False
    while not done:
        answer = player(info)
        obs, reward, terminated, truncated, info = env.step(answer)
        steps.append((answer, info["parse"], info.get("tool_result")))
        done = terminated or truncated
    assert [s[0] for s in steps] == [
        '<tool_call>\n{"name": "multiply", "arguments": {"a": -33, "b": -22}}\n</tool_call>',
        '<tool_call>\n{"name": "subtract", "arguments": {"a": 726, "b": -8}}\n</tool_call>',
        "<answer>734</answer>"]
    assert [(p["valid"], p["action_name"], result) for _, p, result in steps] == [
        (True, "multiply", "726"), (True, "subtract", "734"), (True, None, None)]
    assert reward == 1.0 and terminated


def test_solution_calls_follow_the_evaluation_order():
    calls, result = solution_calls("(75 + 19) * 74")
    assert [(c["name"], c["arguments"]) for c in calls] == [("add", {"a": 75, "b": 19}),
                                                            ("multiply", {"a": 94, "b": 74})]
    assert result == 6956
    calls, result = solution_calls("2 * 3 + 4 * 5")          # left operand first, then the right
    assert [c["name"] for c in calls] == ["multiply", "multiply", "add"] and result == 26
    calls, result = solution_calls("-(3 - 5)")               # a negated sub-expression: 0 - x
    assert calls[-1] == {"name": "subtract", "arguments": {"a": 0, "b": -2}} and result == 2
    assert solution_calls("7")[0] == []
    with pytest.raises(ValueError, match="not arithmetic"):
        solution_calls("2 ** 3")


def test_the_tool_conversation_is_what_the_scripted_player_plays_in_the_env():
    env = textgym.make("textgym/Calculator-v0")
    for seed in range(5):
        item = tool_conversation(seed)
        obs, info = env.reset(seed=seed)
        assert item["question"] == obs and item["reward"] == 1.0
        for call in item["calls"]:
            _, _, _, _, info = env.step(f'<tool_call>{{"name": "{call["name"]}", "arguments": '
                                        f'{{"a": {call["arguments"]["a"]}, "b": {call["arguments"]["b"]}}}}}</tool_call>')
            assert info["parse"]["valid"] and info["tool_result"] == call["result"]
        assert env.step(item["answer"])[1] == 1.0
        messages = item["messages"]
        assert messages[0] == {"role": "user", "content": item["question"]}
        assert [m["content"] for m in messages if m["role"] == "tool"] == [c["result"] for c in item["calls"]]
        assert messages[-1] == {"role": "assistant", "content": item["answer"]}


def test_the_tool_conversation_renders_as_the_players_answers_in_a_tool_calling_chat_template():
    from transformers.utils.chat_template_utils import render_jinja_template
    from trl.chat_template_utils import qwen2_5_chat_template

    from textgym.envs.calculator import scripted_calculator

    item = tool_conversation(3)
    [rendered], _ = render_jinja_template([item["messages"]], chat_template=qwen2_5_chat_template)
    env = textgym.make("textgym/Calculator-v0")
    player = scripted_calculator(env)
    _, info = env.reset(seed=3)
    answers = [player(info) for _ in range(len(item["calls"]) + 1)]
    assert all(answer in rendered for answer in answers)    # the same text, call for call


def test_eval_reports_the_valid_tool_call_rate_of_a_model_and_of_the_scripted_player(cli):
    import json

    result = cli("eval", "textgym/Calculator-v0", "--model", "tiny", "--mode", "generate",
                 "--max-new-tokens", "8", "--baseline", "scripted", "--episodes", "4", "--json")
    assert result.exit_code == 0, result.stderr
    results = json.loads(result.stdout)["results"]
    # the untrained tiny model writes no tool call; the scripted player calls one per operation
    assert results["tiny"]["valid_tool_call_rate"] == 0.0 and results["tiny"]["tool_use_rate"] == 0.0
    assert results["tiny"]["answer_reward_mean"] < 0.05   # reasoning-gym's 0.01 for a non-answer
    scripted = results["scripted"]
    assert scripted["tool_use_rate"] == 1.0 and 0.5 <= scripted["valid_tool_call_rate"] < 1.0
    # the final answers alone score 1 (solved), whatever the tool calls' rewards
    assert scripted["answer_reward_mean"] == 1.0 and scripted["answer_reward_stderr"] == 0.0
    table = cli("eval", "textgym/Calculator-v0", "--baseline", "scripted", "--episodes", "4")
    assert "valid tool calls" in table.stdout and "100.0%" in table.stdout
    assert "answer reward" in table.stdout and "1.000 ± 0.000" in table.stdout


def test_an_env_without_tools_reports_no_tool_use():
    from textgym.baselines import evaluate_baseline

    result = evaluate_baseline(textgym.make("bandit"), "scripted", episodes=4, seed=0)
    assert "valid_tool_call_rate" not in result and "tool_use_rate" not in result


def test_the_warm_start_reads_the_scripted_players_episodes_as_the_rollouts_conversation():
    from textgym.rollout import collect
    from textgym.trainers.engine.sft import demonstration_decisions, player_demonstrations

    demos, stats = player_demonstrations("textgym/Calculator-v0", "scripted", episodes=3, seed=0)
    assert stats["return_mean"] == 1.0 and [len(d.earlier) for d in demos][:3] == [0, 1, 2]
    assert demos[1].prompt == "<tool_response>\n726\n</tool_response>"   # the newest observation alone
    policy = textgym.Policy(*textgym.models.load("tiny"), mode="generate", max_new_tokens=4, seed=0)
    decisions = demonstration_decisions(policy, demos)
    first, second = decisions[0], decisions[1]
    assert first.answer_ids[-1] in policy.end_ids                  # the answer ends its turn, as sampled
    assert second.prompt_ids[:len(first.prompt_ids) + len(first.answer_ids)] == first.prompt_ids + first.answer_ids
    # the same context a rollout builds: its first decision's prompt, then the conversation grows
    rollout = collect(policy, textgym.make("textgym/Calculator-v0"), episodes=1, seed=0, greedy=True)
    assert rollout.episodes[0].steps[0].decision.prompt_ids == first.prompt_ids


def test_a_model_that_writes_invalid_calls_forever_ends_its_episode_at_the_call_cap():
    env = textgym.make("textgym/Calculator-v0")          # 4 tool calls, 2 retries of an invalid one
    env.reset(seed=0)
    bad = '<tool_call>{"name": "power", "arguments": {"a": 2, "b": 3}}</tool_call>'
    steps, returns, done = 0, 0.0, False
    while not done and steps < 100:
        _, reward, terminated, truncated, info = env.step(bad)
        steps, returns, done = steps + 1, returns + reward, terminated or truncated
    assert truncated and not terminated and steps == 4 * 3   # each refused call: 2 retries, then counted
    assert not info["parse"]["valid"] and returns == -4.0    # the invalid-answer penalty per refused call
