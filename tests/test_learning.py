"""Proof that the trainers learn: with the tiny random model on textgym/Bandit-v0 (two colors, two
animals, chance 0.5), each algorithm and the Agent take greedy mean reward on held-out seeds from
chance to >= 0.9 within a fixed budget (each runs in well under a minute on 2 cores).

The tiny model's sampled reward plateaus near 0.85: its tied random embeddings (not trained by
LoRA) bound how far apart two answers' logits can get. Greedy play, the evaluation, reaches 1.0.
"""

import copy

import pytest

import textgym
from textgym.seeds import EVAL_BASE
from textgym.trainers import make_trainer

pytestmark = pytest.mark.slow  # each trains the tiny model to a target, up to BUDGET_UPDATES updates

BUDGET_UPDATES = 60  # 32 episodes each; every algorithm got there in 20-40 updates over seeds 0-4
CONFIGS = {
    "reinforce": {"lr": 3e-3},
    "grpo": {"lr": 3e-3, "group_size": 4, "epochs": 2},
    "ppo": {"lr": 3e-3, "epochs": 2},
}


@pytest.mark.parametrize("algorithm", sorted(CONFIGS))
def test_algorithm_learns_the_bandit(algorithm, tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0)
    config = dict(num_envs=16, episodes_per_update=32, minibatch_size=32, seed=1, **CONFIGS[algorithm])
    trainer = make_trainer(algorithm, policy, env="textgym/Bandit-v0", config=config)

    before = trainer.evaluate(episodes=64)["return_mean"]
    # Stop early once the sampled reward over the last 100 episodes is clearly above chance.
    history = trainer.train(updates=BUDGET_UPDATES, callback=lambda m: m["return_mean"] < 0.8)
    after = trainer.evaluate(episodes=64)["return_mean"]

    assert before <= 0.6, f"the untrained policy should be near chance (0.5), got {before}"
    assert after >= 0.9, f"{algorithm}: greedy reward {before:.2f} -> {after:.2f} after {len(history)} updates"
    assert history[-1]["return_mean"] > history[0]["return_mean"] + 0.2


def test_agent_learns_the_bandit(tiny_model_and_tokenizer):
    from textgym.envs.bandit import ANIMALS, COLORS, CueBanditEnv

    class BanditAgent(textgym.Agent):
        def get_system_prompt(self):
            return "Each color has one right animal. Answer with an animal."

        def format_observation(self, cue):
            return f"Color: {COLORS[cue]}."

        def extract_action(self, response):
            return ANIMALS.index(response.strip())

    model, tokenizer = tiny_model_and_tokenizer
    agent = BanditAgent(copy.deepcopy(model), tokenizer, mode="score", action_names=["cat", "dog"], seed=0,
                        config={"episodes_per_update": 32, "minibatch_size": 32, "lr": 3e-3, "seed": 1})
    # red -> dog, green -> cat: the untrained tiny model happens to prefer the opposite with this prompt
    env = CueBanditEnv(mapping=[1, 0])

    def greedy_reward(first_seed, episodes=64):
        total = 0.0
        for seed in range(first_seed, first_seed + episodes):
            cue, _ = env.reset(seed=seed)
            total += env.step(agent.act(cue, greedy=True))[1]
            agent.terminate_episode(train=False)
        return total / episodes

    before = greedy_reward(EVAL_BASE)
    history = []
    for episode in range(32 * BUDGET_UPDATES):  # the LlamaGym loop: act, step, reward, end
        cue, _ = env.reset(seed=episode)
        agent.assign_reward(env.step(agent.act(cue))[1])
        if metrics := agent.terminate_episode():
            history.append(metrics)
            if metrics["return_mean"] >= 0.8:
                break
    after = greedy_reward(EVAL_BASE)
    assert before <= 0.6 and after >= 0.9, f"agent: greedy reward {before:.2f} -> {after:.2f}"


def test_ppo_learns_from_episodes_cut_short(tiny_model_and_tokenizer, countdown_env_cls):
    """Training episodes capped at 3 steps (PPO bootstraps them from the value of the state they
    reached); greedy play of the full episodes (up to 8 steps) says GOOD at every step."""
    model, tokenizer = tiny_model_and_tokenizer
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0)
    envs = [countdown_env_cls(max_length=8) for _ in range(8)]
    config = dict(num_envs=8, episodes_per_update=16, minibatch_size=32, seed=1, lr=3e-3, epochs=2, gamma=0.9,
                  max_train_episode_steps=3)
    trainer = make_trainer("ppo", policy, env=envs, config=config)

    def good_share():
        result = trainer.evaluate(episodes=16)
        return result["return_mean"] / result["length_mean"]

    before = good_share()
    history = trainer.train(updates=BUDGET_UPDATES, callback=lambda m: m["return_mean"] / m["length_mean"] < 0.9)
    after = good_share()
    assert max(m["length_mean"] for m in history) <= 3  # every training episode was cut at 3 steps
    assert before <= 0.7 and after >= 0.95, f"GOOD share {before:.2f} -> {after:.2f} after {len(history)} updates"
