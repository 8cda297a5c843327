"""Tool-calling envs (textgym.tool_env): tools from a TRL environment_factory-style class or from
plain functions, tool calls parsed, checked and run, and every fault an answer, never a crash."""

from __future__ import annotations

import json
import threading

import pytest

import textgym
from textgym.tools import parse_tool_call


class Counter:
    """A TRL environment_factory-style env: count up to a target, then say the count."""

    def __init__(self):
        self.count = 0
        self.target = 0

    def reset(self, seed=None, **kwargs) -> str:
        self.count, self.target = 0, 2 + (seed or 0) % 3
        return f"Count up to {self.target}, then answer with the count."

    def increment(self, by: int = 1) -> int:
        """Add to the count.

        Args:
            by: how much to add
        """
        self.count += by
        return self.count

    def fail(self, reason: str) -> str:
        """A tool that raises.

        Args:
            reason: the error message
        """
        raise RuntimeError(reason)

    def flood(self, nul: bool = False) -> str:
        """A tool that returns 1 MB of text.

        Args:
            nul: put NUL bytes in it
        """
        return ("ab\x00" if nul else "abc") * 350_000

    def get_reward(self, answer: str) -> float:
        return float(self.count == self.target and answer.strip() == str(self.target))


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_a_trl_style_class_is_a_tool_env_that_solves_with_tool_calls():
    env = textgym.tool_env(Counter)
    obs, info = env.reset(seed=0)
    assert obs == "Count up to 2, then answer with the count."
    assert [t["function"]["name"] for t in info["tools"]] == ["fail", "flood", "increment"]
    assert '"name": "increment"' in info["system_prompt"] and "<tool_call>" in info["system_prompt"]
    obs, reward, terminated, truncated, info = env.step(call("increment"))
    assert (obs, reward, terminated) == ("<tool_response>\n1\n</tool_response>", 0.0, False)
    assert info["parse"] | {} == {**info["parse"], "action": {"name": "increment", "arguments": {}},
                                  "action_name": "increment", "parser": "tool_call", "valid": True}
    # plain JSON works too, and "1" is coerced to the integer the schema asks for
    obs, reward, terminated, truncated, info = env.step('{"name": "increment", "arguments": {"by": "1"}}')
    assert obs == "<tool_response>\n2\n</tool_response>" and info["parse"]["parser"] == "json"
    assert info["parse"]["action"]["arguments"] == {"by": 1}
    obs, reward, terminated, truncated, info = env.step("The count is 2")  # no tool call: the final answer
    assert (reward, terminated, truncated) == (0.0, True, False)           # get_reward took the answer
    env.reset(seed=0)
    env.step(call("increment", by=2))
    _, reward, terminated, _, info = env.step("2")
    assert (reward, terminated, info["episode"]) == (1.0, True, {"return": 1.0, "length": 2, "invalid_count": 0})


def test_plain_functions_with_reset_and_reward():
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first
            b: the second
        """
        return a + b

    env = textgym.tool_env(tools=[add], reset=lambda seed: f"What is {seed} + 3?",
                           reward=lambda answer: float(answer.strip() == "7"))
    assert env.reset(seed=4)[0] == "What is 4 + 3?"
    assert env.step(call("add", a=4, b=3))[0] == "<tool_response>\n7\n</tool_response>"
    _, reward, terminated, _, info = env.step("7")
    assert (reward, terminated) == (1.0, True)
    assert info["episode"] == {"return": 1.0, "length": 2, "invalid_count": 0}


def test_a_function_without_types_or_docstring_is_refused_naming_it():
    def untyped(x):
        return x

    with pytest.raises(TypeError, match="untyped cannot be a tool"):
        textgym.tool_env(tools=[untyped])


@pytest.mark.parametrize(("answer", "message"), [
    (call("teleport"), "unknown tool 'teleport'; the tools are fail, flood, increment"),
    (call("increment", by="lots"), "argument by: 'lots' is not of type 'integer'"),
    (call("increment", steps=1), "unknown argument 'steps'; increment takes by"),
    ("<tool_call>{name: increment}</tool_call>", "the tool call is not JSON"),
    ('<tool_call>["increment"]</tool_call>', "a tool call is a JSON object"),
    ('<tool_call>{"name": "increment", "arguments": [1]}</tool_call>', "the arguments are not a JSON object"),
])
def test_an_invalid_call_is_an_invalid_answer_with_the_reason_as_feedback(answer, message):
    env = textgym.tool_env(Counter)
    first, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(answer)
    assert not info["parse"]["valid"] and info["parse"]["policy"] == "retry"
    assert message in info["feedback"] and obs == f"{first}\n{info['feedback']}"
    assert (reward, terminated, truncated) == (0.0, False, False)


def test_invalid_calls_follow_the_envs_invalid_answer_policy():
    env = textgym.tool_env(Counter, invalid_policy="terminate", invalid_penalty=-2.0)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(call("nope"))
    assert (reward, terminated, info["parse"]["policy"]) == (-2.0, True, "terminate")
    env = textgym.tool_env(Counter, invalid_policy="retry", max_retries=1)
    env.reset(seed=0)
    assert env.step(call("nope"))[4]["parse"]["policy"] == "retry"
    obs, reward, terminated, _, info = env.step(call("nope"))  # past the retries: the penalty, no call made
    assert (reward, terminated, info["parse"]["policy"]) == (-1.0, False, "penalty")
    assert obs.startswith("Invalid tool call: unknown tool 'nope'")
    assert "answer_reward" not in info                   # no final answer yet
    env.step(call("increment", by=2))
    _, reward, terminated, _, info = env.step("2")      # solved, after a penalty of -1
    assert (reward, terminated, info["answer_reward"], info["episode"]["return"]) == (1.0, True, 1.0, 0.0)


def test_a_tool_that_raises_returns_its_error():
    env = textgym.tool_env(Counter)
    env.reset(seed=0)
    obs, _reward, terminated, _, info = env.step(call("fail", reason="disk on fire"))
    assert obs == "<tool_response>\nError: RuntimeError: disk on fire\n</tool_response>"
    assert info["parse"]["valid"] and not terminated


def test_a_hanging_tool_hits_the_step_timeout():
    release = threading.Event()

    def wait(seconds: int) -> str:
        """Wait.

        Args:
            seconds: how long
        """
        release.wait()
        return "done"

    env = textgym.tool_env(tools=[wait], step_timeout=0.2)
    env.reset(seed=0)
    try:
        obs, _, terminated, _, _info = env.step(call("wait", seconds=3600))
    finally:
        release.set()
    assert "Error: the tool wait did not return within 0.2 s" in obs and not terminated


def test_a_1mb_result_is_cut_and_nul_bytes_removed():
    env = textgym.tool_env(Counter, max_result_chars=1000)
    env.reset(seed=0)
    obs, *_ = env.step(call("flood"))
    assert obs.count("abc") == 333 and "[... 1,049,000 more characters cut]" in obs
    obs, *_ = env.step(call("flood", nul=True))
    assert "\x00" not in obs and "abab" in obs
    obs, *_ = env.step("<tool_call>" + json.dumps({"name": "increment\x00", "arguments": {}}) + "</tool_call>")
    assert "unknown tool 'increment\\x00'" in obs


def test_the_tool_calls_per_episode_are_capped():
    env = textgym.tool_env(Counter, max_tool_calls=2)
    env.reset(seed=0)
    assert not env.step(call("increment"))[3]
    _obs, _reward, terminated, truncated, info = env.step(call("increment"))
    assert (terminated, truncated) == (False, True) and info["episode"]["length"] == 2


def test_parse_tool_call_reads_the_native_and_the_json_format():
    assert parse_tool_call('I will call it.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>').arguments == {"x": 1}
    assert parse_tool_call('{"name": "f", "arguments": "{\\"x\\": 2}"}').arguments == {"x": 2}
    assert parse_tool_call('{"answer": 3}') is None
    assert parse_tool_call("[" * 100_000) is None
    assert parse_tool_call("<tool_call>" + "[" * 100_000).error.startswith("the tool call is not JSON")


def test_transcripts_show_the_tool_calls_and_their_results(tmp_path):
    from textgym.rollout import collect
    from textgym.transcripts import TranscriptWriter, read_transcripts
    from textgym.vector import TextVectorEnv

    class Scripted:
        """Calls increment twice, then answers 2."""

        def act(self, observations, system_prompts, valid_actions=None, greedy=False):
            from textgym.policy import Decision

            answers = [call("increment") if "<tool_response>\n2" not in obs else "2" for obs in observations]
            return [Decision(text=a, prompt_ids=[], answer_ids=[], token_logprobs=[], logprob=0.0) for a in answers]

    venv = TextVectorEnv([lambda: textgym.tool_env(Counter)], seed=0)
    episodes = collect(Scripted(), venv, episodes=1, seed=0).episodes
    TranscriptWriter(tmp_path, per_update=1).write(episodes, update=1, source="train")
    steps = read_transcripts(tmp_path)[0]["steps"]
    assert [s["parse"]["action"] for s in steps] == ["increment({})", "increment({})", "final answer"]
    assert [s["observation"] for s in steps][1:] == ["<tool_response>\n1\n</tool_response>",
                                                     "<tool_response>\n2\n</tool_response>"]
    assert read_transcripts(tmp_path)[0]["return"] == 1.0


def test_the_calculator_tool_env_trains_in_generate_mode(tiny_model_and_tokenizer, tmp_path):
    import copy

    import torch

    from textgym.trainers import make_trainer

    model, tokenizer = tiny_model_and_tokenizer
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="generate", max_new_tokens=8, seed=0)
    before = [p.detach().clone() for p in policy.model.parameters() if p.requires_grad]
    trainer = make_trainer("reinforce", policy, env="textgym/Calculator-v0", out_dir=tmp_path,
                           config={"num_envs": 2, "episodes_per_update": 4, "minibatch_size": 8, "lr": 1e-2})
    history = trainer.train(updates=1)
    assert len(history) == 1 and history[0]["episodes"] >= 4
    after = [p for p in policy.model.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))   # the update changed weights
    envs = trainer.venv.envs
    assert envs[0].get_wrapper_attr("tools")   # a tool env, played by the one rollout loop


def test_the_calculator_passes_gymnasiums_env_checker():
    import warnings

    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    env = gym.make("textgym/Calculator-v0")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
        check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert obs == "Calculate -33 * -22 - -8." and [t["function"]["name"] for t in info["tools"]] == [
        "add", "divide", "multiply", "subtract"]


def test_one_calculator_class_serves_trl_and_tool_env():
    from textgym.envs.calculator import ArithmeticCalculator

    trl_style = ArithmeticCalculator()                   # what TRL's environment_factory makes
    assert trl_style.reset(seed=0) == "Calculate -33 * -22 - -8."
    trl_style.multiply(a=-33, b=-22)
    assert trl_style.subtract(a=726, b=-8) == "734" and trl_style.get_reward() == 1.0   # TRL: the last result
    env = textgym.tool_env(ArithmeticCalculator)
    env.reset(seed=0)
    assert env.step("<answer>734</answer>")[1] == 1.0     # textgym: the final answer


def test_adversarial_answers_never_break_a_tool_env():
    from tests.test_fuzz import EMPTY_NON_TEXT, GARBAGE_TEXT, OTHER_NON_TEXT

    env = textgym.tool_env(Counter, invalid_policy="retry", max_tool_calls=3)
    env.reset(seed=0)
    tool_calls = [call("increment", by=10 ** 400), call("increment", by=float("nan")), call("flood", nul="yes"),
                  "<tool_call>" + "{" * 50_000, '<tool_call>{"name": null}</tool_call>',
                  '<tool_call>{"name": "increment", "arguments": {"by": 1, "by": 2}}</tool_call>',
                  '{"name": "__init__", "arguments": {}}', '{"name": "reset", "arguments": {}}']
    for answer in GARBAGE_TEXT + EMPTY_NON_TEXT + OTHER_NON_TEXT + tool_calls:
        obs, reward, terminated, truncated, info = env.step(answer)
        assert isinstance(obs, str) and isinstance(reward, float) and isinstance(info["parse"]["valid"], bool)
        if terminated or truncated:
            env.reset(seed=1)


def test_the_calculators_scripted_reference_solves_every_item():
    from textgym.baselines import evaluate_baseline

    result = evaluate_baseline(textgym.make("textgym/Calculator-v0"), "scripted", episodes=50, seed=0)
    assert result["return_mean"] == 1.0 and result["invalid_rate"] == 0.0


def test_the_calculator_is_declared_free_text():
    from textgym.registry import takes_free_text

    assert takes_free_text("textgym/Calculator-v0")   # score mode refuses it before loading a model
