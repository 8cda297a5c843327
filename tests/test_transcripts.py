"""Episode transcripts (``transcripts.jsonl``): what each line records, the bounds on the file, and
resuming like ``metrics.jsonl``; the trainer writing train, check and eval lines."""

from __future__ import annotations

import json

import pytest

import textgym
from textgym.policy import Decision
from textgym.rollout import collect
from textgym.transcripts import TRANSCRIPTS_FILE, TranscriptWriter, pick, read_transcripts

INJECTION = "</script><script>window.pwned = 1</script>"


class Scripted:
    """Answers from a fixed cycle (a valid one, then a garbage one), log-prob -0.5 each."""

    def __init__(self, answers):
        self.answers, self.calls = answers, 0

    def act(self, observations, system_prompts, valid_actions=None, greedy=False):
        decisions = []
        for _ in observations:
            text = self.answers[self.calls % len(self.answers)]
            self.calls += 1
            decisions.append(Decision(text=text, prompt_ids=[1], answer_ids=[2], token_logprobs=[-0.5], logprob=-0.5))
        return decisions


def bandit_episodes(count=4, answers=("cat", INJECTION)):
    venv = textgym.make_vec("textgym/Bandit-v0", num_envs=2, format_bonus=0.1, invalid_penalty=-0.5)
    return collect(Scripted(list(answers)), venv, episodes=count, seed=0).episodes


def test_a_line_records_every_step_of_an_episode(tmp_path):
    episodes = bandit_episodes()
    written = TranscriptWriter(tmp_path, per_update=4).write(episodes, update=3, source="check")
    lines = read_transcripts(tmp_path)
    assert lines == written and len(lines) == 4
    by_answer = {line["steps"][0]["answer"]: line for line in lines}
    valid, invalid = by_answer["cat"], by_answer[INJECTION]
    assert (valid["source"], valid["update"], valid["length"], valid["invalid"]) == ("check", 3, 1, 0)
    step = valid["steps"][0]
    assert step["observation"].startswith("Color: ")
    assert step["parse"] == {"parser": "keyword", "valid": True, "action": "cat"}
    assert step["logprob"] == -0.5
    assert step["reward_terms"]["format"] == pytest.approx(0.1)  # ShapeReward's FormatBonus
    assert step["reward"] == pytest.approx(sum(step["reward_terms"].values()))
    assert valid["return"] == pytest.approx(step["reward_terms"]["scale"])  # the env's own, unshaped
    step = invalid["steps"][0]
    assert step["parse"] == {"parser": None, "valid": False, "action": None}
    assert invalid["invalid"] == 1 and step["reward_terms"]["format"] == 0  # no bonus
    assert step["reward"] == pytest.approx(sum(step["reward_terms"].values()))
    assert invalid["system_prompt"].startswith("Each color")


def test_the_sample_is_spread_over_the_batch_and_the_file_capped(tmp_path):
    assert pick(10, 3) == [0, 4, 9] and pick(2, 4) == [0, 1] and pick(5, 0) == [] and pick(5, 1) == [0]
    episodes = bandit_episodes(count=6)
    one_line = len(json.dumps(read_or_write_one(tmp_path / "probe", episodes)).encode()) + 1
    writer = TranscriptWriter(tmp_path / "run", per_update=2, max_bytes=int(one_line * 2.5))
    assert [r["index"] for r in writer.write(episodes, update=1, source="train")] == [0, 5]
    assert len(writer.write(episodes, update=2, source="train")) == 0  # the third line would pass the cap
    assert writer.write(episodes, update=3, source="train") == []
    assert [r["update"] for r in read_transcripts(tmp_path / "run")] == [1, 1]
    assert TranscriptWriter(tmp_path / "none", per_update=0).write(episodes, update=1, source="train") == []
    assert not (tmp_path / "none").exists()  # nothing is created for nothing


def read_or_write_one(folder, episodes):
    return TranscriptWriter(folder, per_update=1).write(episodes, update=1, source="train")[0]


def test_resume_keeps_the_lines_up_to_the_checkpoint(tmp_path):
    episodes = bandit_episodes(count=2)
    writer = TranscriptWriter(tmp_path, per_update=1)
    for update in (1, 2, 3):
        writer.write(episodes, update=update, source="train")
    path = tmp_path / TRANSCRIPTS_FILE
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines) + "\n" + lines[0][:30])  # a crash tore the next line
    assert [r["update"] for r in read_transcripts(path)] == [1, 2, 3]  # a reader skips the torn line
    assert writer.resume(2) == 2  # update 3 (redone by the resumed run) and the torn line
    assert path.read_text().splitlines() == lines[:2]
    assert writer.resume(2) == 0 and path.read_text().splitlines() == lines[:2]


def test_the_trainer_writes_train_check_and_eval_lines_and_resumes_them(tmp_path, tiny_policy):
    from textgym.trainers import EarlyStop, make_trainer

    config = {"num_envs": 4, "episodes_per_update": 8, "minibatch_size": 8, "lr": 1e-3, "transcripts": 2,
              "report_to": "none"}
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=config, out_dir=tmp_path)
    trainer.train(updates=2, early_stop=EarlyStop(until=2.0, every=2, episodes=4))
    trainer.save_checkpoint()
    trainer.evaluate(episodes=4)
    trainer.train(updates=1)
    seen = [(r["source"], r["update"]) for r in read_transcripts(tmp_path)]
    assert seen == [("train", 1)] * 2 + [("check", 2)] * 2 + [("train", 2)] * 2 + [("eval", 2)] * 2 \
        + [("train", 3)] * 2
    assert all(isinstance(s["logprob"], float) and s["logprob"] <= 0 for r in read_transcripts(tmp_path)
               for s in r["steps"])
    assert not (tmp_path / "tb").exists()  # report_to none: no TensorBoard either

    trainer.load_state(tmp_path / "checkpoint")  # back to update 2: update 3's lines go
    assert [(r["source"], r["update"]) for r in read_transcripts(tmp_path)] == seen[:8]


def test_report_to_is_checked_when_the_config_is_made():
    from textgym.trainers import ReinforceConfig

    with pytest.raises(ValueError, match="unknown tracker 'mlflow'"):
        ReinforceConfig(report_to="tensorboard,mlflow")
    with pytest.raises(ValueError, match=r"transcripts must be an integer in \[0, 10000\], got -1"):
        ReinforceConfig(transcripts=-1)
    assert ReinforceConfig(report_to="none").report_to == "none"


def test_train_flags_set_the_transcripts_and_trackers(tmp_path, cli):
    from textgym.cli import config as run_config
    from textgym.cli.training import _fill_from_trainer, _trainer_config

    layer = run_config.trainer_flags({"env": "bandit", "transcripts": 1, "report_to": "trackio",
                                      "trainer": {"epochs": 2}})
    assert layer == {"env": "bandit", "trainer": {"epochs": 2, "transcripts": 1, "report_to": "trackio"}}
    cfg = run_config.resolve({"updates": 2, "num_envs": 4}, layer)
    trainer_config = _trainer_config(cfg)
    assert (trainer_config.transcripts, trainer_config.report_to, trainer_config.epochs) == (1, "trackio", 2)
    _fill_from_trainer(cfg, trainer_config)
    assert "transcripts = 1\n" in run_config.dumps(cfg)  # kept in config.toml's [trainer]

    result = cli("train", "bandit", "--model", "tiny", "--out", tmp_path / "bad", "--report-to", "tensorboard,mlflow")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and "unknown tracker 'mlflow'" in lines[0], result.stderr
    assert not (tmp_path / "bad").exists()
