"""textgym.Agent: the LlamaGym-style act / assign_reward / terminate_episode loop."""

import copy

import pytest

import textgym
from textgym.envs.bandit import ANIMALS, COLORS, CueBanditEnv


class BanditAgent(textgym.Agent):
    def get_system_prompt(self):
        return "Each color has one right animal. Answer with an animal."

    def format_observation(self, cue):
        return f"Color: {COLORS[cue]}."

    def extract_action(self, response):
        for index, animal in enumerate(ANIMALS[:2]):
            if animal in response.lower():
                return index
        return None  # unreadable


class RaisingAgent(BanditAgent):
    def extract_action(self, response):
        raise ValueError("cannot parse")


def _agent(cls, tiny_model_and_tokenizer, **kwargs):
    model, tokenizer = tiny_model_and_tokenizer
    return cls(copy.deepcopy(model), tokenizer, seed=0, **kwargs)


def test_generate_mode_always_returns_a_valid_action(tiny_model_and_tokenizer):
    agent = _agent(RaisingAgent, tiny_model_and_tokenizer, mode="generate", max_new_tokens=4,
                   default_action=1, config={"episodes_per_update": 100})
    env = CueBanditEnv()
    for episode in range(3):
        cue, _ = env.reset(seed=episode)
        action = agent.act(cue)
        assert action == 1  # extract_action raised: the default action is played
        agent.assign_reward(env.step(action)[1])
        agent.terminate_episode()
    step = agent.episodes[0].steps[0]
    assert step.parse["valid"] is False and "cannot parse" in step.parse["error"]
    assert agent.invalid_count == 3 and agent.episodes[0].invalid_count == 1


def test_rewards_stay_aligned_with_turns(tiny_model_and_tokenizer):
    agent = _agent(BanditAgent, tiny_model_and_tokenizer, mode="score", action_names=["cat", "dog"],
                   config={"episodes_per_update": 100})
    with pytest.raises(RuntimeError, match="before any act"):
        agent.assign_reward(1.0)
    for reward in (0.5, -1.0, 2.0):
        agent.act(0)
        agent.assign_reward(reward)
    agent.assign_reward(0.25)  # a second reward for the same turn adds up
    agent.terminate_episode()
    [episode] = agent.episodes
    assert [s.reward for s in episode.steps] == [0.5, -1.0, 2.25]
    assert episode.steps[-1].terminated and episode.return_ == 1.75
    assert all(s.decision.text in ("cat", "dog") and s.parse["valid"] for s in episode.steps)


def test_trains_when_the_batch_is_full(tiny_model_and_tokenizer):
    agent = _agent(BanditAgent, tiny_model_and_tokenizer, mode="score", action_names=["cat", "dog"],
                   algorithm="ppo", config={"episodes_per_update": 3, "minibatch_size": 3})
    env = CueBanditEnv()
    results = []
    for episode in range(7):
        cue, _ = env.reset(seed=episode)
        agent.assign_reward(env.step(agent.act(cue))[1])
        results.append(agent.terminate_episode(train=episode != 6))
    assert [bool(r) for r in results] == [False, False, True, False, False, True, False]
    assert results[2]["update"] == 1 and results[5]["update"] == 2 and "value_loss" in results[2]
    assert agent.episodes == []  # the evaluation episode (train=False) was not kept


def test_agent_from_model_name():
    agent = BanditAgent("tiny", mode="score", action_names=["cat", "dog"])
    assert agent.act(1) in (0, 1)
    with pytest.raises(ValueError, match="action_names"):
        BanditAgent("tiny", mode="score")
