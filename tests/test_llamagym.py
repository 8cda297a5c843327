"""Coming from LlamaGym: its Blackjack example's structure runs on textgym.Agent unchanged.

The agent below is LlamaGym's ``examples/blackjack.py`` agent (its three methods), built with
LlamaGym's positional constructor and both dicts, and driven by the example's loop; only the
import and the model loading differ (TRL no longer ships value-head models)."""

import copy
import re

import gymnasium as gym
import pytest
import torch

from textgym import Agent
from textgym.agent import llamagym_generate_settings, llamagym_ppo_settings


class BlackjackAgent(Agent):
    def get_system_prompt(self) -> str:
        return """You are an expert blackjack player. Every turn, you'll see your current sum, the dealer's showing card value, and whether you have a usable ace. Win by exceeding the dealer's hand but not exceeding 21.
Decide whether to stay with your current sum by writing "Action: 0" or accept another card by writing "Action: 1". Accept a card unless very close to 21."""

    def format_observation(self, observation: gym.core.ObsType) -> str:
        return f"You: {observation[0]}. Dealer: {observation[1]}. You have {'an' if bool(observation[2]) else 'no'} ace."

    def extract_action(self, response: str) -> gym.core.ActType:
        match = re.compile(r"Action: (\d)").search(response)
        if match:
            return int(match.group(1))

        digits = [char for char in response if char.isdigit()]
        if len(digits) == 0 or digits[-1] not in ("0", "1"):
            if "stick" in response.lower():
                return 0
            elif "hit" in response.lower():
                return 1

        return 0


class ValueHeadModel(torch.nn.Module):
    """What LlamaGym users pass: a language model inside a value-head wrapper."""

    def __init__(self, model):
        super().__init__()
        self.pretrained_model = model
        self.v_head = torch.nn.Linear(model.config.hidden_size, 1)


def test_llamagym_blackjack_example_trains_every_batch_size_turns(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    hyperparams = {
        "batch_size": 8,
        "episodes": 16,
        "generate/max_new_tokens": 6,
        "generate/do_sample": True,
        "generate/top_p": 0.6,
        "generate/top_k": 0,
        "generate/temperature": 0.9,
    }
    agent = BlackjackAgent(
        ValueHeadModel(copy.deepcopy(model)),
        tokenizer,
        "cpu",
        {key: value for key, value in hyperparams.items() if key.startswith("generate/")},
        {"batch_size": hyperparams["batch_size"], "mini_batch_size": hyperparams["batch_size"]},
    )
    assert agent.model is not None and agent.tokenizer is tokenizer and agent.device == torch.device("cpu")
    assert agent.trainer.algorithm == "ppo" and agent.config.kl_coef == 0.2 and agent.policy.history == "full"
    env = gym.make("Blackjack-v1", natural=False, sab=False)

    turns, ends, updates_at, updates = 0, [], [], []
    for episode in range(hyperparams["episodes"]):
        observation, _info = env.reset(seed=episode)
        done = False

        while not done:
            action = agent.act(observation)
            observation, reward, terminated, truncated, _info = env.step(action)
            agent.assign_reward(reward)
            done = terminated or truncated
            turns += 1

        episode_stats = {
            "episode": episode,
            "total_return": sum(agent.current_episode_rewards),
            "message_ct": len(agent.current_episode_messages),
            "episode_messages": agent.current_episode_messages,
        }
        length = len(agent.current_episode_rewards)
        assert episode_stats["message_ct"] == 1 + 2 * length
        assert episode_stats["total_return"] == reward  # Blackjack pays at the end
        roles = [m["role"] for m in episode_stats["episode_messages"]]
        assert roles == ["system"] + ["user", "assistant"] * length
        train_stats = agent.terminate_episode()
        episode_stats.update(train_stats)
        ends.append(turns)
        if train_stats:
            updates_at.append(turns)
            updates.append(train_stats)
        assert len(agent.current_episode_messages) == 1 and agent.current_episode_rewards == []

    # As LlamaGym: an update at the end of the episode in which the turns reach each multiple of
    # batch_size, on exactly batch_size turns (the rest waits in current_batch).
    assert turns >= 16 and len(updates) == turns // 8
    assert [u["update"] for u in updates] == list(range(1, len(updates) + 1))
    assert all(u["decisions"] == 8 * u["update"] for u in updates)
    assert all("value_loss" in u and "ref_kl" in u for u in updates)  # PPO with a KL penalty
    assert len(agent.current_batch["queries"]) == turns % 8
    assert updates_at == [min(end for end in ends if end >= 8 * k) for k in range(1, len(updates) + 1)]


def test_llamagym_form_prompts_with_the_whole_conversation(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    agent = BlackjackAgent(copy.deepcopy(model), tokenizer, "cpu",
                           {"max_new_tokens": 4, "temperature": 0.9}, {"batch_size": 64})
    first = agent.act((12, 10, 0))
    second = agent.act((15, 10, 0))
    assert first in (0, 1) and second in (0, 1)
    [one, two] = [step.decision for step in agent.current_episode]
    assert two.continues(one)  # turn 2 acted on turn 1's prompt and answer, then the new observation
    assert tokenizer.decode(two.prompt_ids).count("You: ") == 2


def test_llamagym_keys_map_to_textgym_settings_and_unknown_ones_warn():
    settings, greedy = llamagym_generate_settings({"generate/max_new_tokens": 12, "generate/do_sample": False,
                                                   "generate/top_p": 0.5, "generate/top_k": 0})
    assert settings == {"max_new_tokens": 12, "top_p": 0.5} and greedy
    with pytest.warns(UserWarning, match=r"'generate/top_k', 'num_beams'.*no textgym setting"):
        llamagym_generate_settings({"generate/top_k": 50, "num_beams": 4})
    fields, turns = llamagym_ppo_settings({"batch_size": 32, "mini_batch_size": 4, "learning_rate": 3e-5,
                                          "ppo_epochs": 2, "lam": 0.9, "cliprange": 0.1, "init_kl_coef": 0.05,
                                          "early_stopping": True, "target_kl": 0.5})
    assert turns == 32
    assert {k: fields[k] for k in ("minibatch_size", "lr", "epochs", "gae_lambda", "clip_eps", "kl_coef",
                                   "target_kl", "value_coef")} == {
        "minibatch_size": 4, "lr": 3e-5, "epochs": 2, "gae_lambda": 0.9, "clip_eps": 0.1, "kl_coef": 0.05,
        "target_kl": 0.5, "value_coef": 0.1}
    with pytest.warns(UserWarning, match=r"'tracker_project_name', 'adap_kl_ctrl'.*no textgym setting"):
        llamagym_ppo_settings({"tracker_project_name": "x", "adap_kl_ctrl": True})


class TextCommandAgent(BlackjackAgent):
    def extract_action(self, response: str):
        match = re.search(r"command: (.+)", response)
        return match.group(1) if match else None  # None: unreadable


def test_unreadable_answers_play_a_text_default_action(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    agent = TextCommandAgent(copy.deepcopy(model), tokenizer, None, {"max_new_tokens": 3}, None,
                             default_action="look")
    assert agent.act((12, 10, 0)) == "look"
    agent.assign_reward(0.0)
    assert agent.current_episode[-1].parse["valid"] is False and agent.invalid_count == 1
    assert agent.current_episode_messages[-1]["role"] == "assistant"  # the answer stays in the chat
