"""``textgym train``'s budgets, early stop and alarms: the default run is budgeted in updates
whatever the machine's speed, ``--until`` stops a run once a greedy check passes (status
"solved"), and the alarms an update raises reach the live display, metrics.jsonl and
summary.json."""

from __future__ import annotations

import datetime
import io
import json
import re
import time
import tomllib
from pathlib import Path


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_default_run_does_its_registered_updates_on_a_slow_machine(cli, tmp_path, monkeypatch):
    from textgym.policy import Policy
    from textgym.registry import training_defaults

    act = Policy.act

    def slow_act(self, *args, **kwargs):  # a busy machine: every decision batch takes longer
        time.sleep(0.02)
        return act(self, *args, **kwargs)

    monkeypatch.setattr(Policy, "act", slow_act)
    run = tmp_path / "run"
    # no --updates, --episodes or --minutes: the env's budget (the check is off to run it all)
    result = cli("train", "bandit", "--model", "tiny", "--check-every", "0", "--out", run, "--quiet")
    assert result.exit_code == 0, result.output
    registered = training_defaults("bandit", "score")
    assert [m["update"] for m in lines_of(run / "metrics.jsonl")] == list(range(1, registered.updates + 1))
    saved = tomllib.loads((run / "config.toml").read_text())
    assert saved["updates"] == registered.updates and "minutes" not in saved and "episodes" not in saved
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["updates_planned"] == registered.updates
    assert summary["until"] is None                     # --check-every 0: no early stop


def test_until_stops_a_bandit_run_once_the_greedy_check_passes(cli, tmp_path):
    run = tmp_path / "run"
    config = tmp_path / "c.toml"
    config.write_text("eval_episodes = 16\n")
    result = cli("train", "bandit", "--model", "tiny", "--lr", "3e-3", "--seed", "1", "--updates", "40",
                 "--until", "0.9", "--check-every", "2", "--check-episodes", "32", "--config", config,
                 "--out", run)
    assert result.exit_code == 0, result.output
    assert ("plan: 40 updates of 32 episodes; stops after update 40 or once the greedy return >= 0.9 "
            "(32 held-out episodes every 2 updates), whichever comes first") in result.stdout
    metrics = lines_of(run / "metrics.jsonl")
    checks = [m["check"] for m in metrics if "check" in m]
    assert [c["update"] for c in checks] == list(range(2, len(metrics) + 1, 2))   # every 2 updates
    assert [c["solved"] for c in checks] == [False] * (len(checks) - 1) + [True]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "solved" and summary["updates"] == len(metrics) < 40
    assert summary["check"] == checks[-1] and summary["check"]["return_mean"] >= 0.9
    assert summary["check"]["episodes"] == 32 and summary["until"] == 0.9
    assert summary["eval"]["episodes"] == 16                # the final evaluation still runs
    assert f"update {len(metrics)} check: greedy return" in result.stdout
    assert f"textgym: solved: greedy return {checks[-1]['return_mean']:.3g} >= 0.9 on 32" in result.stdout
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["update_count"] == len(metrics)        # saved at the update that solved it


def test_alarms_reach_the_display_metrics_and_summary(cli, tmp_path):
    run = tmp_path / "run"
    config = tmp_path / "c.toml"
    # a target_kl no update keeps: the KL alarm at update 1, raised once while it lasts
    config.write_text("[trainer]\ntarget_kl = 1e-12\nminibatch_size = 4\nepisodes_per_update = 8\n")
    result = cli("train", "bandit", "--model", "tiny", "--updates", "3", "--check-every", "0",
                 "--num-envs", "8", "--config", config, "--out", run)
    assert result.exit_code == 0, result.output
    alarm_lines = [line for line in result.stdout.splitlines() if " alarm: " in line]
    assert len(alarm_lines) == 1 and alarm_lines[0].startswith("update 1 alarm: kl ")
    assert alarm_lines[0].endswith("one update moved the policy too far: lower lr, or set (or lower) target_kl")
    metrics = lines_of(run / "metrics.jsonl")
    assert [[a["code"] for a in m["alarms"]] for m in metrics] == [["kl_blowup"], [], []]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["alarms"] == metrics[0]["alarms"] and summary["alarms"][0]["update"] == 1


def test_the_live_display_shows_the_plan_checks_and_new_alarms_at_80_columns():
    from rich.console import Console

    from textgym.cli.display import LiveDisplay, alarm_line, plan_line

    alarm = {"code": "entropy_collapse", "update": 6, "message": "entropy 0.012 (2% of log 2), return 21.4 < 195",
             "hint": "the policy stopped exploring before it solved the task: raise entropy_coef or lower lr"}
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=80, color_system=None)
    base = {"episodes": 96, "return_mean": 21.4, "length_mean": 21.4, "invalid_rate": 0.0}
    with LiveDisplay(total=12, console=console, description="CartPole-v1") as display:
        display.log(plan_line(12, episodes_per_update=16, minutes=10, until=195, check_every=2, check_episodes=8))
        display.update({**base, "update": 6, "alarms": [alarm],
                        "check": {"update": 6, "return_mean": 132.0, "episodes": 8, "max_steps": 200,
                                  "until": 195.0, "solved": False}})
        display.update({**base, "update": 7, "alarms": []})        # still collapsed: not shown again
    out = buffer.getvalue()
    assert out.count(alarm_line(alarm)) == 1                       # one line, whole, once
    assert alarm_line(alarm) == ("update 6 alarm: entropy 0.012 (2% of log 2), return 21.4 < 195: the policy "
                                 "stopped exploring before it solved the task: raise entropy_coef or lower lr")
    assert "update 6 check: greedy return 132 on 8 held-out episodes, 200 steps max (target 195)" in out
    assert "stops after update 12, at " in out and "(10 min cap) or once the greedy return >= 195" in out
    frame = out.rsplit("\x1b[2K", 1)[-1].splitlines()           # the bar and the statistics stay in 80
    assert frame[0].startswith("CartPole-v1 ") and "7/12 updates" in frame[0] and len(frame[0]) <= 80
    assert frame[1].startswith("update 7 | return 21.4") and len(frame[1]) <= 80


def test_plan_lines_say_which_budget_applies():
    from textgym.cli.display import plan_line

    at = datetime.datetime(2026, 1, 1, 9, 55)
    assert plan_line(12, episodes_per_update=16) == "plan: 12 updates of 16 episodes; stops after update 12"
    assert plan_line(12, done=4, minutes=10, now=at) == (
        "plan: updates 5-12; stops after update 12 or at 10:05 (10 min cap), whichever comes first")


def test_bad_budget_flags_are_one_line_errors(cli, tmp_path):
    at_least_0 = "greater than or equal to 0|not in the range x>=0"  # Typer 0.29's words | 0.28's
    for args, expected in [(("--until", "inf"), "until must be a finite number"),
                           (("--check-every", "-1"), at_least_0),
                           (("--updates", "-1"), at_least_0),
                           (("--updates", "0"), "updates 0 trains nothing without a warm start")]:
        result = cli("train", "bandit", "--model", "tiny", *args, "--out", tmp_path / "run")
        assert result.exit_code != 0 and re.search(expected, result.output), result.output
        assert not (tmp_path / "run").exists()
    # a negative threshold is a number, not a flag
    result = cli("train", "bandit", "--model", "tiny", "--until", "-0.5", "--updates", "1", "--check-every", "1",
                 "--check-episodes", "4", "--out", tmp_path / "neg", "--quiet")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "neg" / "summary.json").read_text())["status"] == "solved"
