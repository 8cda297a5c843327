"""One parse record (``ParseRecord``) and one invalid-answer sequence (``AnswerCounter``) behind
every env's ``info["parse"]``."""

from __future__ import annotations

import dataclasses

import gymnasium as gym

from textgym.wrappers import AnswerCounter, InvalidAnswerRule, ParseAction, ParseRecord

KEYS = [f.name for f in dataclasses.fields(ParseRecord) if f.name != "error"]


def test_parse_action_records_have_the_record_keys():
    env = ParseAction(gym.make("CartPole-v1"), action_names=["LEFT", "RIGHT"], invalid_policy="retry",
                      max_retries=1)
    env.reset(seed=0)
    infos = [env.step(answer)[4] for answer in ("dance", "dance", "RIGHT")]
    assert [list(info["parse"]) for info in infos] == [KEYS] * 3
    assert [(i["parse"]["policy"], i["parse"]["retries"], i["parse"]["invalid_count"]) for i in infos] == [
        ("retry", 1, 1), ("penalty", 0, 2), (None, 0, 2)]
    assert infos[2]["parse"]["action"] == 1 and infos[2]["parse"]["action_name"] == "RIGHT"


def test_the_sequence_decides_retries_then_falls_back_and_ends():
    counter = AnswerCounter(InvalidAnswerRule(policy="retry", max_retries=2, retry_fallback="terminate"))
    verdicts = [counter.refuse("?")[0] for _ in range(3)]
    assert [v.policy for v in verdicts] == ["retry", "retry", "terminate"] and verdicts[2].ends_episode
    record = counter.accept("LEFT", 0, "LEFT", "keyword")
    assert record.valid and record.invalid_count == 3 and record.retries == 0
    counter.reset()
    assert counter.refuse("?", error="boom")[1].to_dict()["error"] == "boom"
