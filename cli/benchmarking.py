"""``textgym benchmark``: train every row of a suite (:mod:`textgym.benchmark`) from the untrained
model, once per seed, evaluate greedily on held-out seeds beside the references, and write
``results.json`` and ``results.md`` to the output folder.

Nothing here trains or evaluates by itself: each run is ``textgym train`` (:func:`training.run`,
with the row's settings as flags, in ``OUT/runs/<row>-seed<k>``), each evaluation is ``textgym
eval``'s (:func:`evaluation._model_evaluation` and :func:`textgym.baselines.evaluate_baseline`).

Resumable run by run: a run's evaluation is kept in ``OUT/runs/<row>-seed<k>/benchmark.json`` and a
row's references in ``OUT/references/<row>.json``; the same command again skips what is done,
continues a half-trained run from its checkpoint (``textgym train --resume``) and starts over a run
that has none. A result recorded with other settings (the suite's declaration changed) is refused,
not reused.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.text import Text
from textgym.cli import config as run_config
from textgym.cli.errors import EXIT_USAGE, CLIError
from textgym.cli.messages import say

from textgym import run_folder
from textgym.benchmark import (
    SUITES,
    BenchmarkConfig,
    BenchmarkRow,
    Suite,
    gain_summary,
    markdown_table,
    result_cell,
    rl_gain,
    seed_summary,
)

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
#: A run's evaluation, in its run folder: present means the run is done.
RUN_RECORD = "benchmark.json"
#: Training statuses after which a run is evaluated (``summary.json``'s ``status``).
FINISHED = ("complete", "solved")


def doc_markers(suite: str) -> tuple[str, str]:
    """The lines around the generated table in a Markdown file (``--doc FILE``)."""
    return (f"<!-- textgym benchmark --suite {suite}: generated table, do not edit -->",
            f"<!-- end of textgym benchmark --suite {suite} -->")


@dataclass(frozen=True)
class RowPlan:
    """A row with its resolved, checked settings: what every seed's ``textgym train`` gets."""

    row: BenchmarkRow
    config: run_config.RunConfig
    flags: dict[str, Any]
    eval_env_kwargs: dict[str, Any]
    episodes_per_update: int

    def spec(self, model: str) -> dict[str, Any]:
        """What a recorded result must have been made with to be reused."""
        return json.loads(json.dumps({
            "model": model, "env": self.config.env, "settings": dict(self.row.settings),
            "eval_episodes": self.row.eval_episodes, "eval_env_kwargs": dict(self.row.eval_env_kwargs)}))


# --- checks: before anything is loaded or written ----------------------------------------------


def _plan(row: BenchmarkRow, model: str) -> RowPlan:
    """Resolve a row as ``textgym train`` would (the env's registered settings, the row's on top)
    and check everything a run will need: settings, env settings, policy and algorithm."""
    from textgym.cli import training
    from textgym.cli.envtools import check_env_kwargs

    flags = {**row.settings, "env": row.env, "model": model}
    try:
        cfg = training._new_config({}, dict(flags), None)
    except CLIError as exc:
        raise CLIError(f"benchmark row {row.name}: {exc}") from None
    check_env_kwargs(cfg.env, cfg.env_kwargs)
    eval_env_kwargs = {**cfg.env_kwargs, **row.eval_env_kwargs}
    check_env_kwargs(cfg.env, eval_env_kwargs)
    training.policy_config(cfg.model, cfg.mode, cfg.seed, cfg.policy)
    trainer_config = training._trainer_config(cfg)
    return RowPlan(row, cfg, flags, eval_env_kwargs, trainer_config.episodes_per_update)


def _check_out(out: Path, suite: Suite, model: str) -> dict[str, Any]:
    """The output folder must be new, or hold this suite's benchmark of this model; returns its
    earlier ``results.json`` (empty when new)."""
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} exists and is not a folder")
    ancestor = out
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise CLIError(f"cannot create --out {out}: {ancestor} is a file, not a folder")
    results_file = out / RESULTS_JSON
    if not results_file.is_file():
        if out.is_dir() and any(out.iterdir()):
            raise CLIError(f"--out {out} is not empty and holds no benchmark ({RESULTS_JSON}): "
                           "give a new folder")
        return {}
    try:
        earlier = json.loads(results_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CLIError(f"unreadable {results_file}: {exc}") from None
    for name, value in (("suite", suite.name), ("model", model)):
        if earlier.get(name) != value:
            raise CLIError(f"--out {out} holds the {earlier.get('suite')!r} suite of model "
                           f"{earlier.get('model')!r}, not {suite.name!r} of {model!r}: give another --out")
    return earlier


def _check_doc(doc: Path, suite: Suite) -> None:
    begin, end = doc_markers(suite.name)
    try:
        text = doc.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"cannot read --doc {doc}: {exc}") from None
    if begin not in text or end not in text or text.index(begin) > text.index(end):
        raise CLIError(f"--doc {doc} has no generated block for this suite: put the lines "
                       f"{begin!r} and {end!r} where the table goes")


# --- the display ---------------------------------------------------------------------------------


class BenchmarkDisplay:
    """A progress bar over the suite's steps (each row's references, each run) with a status line
    below it (what the current step is playing) on a terminal; elsewhere one line per finished
    step; nothing with ``quiet``."""

    def __init__(self, total: int, quiet: bool, console: Console | None = None):
        from textgym.cli.display import ProgressWithStats

        self.console = console or Console(file=sys.stdout)
        self.quiet = quiet
        self.current = ""
        self._progress = None
        if self.console.is_terminal and not quiet:
            self._progress = ProgressWithStats(
                TextColumn("benchmark", style="bold"), BarColumn(bar_width=None), MofNCompleteColumn(),
                TextColumn("steps"), TimeElapsedColumn(), console=self.console, expand=True,
                stats="starting...")
            self._task = self._progress.add_task("benchmark", total=total)

    @contextlib.contextmanager
    def shown(self) -> Iterator[BenchmarkDisplay]:
        from textgym.rollout import watch

        if self._progress is None:
            yield self
            return
        with self._progress, watch(self._rollout):
            yield self

    def _rollout(self, progress: Any) -> None:
        from textgym.cli.display import progress_line

        if self._progress is not None:
            if progress.greedy:  # the evaluation, or a greedy check during training
                line = progress_line(progress)
            elif progress.finished:
                line = f"training: optimising on {progress.decisions} decisions"
            else:
                line = f"training: {progress_line(progress)}"
            self._progress.stats = Text(f"{self.current}: {line}", no_wrap=True, overflow="ellipsis")
            self._progress.refresh()

    def start(self, what: str) -> None:
        self.current = what
        if self._progress is not None:
            self._progress.stats = Text(f"{what}: loading...", no_wrap=True, overflow="ellipsis")
            self._progress.refresh()

    def done(self, line: str) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)
            say(line, console=self._progress.console)
        elif not self.quiet:
            say(line, console=self.console)


# --- the steps -----------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CLIError(f"unreadable {path}: {exc} (delete it to redo that step)") from None


def _reuse(path: Path, spec: dict[str, Any]) -> dict[str, Any] | None:
    """A recorded result made with ``spec``, ``None`` when there is none; another spec: CLIError."""
    record = _read_json(path)
    if record is None:
        return None
    if record.get("spec") != spec:
        raise CLIError(f"{path} was recorded with other settings than the suite now declares; "
                       "give another --out (or delete it to redo that step)")
    return record


def _eval_envs(plan: RowPlan) -> int:
    return min(plan.row.eval_episodes, max(plan.config.num_envs or 8, 16))


def _references(plan: RowPlan, model: str, path: Path) -> dict[str, Any]:
    """The untrained model and the env's reference policies on the evaluation's seeds and env."""
    from textgym.cli.envtools import make_env
    from textgym.cli.evaluation import _model_evaluation
    from textgym.cli.runs import with_stderr, write_json

    from textgym.baselines import evaluate_baseline
    from textgym.registry import list_envs
    from textgym.seeds import EVAL_BASE

    env_id, episodes = plan.config.env, plan.row.eval_episodes
    _, untrained, _ = _model_evaluation(
        env_id, None, model, plan.config.mode, episodes, _eval_envs(plan), EVAL_BASE,
        overrides=dict(plan.config.policy), env_overrides=plan.eval_env_kwargs, announce=False)
    results = {"untrained": untrained}
    names = next((info.reference_policies for info in list_envs() if info.id == env_id), ("random",))
    env = make_env(env_id, **plan.eval_env_kwargs)
    try:
        for name in names:
            result = evaluate_baseline(env, name, episodes, EVAL_BASE)
            if result is not None:
                results[name] = with_stderr(result)
    finally:
        env.close()
    record = {"spec": plan.spec(model), "references": results}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)
    return record


def _train_and_evaluate(plan: RowPlan, model: str, seed: int, run_dir: Path,
                        untrained: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train the row's run of ``seed`` in ``run_dir`` (new, resumed from its checkpoint, or already
    finished), then evaluate it greedily on the held-out seeds; record and return the result, with
    ``start_eval``: its starting point's greedy result on the same episodes (the warm start's
    checkpoint ``start/``, else the untrained model: the row's ``untrained`` reference) and the
    RL ``gain`` between the two."""
    from textgym.cli import training
    from textgym.cli.evaluation import _model_evaluation
    from textgym.cli.runs import write_json

    from textgym.seeds import EVAL_BASE

    summary = _read_json(run_dir / run_folder.SUMMARY) or {}
    if summary.get("status") not in FINISHED:
        flags = {**plan.flags, "seed": seed}
        resumable = (run_dir / run_folder.CHECKPOINT / run_folder.STATE).is_file()
        try:
            if resumable:
                training.run(flags, resume=run_dir, quiet=True)
            else:
                run_dir.parent.mkdir(parents=True, exist_ok=True)
                training.run(flags, out=run_dir, force=run_dir.exists(), quiet=True)
        except typer.Exit as exc:
            if exc.exit_code:
                say("textgym: benchmark stopped; the same command again continues it "
                    "(finished runs are kept)", err=True)
            raise
        summary = _read_json(run_dir / run_folder.SUMMARY) or {}
        if summary.get("status") not in FINISHED:
            raise CLIError(f"the run in {run_dir} ended {summary.get('status')!r}, not complete")
    _, result, _ = _model_evaluation(
        plan.config.env, run_dir, None, None, plan.row.eval_episodes, _eval_envs(plan), EVAL_BASE,
        env_overrides=dict(plan.row.eval_env_kwargs), announce=False)
    start, start_eval = "untrained", untrained
    if (run_dir / run_folder.START).is_dir():  # a warm start: RL started from its checkpoint
        start = "warm start"
        _, start_eval, _ = _model_evaluation(
            plan.config.env, run_dir / run_folder.START, None, None, plan.row.eval_episodes, _eval_envs(plan),
            EVAL_BASE, env_overrides=dict(plan.row.eval_env_kwargs), announce=False)
    record = {"spec": {**plan.spec(model), "seed": seed}, "seed": seed, "run_dir": str(run_dir),
              "status": summary.get("status"), "updates": summary.get("updates"),
              "episodes": summary.get("episodes"), "train_seconds": summary.get("wall_time"),
              "eval": result, "start": start, "start_eval": start_eval,
              "gain": rl_gain(result, start_eval) if start_eval else None}
    write_json(run_dir / RUN_RECORD, record)
    return record


# --- the command ---------------------------------------------------------------------------------


def _commit() -> str | None:
    """The git commit of textgym's source tree (``+dirty`` with uncommitted changes), if any."""
    source = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(source), "describe", "--always", "--dirty=+dirty"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def run(settings: dict[str, Any], out: Path | None, doc: Path | None, quiet: bool = False) -> None:
    """The ``benchmark`` command (see the module docstring): ``settings`` are the options of
    :class:`textgym.benchmark.BenchmarkConfig` (``None``: not given). Every check (options, model,
    output folder, ``--doc`` file, each row's settings) comes before anything is loaded or written."""
    from textgym.cli.modelcheck import check_model
    from textgym.cli.runs import write_json

    import textgym

    if settings.get("suite") is None:
        raise CLIError(f"missing --suite: one of {', '.join(SUITES)}", exit_code=EXIT_USAGE)
    try:
        config = BenchmarkConfig(**{k: v for k, v in settings.items() if v is not None}).resolved()
    except ValueError as exc:
        raise CLIError(str(exc), exit_code=EXIT_USAGE) from None
    suite, seeds, model = SUITES[config.suite], config.seeds, config.model
    out = Path(out) if out is not None else Path("runs") / f"benchmark-{suite.name}"
    check_model(model)
    earlier = _check_out(out, suite, model)
    if doc is not None:
        _check_doc(doc, suite)
    plans = [_plan(row, model) for row in suite.rows]

    command = f"textgym benchmark --suite {suite.name} --seeds {seeds} --model {model} --out {out}"
    # (--rows is left out: the table is the suite's, whichever rows each session ran)
    results: dict[str, Any] = {
        "suite": suite.name, "description": suite.description, "model": model, "seeds": seeds,
        "command": command, "textgym": textgym.__version__,
        # the commit of each session that ran a step (a resumed benchmark may span several)
        "commits": list(earlier.get("commits") or ([earlier["commit"]] if earlier.get("commit") else [])),
        "started": earlier.get("started") or time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "rows": {}}
    rows: dict[str, Any] = results["rows"]
    commit = _commit() or "unknown"

    def ran_a_step() -> None:
        if commit not in results["commits"]:
            results["commits"].append(commit)

    def save() -> None:
        write_json(out / RESULTS_JSON, results)
        (out / RESULTS_MD).write_text(_markdown(suite, results), encoding="utf-8")

    out.mkdir(parents=True, exist_ok=True)
    chosen = set(config.row_names())  # the others: only what earlier runs recorded
    display = BenchmarkDisplay(total=len(chosen) * (1 + seeds), quiet=quiet)
    with display.shown():
        for plan in plans:  # every row's resolved settings, so a partial table shows them too
            cfg = plan.config
            rows[plan.row.name] = {
                "env": cfg.env, "target": str(plan.row.target), "budget_note": plan.row.budget,
                "settings": dict(plan.row.settings),
                "budget": {"updates": cfg.updates, "episodes": cfg.episodes,
                           "episodes_per_update": plan.episodes_per_update,
                           **({"warm_start": {"player": cfg.sft_player, "episodes": cfg.sft_episodes,
                                              "epochs": cfg.sft_epochs}} if cfg.sft_player else {})},
                "eval_episodes": plan.row.eval_episodes, "eval_env_kwargs": dict(plan.row.eval_env_kwargs),
                "references": {}, "runs": [], "trained": {}}
        for plan in plans:
            row = plan.row
            entry = rows[row.name]
            path = out / "references" / f"{row.name}.json"
            record = _reuse(path, plan.spec(model))
            if record is None and row.name not in chosen:
                continue
            visible = display if row.name in chosen else None  # another row's records: loaded quietly
            if visible:
                visible.start(f"{row.name} references")
            again = record is not None
            if record is None:
                ran_a_step()
                record = _references(plan, model, path)
            entry["references"] = record["references"]
            if visible:
                visible.done(f"{row.name}: references {'(done before) ' if again else ''}"
                           + ", ".join(f"{name} {result_cell(r)}" for name, r in record["references"].items()))
            save()
            for seed in range(seeds):
                run_dir = out / "runs" / f"{row.name}-seed{seed}"
                record = _reuse(run_dir / RUN_RECORD, {**plan.spec(model), "seed": seed})
                if record is None and row.name not in chosen:
                    continue
                if visible:
                    visible.start(f"{row.name} seed {seed}")
                again = record is not None
                if record is None:
                    ran_a_step()
                    record = _train_and_evaluate(plan, model, seed, run_dir, entry["references"].get("untrained"))
                entry["runs"].append({k: v for k, v in record.items() if k != "spec"})
                entry["trained"] = seed_summary([r["eval"] for r in entry["runs"]])
                entry["gain"] = gain_summary([r.get("gain") for r in entry["runs"]])
                entry["met"] = row.target.met(entry["trained"], entry["references"].get("untrained"))
                if visible:
                    visible.done(f"{row.name} seed {seed}: {'(done before) ' if again else ''}"
                               f"{record['updates']} update{'' if record['updates'] == 1 else 's'}, "
                               f"{record['episodes']} episodes; greedy "
                               f"{result_cell(record['eval'])} on {row.eval_episodes} held-out episodes")
                save()
    if all(len(entry["runs"]) == seeds for entry in rows.values()):  # not when --rows left some out
        results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    save()
    if doc is not None:
        _write_doc(doc, suite, results)
    if not quiet:
        say(f"textgym: wrote {out / RESULTS_MD} and {out / RESULTS_JSON}"
            + (f"; updated {doc}" if doc is not None else ""))


def _markdown(suite: Suite, results: dict[str, Any]) -> str:
    """``results.md``: what was run, then the table."""
    commits = results.get("commits") or ["unknown"]
    head = (f"`{results['command']}` (textgym {results['textgym']}, "
            f"commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}); "
            f"each row trained from the untrained {results['model']} with {results['seeds']} "
            f"seed{'s' if results['seeds'] > 1 else ''}, greedy mean return on held-out seeds "
            "(from 1,000,000) beside the untrained model and the env's reference policies.")
    return f"{head}\n\n{markdown_table(suite, results)}\n"


def _write_doc(doc: Path, suite: Suite, results: dict[str, Any]) -> None:
    begin, end = doc_markers(suite.name)
    text = doc.read_text(encoding="utf-8")
    before, rest = text.split(begin, 1)
    _, after = rest.split(end, 1)
    doc.write_text(f"{before}{begin}\n{_markdown(suite, results)}{end}{after}", encoding="utf-8")
