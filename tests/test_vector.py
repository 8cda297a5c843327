"""TextVectorEnv: seeding, same-step autoreset, final observation/info, errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import textgym
from textgym.spaces import TextSpace
from textgym.vector import TextVectorEnv


def bandit():
    return textgym.make("textgym/Bandit-v0", num_cues=4)


def test_is_a_gymnasium_vector_env_with_text_spaces():
    venv = TextVectorEnv([bandit, bandit])
    assert isinstance(venv, gym.vector.VectorEnv)
    assert venv.num_envs == 2 and len(venv.envs) == 2
    assert isinstance(venv.single_observation_space, TextSpace)
    assert isinstance(venv.single_action_space, TextSpace)
    assert venv.observation_space.contains(["Color: red.", "Color: blue."])
    assert venv.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert venv.get_attr("action_names") == (["cat", "dog"], ["cat", "dog"])
    assert "TextVectorEnv(textgym/Bandit-v0, num_envs=2)" == repr(venv)
    venv.close()
    assert venv.closed


def test_sub_env_i_is_seeded_seed_plus_i_and_later_resets_continue_its_rng():
    venv = textgym.make_vec("textgym/Bandit-v0", num_envs=3, seed=5, num_cues=4)
    # Reference: each sub-env alone, reset with seed + i, then reset without a seed.
    expected = []
    for i in range(3):
        env = bandit()
        first = env.reset(seed=5 + i)[0]
        later = [env.reset()[0] for _ in range(4)]
        expected.append([first] + later)

    obs, _ = venv.reset()
    seen = [[o] for o in obs]
    for _ in range(4):                     # each step ends every one-step episode: autoreset
        obs, _, terminated, _, _ = venv.step(["cat"] * 3)
        assert terminated.all()
        for i, o in enumerate(obs):
            seen[i].append(o)
    assert seen == expected

    obs, _ = venv.reset(seed=5)            # an explicit seed restarts the same streams
    assert obs == [e[0] for e in expected]
    obs, _ = venv.reset(seed=[7, None, 5])
    assert obs[0] == bandit().reset(seed=7)[0] and obs[2] == expected[0][0]


def test_same_step_autoreset_keeps_the_final_observation_and_info():
    venv = textgym.make_vec("textgym/CartPole-v1", num_envs=2, seed=0, max_episode_steps=3)
    obs, infos = venv.reset()
    assert len(obs) == 2 and all(isinstance(o, str) for o in obs)
    assert infos[0]["valid_actions"] == ["LEFT", "RIGHT"]
    returns = np.zeros(2)
    for step in range(3):
        obs, rewards, terminated, truncated, infos = venv.step(["LEFT", "nonsense"])
        returns += rewards
        assert rewards.dtype == np.float64 and terminated.dtype == bool and truncated.shape == (2,)
    assert truncated.tolist() == [True, True]
    # The returned observation already starts the next episode ...
    assert obs[0] != infos[0]["final_observation"]
    assert "system_prompt" in infos[0] and "parse" not in infos[0]
    # ... and the last step's text and info are kept.
    final = infos[1]["final_info"]
    assert final["episode"] == {"return": returns[1], "length": 3, "invalid_count": 3}
    assert infos[0]["final_info"]["episode"] == {"return": 3.0, "length": 3, "invalid_count": 0}
    assert final["parse"]["raw"] == "nonsense" and final["parse"]["valid"] is False
    assert infos[1]["final_observation"].startswith("Pole ")
    obs, rewards, terminated, truncated, infos = venv.step(["LEFT", "RIGHT"])
    assert not truncated.any() and "final_info" not in infos[0]


def test_errors_are_clear():
    venv = TextVectorEnv([bandit, bandit], seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        venv.step(["cat", "dog"])
    venv.reset()
    with pytest.raises(ValueError, match=r"one action per sub-env \(2\), got 3 actions"):
        venv.step(["cat", "dog", "cat"])
    with pytest.raises(ValueError, match="single str"):
        venv.step("ca")
    with pytest.raises(ValueError, match="share their spaces"):
        TextVectorEnv([bandit, lambda: gym.make("CartPole-v1")])
    with pytest.raises(ValueError, match="at least one"):
        TextVectorEnv([])
