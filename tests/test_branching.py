"""Tree rollouts (``branch_turns``): every action of a training episode's states, each played on
from a replay of the episode, and the update that compares them."""

import math
import random

import pytest
import torch

from textgym.rollout import collect, play
from textgym.step_cap import StepCap
from textgym.trainers import ReinforceConfig, make_trainer
from textgym.trainers.algorithms import reinforce
from textgym.trainers.engine.branching import Branch, BranchSlot, ReplayError, branch_turns, grow
from textgym.trainers.engine.losses import returns_to_go


def _episodes(policy, envs, n=4, seed=5):
    return collect(policy, envs, episodes=n, seed=seed).episodes


def test_a_score_decision_records_every_candidates_log_prob(tiny_policy):
    decisions = tiny_policy.act(["obs one", "obs two"], ["sys", "sys"], [["A", "B", "C"], ["X", "Y"]])
    for decision in decisions:
        assert len(decision.candidate_logprobs) == len(decision.candidates)
        assert sum(math.exp(lp) for lp in decision.candidate_logprobs) == pytest.approx(1.0, abs=1e-5)
        assert decision.logprob == decision.candidate_logprobs[decision.action_index]


def test_choosing_another_candidate_takes_its_log_prob_and_a_behaviour_of_one(tiny_policy):
    decision = tiny_policy.act(["obs"], ["sys"], [["A", "B", "C"]])[0]
    other = (decision.action_index + 1) % 3
    forced = decision.choosing(other, "ABC"[other])
    assert (forced.text, forced.action_index, forced.answer_ids) == ("ABC"[other], other, decision.candidates[other])
    assert forced.logprob == decision.candidate_logprobs[other]
    assert forced.behaviour_logprobs == [0.0]
    assert forced.prompt_ids == decision.prompt_ids
    with pytest.raises(ValueError, match="candidate 3"):
        decision.choosing(3, "D")


def test_branch_turns_take_every_turn_or_a_sample_of_them():
    assert branch_turns(4, 4, random.Random(0)) == [0, 1, 2, 3]
    picked = branch_turns(10, 3, random.Random(1))
    assert len(picked) == 3 and picked == sorted(set(picked)) and all(0 <= t < 10 for t in picked)


def test_every_action_of_each_branched_state_gets_its_return(tiny_policy, countdown_env_cls):
    envs = [countdown_env_cls(max_length=4) for _ in range(3)]
    episodes = _episodes(tiny_policy, envs)
    tree = grow(tiny_policy, envs, episodes, turns=10, gamma=0.5, rng=random.Random(0))
    states = sum(len(ep.steps) for ep in episodes)  # every turn branches (each has <= 4)
    assert tree.stats["branched_states"] == states and len(tree.decisions) == 2 * states
    assert tree.stats["branches"] == states
    at = 0
    for episode in episodes:
        to_go = returns_to_go(torch.tensor([s.reward for s in episode.steps]), 0.5)
        for t, step in enumerate(episode.steps):
            pair = tree.decisions[at:at + 2]
            # one decision per candidate, in order, each taken on purpose (behaviour probability 1)
            assert [d.action_index for d in pair] == [0, 1] and [d.text for d in pair] == ["GOOD", "BAD"]
            assert all(d.behaviour_logprobs == [0.0] and d.prompt_ids == step.decision.prompt_ids for d in pair)
            assert [d.logprob for d in pair] == step.decision.candidate_logprobs
            own = step.decision.action_index
            assert float(tree.returns[at + own]) == pytest.approx(float(to_go[t]))
            if t == len(episode.steps) - 1:  # the last turn: each action's own reward, exactly
                assert tree.returns[at:at + 2].tolist() == [1.0, 0.0]
            at += 2


def test_a_branch_replays_its_episode_then_plays_on(tiny_policy, countdown_env_cls):

    env = countdown_env_cls(max_length=4)
    episode = _episodes(tiny_policy, [env], n=1, seed=3)[0]  # 1 + 3 % 4 = 4 steps
    assert episode.length == 4
    step = episode.steps[1]
    other = 1 - step.decision.action_index
    branch = Branch(episode.seed, [s.decision.text for s in episode.steps[:1]], step.observation, step.decision, other)
    slot = BranchSlot(env, 0, [branch], StepCap.of(None))
    slot.start()
    play(tiny_policy, [slot])
    played = branch.episode
    assert played.steps[0].observation == step.observation and played.steps[0].decision.action_index == other
    assert played.length == 3  # the branch's own action and the two turns left
    assert played.steps[0].reward == (1.0 if other == 0 else 0.0)


def test_a_replay_that_reaches_another_state_is_an_error(tiny_policy, countdown_env_cls):
    class Unseeded(countdown_env_cls):
        """Its observation tells how many resets it had: no replay reaches the same text."""

        resets = 0

        def reset(self, *, seed=None, options=None):
            type(self).resets += 1
            return super().reset(seed=seed, options=options)

        def _obs(self):
            return f"{self.remaining} steps left (reset {type(self).resets})."

    envs = [Unseeded(max_length=4)]
    episodes = _episodes(tiny_policy, envs, n=1, seed=3)
    with pytest.raises(ReplayError, match="replays exactly from its seed"):
        grow(tiny_policy, envs, episodes, turns=4, gamma=1.0, rng=random.Random(0))


def test_branch_turns_need_the_state_baseline():
    with pytest.raises(ValueError, match="baseline='state'"):
        ReinforceConfig(branch_turns=2)
    assert ReinforceConfig(branch_turns=2, baseline="state").branch_turns == 2
    with pytest.raises(ValueError, match="branch_turns > 0"):
        ReinforceConfig(baseline="state", branch_value="policy")
    with pytest.raises(ValueError, match="branch_value"):
        ReinforceConfig(baseline="state", branch_turns=2, branch_value="greedy")


@pytest.mark.parametrize("branch_value", ["uniform", "policy"])
def test_branched_states_compare_each_action_with_the_states_value(tiny_policy, countdown_env_cls, monkeypatch,
                                                                     branch_value):
    seen = []
    original = reinforce.same_state_advantages

    def recording(keys, values, fallback=None, weights=None):
        out = original(keys, values, fallback=fallback, weights=weights)
        seen.append((keys, out, weights))
        return out

    monkeypatch.setattr(reinforce, "same_state_advantages", recording)
    envs = [countdown_env_cls(max_length=3) for _ in range(4)]
    trainer = make_trainer("reinforce", tiny_policy, env=envs,
                           config={"num_envs": 4, "episodes_per_update": 8, "baseline": "state", "branch_turns": 3,
                                   "branch_value": branch_value, "importance_floor": 1.0, "lr": 1e-3, "seed": 0})
    trainer.train(updates=1)
    (keys, advantages, weights), = seen
    groups: dict = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    assert len(groups) < len(keys)  # every branched state has both its actions
    for rows in groups.values():
        a = advantages[rows]
        if branch_value == "uniform":
            assert weights is None and float(a.sum()) == pytest.approx(0.0, abs=1e-5)
        else:  # each copy of the state brings the policy's probabilities of its two actions: they sum to 1
            w = weights[rows]
            assert float(w.sum()) == pytest.approx(round(float(w.sum())), abs=1e-4) and round(float(w.sum())) >= 1
            assert float((w * a).sum()) == pytest.approx(0.0, abs=1e-5)  # zero mean under the policy


def test_reinforce_on_a_tree_trains_every_action_of_the_branched_states(tiny_policy, countdown_env_cls):
    envs = [countdown_env_cls(max_length=3) for _ in range(4)]
    trainer = make_trainer("reinforce", tiny_policy, env=envs,
                           config={"num_envs": 4, "episodes_per_update": 8, "baseline": "state", "branch_turns": 3,
                                   "importance_floor": 1.0, "lr": 1e-3, "seed": 0})
    metrics = trainer.train(updates=1)[0]
    assert metrics["branched_states"] == metrics["branches"]  # two actions: one branch per state
    assert metrics["branch_decisions"] > 0 and metrics["importance_weight"] == pytest.approx(1.0)


def test_reinforce_on_trees_learns_the_better_answer(tiny_policy, countdown_env_cls):
    envs = [countdown_env_cls(max_length=3) for _ in range(4)]
    trainer = make_trainer("reinforce", tiny_policy, env=envs,
                           config={"num_envs": 4, "episodes_per_update": 8, "baseline": "state", "branch_turns": 3,
                                   "importance_floor": 1.0, "lr": 3e-3, "seed": 0})
    before = trainer.evaluate(episodes=16, num_envs=4)["return_mean"]
    trainer.train(updates=1)
    after = trainer.evaluate(episodes=16, num_envs=4)["return_mean"]
    assert before == 0.0 and after == 2.0  # from BAD everywhere to GOOD everywhere (lengths 1-3: 2 on average)
