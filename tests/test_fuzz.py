"""Every registered env, every invalid-answer policy, a fixed corpus of adversarial answers.

No answer may raise; garbage is an invalid answer (``info["parse"]["valid"]`` is False) handled by
the policy; episodes still end and reset normally afterwards. A fixed corpus keeps this fast and
reproducible (hypothesis drives ParseAction alone in test_wrappers.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import textgym
from textgym.registry import takes_free_text
from textgym.wrappers import INVALID_POLICIES

pytest.importorskip("pettingzoo")


class _Unprintable:
    def __str__(self):
        raise RuntimeError("no text here")

    __repr__ = __str__


# Text that names no action of any built-in env (no action word, no digit).
GARBAGE_TEXT = [
    "", " ", "\n\n\t", "x" * 100_000, "ünïcödé 🤖 ∑ ǅ", "\x00\x01\x1b[m\x7f\u202e", "\ud800",
    '{"action":', '{"action": null}', '{"action": true}', '{"action": ["A", "B"]}', "{}" * 5000,
    '{"action": "definitely not an action"}', '{"move": {"action": {}}}', "[[[[[[[[", "\\q \\x",
    "Action:", "Answer: ???", "I refuse to answer.", "save", "restart", "wait then save",
    "quit, then restart", "undo. transcript",
]
# Non-text actions whose text is empty: never valid. (Other objects are read through str(), as
# ParseAction reads them, and may name an action: "[1, 2]" is square 1.)
EMPTY_NON_TEXT = [None, 10 ** 5000, _Unprintable(), b"", bytearray(b"\xff\xfe")]
OTHER_NON_TEXT = [object(), [], {}, (1, "x"), float("nan"), 3 + 4j, b"\x00\x01", memoryview(b"abc")]

# A free-text env reads any text as an answer (a tool env's final answer): tests/test_tool_env.py
# fuzzes Calculator-v0's tool calls.
BUILTIN_IDS = [info.id for info in textgym.list_envs() if info.source == "textgym" and not takes_free_text(info.id)]
# Short episodes and one small game keep the run within seconds.
KWARGS = {
    "textgym/TextWorld-v0": {"world_size": 1, "nb_objects": 1, "quest_length": 1, "games": 1,
                             "max_episode_steps": 40},
}


@pytest.fixture(scope="module")
def textgym_home(tmp_path_factory):
    """A fresh TEXTGYM_HOME for the module: the TextWorld game is generated there once."""
    pytest.importorskip("textworld")
    home = tmp_path_factory.mktemp("textgym_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TEXTGYM_HOME", str(home))
        yield home


def illegal_answer(env, info) -> str | None:
    """A JSON answer naming an action that exists but is not legal now (a taken square, a
    masked taxi move), when there is one."""
    try:
        names = env.get_wrapper_attr("action_names")
    except AttributeError:
        return None
    illegal = [name for name in names if name not in info["valid_actions"]]
    return f'{{"action": "{illegal[0]}"}}' if illegal else None


def check_step(result, policy):
    obs, reward, terminated, truncated, info = result
    assert isinstance(obs, str)
    assert isinstance(reward, float) and math.isfinite(reward)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert isinstance(info["valid_actions"], list)
    record = info["parse"]
    assert isinstance(record["raw"], str) and record["invalid_count"] >= 0
    return info


@pytest.mark.parametrize("policy", INVALID_POLICIES)
@pytest.mark.parametrize("env_id", BUILTIN_IDS)
def test_adversarial_answers_never_break_an_env(env_id, policy, request, tmp_path, monkeypatch):
    if env_id == "textgym/TextWorld-v0":
        request.getfixturevalue("textgym_home")     # a tiny game, generated once into a tmp home
    monkeypatch.chdir(tmp_path)                     # nothing may be written here ("save", "script")
    kwargs = {"max_episode_steps": 25, **KWARGS.get(env_id, {})}
    env = textgym.make(env_id, invalid_policy=policy, **kwargs)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    episodes = 0
    answers = [(a, True) for a in GARBAGE_TEXT + EMPTY_NON_TEXT] + [(a, False) for a in OTHER_NON_TEXT]
    for i, (answer, garbage) in enumerate(answers):
        if i % 5 == 4:      # now and then an answer naming an existing action that is illegal now
            illegal = illegal_answer(env, info)
            if illegal is not None:
                result = env.step(illegal)
                info = check_step(result, policy)
                assert info["parse"]["valid"] is False
                if result[2] or result[3]:
                    _, info = env.reset()
        result = env.step(answer)
        info = check_step(result, policy)
        if garbage:
            record = info["parse"]
            assert record["valid"] is False, (answer, record)
            assert record["policy"] in (policy, "penalty"), record     # retry falls back to penalty
            if policy == "terminate":
                assert result[2] is True
        if result[2] or result[3]:
            episodes += 1
            assert "episode" in info
            _, info = env.reset()
    if policy == "terminate":                      # every garbage answer ended its episode
        assert episodes >= len(GARBAGE_TEXT) + len(EMPTY_NON_TEXT)
    # the env still plays whole episodes with valid answers
    for _ in range(3):
        done = False
        for _ in range(200):
            _, _, terminated, truncated, info = env.step(str(rng.choice(info["valid_actions"])))
            assert info["parse"]["valid"] is True
            if terminated or truncated:
                done = True
                assert info["episode"]["length"] >= 1
                _, info = env.reset()
                break
        assert done
    env.close()
    assert list(tmp_path.iterdir()) == []


# The families: a MiniGrid/BabyAI level goes through textgym.wrap (every invalid policy); the
# reasoning-gym and TextArena envs pass every answer on (scored by the dataset, judged by the game).
FAMILY_IDS = {
    "minigrid/BabyAI-GoToRedBall-v0": ("minigrid", True),
    "reasoning_gym/basic_arithmetic": ("reasoning_gym", False),
    "textarena/GuessTheNumber-v0": ("textarena", False),
    "textarena/TicTacToe-v0": ("textarena", False),
}


@pytest.mark.parametrize("env_id", sorted(FAMILY_IDS))
def test_adversarial_answers_never_break_a_family_env(env_id, tmp_path, monkeypatch):
    package, parsed = FAMILY_IDS[env_id]
    pytest.importorskip(package)
    monkeypatch.chdir(tmp_path)
    policies = INVALID_POLICIES if parsed else (None,)
    answers = GARBAGE_TEXT + EMPTY_NON_TEXT + OTHER_NON_TEXT
    for policy in policies:
        env = textgym.make(env_id, **({"invalid_policy": policy, "max_episode_steps": 25} if policy else {}))
        env.reset(seed=0)
        for answer in answers:
            result = env.step(answer)
            info = check_step(result, policy)
            if parsed and answer in GARBAGE_TEXT:
                assert info["parse"]["valid"] is False and info["parse"]["policy"] in (policy, "penalty")
            if result[2] or result[3]:
                assert "episode" in info
                env.reset()
        env.close()
    assert list(tmp_path.iterdir()) == []


def test_adversarial_answers_never_break_a_continuous_env():
    import gymnasium as gym

    for policy in INVALID_POLICIES:
        env = textgym.wrap(gym.make("Pendulum-v1", max_episode_steps=20), invalid_policy=policy)
        env.reset(seed=0)
        for answer in GARBAGE_TEXT + EMPTY_NON_TEXT + OTHER_NON_TEXT:
            obs, reward, terminated, truncated, info = env.step(answer)
            assert isinstance(obs, str) and math.isfinite(reward)
            action = info["parse"]["action"]
            assert action is None or -2.0 <= action[0] <= 2.0
            if isinstance(answer, str) and answer in GARBAGE_TEXT:      # no digit: no action
                assert info["parse"]["valid"] is False
            if terminated or truncated:
                env.reset()
