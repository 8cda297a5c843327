"""The example scripts run end to end (their --quick settings: the random tiny model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # generates 4 games and trains 6 updates
def test_textworld_example_wins_more_training_games_than_before_training(tmp_path):
    pytest.importorskip("textworld")
    env = dict(os.environ, TEXTGYM_HOME=str(tmp_path / "home"))
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "textworld_train.py"), "--quick",
                          "--out-dir", str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "win rate on training games" in run.stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["training_episodes"] == 48           # --quick: 6 updates of 8 episodes
    # against the untrained policy of the same run: it won one training game of two, the trained
    # one wins both (what it learned: greedy play, every game once, seed 0)
    assert results["before"]["train"] == 0.5 and results["after"]["train"] == 1.0
    # one-command quests in one room: a random player wins some of them within 3 commands
    assert results["random"]["train"] > 0 and results["random"]["test"] > 0
    # the games were generated into TEXTGYM_HOME (2 training + 2 held-out, each a .z8 with its .json)
    assert len(list((tmp_path / "home" / "textworld").rglob("*.z8"))) == 4
    assert (tmp_path / "out" / "metrics.jsonl").is_file()
