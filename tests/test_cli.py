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
from typer.testing import CliRunner

from textgym.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
TEXTGYM = Path(sys.executable).with_name("textgym")


@pytest.fixture
def cli():
    """Invoke the app in-process; returns the Result (stdout and stderr kept apart)."""
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, [str(a) for a in args], input=input)

    return invoke


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
    for command in ("train", "eval", "envs", "play", "plot"):
        assert command in result.stdout


def test_python_dash_m_runs_the_same_app():
    result = subprocess.run([sys.executable, "-m", "textgym.cli", "train", "--help"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "--resume" in result.stdout and "--lora" in result.stdout


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
    assert "'episodes' must be an integer" in line


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
    assert rows["textgym/CartPole-v1"]["training_defaults"]["env_kwargs"] == {"shaping": 1.0}
    assert rows["textgym/Acrobot-v1"]["training_defaults"] is None
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


def test_eval_needs_something_to_evaluate(cli):
    line = one_error_line(cli("eval", "cartpole"))
    assert "nothing to evaluate" in line


def test_eval_missing_checkpoint(cli, tmp_path):
    line = one_error_line(cli("eval", "bandit", "--checkpoint", tmp_path / "nope"))
    assert "does not exist" in line
    (tmp_path / "empty").mkdir()
    line = one_error_line(cli("eval", "bandit", "--checkpoint", tmp_path / "empty"))
    assert "no checkpoint in" in line


def test_missing_model(cli, tmp_path):
    line = one_error_line(cli("eval", "bandit", "--model", "smollm-135"))
    assert "unknown model 'smollm-135'" in line and "smollm2-135m" in line
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


def test_interrupted_run_resumes_where_it_stopped(cli, tmp_path, fast_config):
    run = tmp_path / "run"
    # --stop-after 1 acts as a Ctrl-C after the first update
    result = cli("train", "bandit", "--config", fast_config, "--episodes", "24", "--out", run,
                 "--stop-after", "1")
    assert result.exit_code == 130, result.output
    assert f"textgym train --resume {run}" in result.stdout
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

    # a finished run continues with a bigger budget; a time budget stops it cleanly
    result = cli("train", "--resume", run, "--episodes", "800", "--minutes", "0.001")
    assert result.exit_code == 0, result.output
    updates = [m["update"] for m in lines_of(run / "metrics.jsonl")]
    assert updates == list(range(1, len(updates) + 1)) and 4 <= len(updates) < 100
    assert (f"time budget of 0.001 min reached after update {len(updates)} "
            f"({8 * len(updates)} of 800 episodes)") in result.stdout
    assert json.loads((run / "summary.json").read_text())["status"] == "time_limit"
    import tomllib

    assert tomllib.loads((run / "config.toml").read_text())["episodes"] == 800


def test_bad_trainer_setting_and_bad_sft_file(cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('model = "tiny"\n[trainer]\nepisodes_per_update = 0\n')
    line = one_error_line(cli("train", "bandit", "--config", cfg, "--out", tmp_path / "r1"))
    assert "episodes_per_update must be >= 1" in line
    cfg.write_text('model = "tiny"\n[trainer]\nbatch_sise = 4\n')
    line = one_error_line(cli("train", "bandit", "--config", cfg, "--out", tmp_path / "r1"))
    assert "batch_sise" in line
    demos = tmp_path / "demos.jsonl"
    demos.write_text("not json\n")
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--sft", demos,
                              "--out", tmp_path / "r2"))
    assert "bad SFT file" in line and "demos.jsonl:1" in line
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()


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
    with LiveDisplay(total=40, quiet=False, sample_every=2, console=console) as display:
        assert display.live
        for update in (1, 2, 3, 4):
            display.update(_metrics(update, 10 * update))
    out = buffer.getvalue()
    assert "40/40" in out and "episodes" in out
    assert "return 1" in out and "invalid 12.5%" in out and "12.5 dec/s" in out
    assert "update 2 sample:" in out and "'Color: red.' -> 'cat' (reward 1)" in out
    assert "update 1 sample:" not in out


def test_live_display_is_plain_off_a_terminal_and_silent_when_quiet(capsys):
    import io

    from rich.console import Console

    from textgym.cli.display import LiveDisplay

    plain = LiveDisplay(total=100, console=Console(file=io.StringIO(), force_terminal=False))
    quiet = LiveDisplay(total=100, quiet=True,
                        console=Console(file=io.StringIO(), force_terminal=True))
    assert not plain.live and not quiet.live
    for display in (plain, quiet):
        with display:
            for update in range(1, 51):          # 2 episodes per update
                display.update(_metrics(update, 2 * update))
            display.log("a message")
    lines = capsys.readouterr().out.splitlines()
    progress = [line for line in lines if line.startswith("update ")]
    assert len(progress) == 10                    # one line per tenth of the run, not 50
    assert progress[0].startswith("update 5: 10/100 episodes | return 1.25 |")
    assert progress[-1].startswith("update 50: 100/100 episodes")
    assert lines.count("a message") == 1          # from the plain display; the quiet one is silent


def test_ctrl_c_stops_after_the_update_and_saves_a_checkpoint(tmp_path, fast_config):
    """A real SIGINT to the console script while it trains."""
    import signal
    import time

    run = tmp_path / "run"
    command = [str(TEXTGYM)] if TEXTGYM.exists() else [sys.executable, "-m", "textgym.cli"]
    process = subprocess.Popen(
        [*command, "train", "bandit", "--config", str(fast_config), "--episodes", "100000",
         "--out", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no update within 120 s"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "Stopping after this update" in stdout and "--resume" in stdout
    assert "Traceback" not in stderr
    updates = [m["update"] for m in lines_of(run / "metrics.jsonl")]
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["update_count"] == updates[-1] == len(updates)   # checkpoint of the last update
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"


# --- pieces: config files, baselines -------------------------------------------------------------


def test_resolved_config_round_trips_through_toml(tmp_path):
    from textgym.cli import config

    cfg = config.RunConfig(env="textgym/Taxi-v4", algo="ppo", episodes=12, minutes=2.5,
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
    from textgym.cli.plotting import plot_runs

    assert "win 75%" in stats_line({"return_mean": 0.5, "win_rate": 0.75, "invalid_rate": 0.0})
    assert "win" not in stats_line({"return_mean": 20.0, "invalid_rate": 0.0})
    (tmp_path / "metrics.jsonl").write_text("".join(
        json.dumps({"update": u, "episodes": 8 * u, "wall_time": 10.0 * u, "return_mean": 0.1 * u,
                    "win_rate": 0.1 * u, "loss_rate": 0.5 - 0.1 * u}) + "\n" for u in (1, 2, 3)))
    import matplotlib.image

    with_games = matplotlib.image.imread(plot_runs([tmp_path], tmp_path / "curve.png"))
    (tmp_path / "metrics.jsonl").write_text("".join(
        json.dumps({"update": u, "episodes": 8 * u, "wall_time": 10.0 * u, "return_mean": 0.1 * u})
        + "\n" for u in (1, 2, 3)))
    without = matplotlib.image.imread(plot_runs([tmp_path], tmp_path / "curve.png"))
    assert with_games.shape[0] == without.shape[0] * 5 // 4   # one more panel row: win/loss rate


def test_train_starts_from_the_settings_registered_with_the_env():
    from textgym.cli import training
    from textgym.registry import training_defaults

    cfg = training._new_config({}, {"env": "cartpole"})
    registered = training_defaults("textgym/CartPole-v1", "score")
    assert (cfg.episodes, cfg.num_envs, cfg.minutes) == (registered.episodes, registered.num_envs,
                                                          registered.minutes)
    assert cfg.env_kwargs == {"shaping": 1.0} and cfg.trainer["gamma"] == 0.3
    flagged = training._new_config({"trainer": {"gamma": 0.9}}, {"env": "cartpole", "episodes": 16})
    assert flagged.episodes == 16 and flagged.trainer["gamma"] == 0.9      # file and flags win
    assert flagged.trainer["episodes_per_update"] == 16                     # the rest stays
