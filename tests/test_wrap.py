"""textgym.wrap: one call to a text env that passes Gymnasium's env checker."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

import textgym
from textgym.spaces import TextSpace
from textgym.wrappers import (
    EpisodeStats,
    FormatBonus,
    History,
    ParseAction,
    Scale,
    ShapeReward,
    TextObservation,
)


class GridEnv(gym.Env):
    """A 4x4 grid with a Dict observation; the agent walks to a random target."""

    action_names = ["RIGHT", "UP", "LEFT", "DOWN"]
    observation_space = spaces.Dict({
        "agent": spaces.Box(0, 3, shape=(2,), dtype=np.int64),
        "target": spaces.Box(0, 3, shape=(2,), dtype=np.int64),
    })
    action_space = spaces.Discrete(4)
    _moves = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agent = self.np_random.integers(0, 4, size=2)
        self.target = self.agent
        while np.array_equal(self.target, self.agent):
            self.target = self.np_random.integers(0, 4, size=2)
        return self._obs(), {}

    def _obs(self):
        return {"agent": self.agent.copy(), "target": self.target.copy()}

    def step(self, action):
        self.agent = np.clip(self.agent + self._moves[action], 0, 3)
        done = bool(np.array_equal(self.agent, self.target))
        return self._obs(), float(done), done, False, {}


class ButtonsEnv(gym.Env):
    """MultiBinary(3) actions; the reward counts pressed buttons that match a hidden pattern."""

    action_space = spaces.MultiBinary(3)
    observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

    def get_action_meanings(self):
        return ["A", "B", "C"]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pattern = self.np_random.integers(0, 2, size=3)
        self.t = 0
        return self.np_random.uniform(-1, 1, size=2).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        reward = float(np.sum(np.asarray(action) == self.pattern))
        return self.np_random.uniform(-1, 1, size=2).astype(np.float32), reward, self.t >= 4, False, {}


def checked(env):
    """Runs Gymnasium's env checker; returns the warnings other than the expected 'is wrapped' one."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    return [str(w.message) for w in caught
            if "different from the unwrapped" not in str(w.message) and "render" not in str(w.message)]


@pytest.mark.parametrize("make", [
    lambda: textgym.wrap(gym.make("CartPole-v1")),
    lambda: textgym.wrap(gym.make("Taxi-v4")),
    lambda: textgym.wrap(gym.make("Blackjack-v1"), actions=["STICK", "HIT"]),
    lambda: textgym.wrap(GridEnv()),
    lambda: textgym.wrap(ButtonsEnv()),
    lambda: textgym.wrap(gym.make("CartPole-v1"), history=3, reward_terms=[Scale(0.1), FormatBonus(0.05)]),
    lambda: textgym.wrap(gym.make("FrozenLake-v1"), invalid_policy="retry", max_retries=1),
    lambda: textgym.wrap(gym.make("CartPole-v1"), invalid_policy="terminate"),
], ids=["cartpole", "taxi-mask", "blackjack-tuple", "dict-obs", "multibinary", "shaped-history",
        "retry", "terminate"])
def test_wrapped_envs_pass_check_env(make):
    env = make()
    assert isinstance(env.observation_space, TextSpace) and isinstance(env.action_space, TextSpace)
    assert checked(env) == []


def test_wrap_order_and_contract():
    env = textgym.wrap(gym.make("CartPole-v1"), history=2, reward_terms=[Scale(1.0)])
    chain, e = [], env
    while isinstance(e, gym.Wrapper):
        chain.append(type(e))
        e = e.env
    assert chain[:5] == [History, ShapeReward, EpisodeStats, ParseAction, TextObservation]
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and isinstance(info["system_prompt"], str)
    assert info["valid_actions"] == ["0", "1"]  # CartPole has no names of its own
    obs, reward, terminated, truncated, info = env.step("1")
    assert set(info["parse"]) >= {"raw", "action", "action_name", "parser", "valid", "invalid_count", "policy"}
    assert env.get_wrapper_attr("action_names") == ["0", "1"]
    assert env.get_wrapper_attr("system_prompt") == env.reset(seed=0)[1]["system_prompt"]
    assert env.unwrapped.__class__.__name__ == "CartPoleEnv"


def test_default_names_come_from_the_env():
    env = textgym.wrap(GridEnv())
    _, info = env.reset(seed=0)
    assert info["valid_actions"] == ["RIGHT", "UP", "LEFT", "DOWN"]
    assert "Actions: RIGHT, UP, LEFT, DOWN." in info["system_prompt"]
    env = textgym.wrap(ButtonsEnv())  # get_action_meanings() names the bits
    _, info = env.reset(seed=0)
    assert env.get_wrapper_attr("action_names") == ["NONE", "C", "B", "B+C", "A", "A+C", "A+B", "A+B+C"]
    _, reward, _, _, info = env.step("A+C")
    assert info["parse"]["action"] == [1, 0, 1]


def test_generic_descriptions_of_observations():
    obs, _ = textgym.wrap(GridEnv()).reset(seed=0)
    base = GridEnv()
    raw, _ = base.reset(seed=0)
    assert obs == f"agent: [{raw['agent'][0]}, {raw['agent'][1]}]\ntarget: [{raw['target'][0]}, {raw['target'][1]}]"
    obs, _ = textgym.wrap(gym.make("Blackjack-v1")).reset(seed=0)
    assert obs.startswith("(") and obs.count(",") == 2
    obs, _ = textgym.wrap(gym.make("Taxi-v4")).reset(seed=0)
    assert obs.isdigit()
    obs, _ = textgym.wrap(gym.make("CartPole-v1"), observation_names=["x", "v", "angle", "spin"]).reset(seed=0)
    assert obs.startswith("x=") and "angle=" in obs


def test_wrap_options():
    env = textgym.wrap("CartPole-v1", actions=["LEFT", "RIGHT"], formatter="angle {2:+.2f}",
                       system_prompt="Keep the pole up.", instructions='Reply {"action": "LEFT"|"RIGHT"}.',
                       invalid_policy="default", default_action="RIGHT", parser=lambda t, n: 0)
    obs, info = env.reset(seed=0)
    assert obs.startswith("angle ")
    assert info["system_prompt"] == 'Keep the pole up.\nReply {"action": "LEFT"|"RIGHT"}.'
    assert env.step("anything")[4]["parse"]["action_name"] == "LEFT"  # the user parser decides
    env = textgym.wrap(ButtonsEnv(), actions={"PRESS_A": [1, 0, 0], "ALL": [1, 1, 1]})
    env.reset(seed=0)
    assert env.step("all")[4]["parse"]["action"] == [1, 1, 1]


def test_wrap_errors_are_clear():
    text_actions = gym.make("CartPole-v1")
    text_actions.action_space = gym.spaces.Text(8)          # a space textgym does not name
    with pytest.raises(ValueError, match=r"Discrete, 1-D MultiBinary and Box .*got Text"):
        textgym.wrap(text_actions)
    with pytest.raises(TypeError, match="invalid_polcy"):
        textgym.wrap(gym.make("CartPole-v1"), invalid_polcy="retry")
    with pytest.raises(ValueError, match="2 action names|got 3 action names"):
        textgym.wrap(gym.make("CartPole-v1"), actions=["A", "B", "C"])


def test_box_actions_work_once_discretized():
    env = gym.wrappers.DiscretizeAction(gym.make("Pendulum-v1"), bins=3)
    env = textgym.wrap(env, actions=["PUSH_LEFT", "NONE", "PUSH_RIGHT"])
    env.reset(seed=0)
    assert env.step("push right")[4]["parse"]["action"] == 2


def test_seeded_reset_is_deterministic_and_episodes_report_stats():
    env = textgym.wrap(gym.make("CartPole-v1"), actions=["LEFT", "RIGHT"])
    assert env.reset(seed=7)[0] == env.reset(seed=7)[0]
    env.reset(seed=7)
    for t in range(500):
        obs, reward, terminated, truncated, info = env.step("LEFT" if t % 3 else "uh")
        if terminated or truncated:
            break
    assert info["episode"]["length"] == t + 1
    assert info["episode"]["invalid_count"] == len(range(0, t + 1, 3))
