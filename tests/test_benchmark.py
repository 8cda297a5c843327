"""``textgym benchmark``: the smoke suite end to end (files, rows, references), resuming run by run,
bad flags, and every declared suite resolving to valid ``textgym train`` settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textgym.cli import benchmarking, evaluation, training

from textgym.baselines import reference_policy_names
from textgym.benchmark import SUITES
from textgym.outcomes import mean_and_stderr
from textgym.registry import resolve_id
from textgym.seeds import EVAL_BASE

SMOKE = SUITES["smoke"]


def one_error_line(result) -> str:
    assert result.exit_code != 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output + result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def smoke_out(tmp_path_factory):
    """The smoke suite, run once for the module's tests (tiny model, about a minute on 2 cores)."""
    from textgym.cli.main import app
    from typer.testing import CliRunner

    out = tmp_path_factory.mktemp("bench") / "smoke"
    result = CliRunner().invoke(app, ["benchmark", "--suite", "smoke", "--out", str(out)])
    assert result.exit_code == 0, result.output + result.stderr
    return out, result


def test_smoke_suite_writes_the_table_and_json_with_references(smoke_out):
    out, result = smoke_out
    data = json.loads((out / "results.json").read_text())
    assert (data["suite"], data["model"], data["seeds"]) == ("smoke", "tiny", 1)
    assert len(data["commits"]) == 1  # the commit of the session that ran the steps
    assert list(data["rows"]) == [row.name for row in SMOKE.rows]
    table = (out / "results.md").read_text().splitlines()
    lines = [line for line in table if line.startswith("| ") and not line.startswith("| run ")]
    assert [line.split(" | ")[0][2:] for line in lines] == [row.name for row in SMOKE.rows]
    for row, line in zip(SMOKE.rows, lines, strict=True):
        entry = data["rows"][row.name]
        references = entry["references"]
        # the untrained model and every reference the env registers, on the same held-out seeds
        assert set(references) == {"untrained", *reference_policy_names(resolve_id(row.env))}
        assert {"random", "scripted"} <= set(references)
        for reference in references.values():
            assert reference["episodes"] == row.eval_episodes
        assert references["random"]["seed"] == EVAL_BASE
        [run] = entry["runs"]
        assert run["seed"] == 0 and run["status"] == "complete"
        assert run["updates"] == row.settings["updates"]
        assert run["eval"]["episodes"] == row.eval_episodes
        assert entry["trained"]["return_mean"] == run["eval"]["return_mean"]
        assert Path(run["run_dir"], "checkpoint").is_dir()  # a real textgym train run folder
        # its starting point (no warm start: the untrained model) on the same held-out episodes,
        # and what RL changed
        assert run["start"] == "untrained" and run["start_eval"] == references["untrained"]
        assert run["gain"]["return"] == pytest.approx(run["eval"]["return_mean"] - run["start_eval"]["return_mean"])
        # the same seeds, episode by episode: the gain's error is the paired one
        assert run["gain"]["paired"] is True and len(run["eval"]["episode_returns"]) == row.eval_episodes
        assert run["gain"]["return_stderr"] == pytest.approx(mean_and_stderr(
            [a - b for a, b in zip(run["eval"]["episode_returns"], run["start_eval"]["episode_returns"])])[1])
        assert entry["gain"]["return"] == pytest.approx(run["gain"]["return"])
        # the table shows these numbers: trained, start, (the gain), untrained, random, scripted,
        # optimal (if any)
        cells = line.strip("| ").split(" | ")
        assert (cells[9] == "none") == ("optimal" not in references)
        assert float(cells[5].split()[0]) == pytest.approx(run["gain"]["return"], abs=0.051 * max(1, abs(run["gain"]["return"])))
        shown_references = [references[name] for name in ("random", "scripted", "optimal") if name in references]
        for cell, value in zip([*cells[3:5], *cells[6:6 + 1 + len(shown_references)]],
                               (run["eval"], run["start_eval"], references["untrained"], *shown_references),
                               strict=True):
            shown = float(cell.split()[0])
            assert shown == pytest.approx(value["return_mean"], abs=0.051 * max(1, abs(value["return_mean"])))
    # the scripted players: the bandit's names the right animal every time
    assert data["rows"]["bandit"]["references"]["scripted"]["return_mean"] == 1.0
    # off a terminal: one line per finished step and the closing line
    assert result.stdout.count("\n") == len(SMOKE.rows) * 2 + 1


def test_the_same_command_again_trains_and_evaluates_nothing(smoke_out, cli, monkeypatch):
    out, _ = smoke_out
    before = json.loads((out / "results.json").read_text())

    def refuse(*args, **kwargs):
        raise AssertionError("a finished benchmark step ran again")

    monkeypatch.setattr(training, "run", refuse)
    monkeypatch.setattr(evaluation, "_model_evaluation", refuse)
    result = cli("benchmark", "--suite", "smoke", "--out", out)
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout.count("(done before)") == len(SMOKE.rows) * 2
    after = json.loads((out / "results.json").read_text())
    assert after["rows"] == before["rows"] and after["commits"] == before["commits"]


def test_a_half_finished_run_resumes_from_its_checkpoint(smoke_out, cli, monkeypatch):
    """A run whose training stopped (its summary not complete, no benchmark record) continues with
    ``textgym train --resume``, not from scratch; then it is evaluated."""
    out, _ = smoke_out
    run_dir = out / "runs" / "bandit-seed0"
    record = json.loads((run_dir / "benchmark.json").read_text())
    (run_dir / "benchmark.json").unlink()
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    calls = []
    real_run = training.run

    def spy(flags, **kwargs):
        calls.append(kwargs)
        return real_run(flags, **kwargs)

    monkeypatch.setattr(training, "run", spy)
    result = cli("benchmark", "--suite", "smoke", "--out", out)
    assert result.exit_code == 0, result.output + result.stderr
    assert [call.get("resume") for call in calls] == [run_dir]
    again = json.loads((run_dir / "benchmark.json").read_text())
    assert again["eval"]["return_mean"] == record["eval"]["return_mean"]  # the same weights, greedy
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "complete"


def test_rows_runs_some_rows_and_the_table_keeps_the_others_records(smoke_out, cli, tmp_path, monkeypatch):
    out, _ = smoke_out
    part = tmp_path / "part"
    result = cli("benchmark", "--suite", "smoke", "--rows", "bandit", "--out", part)
    assert result.exit_code == 0, result.output + result.stderr
    data = json.loads((part / "results.json").read_text())
    assert [len(data["rows"][row.name]["runs"]) for row in SMOKE.rows] == [1, 0, 0]
    assert "finished" not in data  # two rows still to run
    assert result.stdout.count("\n") == 2 + 1  # the bandit's references and run, the closing line
    # another session runs another row: the bandit's records are kept, not run again
    calls = []
    real_run = training.run
    monkeypatch.setattr(training, "run", lambda flags, **kwargs: calls.append(flags["env"]) or real_run(flags, **kwargs))
    result = cli("benchmark", "--suite", "smoke", "--rows", "blackjack", "--out", part)
    assert result.exit_code == 0, result.output + result.stderr
    assert calls == ["blackjack"]
    data = json.loads((part / "results.json").read_text())
    assert [len(data["rows"][row.name]["runs"]) for row in SMOKE.rows] == [1, 0, 1]
    [cartpole] = [line for line in (part / "results.md").read_text().splitlines()
                  if line.startswith("| cartpole-numbers | ")]
    assert cartpole.count("not run") == 6  # trained, start, untrained, random, scripted, optimal


@pytest.mark.parametrize("args, exit_code, says", [
    (["--suite", "huge"], 2, "huge"),
    (["--seeds", "2"], 2, "missing --suite"),
    (["--suite", "smoke", "--seeds", "0"], 2, "--seeds"),
    (["--suite", "smoke", "--model", "no-such-model-here"], 1, "no-such-model-here"),
    (["--suite", "smoke", "--rows", "bandit,chess"], 2, "rows must be names of the smoke suite's rows"),
])
def test_bad_flags_are_one_line_and_write_nothing(cli, tmp_path, args, exit_code, says):
    out = tmp_path / "out"
    result = cli("benchmark", *args, "--out", out)
    assert result.exit_code == exit_code
    assert says in one_error_line(result)
    assert not out.exists()


def test_an_out_folder_of_something_else_is_refused(cli, tmp_path, smoke_out):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert "not a folder" in one_error_line(cli("benchmark", "--suite", "smoke", "--out", afile))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert "not empty" in one_error_line(cli("benchmark", "--suite", "smoke", "--out", other))
    out, _ = smoke_out  # the smoke suite of the tiny model: not the quick one
    assert "give another --out" in one_error_line(cli("benchmark", "--suite", "quick", "--out", out))
    doc = tmp_path / "results.md"
    doc.write_text("# no generated block here\n")
    new = tmp_path / "new"
    assert "generated block" in one_error_line(cli("benchmark", "--suite", "smoke", "--out", new, "--doc", doc))
    assert not new.exists() and doc.read_text() == "# no generated block here\n"


def test_the_doc_block_is_replaced_by_the_table(smoke_out, cli, tmp_path):
    out, _ = smoke_out
    begin, end = benchmarking.doc_markers("smoke")
    doc = tmp_path / "results.md"
    doc.write_text(f"# Results\n\nabove\n{begin}\nold table\n{end}\nbelow\n")
    result = cli("benchmark", "--suite", "smoke", "--out", out, "--doc", doc)  # all done before
    assert result.exit_code == 0, result.output + result.stderr
    text = doc.read_text()
    assert "old table" not in text and text.startswith("# Results\n\nabove\n") and text.endswith(f"{end}\nbelow\n")
    assert (out / "results.md").read_text() in text


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_every_declared_row_resolves_to_valid_train_settings(suite):
    """Every row of every suite is a valid ``textgym train`` run and evaluation (settings, env
    settings, policy and algorithm checked as the command checks them), with a budget and a target."""
    pytest.importorskip("pettingzoo")
    pytest.importorskip("textworld")
    for row in SUITES[suite].rows:
        plan = benchmarking._plan(row, SUITES[suite].model)
        assert plan.config.updates is not None or plan.config.episodes is not None
        assert row.target and row.budget and row.eval_episodes >= 1
    names = [row.name for row in SUITES[suite].rows]
    assert len(set(names)) == len(names)


def test_the_budget_cell_says_the_warm_start_and_the_rl_updates():
    from textgym.benchmark import _budget

    row = SUITES["full"].rows[0]
    warm = {"player": "scripted", "episodes": 256, "epochs": 4}
    runs = [{"train_seconds": 60.0}, {"train_seconds": 180.0}]
    assert _budget({"budget": {"updates": 0, "warm_start": warm}, "runs": runs}, row) == (
        "a warm start on the scripted player's 256 episodes (4 epochs), no RL update (2.0 min)")
    assert _budget({"budget": {"updates": 8, "episodes_per_update": 16, "warm_start": warm}}, row) == (
        "a warm start on the scripted player's 256 episodes (4 epochs), then 8 updates of 16 episodes")
    assert _budget({"budget": {"updates": 1, "episodes_per_update": 8}}, row) == "1 update of 8 episodes"


def test_the_full_suite_holds_the_issue_targets():
    rows = {row.name: row for row in SUITES["full"].rows}
    assert SUITES["full"].seeds == 3
    assert rows["tictactoe"].eval_episodes == 400
    assert rows["blackjack"].eval_episodes == 2000
    assert rows["cartpole-numbers"].eval_episodes == 50
    assert rows["cartpole-numbers"].settings["env_kwargs"]["word"] == "none"
    assert rows["textworld-one-command"].settings["env_kwargs"]["quest_length"] == 1
    assert rows["babyai-gotoredball"].env.startswith("minigrid/BabyAI-")  # one BabyAI level
    assert rows["babyai-gotoredball"].settings["sft_player"] == "scripted"  # warm-started on the bot
    # held-out games: the evaluation's pool starts past the training pool
    train = rows["textworld-one-command"].settings["env_kwargs"]
    held_out = rows["textworld-one-command"].eval_env_kwargs
    assert held_out["first_game"] >= train["first_game"] + train["games"]
