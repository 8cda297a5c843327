"""Tests of the ``textgym`` command line: every command and every bad-input case.

Most tests call the Typer app in-process through ``typer.testing.CliRunner``; a few run the
installed console script (or ``python -m textgym.cli``) in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
TEXTGYM = Path(sys.executable).with_name("textgym")


def one_error_line(result) -> str:
    """The single ``textgym: error: ...`` line of a failed command (and no traceback)."""
    assert result.exit_code != 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("textgym: error: "), lines[0]
    assert "Traceback" not in result.output + result.stderr
    return lines[0]


def run_script(*args: str, input: str | None = None, timeout: float = 60):
    command = [str(TEXTGYM)] if TEXTGYM.exists() else [sys.executable, "-m", "textgym.cli"]
    return subprocess.run([*command, *map(str, args)], input=input, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


# --- start-up ------------------------------------------------------------------------------


def test_help_lists_every_command():
    result = run_script("--help")
    assert result.returncode == 0, result.stderr
    for command in ("train", "eval", "envs", "play", "plot", "view", "export"):
        assert command in result.stdout
    for option in ("--version", "--install-completion", "--show-completion"):
        assert option in result.stdout


def test_python_dash_m_runs_the_same_app():
    result = subprocess.run([sys.executable, "-m", "textgym.cli", "train", "--help"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "--resume" in result.stdout and "--lora" in result.stdout


def test_version_comes_from_the_installed_package(cli):
    from importlib.metadata import version

    result = cli("--version")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"textgym {version('textgym')}\n"


def test_shell_completion_of_commands_flags_and_env_names():
    import os

    # typer names the shell it finds among the parent processes: start it from bash, whatever
    # started pytest (make, sh, an IDE); "; exit $?" keeps bash from exec-ing the command in its place
    command = str(TEXTGYM) if TEXTGYM.exists() else f"{sys.executable} -m textgym.cli"
    script = subprocess.run(["bash", "-c", f"{command} --show-completion; exit $?"], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert script.returncode == 0, script.stderr
    assert "_TEXTGYM_COMPLETE=complete_bash" in script.stdout and "complete " in script.stdout

    def complete(words: str) -> list[str]:
        env = {**os.environ, "_TEXTGYM_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split(" ")) - 1)}
        command = [str(TEXTGYM)] if TEXTGYM.exists() else [sys.executable, "-m", "textgym.cli"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60,
                              cwd=ROOT)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("textgym tr") == ["train"]
    assert complete("textgym train --algo ") == ["reinforce", "grpo", "ppo"]
    assert complete("textgym train cl") == ["cliffwalking"]
    assert "cartpole" in complete("textgym eval ")


def test_importing_the_cli_does_not_import_torch():
    code = ("import sys, textgym.cli.main; "
            "heavy = [m for m in ('torch', 'transformers', 'peft', 'trl', 'textgym.models', "
            "'matplotlib') if m in sys.modules]; print(heavy)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --- bad input -----------------------------------------------------------------------------


def test_invalid_flag_value_is_one_line_exit_2(cli):
    result = cli("train", "bandit", "--algo", "sarsa")
    line = one_error_line(result)
    assert result.exit_code == 2
    assert "--algo" in line and "sarsa" in line


def test_out_of_range_flag_value(cli):
    line = one_error_line(cli("train", "bandit", "--episodes", "0"))
    assert "--episodes" in line


def test_bad_history_is_refused_before_anything_loads(cli, tmp_path):
    line = one_error_line(cli("train", "cartpole", "--history", "lots", "--out", tmp_path / "run"))
    assert "history must be 'full', 'none' or a number of turns >= 1, got 'lots'" in line
    assert not (tmp_path / "run").exists()
    bad = tmp_path / "bad.toml"
    bad.write_text("history = 0\n")
    line = one_error_line(cli("train", "cartpole", "--config", bad, "--out", tmp_path / "run"))
    assert "history must be" in line and not (tmp_path / "run").exists()


def test_unknown_command_suggests(cli):
    line = one_error_line(cli("trian"))
    assert "train" in line


def test_debug_shows_the_traceback(cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("episodes = [")
    result = cli("train", "bandit", "--config", bad, "--debug")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr


def test_malformed_toml(cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("algo = 'grpo'\nepisodes = = 3\n")
    line = one_error_line(cli("train", "bandit", "--config", bad, "--out", tmp_path / "run"))
    assert "malformed config file" in line and "bad.toml" in line
    assert not (tmp_path / "run").exists()


def test_config_unknown_key_and_wrong_type(cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("epsiodes = 3\n")
    line = one_error_line(cli("train", "bandit", "--config", bad))
    assert "unknown key 'epsiodes'" in line and "episodes" in line
    bad.write_text("episodes = 'many'\n")
    line = one_error_line(cli("train", "bandit", "--config", bad))
    assert "episodes must be an integer" in line and "'many'" in line


def test_missing_config_file(cli, tmp_path):
    line = one_error_line(cli("train", "bandit", "--config", tmp_path / "nope.toml"))
    assert "does not exist" in line


def test_unknown_env_names_close_matches(cli):
    line = one_error_line(cli("train", "cartpol"))
    assert "cartpol" in line and "CartPole" in line


def test_train_without_env_or_resume(cli):
    line = one_error_line(cli("train"))
    assert "ENV" in line or "env" in line


# --- plot ----------------------------------------------------------------------------------


def _fake_run(folder: Path, slope: float) -> Path:
    folder.mkdir(parents=True)
    with open(folder / "metrics.jsonl", "w") as f:
        for update in range(1, 11):
            f.write(json.dumps({
                "update": update, "episodes": 8 * update, "wall_time": 2.0 * update,
                "return_mean": slope * update, "length_mean": 10 + update,
                "invalid_rate": 1 / update, "kl": 0.01 * update, "samples": [],
            }) + "\n")
    return folder


def test_plot_overlays_runs(cli, tmp_path):
    a = _fake_run(tmp_path / "a", 1.0)
    b = _fake_run(tmp_path / "b", 2.0)
    out = tmp_path / "curves.png"
    result = cli("plot", a, b / "metrics.jsonl", "--out", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def _panels(figure) -> list[tuple[str, str]]:
    """(y label, y scale) of each row of a curves figure (its left column)."""
    axes = figure.get_axes()
    return [(ax.get_ylabel(), ax.get_yscale()) for ax in axes[::2]]


def test_plot_kl_axis_is_symlog_and_empty_panels_are_left_out():
    from textgym.cli.plotting import figure_of

    def records(kl_spike: float) -> list[dict]:
        return [{"update": u, "episodes": 8 * u, "wall_time": 2.0 * u, "return_mean": 0.1 * u,
                 "length_mean": 1.0, "kl": kl_spike if u == 3 else 0.002 * u}
                for u in range(1, 6)]

    figure = figure_of([("collapsed", records(2e15)), ("healthy", records(0.01))])
    # no run logged an invalid rate or game outcomes: those panels are gone
    assert _panels(figure) == [("mean return", "linear"), ("mean episode length", "linear"),
                               ("KL: per update (solid), to reference (dashed)", "symlog")]
    kl_axes = figure.get_axes()[4]
    low, high = kl_axes.get_ylim()
    assert high >= 2e15                                    # the spike is on the axis...
    healthy = kl_axes.get_lines()[1]
    assert healthy.get_label() == "healthy" and max(healthy.get_ydata()) == 0.01
    transform = kl_axes.transScale.transform  # ...and the healthy run still spans a visible
    spread = transform([[0, 0.01]])[0][1] - transform([[0, 0.002]])[0][1]  # part of it
    assert spread / (transform([[0, high]])[0][1] - transform([[0, low]])[0][1]) > 0.02
    assert [line.get_label() for line in figure.get_axes()[0].get_lines()] == [
        "collapsed", "healthy"]
    assert figure.get_axes()[0].get_legend() is not None


def test_plot_missing_run(cli, tmp_path):
    line = one_error_line(cli("plot", tmp_path / "nothing"))
    assert "no run at" in line and "nothing" in line
    (tmp_path / "empty").mkdir()
    line = one_error_line(cli("plot", tmp_path / "empty"))
    assert "metrics.jsonl does not exist" in line


# --- envs, play, baselines -------------------------------------------------------------------


def test_envs_lists_builtins_with_actions_and_package(cli):
    result = cli("envs", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in json.loads(result.stdout)}
    assert rows["textgym/CartPole-v1"]["action_names"] == ["LEFT", "RIGHT"]
    assert rows["textgym/CartPole-v1"]["source"] == "textgym"
    assert rows["textgym/Bandit-v0"]["description"]
    assert rows["textgym/CartPole-v1"]["reference_policies"] == ["random", "scripted"]
    assert rows["textgym/CartPole-v1"]["training_defaults"]["env_kwargs"] == {"shaping": 1.0, "word": "heading"}
    acrobot = rows["textgym/Acrobot-v1"]["training_defaults"]   # generate-mode settings only
    assert acrobot["episodes"] is None and acrobot["modes"]["generate"]["env_kwargs"]["answer_format"] == "json"
    table = cli("envs")
    assert table.exit_code == 0
    assert "textgym/Blackjack-v1" in table.stdout and "STICK, HIT" in table.stdout


def test_envs_includes_a_plugin_with_its_package(cli, monkeypatch):
    import textgym
    from textgym import registry

    textgym.register("cliplugin/Coin-v0", "textgym.envs.bandit:make_bandit",
                     description="Heads or tails from a plugin", action_names=["cat", "dog"],
                     source="cli-plugin-pkg")
    try:
        rows = {row["id"]: row for row in json.loads(cli("envs", "--json").stdout)}
        assert rows["cliplugin/Coin-v0"]["source"] == "cli-plugin-pkg"
        assert rows["cliplugin/Coin-v0"]["description"] == "Heads or tails from a plugin"
    finally:
        registry._INFOS.pop("cliplugin/Coin-v0", None)
        import gymnasium as gym

        gym.registry.pop("cliplugin/Coin-v0", None)


def test_play_shows_the_prompt_and_parses_piped_answers(cli):
    answers = 'LEFT\nI push it right\n{"action": "LEFT"}\nbanana\n'
    result = cli("play", "cartpole", "--seed", "0", input=answers)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Answer with one word: LEFT or RIGHT." in out  # the system prompt the model sees
    assert "Pole " in out and "; cart at " in out               # the observation text
    parses = [json.loads(line[len("parse: "):]) for line in out.splitlines()
              if line.startswith("parse: ")]
    assert [(p["action_name"], p["valid"]) for p in parses] == [
        ("LEFT", True), ("RIGHT", True), ("LEFT", True), (None, False)]
    assert parses[2]["parser"] == "json" and parses[3]["parser"] is None
    assert parses[-1]["invalid_count"] == 1
    assert "reward: 1" in out
    assert "end of input" in out


def test_play_a_whole_bandit_episode(cli):
    result = cli("play", "bandit", "--seed", "1", "--episodes", "2", input="cat\ncat\n")
    assert result.exit_code == 0, result.output
    colors = [line for line in result.stdout.splitlines() if line.startswith("Color: ")]
    rewards = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("reward:")]
    assert len(colors) == len(rewards) == 2
    for color, reward in zip(colors, rewards):
        assert reward == ("1" if color == "Color: red." else "0")   # red -> cat, green -> dog
    assert result.stdout.count("episode over") == 2


def test_play_unknown_env(cli):
    line = one_error_line(cli("play", "blackjak"))
    assert "Blackjack" in line


def test_eval_baselines(cli):
    result = cli("eval", "cartpole", "--baseline", "random", "--baseline", "scripted",
                 "--episodes", "10", "--json")
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    assert results["scripted"]["return_mean"] == 500.0      # the PD controller balances it
    assert results["random"]["return_mean"] < 60
    assert results["random"]["return_stderr"] > 0
    assert results["random"]["invalid_rate"] == 0.0
    table = cli("eval", "bandit", "--baseline", "scripted", "--episodes", "5")
    assert table.exit_code == 0 and "1.000 ± 0.000" in table.stdout


def test_eval_config_gives_a_bare_model_its_mode_policy_and_env_settings(cli, tmp_path, monkeypatch):
    from textgym.cli import training

    built = []
    real = training.build_policy

    def spy(model, mode, **settings):
        built.append((mode, settings))
        return real(model, mode, **settings)

    monkeypatch.setattr(training, "build_policy", spy)
    config = tmp_path / "run.toml"  # a train config file: the same tables
    config.write_text('mode = "generate"\n[policy]\nnormalization = "token"\nmax_new_tokens = 3\n'
                      '[env_kwargs]\nmax_episode_steps = 2\n')
    result = cli("eval", "cartpole", "--model", "tiny", "--config", config, "--episodes", "2",
                 "--max-new-tokens", "2", "--json")
    assert result.exit_code == 0, result.output
    [(mode, settings)] = built
    # the file's policy table, under the flags
    assert mode == "generate" and settings["normalization"] == "token" and settings["max_new_tokens"] == 2
    assert json.loads(result.stdout)["results"]["tiny"]["length_mean"] <= 2  # its env_kwargs
    flag = cli("eval", "cartpole", "--model", "tiny", "--config", config, "--episodes", "2",
               "--max-new-tokens", "2", "--max-episode-steps", "1", "--json")
    assert json.loads(flag.stdout)["results"]["tiny"]["length_mean"] == 1  # the flag over the file
    config.write_text('[policy]\nnormalization = "loud"\n')
    line = one_error_line(cli("eval", "cartpole", "--model", "tiny", "--config", config))
    assert "invalid policy settings" in line and "normalization" in line
    assert len(built) == 2  # refused before a model loads


def test_eval_needs_something_to_evaluate(cli):
    line = one_error_line(cli("eval", "cartpole"))
    assert "nothing to evaluate" in line


def test_eval_baseline_names_are_the_envs_reference_policies(cli):
    result = cli("eval", "tictactoe", "--baseline", "optimal", "--episodes", "4", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["results"]["optimal"]["loss_rate"] == 0.0
    result = cli("eval", "tictactoe", "--model", "tiny", "--baseline", "optimall")
    line = one_error_line(result)
    assert result.exit_code == 2 and "optimall" in line and "random, scripted, optimal" in line


def test_eval_missing_checkpoint(cli, tmp_path):
    line = one_error_line(cli("eval", "bandit", "--checkpoint", tmp_path / "nope"))
    assert "does not exist" in line
    (tmp_path / "empty").mkdir()
    line = one_error_line(cli("eval", "bandit", "--checkpoint", tmp_path / "empty"))
    assert "no checkpoint in" in line


def test_missing_model(cli, tmp_path):
    line = one_error_line(cli("eval", "bandit", "--model", "smollm-135"))
    assert "'smollm-135'" in line and "Did you mean: smollm2-135m" in line
    line = one_error_line(cli("train", "bandit", "--model", tmp_path / "no_model",
                              "--out", tmp_path / "run"))
    assert "does not exist" in line
    assert not (tmp_path / "run").exists()


# --- run folders -----------------------------------------------------------------------------


def test_existing_run_folder_is_not_touched(cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"update": 1}\n')
    (run / "config.toml").write_text('env = "textgym/Bandit-v0"\n')
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--out", run))
    assert "already exists" in line and "--resume" in line and "--force" in line
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_force_refuses_to_empty_a_folder_that_is_not_a_run(cli, tmp_path):
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--out", folder, "--force"))
    assert "not a textgym run folder" in line
    assert (folder / "notes.txt").read_text() == "keep me"


def test_resume_bad_folders(cli, tmp_path):
    line = one_error_line(cli("train", "--resume", tmp_path / "nope"))
    assert "does not exist" in line
    (tmp_path / "plain").mkdir()
    line = one_error_line(cli("train", "--resume", tmp_path / "plain"))
    assert "not a textgym run folder" in line


# --- train, eval of its checkpoint, interrupted and resumed runs ---------------------------------

# Small and fast: the tiny random model on the one-step bandit, 8 episodes per update.
FAST = '[trainer]\nepisodes_per_update = 8\nminibatch_size = 8\n'


@pytest.fixture
def fast_config(tmp_path):
    path = tmp_path / "fast.toml"
    path.write_text('model = "tiny"\nnum_envs = 8\nepisodes = 8\n' + FAST)
    return path


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_train_writes_every_run_file_and_eval_reads_its_checkpoint(cli, tmp_path, fast_config):
    run = tmp_path / "run"
    demos = tmp_path / "demos.jsonl"
    demos.write_text(json.dumps({"observation": "Color: red.", "action": "cat"}) + "\n"
                     + json.dumps({"observation": "Color: green.", "action": "dog"}) + "\n")
    result = cli("train", "bandit", "--config", fast_config, "--episodes", "16", "--lr", "3e-4",
                 "--sft", demos, "--out", run)
    assert result.exit_code == 0, result.output
    assert "supervised warm-up" in result.stdout and "done: 2 updates, 16 episodes" in result.stdout

    # the resolved config: file values, flags over them, the trainer's settings filled in
    import tomllib

    saved = tomllib.loads((run / "config.toml").read_text())
    assert saved["env"] == "textgym/Bandit-v0" and saved["model"] == "tiny"
    assert saved["episodes"] == 16 and saved["num_envs"] == 8 and saved["lr"] == 3e-4
    assert saved["trainer"]["episodes_per_update"] == 8 and saved["trainer"]["baseline"] == "batch"
    assert saved["sft"] == str(demos)

    metrics = lines_of(run / "metrics.jsonl")
    assert [m["update"] for m in metrics] == [1, 2]
    assert [m["episodes"] for m in metrics] == [8, 16]
    assert all(0.0 <= m["return_mean"] <= 1.0 and m["samples"] for m in metrics)
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["update_count"] == 2 and state["episodes_seen"] == 16
    assert state["policy"]["name"] == "tiny" and state["policy"]["mode"] == "score"
    assert (run / "checkpoint" / "adapter").is_dir()
    assert (run / "curve.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["updates"] == 2
    assert summary["episodes"] == 16 and summary["env"] == "textgym/Bandit-v0"

    # eval of the checkpoint (run folder or checkpoint folder), beside the baselines
    result = cli("eval", "bandit", "--checkpoint", run, "--episodes", "8", "--num-envs", "8",
                 "--baseline", "random", "--baseline", "scripted", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    model = report["results"]["checkpoint"]
    assert model["episodes"] == 8 and model["length_mean"] == 1.0
    assert 0.0 <= model["return_mean"] <= 1.0 and model["return_stderr"] >= 0.0
    assert model["invalid_rate"] == 0.0                     # score mode always answers validly
    assert report["results"]["scripted"]["return_mean"] == 1.0
    # --config's env_kwargs over the run's (another opponent, here the arms swapped): on the same
    # cues, each greedy answer right before is wrong now and the reverse
    assert model["return_mean"] != 0.5  # (the tiny model learns the Bandit in these 2 updates)
    swapped = tmp_path / "swapped.toml"
    swapped.write_text("[env_kwargs]\nmapping = [1, 0]\n")
    result = cli("eval", "bandit", "--checkpoint", run, "--episodes", "8", "--num-envs", "8",
                 "--config", swapped, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["results"]["checkpoint"]["return_mean"] == 1.0 - model["return_mean"]
    table = cli("eval", "bandit", "--checkpoint", run / "checkpoint", "--episodes", "4",
                "--num-envs", "4")
    assert table.exit_code == 0, table.output
    assert "checkpoint" in table.stdout and "±" in table.stdout
    # a checkpoint copied out of its run folder still names its base model
    import shutil

    shutil.copytree(run / "checkpoint", tmp_path / "moved")
    result = cli("eval", "bandit", "--checkpoint", tmp_path / "moved", "--episodes", "8",
                 "--num-envs", "8", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["results"]["checkpoint"]["episodes"] == 8

    # the run folder exists now: a second train into it is refused, files untouched
    before = (run / "metrics.jsonl").read_bytes()
    line = one_error_line(cli("train", "bandit", "--config", fast_config, "--out", run))
    assert "already exists" in line
    assert (run / "metrics.jsonl").read_bytes() == before

    # --force starts over in a run folder
    result = cli("train", "bandit", "--config", fast_config, "--out", run, "--force", "--quiet")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert [m["update"] for m in lines_of(run / "metrics.jsonl")] == [1]


def test_history_is_saved_in_the_config_and_the_checkpoint(cli, tmp_path, fast_config):
    import tomllib

    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", fast_config, "--history", "full", "--out", run, "--quiet",
                 "--stop-after", "1", "--episodes", "16")
    assert result.exit_code == 130, result.output
    assert tomllib.loads((run / "config.toml").read_text())["history"] == "full"
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["policy"]["history"] == "full"   # textgym eval reads it back from here
    line = one_error_line(cli("train", "--resume", run, "--history", "3"))
    assert "history='3'" in line and "'full'" in line
    result = cli("train", "--resume", run, "--quiet")
    assert result.exit_code == 0, result.output


def test_interrupted_run_resumes_where_it_stopped(cli, tmp_path, fast_config):
    run = tmp_path / "run"
    # --stop-after 1 acts as a Ctrl-C after the first update
    # no greedy check: the tiny model may solve the bandit before the budget this test counts on
    result = cli("train", "bandit", "--config", fast_config, "--episodes", "24", "--out", run,
                 "--stop-after", "1", "--check-every", "0")
    assert result.exit_code == 130, result.output
    assert f"textgym train --resume {run}" in result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["updates"] == 1
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["update_count"] == 1 and state["episodes_seen"] == 8

    # a resumed run cannot change what it trains
    line = one_error_line(cli("train", "--resume", run, "--algo", "grpo"))
    assert "cannot resume" in line and "algo" in line and "reinforce" in line

    # a hard kill between a metrics line and its checkpoint: that update is redone, once
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"update": 2, "episodes": 16, "return_mean": 9.9}) + "\n")
    result = cli("train", "--resume", run)
    assert result.exit_code == 0, result.output
    assert "1 metrics lines after the checkpoint will be redone" in result.stdout
    metrics = lines_of(run / "metrics.jsonl")
    assert all(m["return_mean"] != 9.9 for m in metrics)
    assert [m["update"] for m in metrics] == [1, 2, 3]          # nothing repeated, nothing lost
    assert [m["episodes"] for m in metrics] == [8, 16, 24]
    assert metrics[2]["wall_time"] >= metrics[0]["wall_time"]
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["update_count"] == 3 and state["episodes_seen"] == 24
    assert json.loads((run / "summary.json").read_text())["status"] == "complete"

    # a finished run continues with a bigger budget; a time cap stops it cleanly
    result = cli("train", "--resume", run, "--episodes", "800", "--minutes", "0.001")
    assert result.exit_code == 0, result.output
    updates = [m["update"] for m in lines_of(run / "metrics.jsonl")]
    assert updates == list(range(1, len(updates) + 1)) and 3 <= len(updates) < 100
    assert (f"time cap of 0.001 min reached after update {len(updates)} of 100 "
            f"({8 * len(updates)} episodes)") in result.stdout
    assert json.loads((run / "summary.json").read_text())["status"] == "time_limit"
    import tomllib

    assert tomllib.loads((run / "config.toml").read_text())["episodes"] == 800


def test_bad_trainer_setting_and_bad_sft_file(cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('model = "tiny"\n[trainer]\nepisodes_per_update = 0\n')
    line = one_error_line(cli("train", "bandit", "--config", cfg, "--out", tmp_path / "r1"))
    assert "episodes_per_update must be an integer in [1, " in line
    cfg.write_text('model = "tiny"\n[trainer]\nbatch_sise = 4\n')
    line = one_error_line(cli("train", "bandit", "--config", cfg, "--out", tmp_path / "r1"))
    assert "batch_sise" in line
    demos = tmp_path / "demos.jsonl"
    demos.write_text("not json\n")
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--sft", demos,
                              "--out", tmp_path / "r2"))
    assert "bad SFT file" in line and "demos.jsonl:1" in line
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()


def test_sft_player_warms_up_on_the_env_s_reference_player(cli, tmp_path, fast_config):
    result = cli("train", "bandit", "--config", fast_config, "--updates", "1", "--sft-player", "scripted",
                 "--sft-episodes", "8", "--sft-epochs", "2", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert "supervised warm-up on the scripted player's 8 episodes (mean return 1): 8 decisions" in result.stdout
    # RL followed the warm start: its starting point is kept beside the last checkpoint
    # (textgym benchmark's start_eval), as the warm start left it
    from textgym.trainers import Trainer

    start = Trainer.resume(tmp_path / "run" / "start", env="bandit")
    assert start.update_count == 0 and Trainer.resume(tmp_path / "run" / "checkpoint", env="bandit").update_count == 1
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--sft-player", "oracle",
                              "--out", tmp_path / "r1"))
    assert line == ("textgym: error: --sft-player: textgym/Bandit-v0 has no reference player 'oracle'; "
                    "it has: random, scripted")
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--sft-player", "scripted",
                              "--history", "full", "--out", tmp_path / "r2"))
    assert "sft_player records the newest observation alone; drop history" in line
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()


def test_updates_0_keeps_the_warm_start_alone(cli, tmp_path, fast_config):
    import json

    from textgym.trainers import Trainer

    run, config = tmp_path / "run", tmp_path / "sft.toml"
    # the settings under which the tiny model's greedy play imitates the player perfectly
    # (test_trainers.py::test_score_mode_sft_ranks_the_demonstrated_action_first)
    config.write_text(fast_config.read_text() + "sft_lr = 1e-2\n")  # in its [trainer] table
    result = cli("train", "bandit", "--config", config, "--updates", "0", "--sft-player", "scripted",
                 "--sft-episodes", "16", "--sft-epochs", "20", "--out", run)
    assert result.exit_code == 0, result.output
    assert "updates 0: the warm start alone, no RL update" in result.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["updates"] == 0
    assert summary["wall_time"] > 0  # the warm start's time
    assert not (run / "start").exists()  # no RL after it: the checkpoint is the starting point
    # the checkpoint holds the warm-started policy: it plays the scripted player's answer greedily
    trainer = Trainer.resume(run / "checkpoint", env="bandit")
    assert trainer.update_count == 0
    assert trainer.evaluate(episodes=4)["return_mean"] == 1.0
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--updates", "0", "--out", tmp_path / "r1"))
    assert "updates 0 trains nothing without a warm start" in line
    assert not (tmp_path / "r1").exists()


def test_an_env_may_register_a_warm_start_and_none_turns_it_off(cli, tmp_path, fast_config):
    import gymnasium as gym
    import textgym
    from textgym import registry
    from textgym.training_defaults import TrainingDefaults

    textgym.register("clisft/Bandit-v0", "textgym.envs.bandit:make_bandit", action_names=["cat", "dog"],
                     training_defaults=TrainingDefaults(updates=1, sft_player="scripted", sft_episodes=6,
                                                        sft_epochs=1),
                     reference_policies={"scripted": "textgym.envs.bandit:scripted_bandit"})
    try:
        result = cli("train", "clisft/Bandit-v0", "--config", fast_config, "--out", tmp_path / "on")
        assert result.exit_code == 0, result.output
        assert "warm-up on the scripted player's 6 episodes" in result.stdout
        assert "warm-up epoch 1/1" in result.stdout
        result = cli("train", "clisft/Bandit-v0", "--config", fast_config, "--sft-player", "none",
                     "--out", tmp_path / "off")
        assert result.exit_code == 0, result.output
        assert "warm-up" not in result.stdout
    finally:
        registry._INFOS.pop("clisft/Bandit-v0", None)
        registry._REFERENCES.pop("clisft/Bandit-v0", None)
        gym.registry.pop("clisft/Bandit-v0", None)


# --- the live display ----------------------------------------------------------------------------


def _metrics(update: int, episodes: int) -> dict:
    return {"update": update, "episodes": episodes, "return_mean": 0.25 * update,
            "length_mean": 1.0, "invalid_rate": 0.125, "decisions_per_s": 12.5,
            "samples": [{"prompt": "Color: red.", "answer": "cat", "reward": 1.0}]}


def test_live_display_on_a_terminal_shows_progress_stats_and_samples():
    import io

    from rich.console import Console

    from textgym.cli.display import LiveDisplay

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=200)
    with LiveDisplay(total=4, quiet=False, sample_every=2, console=console) as display:
        assert display.live
        for update in (1, 2, 3, 4):
            display.update(_metrics(update, 10 * update))
    out = buffer.getvalue()
    assert "4/4" in out and "updates" in out
    assert "return 1" in out and "invalid 12.5%" in out and "12.5 dec/s" in out
    assert "update 2 sample:" in out and "'Color: red.' -> 'cat' (reward 1)" in out
    assert "update 1 sample:" not in out


def test_live_display_keeps_bar_count_and_eta_readable_at_80_columns():
    import io

    from rich.console import Console

    from textgym.cli.display import LiveDisplay

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=80, color_system=None)
    metrics = {**_metrics(3, 120), "win_rate": 0.5, "kl": 0.00123, "length_mean": 21.4}
    with LiveDisplay(total=12, console=console, description="ConnectFour-v3") as display:
        display.update(metrics)
    # the last frame: the bar line, then the statistics on their own line
    frame = buffer.getvalue().rsplit("\x1b[2K", 1)[-1].splitlines()
    bar, stats = frame[0], frame[1]
    assert len(bar) <= 80 and len(stats) <= 80
    assert bar.startswith("ConnectFour-v3 ━") and "3/12 updates" in bar
    assert "eta 0:00:" in bar or "eta -:--:--" in bar
    assert stats.startswith("update 3 | return 0.75 | win 50% | len 21.4 | invalid 12.5%")


def test_live_display_is_plain_off_a_terminal_and_silent_when_quiet():
    import io

    from rich.console import Console

    from textgym.cli.display import LiveDisplay

    plain = LiveDisplay(total=50, console=Console(file=io.StringIO(), force_terminal=False))
    quiet = LiveDisplay(total=50, quiet=True,
                        console=Console(file=io.StringIO(), force_terminal=True))
    assert not plain.live and not quiet.live
    for display in (plain, quiet):
        with display:
            for update in range(1, 51):          # 2 episodes per update
                display.update(_metrics(update, 2 * update))
            display.log("Stopping after this update.", style="yellow")
    assert quiet.console.file.getvalue() == ""
    lines = plain.console.file.getvalue().splitlines()
    progress = [line for line in lines if line.startswith("update ")]
    assert len(progress) == 10                    # one line per tenth of the run, not 50
    assert progress[0].startswith("update 5/50: 10 episodes | return 1.25 |")
    assert progress[-1].startswith("update 50/50: 100 episodes")
    assert lines[-1] == "Stopping after this update."  # no markup, no colour codes


def test_messages_are_styled_on_a_terminal_and_plain_elsewhere():
    import io

    from rich.console import Console

    from textgym.cli.messages import say, styled

    terminal = Console(file=io.StringIO(), force_terminal=True, color_system="standard")
    pipe = Console(file=io.StringIO(), force_terminal=False)
    for console in (terminal, pipe):
        say("Stopping after this update.", style="yellow", console=console)
        say(styled(("update 2 sample:", "dim"), " runs/[bold]x -> 'cat'"), console=console)
    assert pipe.file.getvalue() == ("Stopping after this update.\n"
                                    "update 2 sample: runs/[bold]x -> 'cat'\n")
    shown = terminal.file.getvalue()
    assert "\x1b[33mStopping after this update.\x1b[0m" in shown   # yellow on a terminal
    assert "runs/[bold]x" in shown                 # text is never read as markup
    # a long line stays one line in a log file (no wrapping at the console width)
    say("x" * 300, console=pipe)
    assert pipe.file.getvalue().splitlines()[-1] == "x" * 300


def _wait_for_first_update(run: Path, process=None, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text():
        if process is not None:
            assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"no update within {timeout} s"
        time.sleep(0.1)


def _check_stopped_run(run: Path, stderr: str, said: str) -> int:
    """Checks of a run stopped by a signal; returns its number of updates."""
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"textgym: stopped by {said} after update ")
    assert last.endswith(f"checkpoint saved. Continue with: textgym train --resume {run}")
    assert "Traceback" not in stderr
    updates = [m["update"] for m in lines_of(run / "metrics.jsonl")]
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["update_count"] == updates[-1] == len(updates)   # checkpoint of the last update
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["stopped_by"] == said
    assert not (run / ".textgym.lock").exists()
    return len(updates)


def test_sigterm_stops_after_the_update_saves_a_checkpoint_and_resumes(cli, tmp_path,
                                                                       fast_config):
    """SIGTERM, what a cluster scheduler sends before it kills a job, to the console script
    while it trains (meanwhile a second writer is refused): handled like the first Ctrl-C."""
    import signal

    run = tmp_path / "run"
    command = [str(TEXTGYM)] if TEXTGYM.exists() else [sys.executable, "-m", "textgym.cli"]
    process = subprocess.Popen(
        [*command, "train", "bandit", "--config", str(fast_config), "--episodes", "100000",
         "--check-every", "0", "--out", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        _wait_for_first_update(run, process)
        # the folder is locked by the training process: a second writer gets one line
        line = one_error_line(cli("train", "--resume", run))
        assert f"is in use by another textgym process (PID {process.pid})" in line
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, stderr
    assert "SIGTERM: stopping after this update to save a checkpoint" in stdout
    assert "[yellow]" not in stdout and "\x1b[" not in stdout    # no markup off a terminal
    updates = _check_stopped_run(run, stderr, "SIGTERM")

    # --resume continues from that checkpoint
    result = cli("train", "--resume", run, "--episodes", 8 * (updates + 1), "--check-every", "0", "--quiet")
    assert result.exit_code == 0, result.output
    assert [m["update"] for m in lines_of(run / "metrics.jsonl")] == list(range(1, updates + 2))


def test_ctrl_c_stops_after_the_update_and_says_so(cli, tmp_path, fast_config):
    """A real SIGINT to this process while the command trains in it (from another thread)."""
    import os
    import signal
    import threading

    run = tmp_path / "run"

    def press_ctrl_c():
        _wait_for_first_update(run)
        os.kill(os.getpid(), signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    presser.start()
    # no greedy check: the tiny model can solve the Bandit and stop before the signal arrives
    result = cli("train", "bandit", "--config", fast_config, "--episodes", 100000, "--check-every", "0",
                 "--out", run, "--quiet")
    presser.join()
    assert result.exit_code == 130, result.output
    assert result.stdout == ""                               # --quiet: no progress ...
    _check_stopped_run(run, result.stderr, "Ctrl-C")        # ... but the line saying why it ended


# --- pieces: config files, baselines -------------------------------------------------------------


def test_resolved_config_round_trips_through_toml(tmp_path):
    from textgym.cli import config

    cfg = config.RunConfig(env="textgym/Taxi-v4", algo="ppo", history="4", episodes=12, minutes=2.5,
                           lr=3e-5, lora=False, sft='demos "x".jsonl',
                           trainer={"gamma": 0.99, "lora_target_modules": ["q_proj", "v_proj"],
                                    "target_kl": float("inf")},
                           env_kwargs={"max_episode_steps": 50})
    path = tmp_path / "config.toml"
    path.write_text(config.dumps(cfg))
    assert config.resolve(config.load_toml(path)) == cfg
    # flags override the file, tables merge key by key
    merged = config.resolve(config.load_toml(path), {"episodes": 99, "lr": None,
                                                     "trainer": {"gamma": 0.9}})
    assert merged.episodes == 99 and merged.lr == 3e-5
    assert merged.trainer["gamma"] == 0.9 and merged.trainer["lora_target_modules"] == [
        "q_proj", "v_proj"]


def test_an_env_without_a_scripted_policy_says_so(cli, countdown_env_cls):
    import gymnasium as gym

    import textgym
    from textgym import registry

    textgym.register("clitest/Countdown-v0", countdown_env_cls, description="test env",
                     action_names=["GOOD", "BAD"], source="clitest")
    try:
        result = cli("eval", "clitest/Countdown-v0", "--baseline", "scripted", "--baseline",
                     "random", "--episodes", "4", "--json")
        assert result.exit_code == 0, result.output
        results = json.loads(result.stdout)["results"]
        assert results["scripted"] is None                  # said, not faked
        assert results["random"]["episodes"] == 4
        table = cli("eval", "clitest/Countdown-v0", "--baseline", "scripted", "--episodes", "2")
        assert "no scripted policy for this env" in table.stdout
    finally:
        registry._INFOS.pop("clitest/Countdown-v0", None)
        gym.registry.pop("clitest/Countdown-v0", None)


def test_eval_of_a_game_reports_win_draw_loss(cli):
    result = cli("eval", "tictactoe", "--baseline", "random", "--baseline", "scripted",
                 "--episodes", "6", "--json")
    assert result.exit_code == 0, result.output
    for stats in json.loads(result.stdout)["results"].values():
        rates = [stats[f"{o}_rate"] for o in ("win", "draw", "loss")]
        assert sum(rates) == pytest.approx(1.0)
        assert stats["return_mean"] == pytest.approx(stats["win_rate"] - stats["loss_rate"])
    table = cli("eval", "tictactoe", "--baseline", "random", "--episodes", "4")
    assert "win / draw / loss" in table.stdout


def test_stats_line_and_plot_show_the_win_rate_of_games(tmp_path):
    from textgym.cli.display import stats_line
    from textgym.cli.plotting import figure_of

    assert "win 75%" in stats_line({"return_mean": 0.5, "win_rate": 0.75, "invalid_rate": 0.0})
    assert "win" not in stats_line({"return_mean": 20.0, "invalid_rate": 0.0})
    games = [{"update": u, "episodes": 8 * u, "wall_time": 10.0 * u, "return_mean": 0.1 * u,
              "win_rate": 0.1 * u, "loss_rate": 0.5 - 0.1 * u, "invalid_rate": 0.0}
             for u in (1, 2, 3)]
    assert [label for label, _ in _panels(figure_of([("ttt", games)]))] == [
        "mean return", "win rate (solid), loss rate (dashed)", "invalid-answer rate"]
    win_axes = figure_of([("ttt", games)]).get_axes()[2]
    assert [line.get_linestyle() for line in win_axes.get_lines()] == ["-", "--"]


def test_train_starts_from_the_settings_registered_with_the_env():
    from textgym.cli import training
    from textgym.registry import training_defaults

    cfg = training._new_config({}, {"env": "cartpole"}, None)
    registered = training_defaults("textgym/CartPole-v1", "score")
    assert (cfg.updates, cfg.episodes, cfg.minutes) == (registered.updates, None, None) == (12, None, None)
    assert (cfg.until, cfg.check_every, cfg.check_episodes, cfg.check_max_steps) == (
        registered.until, registered.check_every, registered.check_episodes, registered.check_max_steps)
    assert cfg.num_envs == registered.num_envs
    assert cfg.env_kwargs == {"shaping": 1.0, "word": "heading"} and cfg.trainer["gamma"] == 0.3
    flagged = training._new_config({"trainer": {"gamma": 0.9}}, {"env": "cartpole", "episodes": 16},
                                 None)
    assert flagged.episodes == 16 and flagged.trainer["gamma"] == 0.9      # file and flags win
    assert flagged.updates is None                                          # a budget given replaces the env's
    assert flagged.trainer["episodes_per_update"] == 16 and flagged.until == 195   # the rest stays
    assert training.planned_updates(flagged, 16) == 1
    both = training._new_config({"updates": 5}, {"env": "cartpole", "episodes": 48}, None)
    assert (both.updates, both.episodes, training.planned_updates(both, 16)) == (5, 48, 3)  # whichever first


def test_generate_mode_starts_from_the_env_s_generate_defaults_and_think_on_top():
    from textgym.cli import training
    from textgym.registry import training_defaults
    from textgym.wrappers.answer_format import ANSWER_FORMATS

    registered = training_defaults("textgym/Bandit-v0", "generate")
    cfg = training._new_config({}, {"env": "bandit", "mode": "generate"}, None)
    assert cfg.policy == registered.policy and cfg.policy["prefill"] == '{"action": "'
    assert cfg.env_kwargs["answer_format"] == "json" and cfg.env_kwargs["format_bonus"] > 0
    # --think: the think format asked by the env and answered by the policy, generate mode implied
    think = training._new_config({}, {"env": "bandit", "think": True}, None)
    assert think.mode == "generate" and think.env_kwargs["answer_format"] == "think"
    assert think.policy["stop"] == ["</answer>"] and think.policy["prefill"] == ""
    assert think.policy["max_new_tokens"] == ANSWER_FORMATS["think"].max_new_tokens
    assert think.policy["temperature"] == registered.policy["temperature"]  # the env's choice stays
    assert think.env_kwargs["format_bonus"] == registered.env_kwargs["format_bonus"]
    # a config file's [policy] wins over both
    tuned = training._new_config({"policy": {"max_new_tokens": 300}}, {"env": "bandit", "think": True},
                                 None)
    assert tuned.policy["max_new_tokens"] == 300 and tuned.policy["stop"] == ["</answer>"]


def test_policy_table_reaches_the_policy_and_bad_settings_fail_first(cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('model = "tiny"\nmode = "generate"\nepisodes = 8\nnum_envs = 8\n'
                   '[trainer]\nepisodes_per_update = 8\n[policy]\ntemperature = 0.5\nmax_new_tokens = 3\n')
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", cfg, "--out", run, "--quiet")
    assert result.exit_code == 0, result.output
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["policy"]["temperature"] == 0.5 and state["policy"]["max_new_tokens"] == 3
    assert state["policy"]["prefill"] == '{"action": "'           # the env's generate defaults
    assert state["env_kwargs"]["answer_format"] == "json"
    metrics = lines_of(run / "metrics.jsonl")
    assert all(s["answer"].startswith('{"action": "') for s in metrics[0]["samples"])
    summary = json.loads((run / "summary.json").read_text())  # the answers at the start and at the end
    assert summary["first_samples"] == metrics[0]["samples"] and summary["last_samples"] == metrics[-1]["samples"]
    assert summary["first_invalid_rate"] == metrics[0]["invalid_rate"]
    for bad, message in (("temprature = 0.5", "temprature"), ("top_p = 2.0", "top_p"),
                         ("seed = 3", "--seed")):
        cfg.write_text(f'model = "tiny"\nmode = "generate"\n[policy]\n{bad}\n')
        line = one_error_line(cli("train", "bandit", "--config", cfg, "--out", tmp_path / "bad"))
        assert "invalid policy settings" in line and message in line
    assert not (tmp_path / "bad").exists()
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--think", "--mode", "score",
                              "--out", tmp_path / "bad"))
    assert "think needs generate mode" in line
