"""collect(): one act call per vector step, independent episode ends, seeds, budgets, stats."""

from __future__ import annotations

import pytest

from textgym.rollout import collect


class CountingPolicy:
    """Wraps a policy and records the batch size of every act() call."""

    def __init__(self, policy):
        self.policy = policy
        self.batches: list[int] = []
        self.counters = policy.counters

    def act(self, observations, system_prompts, valid_actions, greedy=False):
        self.batches.append(len(observations))
        return self.policy.act(observations, system_prompts, valid_actions, greedy=greedy)

    def seed(self, seed):
        self.policy.seed(seed)


def test_episodes_of_different_lengths_finish_independently(tiny_policy, countdown_env_cls):
    envs = [countdown_env_cls(max_length=4) for _ in range(3)]
    policy = CountingPolicy(tiny_policy)
    rollout = collect(policy, envs, episodes=3, seed=0)  # episode j: seed j, length 1 + j
    assert sorted(ep.length for ep in rollout.episodes) == [1, 2, 3]
    assert [ep.length for ep in rollout.episodes] == [1, 2, 3]  # in order of completion
    assert policy.batches == [3, 2, 1]  # one act per vector step; finished envs drop out
    assert [ep.steps[0].env_index for ep in rollout.episodes] == [0, 1, 2]
    assert [ep.seed for ep in rollout.episodes] == [0, 1, 2]
    for ep in rollout.episodes:
        assert ep.return_ == sum(1.0 if s.decision.text == "GOOD" else 0.0 for s in ep.steps)
        assert ep.invalid_count == 0 and ep.steps[-1].terminated
        assert ep.steps[0].observation == f"{ep.length} steps left."
        assert all(s.parse["valid"] for s in ep.steps)
    assert rollout.stats["decisions"] == 6 and rollout.stats["episodes"] == 3


def test_each_env_plays_its_share_of_episodes(tiny_policy, countdown_env_cls):
    envs = [countdown_env_cls(max_length=3) for _ in range(2)]
    rollout = collect(tiny_policy, envs, episodes=5, seed=10)
    assert len(rollout.episodes) == 5
    assert sorted(ep.seed for ep in rollout.episodes) == [10, 11, 12, 13, 14]
    by_env = {}
    for ep in rollout.episodes:
        by_env.setdefault(ep.steps[0].env_index, []).append(ep.seed)
    assert by_env == {0: [10, 12, 14], 1: [11, 13]}  # episode j on env j % 2
    assert all(ep.length == 1 + ep.seed % 3 for ep in rollout.episodes)


def test_a_seed_replays_the_same_episodes(tiny_model_and_tokenizer, countdown_env_cls):
    from textgym.policy import Policy

    policy = Policy(*tiny_model_and_tokenizer, temperature=1e6)  # uniform: the sampling RNG matters
    envs = [countdown_env_cls(max_length=5) for _ in range(4)]

    def play(seed):
        rollout = collect(policy, envs, episodes=8, seed=seed)
        return [(ep.seed, [s.decision.text for s in ep.steps]) for ep in rollout.episodes]

    first = play(3)
    assert play(3) == first
    assert play(4) != first
    assert {text for _, texts in first for text in texts} == {"GOOD", "BAD"}


def test_a_step_budget_makes_exactly_that_many_decisions(tiny_policy, countdown_env_cls):
    envs = [countdown_env_cls(max_length=3) for _ in range(4)]
    policy = CountingPolicy(tiny_policy)
    rollout = collect(policy, envs, steps=10, seed=0)
    assert sum(policy.batches) == 10 and policy.batches == [4, 4, 2]
    done = sum(ep.length for ep in rollout.episodes)
    assert done + sum(ep.length for ep in rollout.unfinished) == 10
    assert all(ep.steps[-1].terminated for ep in rollout.episodes)
    assert not any(ep.steps[-1].terminated for ep in rollout.unfinished)


def test_garbage_answers_are_recorded_not_fatal(tiny_model_and_tokenizer, countdown_env_cls):
    from textgym.policy import Policy

    policy = Policy(*tiny_model_and_tokenizer, mode="generate", max_new_tokens=3, seed=0)
    rollout = collect(policy, [countdown_env_cls(max_length=2)], episodes=2, seed=0)
    steps = rollout.steps
    assert len(steps) == 3 and all(not s.parse["valid"] for s in steps)  # a random model's text
    assert all(s.reward == -1.0 for s in steps)
    assert [ep.invalid_count for ep in rollout.episodes] == [1, 2]
    assert rollout.stats["answer_tokens"] == sum(len(s.decision.answer_ids) for s in steps)


def test_stats_count_prefix_cache_reuse(tiny_policy, countdown_env_cls):
    envs = [countdown_env_cls(max_length=4) for _ in range(4)]
    rollout = collect(tiny_policy, envs, episodes=4, seed=0)
    steps = rollout.steps
    prefix = len(tiny_policy.prompts.system_prefix(countdown_env_cls.system_prompt))
    assert rollout.stats["prompt_tokens_total"] == sum(len(s.decision.prompt_ids) for s in steps)
    # the shared prefix is run once, not once per decision
    assert rollout.stats["prompt_tokens"] == prefix + sum(len(s.decision.prompt_ids) - prefix for s in steps)
    assert rollout.stats["seconds"] > 0 and rollout.stats["decisions_per_s"] > 0


def test_works_with_a_text_vector_env(tiny_policy):
    import textgym

    venv = textgym.make_vec("textgym/Bandit-v0", num_envs=3, seed=0)
    rollout = collect(tiny_policy, venv, episodes=6, seed=5)
    assert len(rollout.episodes) == 6
    for ep in rollout.episodes:  # EpisodeStats' record agrees with the rewards collected
        assert ep.env_return == pytest.approx(ep.info["episode"]["return"]) == pytest.approx(ep.return_)
        assert ep.info["episode"]["length"] == ep.length
    _, info = textgym.make("textgym/Bandit-v0").reset(seed=5)
    assert all(s.decision.text in info["valid_actions"] for s in rollout.steps)
    again = collect(tiny_policy, venv, episodes=6, seed=5)
    assert [s.observation for s in again.steps] == [s.observation for s in rollout.steps]
    assert [s.decision.text for s in again.steps] == [s.decision.text for s in rollout.steps]


def test_bad_budgets_are_rejected(tiny_policy, countdown_env_cls):
    with pytest.raises(ValueError, match="exactly one"):
        collect(tiny_policy, [countdown_env_cls()], episodes=1, steps=1)
    with pytest.raises(ValueError, match="seeds"):
        collect(tiny_policy, [countdown_env_cls()], episodes=1, seed=[1, 2])


def test_works_with_an_unseeded_gymnasium_sync_vector_env(tiny_policy):
    import gymnasium as gym

    import textgym

    venv = gym.vector.SyncVectorEnv([lambda: textgym.make("textgym/Bandit-v0")] * 2)
    rollout = collect(tiny_policy, venv, episodes=4)  # no seed anywhere: each env's generator continues
    assert len(rollout.episodes) == 4 and {ep.steps[0].env_index for ep in rollout.episodes} == {0, 1}
    assert all(ep.seed is None and ep.steps[0].observation.startswith("Color:") for ep in rollout.episodes)


def test_a_schedule_plays_exactly_the_listed_seeds_on_each_env(tiny_policy, countdown_env_cls):
    envs = [countdown_env_cls(max_length=4) for _ in range(3)]
    policy = CountingPolicy(tiny_policy)
    rollout = collect(policy, envs, schedule=[[0, 4], [1], []])
    by_env = {}
    for ep in rollout.episodes:
        by_env.setdefault(ep.steps[0].env_index, []).append((ep.seed, ep.length))
    assert by_env == {0: [(0, 1), (4, 1)], 1: [(1, 2)]}  # length 1 + seed % 4; env 2 plays nothing
    assert policy.batches == [2, 2]  # env 0's second episode runs beside env 1's second step
    with pytest.raises(ValueError, match="replaces"):
        collect(tiny_policy, envs, episodes=2, schedule=[[0], [1], [2]])


def test_max_episode_steps_cuts_long_episodes_and_marks_them_truncated(tiny_policy, countdown_env_cls):
    envs = [countdown_env_cls(max_length=5) for _ in range(2)]
    rollout = collect(tiny_policy, envs, episodes=6, seed=0, max_episode_steps=2)  # full lengths 1..5, 1
    by_seed = {ep.seed: ep for ep in rollout.episodes}
    assert sorted(by_seed) == [0, 1, 2, 3, 4, 5]
    for seed, ep in by_seed.items():
        full = 1 + seed % 5
        assert ep.length == min(full, 2)
        assert ep.truncated == (full > 2) and ep.steps[-1].terminated == (full <= 2)
        assert ep.bootstrap is None  # not asked for
        assert ep.steps[0].observation == f"{full} steps left."  # the next episode was reset: a fresh start
    assert "bootstrap_decisions" not in rollout.stats
    with pytest.raises(ValueError, match="max_episode_steps"):
        collect(tiny_policy, envs, episodes=1, max_episode_steps=0)


def test_bootstrap_asks_one_unplayed_decision_at_each_truncated_episodes_final_state(tiny_policy,
                                                                                      countdown_env_cls):
    envs = [countdown_env_cls(max_length=5) for _ in range(3)]
    policy = CountingPolicy(tiny_policy)
    rollout = collect(policy, envs, episodes=3, seed=2, max_episode_steps=2, bootstrap=True)  # lengths 3, 4, 5
    assert [ep.length for ep in rollout.episodes] == [2, 2, 2] and all(ep.truncated for ep in rollout.episodes)
    tokenizer = tiny_policy.tokenizer
    for ep in rollout.episodes:
        left = 1 + ep.seed % 5 - 2  # where the cut left the countdown
        assert f"{left} steps left." in tokenizer.decode(ep.bootstrap.prompt_ids)
        assert ep.bootstrap.text in countdown_env_cls.action_names
    # the three bootstrap decisions are asked together, in the step after the cut, and not counted
    assert policy.batches == [3, 3, 3]
    assert rollout.stats["decisions"] == 6 and rollout.stats["bootstrap_decisions"] == 3
    terminated = collect(tiny_policy, envs, episodes=3, seed=0, max_episode_steps=2, bootstrap=True)
    assert [ep.bootstrap is None for ep in terminated.episodes] == [True, True, False]  # lengths 1, 2, 3


def test_bootstrap_decisions_spend_no_step_budget(tiny_policy, countdown_env_cls):
    envs = [countdown_env_cls(max_length=5) for _ in range(2)]
    rollout = collect(tiny_policy, envs, steps=7, seed=3, max_episode_steps=2, bootstrap=True)
    assert rollout.stats["decisions"] == 7
    assert sum(ep.length for ep in rollout.episodes + rollout.unfinished) == 7
    assert rollout.stats["bootstrap_decisions"] == sum(ep.bootstrap is not None for ep in rollout.episodes) > 0


def test_a_cut_episode_keeps_its_episode_stats(tiny_policy):
    import textgym

    venv = textgym.make_vec("textgym/CartPole-v1", num_envs=2, shaping=1.0)
    rollout = collect(tiny_policy, venv, episodes=4, seed=0, max_episode_steps=3)
    for ep in rollout.episodes:
        assert ep.length <= 3
        stats = ep.info["episode"]
        assert stats["length"] == ep.length and stats["return"] == ep.length  # CartPole's own +1 per step
        assert ep.return_ != ep.env_return  # the shaped rewards differ from the env's
