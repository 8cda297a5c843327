"""Gymnasium's own tools on textgym envs: RecordEpisodeStatistics, render_mode="ansi",
env.spec.to_json() / EnvSpec.from_json, gym.make(env.spec), the env checker's render check."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env

import textgym
from textgym.registry import takes_free_text

# TextWorld has the same tests in tests/test_textworld.py (it needs generated games); these play
# random valid actions, which a free-text env (a tool env: Calculator-v0) has none of: its
# checks are in tests/test_tool_env.py.
ALL_IDS = [info.id for info in textgym.list_envs()
           if info.source == "textgym" and info.id != "textgym/TextWorld-v0" and not takes_free_text(info.id)]


def play(env, seed, steps, answers=None):
    """Observations, rewards and infos of ``steps`` random valid answers (reset on episode end)."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    trace = [obs]
    for i in range(steps):
        answer = answers[i] if answers else str(rng.choice(info["valid_actions"]))
        obs, reward, terminated, truncated, info = env.step(answer)
        trace.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            obs, info = env.reset()
            trace.append(obs)
    return trace


def count_wrappers(env, cls):
    n = 0
    while isinstance(env, gym.Wrapper):
        n += isinstance(env, cls)
        env = env.env
    return n


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_record_episode_statistics_wraps_a_text_env(env_id):
    env = gym.wrappers.RecordEpisodeStatistics(textgym.make(env_id), stats_key="gym_episode")
    rng = np.random.default_rng(0)
    ended = 0
    for seed in range(3):
        _, info = env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(str(rng.choice(info["valid_actions"])))
            done = terminated or truncated
        ours, theirs = info["episode"], info["gym_episode"]
        assert theirs["r"] == pytest.approx(ours["return"]) and theirs["l"] == ours["length"]
        ended += 1
    assert len(env.return_queue) == ended == 3


def test_vector_record_episode_statistics_on_a_sync_vector_env():
    venv = gym.vector.SyncVectorEnv([lambda: textgym.make("bandit")] * 2)
    venv = gym.wrappers.vector.RecordEpisodeStatistics(venv, stats_key="gym_episode")  # "episode" is ours
    venv.reset(seed=0)
    _, _, terminated, _, infos = venv.step(["cat", "dog"])
    assert terminated.all() and infos["_gym_episode"].all()
    assert set(infos["gym_episode"]["r"]) <= {0.0, 1.0}
    assert list(infos["gym_episode"]["r"]) == list(infos["episode"]["return"])


@pytest.mark.parametrize("env_id", ALL_IDS)
@pytest.mark.parametrize("make", [textgym.make, gym.make], ids=["textgym.make", "gym.make"])
def test_ansi_render_is_the_text_the_model_sees(env_id, make):
    env = make(env_id, render_mode="ansi")
    assert env.render_mode == "ansi"
    obs, info = env.reset(seed=0)
    assert env.render() == obs
    for answer in [info["valid_actions"][0], "not an action at all"]:
        obs, *_ = env.step(answer)
        assert env.render() == obs
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
        check_env(make(env_id, render_mode="ansi"))       # the checker's render check included


def test_ansi_render_shows_retry_feedback_and_history():
    env = textgym.make("cartpole", render_mode="ansi", invalid_policy="retry", history=2)
    env.reset(seed=0)
    obs, *_ = env.step("hmm")
    assert env.render() == obs and "Invalid answer" in obs
    with pytest.raises(ValueError, match="render_mode='ansi'"):
        textgym.wrap(gym.make("CartPole-v1"), ["LEFT", "RIGHT"], render_mode="rgb_array")
    pixels = textgym.make("cartpole", render_mode="rgb_array")   # other modes: the Gymnasium env's
    pixels.reset(seed=0)
    assert pixels.render().ndim == 3


@pytest.mark.parametrize("env_id", ALL_IDS)
@pytest.mark.parametrize("kwargs", [{}, {"max_episode_steps": 7}], ids=["defaults", "limit"])
def test_spec_serializes_and_rebuilds_the_same_env(env_id, kwargs):
    env = textgym.make(env_id, **kwargs)
    text = env.spec.to_json()
    for rebuilt in (gym.make(env.spec), gym.make(EnvSpec.from_json(text))):
        assert str(rebuilt) == str(env)
        assert count_wrappers(rebuilt, gym.wrappers.TimeLimit) == count_wrappers(env, gym.wrappers.TimeLimit) <= 1
        answers = [str(a) for a in np.random.default_rng(1).choice(env.get_wrapper_attr("action_names"), 20)]
        assert play(rebuilt, 5, 20, answers) == play(env, 5, 20, answers)
    assert env.spec.max_episode_steps is None        # the limit sits inside, as an entry-point kwarg
    if kwargs:
        assert env.spec.kwargs["max_episode_steps"] == 7


@pytest.mark.parametrize("env_id", ALL_IDS)
@pytest.mark.parametrize("mode", ["score", "generate"])
def test_spec_of_the_registered_training_settings_serializes(env_id, mode):
    """The settings `textgym train` makes the env with (shaping terms, answer formats, a fading
    format bonus) survive env.spec.to_json() and rebuild the same env."""
    from textgym.registry import training_defaults

    env = textgym.make(env_id, **training_defaults(env_id, mode).env_kwargs)
    rebuilt = gym.make(EnvSpec.from_json(env.spec.to_json()))
    assert str(rebuilt) == str(env)
    answers = [str(a) for a in np.random.default_rng(2).choice(env.get_wrapper_attr("action_names"), 20)]
    assert play(rebuilt, 3, 20, answers) == play(env, 3, 20, answers)


def test_reward_terms_are_recorded_by_class_and_kwargs():
    from textgym.envs.classic import pole_spin_potential
    from textgym.wrappers import FormatBonus, LinearDecay, Potential, RewardFn, Scale
    from textgym.wrappers.shape_reward import from_record

    terms = [Scale(0.5), FormatBonus(0.1, parsers=("json",), weight=LinearDecay(1.0, 0.0, steps=10)),
             Potential(pole_spin_potential, zero_terminal=False, name="spin")]
    env = textgym.wrap(gym.make("CartPole-v1"), ["LEFT", "RIGHT"], reward_terms=terms)
    records = next(w.kwargs["terms"] for w in env.spec.additional_wrappers if w.name == "ShapeReward")
    assert records[1]["class"] == "textgym.wrappers.shape_reward:FormatBonus"
    assert records[1]["kwargs"]["parsers"] == ["json"] and records[1]["kwargs"]["weight"]["kwargs"]["steps"] == 10
    assert records[2]["kwargs"]["potential"] == {"function": "textgym.envs.classic:pole_spin_potential"}
    assert [from_record(r) for r in records] == terms
    rebuilt = gym.make(EnvSpec.from_json(env.spec.to_json()))
    assert play(rebuilt, 2, 30) == play(env, 2, 30)
    # a lambda cannot be recorded: the spec keeps the term (gym.make(env.spec) works in this process)
    anonymous = textgym.wrap(gym.make("CartPole-v1"), ["LEFT", "RIGHT"],
                             reward_terms=[RewardFn(lambda o, a, r, i: r)])
    assert play(gym.make(anonymous.spec), 1, 10) == play(anonymous, 1, 10)
    with pytest.raises(TypeError, match="not a textgym reward term"):
        from_record({"class": "os:system", "kwargs": {}})


def test_spec_records_renderers_by_name_and_kwargs():
    from textgym.envs.classic import GridText
    from textgym.wrappers import Renderer

    env = textgym.make("frozenlake", map_name="8x8")
    record = next(w.kwargs["formatter"] for w in env.spec.additional_wrappers if w.name == "TextObservation")
    assert record["renderer"] == "textgym.envs.classic:GridText" and len(record["kwargs"]["rows"]) == 8
    assert Renderer.from_record(record) == GridText(**record["kwargs"])
    assert str(gym.make(EnvSpec.from_json(env.spec.to_json()))) == str(env)
    with pytest.raises(TypeError, match="not a textgym Renderer"):
        Renderer.from_record({"renderer": "os:system", "kwargs": {}})


def test_spec_of_a_wrapped_gymnasium_env_rebuilds_it():
    env = textgym.wrap(gym.make("CartPole-v1", max_episode_steps=30), ["LEFT", "RIGHT"],
                       formatter="Pole {2:+.2f}", invalid_policy="terminate")
    rebuilt = gym.make(EnvSpec.from_json(env.spec.to_json()))
    assert str(rebuilt) == str(env) and count_wrappers(rebuilt, gym.wrappers.TimeLimit) == 1
    assert play(rebuilt, 2, 40) == play(env, 2, 40)
