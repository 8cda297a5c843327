"""Trainer.train's budgets and stops: updates whatever the speed, a time cap checked inside an update
(the partial update dropped, resume replaying it), the greedy early-stop check, and the alarms
and answer statistics each update records."""

from __future__ import annotations

import copy
import time
from collections import Counter

import pytest

import textgym
from textgym.trainers import Trainer, make_trainer
from textgym.trainers.engine.early_stop import CHECK_SEED, EarlyStop

SMALL = {"num_envs": 8, "episodes_per_update": 16, "minibatch_size": 16, "lr": 3e-3}


def slowed(policy, seconds: float):
    """Make ``policy.act`` take ``seconds`` longer per call (a slow or busy machine)."""
    act = policy.act

    def slow_act(*args, **kwargs):
        time.sleep(seconds)
        return act(*args, **kwargs)

    policy.act = slow_act
    return policy


def test_an_update_budget_does_the_same_updates_at_any_speed(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    runs = []
    for delay in (0.0, 0.1):
        policy = slowed(textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0), delay)
        trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=SMALL)
        history = trainer.train(updates=3)
        runs.append(([m["update"] for m in history], [m["episodes"] for m in history],
                     [m["return_mean"] for m in history]))
        assert trainer.stopped_by == "budget"
    (fast_updates, fast_episodes, fast_returns), (slow_updates, slow_episodes, slow_returns) = runs
    assert fast_updates == slow_updates == [1, 2, 3] and fast_episodes == slow_episodes == [16, 32, 48]
    assert slow_returns == pytest.approx(fast_returns)     # the same episodes, too


class FakeClock:
    """``time.monotonic`` for the trainer: advances one second at every policy call."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_a_time_cap_cuts_the_rollout_and_resume_replays_the_dropped_update(
        tiny_model_and_tokenizer, tmp_path, monkeypatch):
    from textgym.trainers.engine import loop

    model, tokenizer = tiny_model_and_tokenizer
    reference = make_trainer("reinforce", textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0),
                             env="textgym/Bandit-v0", config=SMALL)
    uncut = reference.train(updates=3)

    clock = FakeClock()
    monkeypatch.setattr(loop, "time", clock)  # the clock of train()'s time cap
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0)
    act = policy.act

    def ticking_act(*args, **kwargs):
        clock.now += 1.0
        return act(*args, **kwargs)

    policy.act = ticking_act
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=SMALL, out_dir=tmp_path / "run")
    # 16 one-step episodes on 8 envs: two policy calls (two "seconds") per update. The cap comes
    # after the first call of update 2's rollout, which is cut there and dropped.
    history = trainer.train(updates=3, seconds=3.0)
    assert [m["update"] for m in history] == [1] and trainer.stopped_by == "time_limit"
    assert trainer.update_count == 1 and trainer.episodes_seen == 16
    trainer.save_checkpoint()
    monkeypatch.undo()

    fresh = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=5)
    resumed = Trainer.resume(tmp_path / "run" / "checkpoint", policy=fresh)
    assert resumed.update_count == 1
    again = resumed.train(updates=2)
    for replayed, original in zip(again, uncut[1:]):
        for key in ("update", "episodes", "return_mean", "loss", "kl"):
            assert replayed[key] == pytest.approx(original[key], rel=1e-4, abs=1e-6), key


def test_early_stop_checks_at_its_updates_on_held_out_capped_episodes(tiny_policy):
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/CartPole-v1",
                           config={**SMALL, "episodes_per_update": 8}, env_kwargs={"max_episode_steps": 6})
    never = EarlyStop(until=1e9, every=2, episodes=4, max_steps=5)
    history = trainer.train(updates=3, early_stop=never)
    assert trainer.stopped_by == "budget" and len(history) == 3
    assert ["check" in m for m in history] == [False, True, False]
    check = history[1]["check"]
    assert check["update"] == 2 and check["episodes"] == 4 and check["max_steps"] == 5
    assert 1 <= check["return_mean"] <= 5 and check["solved"] is False   # capped at 5 steps
    assert check["until"] == 1e9 and check["seconds"] >= 0
    # the check's seeds are held out: neither the first evaluation seeds nor any training seed
    assert max(never.seeds()) < trainer.config.eval_seed and CHECK_SEED + 4 < trainer.rollout_seed(0)

    # the run's own step limit is tighter than the check's cap: the check reports the one it played
    assert trainer.greedy_check(EarlyStop(until=1.0, episodes=2, max_steps=50)).max_steps == 6

    reached = EarlyStop(until=0.0, every=1, episodes=4)
    history = trainer.train(updates=5, early_stop=reached)
    assert trainer.stopped_by == "solved" and len(history) == 1 and history[0]["check"]["solved"]
    with pytest.raises(ValueError, match="must not reach the evaluation seeds"):
        trainer.train(updates=1, early_stop=EarlyStop(until=1.0, seed=trainer.config.eval_seed - 2))
    with pytest.raises(ValueError, match="every must be at least 1"):
        EarlyStop(until=1.0, every=0)


def test_each_update_records_its_answers_and_the_alarms_it_raised(tiny_policy, tmp_path):
    from textgym.trainers.state.checkpoint import read_state

    # a target_kl no update can keep: the KL alarm is raised at the first update, then only recorded
    config = {**SMALL, "target_kl": 1e-12, "minibatch_size": 4}
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=config)
    history = trainer.train(updates=2)
    first, second = history
    assert first["answer_choices"] == 2 and first["top_answer"] in ("cat", "dog")
    assert 0.5 <= first["top_answer_share"] <= 1.0
    assert [a["code"] for a in first["alarms"]] == ["kl_blowup"] and first["alarms"][0]["update"] == 1
    assert "10x target_kl" in first["alarms"][0]["message"] and first["alarms"][0]["hint"]
    assert second["alarms"] == []                       # still in it: raised once
    assert [s.update for s in trainer.alarm_history] == [1, 2]
    trainer.save_checkpoint(tmp_path / "ck")
    assert [s["update"] for s in read_state(tmp_path / "ck")["alarm_history"]] == [1, 2]
    resumed = Trainer.resume(tmp_path / "ck")
    assert resumed.alarm_history == trainer.alarm_history
    assert resumed.train(updates=1)[0]["alarms"] == []  # the condition lasts across the resume


def test_generate_mode_counts_the_env_actions_and_the_raw_answers(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="generate", max_new_tokens=4, seed=0)
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=SMALL)
    rollout = trainer.collect()
    metrics = trainer.update(rollout.episodes, stats=rollout.stats)
    assert metrics["answer_choices"] == 2                    # the env's action names
    # the parsed action of a valid answer, the text of an invalid one (a random model babbles)
    answers = Counter((s.parse["action_name"] if s.parse["valid"] else s.decision.text.strip())
                      for s in rollout.steps)
    top, count = answers.most_common(1)[0]
    assert (metrics["top_answer"], metrics["top_answer_share"]) == (top, count / 16)
