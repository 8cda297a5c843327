"""Hardening 3 (issue #42, items 9-18): play loops, run folders, the viewer, the benchmark table and
what a newcomer meets; one test (or more) per item."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_cli_runs import FAST, finished_bandit_run, one_error_line, snapshot


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


# --- 11. resume and checkpoints ----------------------------------------------------------------

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished tiny Bandit run (1 update, 8 episodes): copy it before changing it."""
    return finished_bandit_run(tmp_path_factory.mktemp("finished"), FAST + "[env_kwargs]\nnum_cues = 2\n")


@pytest.fixture
def run(finished_run, tmp_path):
    """A private copy of :func:`finished_run`."""
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


@pytest.mark.parametrize("old, new, named", [
    ("num_cues = 2", "num_cues = 3", "[env_kwargs] num_cues=3 but the checkpoint was trained with num_cues=2"),
    ("num_cues = 2", "num_cues = 2\nnum_arms = 3", "[env_kwargs] num_arms=3 but the checkpoint was trained with no num_arms"),
    ("[env_kwargs]\nnum_cues = 2", "", "[env_kwargs] no num_cues but the checkpoint was trained with num_cues=2"),
])
def test_resume_refuses_edited_env_kwargs(cli, run, old, new, named):
    config = run / "config.toml"
    assert old in config.read_text(), config.read_text()
    config.write_text(config.read_text().replace(old, new))
    before = snapshot(run)
    line = one_error_line(cli("train", "--resume", run, "--episodes", 16))
    assert "cannot resume" in line and named in line, line
    assert snapshot(run) == before


def test_a_swapped_optimizer_state_is_refused_naming_the_file(cli, run):
    from safetensors.torch import load_file, save_file

    optimizer = run / "checkpoint" / "optimizer.safetensors"
    tensors = load_file(str(optimizer))
    name = next(k for k, v in tensors.items() if v.dim() > 0)
    tensors[name] = torch.zeros(3, 5)   # another adapter's moment
    save_file(tensors, str(optimizer))
    line = one_error_line(cli("train", "--resume", run, "--episodes", 16))
    assert str(optimizer) in line and "shape (3, 5)" in line, line


def test_a_truncated_adapter_is_named(cli, run):
    adapter = run / "checkpoint" / "adapter" / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[: adapter.stat().st_size // 2])
    line = one_error_line(cli("train", "--resume", run, "--episodes", 16))
    assert str(adapter) in line and "truncated" in line, line
    for command in (("eval", "bandit", "--checkpoint", run, "--episodes", 2),
                    ("play", "bandit", "--checkpoint", run)):
        result = cli(*command)
        [line] = [line for line in result.stderr.splitlines() if line.startswith("textgym: error:")]
        assert result.exit_code != 0 and "Traceback" not in result.output
        assert str(adapter) in line and "truncated" in line, (command, line)


# --- 12. score mode on a free-text env fails first ----------------------------------------------

def test_score_mode_on_a_free_text_env_fails_before_the_model_and_the_run_folder(cli, tmp_path, monkeypatch):
    from textgym.cli import training

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(training, "build_policy", no_model)
    monkeypatch.chdir(tmp_path)
    line = one_error_line(cli("train", "reasoning_gym/leg_counting", "--model", "tiny"))
    assert "reasoning_gym/leg_counting takes free-text answers" in line and "--mode generate" in line, line
    line = one_error_line(cli("train", "reasoning_gym/leg_counting", "--model", "tiny", "--out", tmp_path / "run"))
    assert "--mode generate" in line and not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()
    line = one_error_line(cli("eval", "reasoning_gym/leg_counting", "--model", "tiny", "--episodes", 2))
    assert "--mode generate" in line, line


def test_the_registry_declares_which_envs_take_free_text():
    from textgym.registry import takes_free_text

    assert takes_free_text("reasoning_gym/leg_counting")
    assert not takes_free_text("reasoning_gym/leg_counting", {"candidates": ["1", "2"]})
    assert not takes_free_text("reasoning_gym/syllogism")   # a fixed answer set: Yes or No
    assert not takes_free_text("cartpole") and not takes_free_text("textarena/GuessTheNumber-v0")


# --- 13. --episodes is rounded up to whole updates, and says so -------------------------------------

def test_episodes_rounded_up_to_whole_updates_is_said_in_the_plan_and_the_summary(cli, tmp_path):
    config = tmp_path / "fast.toml"
    config.write_text(FAST.replace("episodes = 8\n", "").replace("episodes_per_update = 8", "episodes_per_update = 16"))
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", config, "--out", run, "--episodes", 8, "--check-every", 0)
    assert result.exit_code == 0, result.output
    assert ("plan: 1 update of 16 episodes (--episodes 8 rounded up to whole updates: 16 episodes); "
            "stops after update 1") in result.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes_planned"] == summary["episodes"] == 16


def test_one_update_is_singular():
    from textgym.cli.display import plan_line

    assert plan_line(1, episodes_per_update=8) == "plan: 1 update of 8 episodes; stops after update 1"


# --- 15. textgym view: the greedy checks, an honest KL, a rate axis from 0 ------------------------

def _metrics_run(folder, records):
    folder.mkdir()
    (folder / "config.toml").write_text('env = "textgym/Bandit-v0"\n')
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_view_shows_the_greedy_checks_that_decided_solved(tmp_path):
    import re

    from textgym.cli.viewing import build_report

    records = [{"update": u, "episodes": 8 * u, "return_mean": 0.2 * u, "invalid_rate": 0.0, "kl": 0.0,
                "check": {"update": u, "return_mean": 0.3 * u, "until": 0.9, "solved": 0.3 * u >= 0.9,
                          "episodes": 8}} for u in (1, 2, 3)]
    page = build_report([_metrics_run(tmp_path / "run", records)])
    panel = re.search(r'data-metric="return_mean".*?</svg>', page).group(0)
    assert "greedy checks" in panel and 'data-series="check_return_mean"' in panel
    checks = re.search(r'data-series="check_return_mean"', panel)
    assert checks and panel.count("<circle") >= 3          # a dot per check
    assert "solved at &#8805; 0.9" in panel                # the threshold they are held to
    kl = re.search(r'data-metric="kl".*?</svg>', page).group(0)
    assert "step of each update" in kl and "to the reference" in kl


def test_the_invalid_rate_axis_never_runs_negative(tmp_path):
    import re

    from textgym.cli.viewing import build_report

    records = [{"update": u, "episodes": 8 * u, "return_mean": 1.0, "invalid_rate": 0.0} for u in (1, 2)]
    page = build_report([_metrics_run(tmp_path / "run", records)])
    panel = re.search(r'data-metric="invalid_rate".*?</svg>', page).group(0)
    labels = [float(t) for t in re.findall(r'class="tick" text-anchor="end">([-0-9.e]+)<', panel)]
    assert labels and min(labels) == 0.0 and max(labels) == 1.0, labels


# --- 16. benchmark suites: targets of the row's own evaluation, one number format, "met" --------------

@pytest.mark.parametrize("suite", ["smoke", "quick", "full"])
def test_every_target_matches_its_rows_evaluation(suite):
    from textgym.benchmark import SUITES

    for row in SUITES[suite].rows:
        cap = row.eval_env_kwargs.get("max_episode_steps")
        if cap is not None and row.target.return_at_least is not None:   # CartPole: 1 per step
            assert row.target.return_at_least <= cap and f"{cap}-step cap" in str(row.target), (suite, row.name)
    [cartpole] = [row for row in SUITES["smoke"].rows if row.name == "cartpole-numbers"]
    assert cartpole.eval_env_kwargs["max_episode_steps"] == 20 and cartpole.target.return_at_least == 19.5


def test_the_table_has_one_number_format_and_a_met_column():
    from textgym.benchmark import SUITES, markdown_table

    results = {"rows": {
        "bandit": {"trained": {"return_mean": 1.0}, "references": {"untrained": {"return_mean": 0.25},
                                                                   "random": {"return_mean": 0.5}}},
        "cartpole-numbers": {"trained": {"return_mean": 9.5}, "references": {"untrained": {"return_mean": 17.25},
                                                                             "random": {"return_mean": 20.0}}},
    }}
    table = markdown_table(SUITES["smoke"], results).splitlines()
    assert table[0].endswith("| target | met |")
    bandit, cartpole, blackjack = table[2:]
    assert bandit.endswith("| return >= 1 (the scripted player's) | yes |")
    assert {"9.5", "17.2", "20"} <= {cell.strip() for cell in cartpole.split("|")}
    assert cartpole.endswith(" | no |")
    assert "+" not in cartpole and blackjack.endswith(" | - |")


# --- 17. TextArena: games that need downloads, and how a game ends ----------------------------------

def test_textarena_games_that_download_nltk_data_are_marked_unavailable_offline(cli, monkeypatch):
    pytest.importorskip("textarena")
    from textgym.envs import textarena_games
    from textgym.registry import EnvUnavailableError

    monkeypatch.setattr(textarena_games, "_nltk_has", lambda resource: False)   # offline, no NLTK data
    assert textarena_games.nltk_downloads("Wordle-v0") == ["averaged_perceptron_tagger_eng", "words"]
    assert textarena_games.nltk_downloads("GuessTheNumber-v0") == []
    listed = cli("envs", "--family", "textarena").stdout.splitlines()
    [wordle] = [line for line in listed if line.startswith("textarena/Wordle-v0 ")]
    assert "unavailable offline" in wordle and "words" in wordle
    assert "textarena/GuessTheNumber-v0" in listed            # playable: no reason beside it
    import textgym

    with pytest.raises(EnvUnavailableError, match="averaged_perceptron_tagger_eng, words"):
        textgym.make("textarena/Wordle-v0")
    line = one_error_line(cli("play", "textarena/Wordle-v0", input=""))
    assert "textarena/Wordle-v0 is unavailable offline" in line and "nltk.downloader" in line


def test_a_finished_textarena_game_says_it_ended_and_why():
    pytest.importorskip("textarena")
    import textgym

    env = textgym.make("textarena/GuessTheNumber-v0")
    _, info = env.reset(seed=0)
    done = False
    while not done:   # always the smallest number left: a game lost at the turn limit or won
        obs, reward, terminated, truncated, info = env.step(info["valid_actions"][0])
        done = terminated or truncated
    assert info["outcome"] in ("win", "loss") and info["end_reason"]
    said = {"win": "you won", "loss": "you lost"}[info["outcome"]]
    assert obs.endswith(f"[GAME] The game is over: {said} (reward {reward:.3g}). {info['end_reason']}")


# --- 18. textgym play on a free-text env; textgym --help lines --------------------------------------

def test_playing_a_free_text_env_says_free_text_and_shows_the_answer(cli):
    pytest.importorskip("reasoning_gym")
    result = cli("play", "reasoning_gym/leg_counting", "--seed", 0, input="<answer>1</answer>\n")
    assert result.exit_code == 0, result.output
    assert "(valid actions: )" not in result.stdout and "(free text: answer as you like)" in result.stdout
    import textgym

    env = textgym.make("reasoning_gym/leg_counting")
    env.reset(seed=0)
    answer = env.step("<answer>1</answer>")[-1]["answer"]
    assert f"answer: {answer}\n" in result.stdout


def test_every_command_of_the_help_is_one_whole_sentence(cli):
    import inspect

    from textgym.cli.main import app

    for command in app.registered_commands:
        first = inspect.getdoc(command.callback).split("\n\n")[0]
        assert "\n" not in first and first.endswith("."), (command.name, first)
    result = cli("--help")
    export = result.stdout[result.stdout.index("│ export "):result.stdout.index("│ plot ")]
    assert export.rstrip(" │\n").endswith("card."), export


def test_the_plotted_rate_axes_never_run_negative():
    from textgym.cli.plotting import figure_of

    records = [{"update": u, "episodes": 8 * u, "wall_time": float(u), "return_mean": 1.0, "invalid_rate": 0.0}
               for u in (1, 2)]
    figure = figure_of([("run", records)])
    rates = [ax for ax in figure.axes if ax.get_ylabel() == "invalid-answer rate"]
    assert rates and all(ax.get_ylim() == (0.0, 1.0) for ax in rates)


def test_an_env_setting_left_at_none_is_not_an_edit():
    from textgym.cli.resuming import check_env_kwargs

    check_env_kwargs(Path("run"), {"num_cues": 2}, {"env_kwargs": {"num_cues": 2, "max_episode_steps": None}})
