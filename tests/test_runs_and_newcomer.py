"""Hardening 3 (issue #42, items 9-18): play loops, run folders, the viewer, the benchmark table and
what a newcomer meets; one test (or more) per item."""

from __future__ import annotations

import json

import pytest
from test_cli_runs import FAST, one_error_line


@pytest.fixture
def fault_envs():
    import faultenvs

    return faultenvs


@pytest.fixture
def small_cap(monkeypatch):
    """The default step cap at 3 (1000 in real runs: the same code path)."""
    from textgym import step_cap

    monkeypatch.setattr(step_cap, "DEFAULT_MAX_EPISODE_STEPS", 3)
    return 3


# --- 9. every play loop is capped ----------------------------------------------------------------

def test_a_baseline_on_an_endless_env_ends_at_the_default_cap(cli, fault_envs, small_cap, caplog):
    result = cli("eval", "faultenvs:fault/Endless-v0", "--baseline", "random", "--episodes", 2, "--json")
    assert result.exit_code == 0, result.output
    random = json.loads(result.stdout)["results"]["random"]
    assert random["length_mean"] == small_cap and random["cut_episodes"] == 2
    assert "2 episode(s) of fault/Endless-v0 cut at 3 steps" in caplog.text


def test_recorded_demonstrations_of_an_endless_env_end_at_the_cap(fault_envs, small_cap):
    import textgym
    from textgym.baselines import evaluate_reference, random_policy

    seen = []
    stats = evaluate_reference(textgym.make("fault/Endless-v0"), random_policy, episodes=2, seed=0,
                               on_step=lambda obs, info, answer: seen.append(answer))
    assert len(seen) == 2 * small_cap and stats["cut_episodes"] == 2


def test_a_self_play_game_that_never_ends_is_cut_at_the_cap(tiny_policy):
    from textgym import selfplay

    records, stats = selfplay.play_selfplay_games(tiny_policy, "tictactoe", games=2, num_games=2, seed=0,
                                                  max_moves=2)
    assert stats["cut_episodes"] == 4
    for record in records:
        first, second = record.episodes["first"], record.episodes["second"]
        assert (first.length, second.length) == (1, 1)
        assert first.steps[-1].truncated and not first.steps[-1].terminated


def test_playing_an_endless_env_by_hand_ends_at_the_cap(cli, fault_envs, small_cap):
    result = cli("play", "faultenvs:fault/Endless-v0", input="GOOD\n" * 10)
    assert result.exit_code == 0, result.output
    assert "cut at 3 steps" in result.stdout and "length 3" in result.stdout


# --- 14. the last step's info["episode"], as the README says --------------------------------------

def test_the_last_step_carries_info_episode_as_the_readme_says():
    from pathlib import Path

    import textgym

    env = textgym.make("bandit")
    env.reset(seed=0)
    *_, terminated, _, info = env.step("cat")
    assert terminated and set(info["episode"]) == {"return", "length", "invalid_count"}
    assert info["episode_stats"] is info["episode"]   # the earlier key, for one more release
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert '`info["episode"]` (return, length, invalid answers)' in readme


# --- 10. JSONL is split at "\n" only ----------------------------------------------------------------

def test_a_transcript_holding_unicode_line_separators_is_shown_by_view(tmp_path):
    from textgym.cli.viewing import build_report
    from textgym.transcripts import read_transcripts

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text('env = "textgym/Bandit-v0"\n')
    step = {"observation": "line one\u2028line two\u2029\x85end", "answer": "cat", "parse": None,
            "reward": 1.0, "reward_terms": None, "logprob": -0.5}
    record = {"source": "train", "update": 1, "index": 0, "seed": 0, "return": 1.0, "length": 1,
              "invalid": 0, "truncated": False, "system_prompt": "", "steps": [step]}
    (run / "transcripts.jsonl").write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    [read] = read_transcripts(run)
    assert read["steps"][0]["observation"] == step["observation"]
    assert '"total": 1' in build_report([run])


def test_demonstrations_holding_unicode_line_separators_are_read_whole(tmp_path):
    from textgym.trainers.engine.sft import load_demonstrations

    path = tmp_path / "demos.jsonl"
    path.write_text(json.dumps({"prompt": "a\u2028b", "answer": "c\u2029d"}, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    [demo] = load_demonstrations(path)
    assert (demo.prompt, demo.answer) == ("a\u2028b", "c\u2029d")
