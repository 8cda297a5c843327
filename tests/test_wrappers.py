"""The text-env wrappers: each policy, masks, MultiBinary, formatters, stats, shaping, history."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from textgym.spaces import TextSpace
from textgym.wrappers import (
    Clip,
    EpisodeStats,
    ExponentialDecay,
    FormatBonus,
    History,
    LinearDecay,
    ParseAction,
    Parser,
    RewardFn,
    Scale,
    ShapeReward,
    TextObservation,
    describe,
)


def cartpole(**kwargs) -> ParseAction:
    env = TextObservation(gym.make("CartPole-v1"), formatter="{0:.4f} {1:.4f} {2:.4f} {3:.4f}")
    return ParseAction(env, action_names=["LEFT", "RIGHT"], **kwargs)


class MultiBinaryEnv(gym.Env):
    """Two buttons; the reward is 1 per pressed button. Three steps long."""

    action_space = spaces.MultiBinary(2)
    observation_space = spaces.Box(0, 3, shape=(1,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.t += 1
        return np.array([self.t], dtype=np.float32), float(np.sum(action)), self.t >= 3, False, {}


class MaskAttrEnv(gym.Env):
    """Three actions; only the ones in ``self.legal`` are allowed (exposed as ``action_mask()``)."""

    action_space = spaces.Discrete(3)
    observation_space = spaces.Discrete(10)

    def __init__(self):
        self.legal = np.array([0, 1, 1], dtype=np.int8)

    def action_mask(self):
        return self.legal.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, {}

    def step(self, action):
        assert self.legal[action], f"illegal action {action} reached the env"
        self.t += 1
        return self.t, float(action), self.t >= 5, False, {}


# --------------------------------------------------------------------------- ParseAction


def test_valid_answer_steps_the_env():
    env = cartpole()
    obs0, info = env.reset(seed=0)
    assert info["valid_actions"] == ["LEFT", "RIGHT"]
    assert env.action_names == ["LEFT", "RIGHT"]
    assert isinstance(env.action_space, TextSpace)
    obs, reward, terminated, truncated, info = env.step('{"action": "RIGHT"}')
    assert obs != obs0 and reward == 1.0 and not terminated
    assert info["parse"] == {"raw": '{"action": "RIGHT"}', "action": 1, "action_name": "RIGHT",
                             "parser": "json", "valid": True, "invalid_count": 0, "policy": None,
                             "retries": 0}
    assert info["valid_actions"] == ["LEFT", "RIGHT"]


def test_penalty_policy_applies_default_action_and_penalty():
    env = cartpole(invalid_policy="penalty", invalid_penalty=-0.25, default_action="RIGHT")
    ref = gym.make("CartPole-v1")
    env.reset(seed=1)
    ref.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step("I like turtles")
    ref_obs, *_ = ref.step(1)
    assert reward == pytest.approx(1.0 - 0.25)
    assert obs == " ".join(f"{x:.4f}" for x in ref_obs)  # the default action (RIGHT) was applied
    p = info["parse"]
    assert (p["valid"], p["action"], p["action_name"], p["parser"], p["policy"], p["invalid_count"]) == \
        (False, 1, None, None, "penalty", 1)
    _, _, _, _, info = env.step("")
    assert info["parse"]["invalid_count"] == 2


def test_default_policy_has_no_penalty():
    env = cartpole(invalid_policy="default")
    env.reset(seed=0)
    _, reward, _, _, info = env.step("???")
    assert reward == 1.0
    assert info["parse"]["policy"] == "default" and info["parse"]["action"] == 0


def test_retry_policy_does_not_step_then_falls_back():
    env = cartpole(invalid_policy="retry", max_retries=2, retry_fallback="penalty", invalid_penalty=-1.0)
    obs0, _ = env.reset(seed=2)
    for attempt in (1, 2):
        obs, reward, terminated, truncated, info = env.step("hmm")
        assert obs.startswith(obs0) and obs.endswith("Invalid answer. Reply with one of: LEFT, RIGHT.")
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert info["parse"]["policy"] == "retry" and info["parse"]["retries"] == attempt
        assert info["parse"]["action"] is None and info["parse"]["invalid_count"] == attempt
        assert info["valid_actions"] == ["LEFT", "RIGHT"]
    # third invalid answer in a row: the fallback (penalty) applies and the env steps
    obs, reward, terminated, truncated, info = env.step("still no idea")
    assert info["parse"]["policy"] == "penalty" and info["parse"]["action"] == 0
    assert reward == 0.0 and info["parse"]["invalid_count"] == 3 and not obs.startswith(obs0)
    # a valid answer resets the retry counter
    _, _, _, _, info = env.step("LEFT")
    assert info["parse"]["retries"] == 0 and info["parse"]["valid"]
    _, _, _, _, info = env.step("??")
    assert info["parse"]["retries"] == 1 and info["parse"]["policy"] == "retry"


def test_retry_leaves_the_env_state_untouched():
    env = cartpole(invalid_policy="retry", max_retries=5)
    ref = cartpole()
    env.reset(seed=3)
    ref.reset(seed=3)
    for answer in ["LEFT", "garbage", "RIGHT", "", "nope", "RIGHT"]:
        obs, *_ = env.step(answer)
        if answer in ("LEFT", "RIGHT"):
            ref_obs, *_ = ref.step(answer)
            assert obs == ref_obs


def test_retry_fallback_terminate():
    env = cartpole(invalid_policy="retry", max_retries=1, retry_fallback="terminate", invalid_penalty=-2.0)
    env.reset(seed=0)
    env.step("x")
    _, reward, terminated, _, info = env.step("y")
    assert terminated and reward == -2.0 and info["parse"]["policy"] == "terminate"


def test_terminate_policy_ends_the_episode_with_the_penalty():
    env = cartpole(invalid_policy="terminate", invalid_penalty=-5.0)
    obs0, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("I refuse")
    assert (obs, reward, terminated, truncated) == (obs0, -5.0, True, False)
    assert info["parse"]["action"] is None and info["parse"]["policy"] == "terminate"


def test_max_retries_zero_is_immediate_fallback():
    env = cartpole(invalid_policy="retry", max_retries=0, retry_fallback="default")
    env.reset(seed=0)
    _, reward, _, _, info = env.step("?")
    assert info["parse"]["policy"] == "default" and reward == 1.0


BAD_ANSWERS = [
    "", " ", "\x00\x01\x02", "\r\n\t", "💥" * 1000, "x" * 1_000_000, '{"action": ' * 10_000,
    '{"action": {"$ref": 1}}', '{"action": [1, 2]}', '{"action": null}', '{"action": true}',
    '{"action": 1e400}', '{"action": "RIGHT"' + "}" * 1000, "LEFT RIGHT LEFT RIGHT", "\ud800",
    "Action: LEFT\nAction: RIGHT\nAction: LEFT", "ＬＥＦＴ",
]


@pytest.mark.parametrize("policy", ["penalty", "default", "retry", "terminate"])
def test_bad_answers_never_raise(policy):
    env = cartpole(invalid_policy=policy, max_retries=1)
    env.reset(seed=0)
    for answer in BAD_ANSWERS + [None, 3, 1.5, b"RIGHT", bytearray(b"\xff\xfe"), object(), np.int64(1), ["LEFT"]]:
        obs, reward, terminated, truncated, info = env.step(answer)
        assert isinstance(obs, str) and env.observation_space.contains(obs)
        assert isinstance(reward, float)
        assert isinstance(info["parse"]["raw"], str)
        assert info["parse"]["valid"] in (True, False)
        if terminated or truncated:
            env.reset(seed=0)


def test_non_str_actions_are_converted():
    env = cartpole()
    env.reset(seed=0)
    assert env.step(b"RIGHT")[4]["parse"]["action"] == 1
    info = env.step(None)[4]
    assert info["parse"]["raw"] == "" and not info["parse"]["valid"]
    assert env.step(["LEFT"])[4]["parse"]["action_name"] == "LEFT"  # str(["LEFT"]) mentions LEFT


def test_several_actions_at_once_takes_the_last():
    env = cartpole()
    env.reset(seed=0)
    assert env.step("LEFT RIGHT LEFT RIGHT")[4]["parse"]["action_name"] == "RIGHT"


def test_taxi_mask_makes_illegal_actions_invalid():
    env = ParseAction(TextObservation(gym.make("Taxi-v4")), invalid_policy="penalty",
                      action_names=["SOUTH", "NORTH", "EAST", "WEST", "PICKUP", "DROPOFF"])
    _, info = env.reset(seed=0)
    mask = env.unwrapped.action_mask(env.unwrapped.s)
    names = env.action_names
    assert info["valid_actions"] == [n for n, m in zip(names, mask) if m]
    illegal = [n for n, m in zip(names, mask) if not m]
    assert "PICKUP" in illegal and "DROPOFF" in illegal  # no passenger in the taxi at the start
    _, reward, _, _, info = env.step('{"action": "DROPOFF"}')
    p = info["parse"]
    assert p["valid"] is False and p["parser"] == "json" and p["policy"] == "penalty"
    assert p["action"] != 5  # the fallback is a legal action, not the masked one
    assert mask[p["action"]] == 1
    legal = info["valid_actions"][0]
    _, _, _, _, info = env.step(legal)
    assert info["parse"]["valid"] and info["parse"]["action_name"] == legal


def test_mask_from_env_attribute_and_fallback_to_first_legal():
    env = ParseAction(MaskAttrEnv(), action_names=["A", "B", "C"], default_action="A")
    _, info = env.reset(seed=0)
    assert info["valid_actions"] == ["B", "C"]
    _, reward, _, _, info = env.step("A")  # masked: invalid; default A is masked too -> first legal (B)
    assert info["parse"]["valid"] is False and info["parse"]["action"] == 1
    assert reward == pytest.approx(1.0 - 1.0)
    env.unwrapped.legal[:] = [1, 1, 0]  # the mask attribute is read live at each step
    _, _, _, _, info = env.step("C")
    assert info["parse"]["valid"] is False and info["parse"]["action"] == 0
    _, _, _, _, info = env.step("A")
    assert info["parse"]["valid"] and info["valid_actions"] == ["A", "B"]


def test_multibinary_enumerates_combinations():
    env = ParseAction(MultiBinaryEnv(), action_names=["UP", "FIRE"])
    _, info = env.reset(seed=0)
    assert env.action_names == ["NONE", "FIRE", "UP", "UP+FIRE"]
    assert info["valid_actions"] == env.action_names
    _, reward, _, _, info = env.step("Action: UP+FIRE")
    assert reward == 2.0 and info["parse"]["action"] == [1, 1]
    _, reward, _, _, info = env.step('{"action": "fire"}')
    assert reward == 1.0 and info["parse"]["action"] == [0, 1]
    _, reward, _, _, info = env.step("none")
    assert reward == 0.0 and info["parse"]["action_name"] == "NONE"
    with pytest.raises(ValueError, match="bit names"):
        ParseAction(MultiBinaryEnv(), action_names=["A", "B", "C", "D"])
    big = MultiBinaryEnv()
    big.action_space = spaces.MultiBinary(12)
    with pytest.raises(ValueError, match="up to 8 bits"):
        ParseAction(big)


def test_dict_action_names_and_discrete_start():
    env = gym.make("CartPole-v1")
    env = ParseAction(env, action_names={"PUSH_RIGHT": 1})
    env.reset(seed=0)
    assert env.action_names == ["PUSH_RIGHT"]
    assert env.step("push right")[4]["parse"]["action"] == 1

    class Shifted(MaskAttrEnv):
        action_space = spaces.Discrete(3, start=-1)

        def action_mask(self):
            return np.ones(3, dtype=np.int8)

        def step(self, action):
            self.t += 1
            return self.t, float(action), False, False, {}

    env = ParseAction(Shifted())
    env.reset(seed=0)
    assert env.action_names == ["-1", "0", "1"]
    assert env.step("Action: -1")[1] == -1.0
    assert env.step('{"action": 1}')[1] == 1.0  # a number that is a name means the name


def test_user_parser_and_a_raising_parser():
    env = cartpole(parser=lambda text, names: "RIGHT" if "->" in text else None)
    env.reset(seed=0)
    info = env.step("->")[4]
    assert info["parse"]["action"] == 1 and info["parse"]["parser"] == "<lambda>"

    class Broken(Parser):
        name = "broken"

        def __call__(self, text, action_names):
            raise RuntimeError("boom")

    env = cartpole(parser=Broken())
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="boom"):
        info = env.step("LEFT")[4]
    assert info["parse"]["valid"] is False and "boom" in info["parse"]["error"]


def test_parse_action_rejects_bad_configuration():
    text_actions = gym.make("CartPole-v1")
    text_actions.action_space = gym.spaces.Text(8)
    with pytest.raises(ValueError, match="Discrete, 1-D MultiBinary and Box"):
        ParseAction(text_actions)
    with pytest.raises(ValueError, match="Box action space takes numbers"):
        ParseAction(gym.make("Pendulum-v1"), action_names=["weak", "strong"])
    with pytest.raises(ValueError, match="invalid_policy"):
        cartpole(invalid_policy="ignore")
    with pytest.raises(ValueError, match="retry_fallback"):
        cartpole(retry_fallback="retry")
    with pytest.raises(ValueError, match="default_action"):
        cartpole(default_action=5)
    with pytest.raises(ValueError, match="default_action"):
        cartpole(default_action="UP")
    with pytest.raises(ValueError, match="3 action names"):
        ParseAction(gym.make("CartPole-v1"), action_names=["A", "B", "C"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answers=st.lists(st.text(max_size=200), min_size=1, max_size=8),
       policy=st.sampled_from(["penalty", "default", "retry", "terminate"]))
def test_any_answers_keep_the_contract(answers, policy):
    env = cartpole(invalid_policy=policy, max_retries=2)
    env.reset(seed=0)
    invalid = 0
    for answer in answers:
        obs, reward, terminated, truncated, info = env.step(answer)
        p = info["parse"]
        invalid += not p["valid"]
        assert p["invalid_count"] == invalid
        assert p["valid"] == (p["action_name"] in ("LEFT", "RIGHT"))
        assert (p["policy"] is None) == p["valid"]
        assert env.observation_space.contains(obs)
        if terminated or truncated:
            break


# --------------------------------------------------------------------------- TextObservation


def test_text_observation_formatters_and_system_prompt():
    env = TextObservation(gym.make("CartPole-v1"), formatter=lambda obs: f"angle {obs[2]:+.3f}",
                          system_prompt="Balance the pole.", instructions="Answer LEFT or RIGHT.")
    obs, info = env.reset(seed=0)
    assert obs.startswith("angle ") and isinstance(env.observation_space, TextSpace)
    assert info["system_prompt"] == "Balance the pole.\nAnswer LEFT or RIGHT."
    assert env.system_prompt == info["system_prompt"]
    wrapped = EpisodeStats(ParseAction(env, ["LEFT", "RIGHT"]))
    assert wrapped.get_wrapper_attr("system_prompt") == info["system_prompt"]
    assert wrapped.get_wrapper_attr("action_names") == ["LEFT", "RIGHT"]


def test_format_string_positional_and_dict_keys():
    env = TextObservation(gym.make("Blackjack-v1"), formatter="sum {0}, dealer {1}, ace {2}")
    obs, _ = env.reset(seed=0)
    player, dealer, ace = env.unwrapped._get_obs()
    assert obs == f"sum {player}, dealer {dealer}, ace {ace}"

    class DictEnv(gym.Env):
        observation_space = spaces.Dict({"agent": spaces.Discrete(5), "goal": spaces.Discrete(5)})
        action_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return {"agent": 1, "goal": 4}, {}

    env = TextObservation(DictEnv(), formatter="at {agent}, goal {goal}")
    assert env.reset()[0] == "at 1, goal 4"
    with pytest.raises(ValueError, match="does not fit"):
        TextObservation(DictEnv(), formatter="at {position}")
    with pytest.raises(ValueError, match="does not fit"):
        TextObservation(gym.make("CartPole-v1"), formatter="{7}")
    with pytest.raises(TypeError, match="formatter"):
        TextObservation(gym.make("CartPole-v1"), formatter=42)


def test_long_observations_are_cut_to_max_length():
    env = TextObservation(gym.make("CartPole-v1"), formatter=lambda obs: "x" * 500, max_length=100)
    with pytest.warns(UserWarning, match="cut"):
        obs, _ = env.reset(seed=0)
    assert len(obs) == 100 and env.observation_space.contains(obs)


def test_describe_generic_spaces():
    assert describe(np.array([0.0312, -0.1, 0.5, 2.0], dtype=np.float32)) == "[0.03, -0.1, 0.5, 2]"
    assert describe(np.array([-0.001])) == "0"  # rounded, and never "-0"
    assert describe(np.array([0.5], dtype=np.float32)) == "0.5"
    assert describe(np.array([1.5, -2.25]), names=["x", "v"]) == "x=1.5, v=-2.25"
    assert describe(np.int64(3), spaces.Discrete(5)) == "3"
    assert describe(np.array([1, 0, 1], dtype=np.int8), spaces.MultiBinary(3)) == "[1, 0, 1]"
    assert describe((14, 10, 0)) == "(14, 10, 0)"
    assert describe((14, 10, 0), names=["sum", "dealer", "ace"]) == "sum=14, dealer=10, ace=0"
    dict_space = spaces.Dict({"pos": spaces.Box(0, 1, (2,)), "inner": spaces.Dict({"k": spaces.Discrete(2)})})
    assert describe({"pos": np.array([0.25, 1.0]), "inner": {"k": 1}}, dict_space) == "pos: [0.25, 1]\ninner: {k: 1}"
    assert describe(np.array([[1, 2], [3, 4]])) == "[[1, 2], [3, 4]]"
    image = np.zeros((8, 8, 3), dtype=np.uint8)
    assert describe(image) == "array of shape (8, 8, 3): min 0, mean 0, max 0"
    assert describe(np.array([1e9, -0.0, float("nan")])) == "[1e+09, 0, nan]"
    assert describe("already text") == "already text"


# --------------------------------------------------------------------------- EpisodeStats


def test_episode_stats_at_episode_end():
    env = EpisodeStats(cartpole(invalid_policy="penalty", invalid_penalty=-0.5))
    env.reset(seed=0)
    total, steps, answers = 0.0, 0, ["LEFT", "nonsense", "LEFT", "", "LEFT"]
    while True:
        obs, reward, terminated, truncated, info = env.step(answers[steps % len(answers)])
        total += reward
        steps += 1
        if terminated or truncated:
            break
        assert "episode" not in info
    invalid = sum(1 for k in range(steps) if answers[k % len(answers)] in ("nonsense", ""))
    assert info["episode"] == {"return": pytest.approx(total), "length": steps, "invalid_count": invalid}
    assert invalid > 0
    env.reset(seed=1)
    _, _, _, _, info = env.step("RIGHT")
    assert env.episode_length == 1 and env.episode_invalid_count == 0


def test_episode_stats_on_terminate_policy():
    env = EpisodeStats(cartpole(invalid_policy="terminate", invalid_penalty=-1.0))
    env.reset(seed=0)
    env.step("RIGHT")
    _, _, terminated, _, info = env.step("bad")
    assert terminated and info["episode"] == {"return": 0.0, "length": 2, "invalid_count": 1}


# --------------------------------------------------------------------------- ShapeReward


def test_shape_reward_terms_and_schedules():
    calls = []

    def shorter_is_better(observation, action, reward, info):
        calls.append((observation, action, reward))
        return -len(action) / 100

    env = ShapeReward(cartpole(), terms=[
        Scale(0.5),
        FormatBonus(bonus=0.1, penalty=0.4, parsers=("json",), weight=LinearDecay(1.0, 0.0, steps=4)),
        RewardFn(shorter_is_better, weight=ExponentialDecay(1.0, decay=0.5)),
    ])
    env.reset(seed=0)
    _, r0, _, _, info = env.step('{"action": "LEFT"}')  # 18 chars, json: full bonus
    assert info["reward_env"] == 1.0
    assert info["reward_terms"] == pytest.approx({"scale": 0.5, "format": 0.1, "shorter_is_better": -0.18})
    assert r0 == pytest.approx(0.5 + 0.1 - 0.18)
    _, r1, _, _, info = env.step("LEFT")  # keyword: no bonus; weights decayed
    assert info["reward_terms"] == pytest.approx({"scale": 0.5, "format": 0.0, "shorter_is_better": -0.02})
    _, r2, _, _, info = env.step("???")  # invalid: penalty reward from ParseAction, format penalty x 0.5
    assert info["reward_env"] == 0.0
    assert info["reward_terms"]["format"] == pytest.approx(-0.4 * 0.5)
    assert calls[0][1] == '{"action": "LEFT"}' and isinstance(calls[0][0], str)
    assert env.steps == 3


def test_shape_reward_clip_default_and_names():
    env = ShapeReward(cartpole(invalid_penalty=-10.0), terms=[Clip(-1.0, 0.5), Clip(-2.0, 2.0, weight=0.0)])
    env.reset(seed=0)
    _, r, _, _, info = env.step("LEFT")
    assert r == 0.5 and set(info["reward_terms"]) == {"clip", "clip_2"}
    _, r, _, _, info = env.step("nope")
    assert info["reward_env"] == -9.0 and r == -1.0
    env = ShapeReward(cartpole())  # default: the env reward unchanged
    env.reset(seed=0)
    assert env.step("LEFT")[1] == 1.0
    with pytest.raises(ValueError):
        ShapeReward(cartpole(), terms=[])
    assert LinearDecay(2.0, 1.0, steps=10)(5) == 1.5
    assert ExponentialDecay(1.0, decay=0.5, end=1.0)(3) == 1.0


def test_potential_shaping_telescopes_and_credits_each_step():
    from textgym.wrappers import Potential, Scale

    spin = Potential(lambda env: -abs(env.state[3]), name="spin")
    env = ShapeReward(cartpole(), terms=[Scale(1.0), spin])
    env.reset(seed=3)
    first = -abs(env.unwrapped.state[3])
    shaping, phi_before = [], first
    for _ in range(500):
        _, _, terminated, truncated, info = env.step("LEFT")
        phi_now = -abs(env.unwrapped.state[3])
        expected = (0.0 if terminated else phi_now) - phi_before  # phi(terminal) = 0 by default
        assert info["reward_terms"]["spin"] == pytest.approx(expected)
        shaping.append(info["reward_terms"]["spin"])
        phi_before = phi_now
        if terminated or truncated:
            break
    assert terminated and sum(shaping) == pytest.approx(0.0 - first)  # telescopes: phi(T) - phi(0)
    # zero_terminal=False keeps the fallen state's potential; gamma discounts phi(s').
    kept = ShapeReward(cartpole(), terms=[Potential(lambda env: -abs(env.state[3]), gamma=0.5,
                                                    zero_terminal=False)])
    kept.reset(seed=3)
    before = -abs(kept.unwrapped.state[3])
    _, reward, *_ = kept.step("RIGHT")
    assert reward == pytest.approx(0.5 * -abs(kept.unwrapped.state[3]) - before)
    with pytest.raises(RuntimeError, match="before reset"):
        Potential(lambda env: 0.0).on_step(None, False)
    with pytest.raises(ValueError, match="gamma"):
        Potential(lambda env: 0.0, gamma=2.0)
    # Equal settings compare equal (Gymnasium's spec re-make relies on it); running state does not count.
    assert Potential(abs, name="x") == Potential(abs, name="x") != Potential(abs, gamma=0.9, name="x")


def test_cartpole_shaping_kwarg_keeps_the_env_return():
    import textgym

    env = textgym.make("textgym/CartPole-v1", shaping=0.5)
    env.reset(seed=0)
    shaped = env_return = 0.0
    for _ in range(100):
        _, reward, terminated, truncated, info = env.step("LEFT")
        shaped += reward
        env_return += info["reward_env"]
        if terminated or truncated:
            break
    assert env_return == 11.0 and shaped != env_return  # always LEFT falls after 11 steps (seed 0)
    assert set(info["reward_terms"]) == {"scale", "spin"}
    with pytest.raises(ValueError, match="shaping"):
        textgym.make("textgym/CartPole-v1", shaping=-1.0)


# --------------------------------------------------------------------------- History


def test_history_renders_the_last_k_turns_and_resets():
    env = History(cartpole(), window=2)
    obs0, _ = env.reset(seed=0)
    obs1, *_ = env.step("Action: LEFT")
    assert obs1.splitlines()[0] == f"Earlier: {obs0}" and obs1.splitlines()[1] == "Your action: LEFT"
    obs2, *_ = env.step("blah blah")
    obs3, *_ = env.step("RIGHT")
    lines = obs3.splitlines()
    assert len(lines) == 5  # two turns + now
    assert lines[1] == "Your action: 'blah blah' (invalid)"
    assert lines[3] == "Your action: RIGHT"
    assert lines[4].startswith("Now: ")
    assert env.observation_space.contains(obs3)
    first, _ = env.reset(seed=0)
    assert first == obs0 and "Earlier" not in first


def test_history_bounds_long_answers_and_needs_text():
    env = History(cartpole(), window=3, max_answer_chars=20)
    env.reset(seed=0)
    obs, *_ = env.step("💥" * 10_000)
    assert env.observation_space.contains(obs) and len(obs.splitlines()[1]) < 60
    with pytest.raises(ValueError, match="TextObservation"):
        History(gym.make("CartPole-v1"), window=2)
    with pytest.raises(ValueError):
        History(cartpole(), window=0)


# ------------------------------------------------------------------ the invalid-answer rule


def test_invalid_answer_rule_decides_reward_turn_and_episode():
    from textgym.wrappers import InvalidAnswerRule

    penalty = InvalidAnswerRule(policy="penalty", penalty=-0.5).decide(retries=0)
    assert (penalty.policy, penalty.reward, penalty.plays_fallback, penalty.ends_episode) == \
        ("penalty", -0.5, True, False)
    default = InvalidAnswerRule(policy="default", penalty=-0.5).decide(retries=0)
    assert (default.reward, default.plays_fallback) == (0.0, True)
    end = InvalidAnswerRule(policy="terminate", penalty=-2.0).decide(retries=0)
    assert (end.reward, end.ends_episode, end.plays_fallback) == (-2.0, True, False)
    retry = InvalidAnswerRule(policy="retry", max_retries=2, retry_fallback="default")
    verdicts = [retry.decide(retries=r) for r in range(3)]
    assert [(v.policy, v.retries, v.asks_again) for v in verdicts] == \
        [("retry", 1, True), ("retry", 2, True), ("default", 0, False)]
    line = retry.feedback_line(["A", "B"], retries=1, answer="x" * 100)
    assert line == "Invalid answer. Reply with one of: A, B."
    custom = InvalidAnswerRule(policy="retry", feedback="{answer!r}? {retries_left} left: {valid_actions}")
    assert custom.feedback_line(["A"], retries=1, answer="hmm\nwell") == "'hmm well'? 1 left: A"


@pytest.mark.parametrize("kwargs, message", [
    ({"policy": "ignore"}, "invalid_policy='ignore'"),
    ({"retry_fallback": "retry"}, "retry_fallback='retry'"),
    ({"max_retries": -1}, "max_retries must be >= 0"),
    ({"penalty": float("nan")}, "must be finite"),
    ({"penalty": "a lot"}, "must be a number"),
    ({"policy": "retry", "allow_retry": False}, "needs turns"),
])
def test_invalid_answer_rule_rejects_bad_settings(kwargs, message):
    from textgym.wrappers import InvalidAnswerRule

    with pytest.raises(ValueError, match=message):
        InvalidAnswerRule(**kwargs)


def test_parse_action_uses_the_rule_and_reads_any_object_as_text():
    from textgym.wrappers import InvalidAnswerRule

    env = cartpole(invalid_policy="retry", invalid_penalty=-0.5, max_retries=1, retry_fallback="terminate")
    assert env.rule == InvalidAnswerRule("retry", -0.5, 1, "terminate")

    class Unprintable:
        def __str__(self):
            raise RuntimeError("no")

    env = cartpole(invalid_policy="penalty")
    env.reset(seed=0)
    for answer in [None, 10 ** 5000, Unprintable(), b"\xff\xfe", object()]:
        _, _, terminated, truncated, info = env.step(answer)
        assert info["parse"]["valid"] is False and isinstance(info["parse"]["raw"], str)
        if terminated or truncated:
            env.reset(seed=0)
    _, _, _, _, info = env.step(b"RIGHT")                  # bytes are decoded
    assert info["parse"]["action_name"] == "RIGHT"
