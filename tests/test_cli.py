"""Tests of the ``textgym`` command line: every command and every bad-input case.

Most tests call the Typer app in-process through ``typer.testing.CliRunner``; a few run the
installed console script (or ``python -m textgym.cli``) in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import os
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
