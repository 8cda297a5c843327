"""Self-play: one policy in every seat, per-role baselines, evaluation against fixed opponents."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from textgym.selfplay import SelfPlay, SelfPlayConfig, evaluate_vs, play_selfplay_games


@dataclass
class FakeDecision:
    text: str


class ScriptedPolicy:
    """A stand-in with textgym.Policy's act() signature: a seeded random legal move (or garbage)."""

    def __init__(self, garbage_rate: float = 0.0):
        self.rng = np.random.default_rng(0)
        self.garbage_rate = garbage_rate
        self.calls = 0

    def seed(self, seed):
        self.rng = np.random.default_rng(seed)

    def act(self, observations, system_prompts, valid_actions, greedy=False):
        self.calls += 1
        assert len(observations) == len(system_prompts) == len(valid_actions)
        out = []
        for valid in valid_actions:
            assert valid, "the acting seat always has legal moves"
            if self.rng.random() < self.garbage_rate:
                out.append(FakeDecision("I refuse to play"))
            else:
                out.append(FakeDecision(str(self.rng.choice(valid))))
        return out


def test_selfplay_games_credit_each_seat():
    policy = ScriptedPolicy()
    records, stats = play_selfplay_games(policy, "tictactoe", games=12, num_games=4, seed=0)
    assert len(records) == 12 and stats["episodes"] == 24
    assert policy.calls < stats["decisions"]          # one act() call serves several games
    for record in records:
        first, second = record.episodes["first"], record.episodes["second"]
        assert len(first.steps) in (len(second.steps), len(second.steps) + 1)
        # zero-sum game, no invalid answers: the returns are +1/-1 or 0/0, matching the outcomes
        assert first.return_ + second.return_ == 0
        expected = {"win": 1.0, "draw": 0.0, "loss": -1.0}
        assert first.return_ == expected[record.outcomes["first"]]
        assert second.return_ == expected[record.outcomes["second"]]
        assert first.steps[-1].terminated and second.steps[-1].terminated
        assert all(s.reward == 0 for s in first.steps[:-1])   # only the last move is credited
        assert first.system_prompt == second.system_prompt and "tic-tac-toe" in first.system_prompt
        assert "You are X." in first.steps[0].observation and "You are O." in second.steps[0].observation
        assert all(s.parse["valid"] for s in first.steps + second.steps)
    # the same seed replays the same games
    again, _ = play_selfplay_games(ScriptedPolicy(), "tictactoe", games=12, num_games=4, seed=0)
    assert [r.outcomes for r in again] == [r.outcomes for r in records]


def test_garbage_answers_never_crash_selfplay():
    records, _ = play_selfplay_games(ScriptedPolicy(garbage_rate=0.5), "connect_four", games=4,
                                     num_games=2, seed=1, invalid="penalty", penalty=-0.5)
    assert len(records) == 4
    invalid = [s for r in records for ep in r.episodes.values() for s in ep.steps if not s.parse["valid"]]
    assert invalid and all(s.parse["policy"] == "penalty" for s in invalid)
    for record in records:
        for role, episode in record.episodes.items():
            penalties = -0.5 * sum(1 for s in episode.steps if not s.parse["valid"])
            game = {"win": 1.0, "draw": 0.0, "loss": -1.0}[record.outcomes[role]]
            assert episode.return_ == pytest.approx(game + penalties)


class CapturingTrainer:
    """Records what SelfPlay hands to trainer.update()."""

    def __init__(self):
        self.batches = []

    def update(self, episodes, stats=None):
        self.batches.append(list(episodes))
        return {"update": len(self.batches), "loss": 0.0}


def test_per_role_baseline_centres_each_seat():
    trainer = CapturingTrainer()
    run = SelfPlay(ScriptedPolicy(), config=SelfPlayConfig(num_games=4, games_per_update=16, eval_games=0),
                   trainer=trainer)
    metrics = run.update()
    episodes = trainer.batches[0]
    assert len(episodes) == 32
    first = [ep.return_ for ep in episodes if ep.info["role"] == "first"]
    second = [ep.return_ for ep in episodes if ep.info["role"] == "second"]
    assert episodes[0].info["role"] == "first" and episodes[-1].info["role"] == "second"  # grouped by role
    assert abs(np.mean(first)) < 1e-9 and abs(np.mean(second)) < 1e-9
    assert metrics["first/baseline"] == pytest.approx(metrics["first/return_mean"])
    assert metrics["first/win_rate"] + metrics["first/draw_rate"] + metrics["first/loss_rate"] == pytest.approx(1)
    assert metrics["first/win_rate"] == metrics["second/loss_rate"]


def test_evaluate_vs_fixed_opponents():
    result = evaluate_vs(ScriptedPolicy(), "tictactoe", "scripted", games=10, num_envs=4)
    assert result["win_rate"] + result["draw_rate"] + result["loss_rate"] == pytest.approx(1)
    assert result["loss_rate"] >= 0.6                    # random play loses to the script
    assert {"first/win_rate", "second/loss_rate"} <= set(result)


def test_short_selfplay_run_with_tiny_model(tmp_path):
    import torch

    import textgym

    policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
    run = SelfPlay(policy, "reinforce",
                   # the tiny model's games can all end alike: a per-role baseline would leave no
                   # signal, so this run uses the trainer's batch normalisation alone
                   SelfPlayConfig(num_games=4, games_per_update=4, eval_games=2, role_baseline="none"),
                   trainer_config={"lr": 1e-2, "num_envs": 1}, out_dir=tmp_path)
    trained = list(run.trainer.trainable_parameters())   # the LoRA weights the trainer added
    before = [p.detach().clone() for p in trained]
    history = run.train(updates=1)
    metrics = history[-1]
    for key in ("first/win_rate", "second/win_rate", "first/baseline", "vs_random/win_rate",
                "vs_scripted/loss_rate", "vs_random/first/win_rate", "policy_loss"):
        assert key in metrics, key
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trained)), "the update changed the weights"
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged[-1]["first/win_rate"] == metrics["first/win_rate"]


@pytest.mark.parametrize("env_id", ["textgym/TicTacToe-v0", "textarena/TicTacToe-v0"])
def test_opponent_self_is_the_learner_in_training_and_random_in_held_out_games(tiny_policy, monkeypatch, env_id):
    if env_id.startswith("textarena/"):
        pytest.importorskip("textarena")
    import textgym
    from textgym.trainers import make_trainer

    rows = []
    act = tiny_policy.act

    def recording_act(observations, *args, **kwargs):
        rows.append(len(observations))
        return act(observations, *args, **kwargs)

    monkeypatch.setattr(tiny_policy, "act", recording_act)
    trainer = make_trainer("reinforce", tiny_policy, env_id,
                           {"num_envs": 2, "episodes_per_update": 4, "seed": 0},
                           env_kwargs={"opponent": "self"})
    assert all(env.get_wrapper_attr("opponent") is tiny_policy for env in trainer.venv.envs)
    metrics = trainer.train(updates=1)[-1]
    learner, opponent = metrics["decisions"], sum(rows) - metrics["decisions"]
    # tic-tac-toe: the opponent moves at least twice a game, every move the learner's policy's
    assert metrics["episodes"] == 4 and opponent >= 2 * 4 and learner >= 3 * 4 - 4
    assert "opponent" not in trainer.held_out.env_kwargs      # held-out games: the default, random
    rows.clear()
    result = trainer.evaluate(episodes=4, seed=0)
    # only the learner's own moves went through the policy: the opponent was random
    assert result["episodes"] == 4 and sum(rows) == round(result["length_mean"] * 4)
    lone = textgym.make(env_id, opponent="self", seat="second")    # no trainer: one clear error
    with pytest.raises(RuntimeError, match="the learner itself"):
        lone.reset(seed=0)
