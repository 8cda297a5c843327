"""Tests of run-folder hardening in ``textgym train``: one writer per run folder, checks before
anything is loaded or written, a run folder that never chooses code to import, metrics and
TensorBoard that stay whole across resumes, and SIGTERM handled like Ctrl-C."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]

# The tiny random model on the one-step bandit, 8 episodes per update: an update takes ~0.1 s.
FAST = ('model = "tiny"\nnum_envs = 8\nepisodes = 8\n'
        '[trainer]\nepisodes_per_update = 8\nminibatch_size = 8\n')


def finished_bandit_run(folder: Path, config_text: str = FAST) -> Path:
    """Train the tiny Bandit run of ``config_text`` to its end in ``folder / "run"`` (the shared
    start of the tests that read or damage a finished run: copy it before changing it)."""
    from textgym.cli.main import app
    from typer.testing import CliRunner

    config = folder / "fast.toml"
    config.write_text(config_text)
    result = CliRunner().invoke(app, ["train", "bandit", "--config", str(config), "--out", str(folder / "run"),
                                      "--check-every", "0", "--quiet"])
    assert result.exit_code == 0, result.output
    return folder / "run"


@pytest.fixture
def fast_config(tmp_path):
    path = tmp_path / "fast.toml"
    path.write_text(FAST)
    return path


@pytest.fixture
def no_model_load(monkeypatch):
    """Make loading a model fail loudly: a test using this proves a check came first."""
    from textgym.cli import training

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the check")

    monkeypatch.setattr(training, "build_policy", refuse)


def one_error_line(result) -> str:
    assert result.exit_code != 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("textgym: error: "), lines[0]
    assert "Traceback" not in result.output
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes), folders as empty entries."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"")
            for p in sorted(folder.rglob("*"))}


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- one writer per run folder ------------------------------------------------------------------

HOLD_LOCK = ("import sys, time\n"
             "from textgym.cli.runlock import RunLock\n"
             "RunLock(sys.argv[1]).acquire()\n"
             "print('locked', flush=True)\n"
             "time.sleep(120)\n")


def test_a_second_writer_is_refused_and_a_stale_lock_is_taken_over(cli, tmp_path, fast_config):
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", fast_config, "--out", run, "--quiet")
    assert result.exit_code == 0, result.output
    assert not (run / ".textgym.lock").exists()          # released at the end of the run

    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(run)],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = snapshot(run)
        for args in (("--resume", run, "--episodes", 16),
                     ("bandit", "--config", fast_config, "--out", run, "--force")):
            result = cli("train", *args)
            line = one_error_line(result)
            assert f"run folder {run} is in use by another textgym process (PID {holder.pid})" \
                in line
            assert result.stdout == ""                    # refused before loading anything
            assert snapshot(run) == before
    finally:
        holder.kill()                                     # SIGKILL: its lock file stays behind
        holder.wait()
    assert (run / ".textgym.lock").read_text().strip() == str(holder.pid)

    # the dead PID's lock is stale: the next session takes it over and trains
    result = cli("train", "--resume", run, "--episodes", 16, "--quiet")
    assert result.exit_code == 0, result.output
    assert [m["update"] for m in lines_of(run / "metrics.jsonl")] == [1, 2]
    assert not (run / ".textgym.lock").exists()


def test_run_lock_is_exclusive_and_released():
    import tempfile

    from textgym.cli.errors import CLIError
    from textgym.cli.runlock import RunLock, lock_holder

    folder = Path(tempfile.mkdtemp())
    with RunLock(folder) as lock:
        assert lock.held and lock_holder(folder) == os.getpid()
        # flock is per open file: a second lock in the same process is refused too
        with pytest.raises(CLIError, match=f"PID {os.getpid()}"):
            RunLock(folder).acquire()
    assert lock_holder(folder) is None and list(folder.iterdir()) == []


# --- checks before anything is loaded or written ----------------------------------------------


def test_unknown_env_kwarg_fails_before_the_model_loads(cli, tmp_path, no_model_load):
    config = tmp_path / "c.toml"
    config.write_text('model = "tiny"\n[env_kwargs]\nshapping = 1.0\n')
    run = tmp_path / "run"
    result = cli("train", "cartpole", "--config", config, "--out", run)
    line = one_error_line(result)
    assert result.exit_code == 1
    assert line.startswith("textgym: error: bad [env_kwargs] for textgym/CartPole-v1: ")
    assert "'shapping'" in line and "was raised from" not in line
    assert result.stdout == "" and not run.exists()
    # a bad value of a known setting too
    config.write_text('model = "tiny"\n[env_kwargs]\nshaping = -1.0\n')
    line = one_error_line(cli("train", "cartpole", "--config", config, "--out", run))
    assert "bad [env_kwargs] for textgym/CartPole-v1: shaping must be >= 0" in line
    assert not run.exists()


def test_out_under_a_file_or_in_an_unwritable_folder(cli, tmp_path, no_model_load):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me")
    result = cli("train", "bandit", "--model", "tiny", "--out", a_file / "runs" / "r1")
    line = one_error_line(result)
    assert result.exit_code == 1
    assert line == (f"textgym: error: cannot create run folder {a_file / 'runs' / 'r1'}: "
                    f"{a_file} is a file, not a folder")
    assert a_file.read_text() == "keep me"

    if os.geteuid() == 0:  # root writes into any mode-0555 folder; sysfs refuses it too
        locked, out = Path("/sys"), Path("/sys/textgym-run")
    else:
        locked = tmp_path / "read-only"
        locked.mkdir(mode=0o555)
        out = locked / "runs" / "r1"
    before = sorted(p.name for p in locked.iterdir())
    result = cli("train", "bandit", "--model", "tiny", "--out", out)
    line = one_error_line(result)
    assert result.exit_code == 1
    assert line.startswith(f"textgym: error: cannot create run folder {out}: no permission")
    assert result.stdout == ""
    assert sorted(p.name for p in locked.iterdir()) == before


def test_a_new_run_that_fails_to_start_leaves_no_folder(cli, tmp_path):
    run = tmp_path / "runs" / "r1"
    line = one_error_line(cli("train", "bandit", "--model", tmp_path / "no_model", "--out", run))
    assert "does not exist" in line
    assert not (tmp_path / "runs").exists()


# --- a run folder never chooses code to import ------------------------------------------------

EVIL_MODULE = '''
import pathlib

import textgym

pathlib.Path(__file__).with_name("IMPORTED").write_text("evilmod ran")
textgym.register("Evil-v0", "textgym.envs.bandit:make_bandit", source="evilmod",
                 kwargs={"max_episode_steps": None})
'''


@pytest.fixture
def evil_module(tmp_path, monkeypatch):
    """A module ``evilmod`` importable from the current folder (as with ``python -m`` run
    there) that leaves a marker file when imported and registers ``Evil-v0`` (a bandit)."""
    import gymnasium as gym

    from textgym import registry

    folder = tmp_path / "cwd"
    folder.mkdir()
    (folder / "evilmod.py").write_text(EVIL_MODULE)
    monkeypatch.syspath_prepend(str(folder))
    yield folder / "IMPORTED"
    sys.modules.pop("evilmod", None)
    registry._INFOS.pop("Evil-v0", None)
    gym.registry.pop("Evil-v0", None)


def test_a_run_folder_or_config_file_never_chooses_a_module_to_import(cli, tmp_path, fast_config,
                                                                       evil_module):
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", fast_config, "--out", run, "--quiet")
    assert result.exit_code == 0, result.output
    # a downloaded run folder whose env names a module, in config.toml and trainer_state.json
    config = run / "config.toml"
    config.write_text(config.read_text().replace('"textgym/Bandit-v0"', '"evilmod:Evil-v0"'))
    state_file = run / "checkpoint" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "env_id": "evilmod:Evil-v0"}))
    before = snapshot(run)

    line = one_error_line(cli("train", "--resume", run, "--episodes", 16))
    assert f"the run in {run} names the env 'evilmod:Evil-v0', which would import the " \
           "Python module 'evilmod'" in line
    assert line.endswith(f"If you trust it, run: textgym train evilmod:Evil-v0 --resume {run}")
    # eval takes its env from the command line only, never from the checkpoint
    result = cli("eval", "bandit", "--checkpoint", run, "--episodes", 2, "--num-envs", 2, "--json")
    assert result.exit_code == 0, result.output
    # a config file may not choose a module either
    bad_config = tmp_path / "bad.toml"
    bad_config.write_text('env = "evilmod:Evil-v0"\n' + FAST)
    line = one_error_line(cli("train", "--config", bad_config, "--out", tmp_path / "run2"))
    assert "config file" in line and "'evilmod'" in line
    assert f"run: textgym train evilmod:Evil-v0 --config {bad_config}" in line
    assert not evil_module.exists() and "evilmod" not in sys.modules
    assert snapshot(run) == before and not (tmp_path / "run2").exists()

    # named on the command line, the same id is the user's choice: imported, and the run goes on
    result = cli("train", "evilmod:Evil-v0", "--resume", run, "--episodes", 16, "--quiet")
    assert result.exit_code == 0, result.output
    assert evil_module.read_text() == "evilmod ran"
    assert [m["update"] for m in lines_of(run / "metrics.jsonl")] == [1, 2]


# --- metrics and TensorBoard across resumes -----------------------------------------------------


def test_a_torn_metrics_line_is_restored_from_the_checkpoint(cli, tmp_path, fast_config):
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", fast_config, "--episodes", 24, "--out", run,
                 "--quiet", "--check-every", "0")  # every update of the budget, solved or not
    assert result.exit_code == 0, result.output
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["update"] for line in lines] == [1, 2, 3]
    # the checkpoint keeps the metrics lines up to its update
    assert (run / "checkpoint" / "metrics.jsonl").read_text().splitlines() == lines

    # a crash tore the last line, the checkpoint's own update, mid-JSON
    (run / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])
    result = cli("train", "--resume", run, "--episodes", 40)
    assert result.exit_code == 0, result.output
    assert "metrics.jsonl repaired: 1 torn lines dropped, 1 lines restored from the checkpoint" \
        in result.stdout
    after = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["update"] for line in after] == [1, 2, 3, 4, 5]  # once, in order
    assert after[:3] == lines


def test_tensorboard_matches_metrics_after_resume_and_a_failed_resume_changes_nothing(
        cli, tmp_path, fast_config):
    import shutil

    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    assert cli("train", "bandit", "--config", fast_config, "--episodes", 16, "--out", run,
               "--quiet").exit_code == 0
    shutil.copytree(run / "checkpoint", tmp_path / "checkpoint-2")
    assert cli("train", "--resume", run, "--episodes", 24, "--quiet").exit_code == 0
    # as if killed after update 3's metrics and TensorBoard events, before its checkpoint
    shutil.rmtree(run / "checkpoint")
    shutil.copytree(tmp_path / "checkpoint-2", run / "checkpoint")

    # a resume that fails (here: the adapter weights are missing) changes nothing on disk
    (run / "checkpoint" / "adapter").rename(tmp_path / "adapter")
    before = snapshot(run)
    line = one_error_line(cli("train", "--resume", run, "--episodes", 32))
    assert "cannot resume from" in line
    assert snapshot(run) == before
    (tmp_path / "adapter").rename(run / "checkpoint" / "adapter")

    result = cli("train", "--resume", run, "--episodes", 32)
    assert result.exit_code == 0, result.output
    assert "1 metrics lines after the checkpoint will be redone" in result.stdout
    metrics = lines_of(run / "metrics.jsonl")
    assert [m["update"] for m in metrics] == [1, 2, 3, 4]
    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    scalars = events.Scalars("return_mean")
    assert [s.step for s in scalars] == [1, 2, 3, 4]      # the first update 3 is superseded
    assert [s.value for s in scalars] == pytest.approx([m["return_mean"] for m in metrics])
