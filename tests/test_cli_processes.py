"""``textgym train --processes N``: data-parallel training started by the CLI (torch's elastic
launcher, gloo on CPU), its checks, and a run that resumes with another number of processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from test_cli import lines_of, one_error_line, run_script

# The tiny model learns the bandit in ~20-30 updates of 32 episodes at this learning rate (its
# greedy play, which the env's early-stop check measures, sooner).
LEARN = """model = "tiny"
lr = 3e-3
num_envs = 16
episodes = 1280
eval_episodes = 64
seed = 1
[trainer]
episodes_per_update = 32
minibatch_size = 32
"""


@pytest.mark.slow  # trains to a target in 2 processes
def test_two_processes_learn_the_bandit_and_the_run_resumes_in_one(cli, tmp_path):  # noqa: F811
    config, run = tmp_path / "learn.toml", tmp_path / "run"
    config.write_text(LEARN)
    result = run_script("train", "bandit", "--config", config, "--processes", "2", "--out", run,
                        "--quiet", timeout=240)
    assert result.returncode == 0, result.stderr

    # two processes really ran, neither of them this one
    summary = json.loads((run / "summary.json").read_text())
    pids = [p["pid"] for p in summary["processes"]]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    # the main process wrote exactly one metrics line per update, over both processes' episodes
    metrics = lines_of(run / "metrics.jsonl")
    solved_at = len(metrics)
    assert [m["update"] for m in metrics] == list(range(1, solved_at + 1))
    assert [m["episodes"] for m in metrics] == [32 * u for u in range(1, solved_at + 1)]
    assert all(m["world_size"] == 2 for m in metrics)
    # it learned, and both processes stopped at the update whose greedy check (Bandit's: 32
    # held-out episodes, half each) reached the env's threshold, 0.9
    assert summary["status"] == "solved" and summary["updates"] == solved_at < 40
    assert summary["check"] == metrics[-1]["check"] and summary["check"]["episodes"] == 32
    assert [m["check"]["solved"] for m in metrics if "check" in m][-1] is True
    assert summary["eval"]["episodes"] == 64
    assert summary["first_return_mean"] < 0.7 and summary["eval"]["return_mean"] >= 0.9, summary

    # the checkpoint of the 2-process run continues in 1 process (no launcher)
    result = cli("train", "--resume", run, "--updates", str(solved_at + 2), "--check-every", "0", "--quiet")
    assert result.exit_code == 0, result.output
    metrics = lines_of(run / "metrics.jsonl")
    assert [m["update"] for m in metrics] == list(range(1, solved_at + 3))
    assert metrics[-1]["episodes"] == 32 * (solved_at + 2) and "world_size" not in metrics[-1]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and [p["pid"] for p in summary["processes"]] == [os.getpid()]
    assert summary["eval"]["return_mean"] >= 0.9


def test_a_stop_reaches_every_process_and_is_said_once(tmp_path):
    config, run = tmp_path / "fast.toml", tmp_path / "run"
    config.write_text('model = "tiny"\nnum_envs = 4\nepisodes = 64\n[trainer]\nepisodes_per_update = 8\n')
    # --stop-after 2 acts as a Ctrl-C after the second update (in every process)
    result = run_script("train", "bandit", "--config", config, "--processes", "2", "--out", run,
                        "--quiet", "--stop-after", "2", timeout=240)
    assert result.returncode == 130, result.stderr
    stopped = [line for line in result.stderr.splitlines() if "stopped by Ctrl-C" in line]
    assert len(stopped) == 1 and "after update 2 of 8 (16 episodes)" in stopped[0]
    assert [m["update"] for m in lines_of(run / "metrics.jsonl")] == [1, 2]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["stopped_by"] == "Ctrl-C"
    assert not (run / ".textgym.lock").exists()  # the main process released the run folder


@pytest.mark.parametrize(("args", "message"), [
    (["--processes", "40"], "cannot train in 40 processes: 32 episodes per update cannot be shared by 40"),
    (["--algo", "grpo", "--processes", "9"],
     "cannot train in 9 processes: 8 groups of 4 episodes per update cannot be shared by 9"),
])
def test_processes_that_cannot_share_the_update_fail_before_anything_loads(cli, tmp_path, args,  # noqa: F811
                                                                           message):
    run = tmp_path / "run"
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--out", run, *args))
    assert message in line
    assert not run.exists()


def test_processes_inside_a_launched_process_is_refused(cli, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun sets
    monkeypatch.setenv("RANK", "0")
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--out", tmp_path / "run",
                              "--processes", "2"))
    assert "already started the processes: drop --processes" in line


def test_processes_must_be_positive(cli, tmp_path):  # noqa: F811
    result = cli("train", "bandit", "--processes", "0", "--out", tmp_path / "run")
    assert result.exit_code == 2 and "--processes" in result.stderr
    assert not Path(tmp_path / "run").exists()
