"""Reference policies: registered with each env, found by name, played by textgym.baselines."""

from __future__ import annotations

import pytest

import textgym
from textgym import registry
from textgym.baselines import evaluate_baseline, evaluate_reference, random_policy


@pytest.mark.parametrize("env, episodes", [
    ("cartpole", 5), ("bandit", 20), ("frozenlake", 30), ("taxi", 5), ("cliffwalking", 2),
    ("mountaincar", 3), ("acrobot", 3), ("blackjack", 300), ("tictactoe", 10), ("connectfour", 6),
])
def test_scripted_baseline_beats_random(env, episodes):
    game = textgym.make(env)
    random = evaluate_baseline(game, "random", episodes, seed=0)
    scripted = evaluate_baseline(game, "scripted", episodes, seed=0)
    margin = 0.05 if env == "blackjack" else 0.2
    assert scripted["return_mean"] > random["return_mean"] + margin
    assert scripted["invalid_rate"] == random["invalid_rate"] == 0.0
    assert random["episodes"] == scripted["episodes"] == episodes


def test_every_builtin_env_has_random_and_scripted_references():
    for info in textgym.list_envs():
        # built-ins: textgym's own namespace (registry.register's docstring example registers
        # example/Colors-v0 from textgym's module when the doctests run first)
        if info.source != "textgym" or not info.id.startswith("textgym/"):
            continue
        assert info.reference_policies[:2] == ("random", "scripted"), info.id
        assert registry.reference_policy(info.id, "random") is random_policy
        assert callable(registry.reference_policy(info.id, "scripted"))
    assert registry.reference_policy("cartpole", "genius") is None


def test_a_reference_policy_sees_the_env_and_answers_with_action_names():
    env = textgym.make("textgym/CartPole-v1")
    answers = []

    def always_right(env, seed):
        def player(info):
            answers.append(("parse" in info, info["valid_actions"]))
            return "RIGHT"
        return player

    result = evaluate_reference(env, always_right, episodes=2, seed=3)
    assert answers[0] == (False, ["LEFT", "RIGHT"])           # the first call gets the reset info
    assert all(seen for seen, _ in answers[1:] if seen) and result["invalid_rate"] == 0.0
    assert result["decisions"] == len(answers) and result["length_mean"] == len(answers) / 2
    assert result["return_mean"] < 20                           # always RIGHT falls over fast
    assert set(result) >= {"episodes", "return_mean", "return_std", "length_mean", "invalid_rate", "seed"}


def test_registered_references_and_plain_callables():
    def oracle(env, seed):
        return lambda info: info["valid_actions"][env.unwrapped.correct_arm]

    textgym.register("reftest/Bandit-v0", "textgym.envs.bandit:make_bandit", source="reftest",
                     reference_policies={"oracle": oracle, "scripted": "textgym.envs.bandit:scripted_bandit"})
    try:
        assert registry.reference_policy("reftest/Bandit-v0", "oracle") is oracle
        env = textgym.make("reftest/Bandit-v0")
        assert evaluate_baseline(env, "oracle", 10)["return_mean"] == 1.0
        assert evaluate_baseline(env, "scripted", 10)["return_mean"] == 1.0
        assert evaluate_baseline(env, "nothing", 10) is None
        with pytest.raises(TypeError, match="reference policy 'bad'"):
            textgym.register("reftest/Bandit-v1", "textgym.envs.bandit:make_bandit", source="reftest",
                             reference_policies={"bad": "no_colon_here"})
    finally:
        import gymnasium as gym

        for env_id in ("reftest/Bandit-v0", "reftest/Bandit-v1"):
            registry._INFOS.pop(env_id, None)
            gym.registry.pop(env_id, None)
