"""``textgym runs``: the run folders under a folder (default ``runs/``), newest first: env,
algorithm, model, status, updates and episodes, the last mean return, and the update of the
checkpoint a ``--resume`` continues from (``--json``: the same as a list of objects)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textgym.cli.errors import CLIError

from textgym import run_folder


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def describe(run: Path) -> dict[str, Any]:
    """One run folder's row: from summary.json when there is one (a session ended), else from
    config.toml, the last metrics line and the checkpoint (a run in progress, or killed)."""
    from textgym.cli import config as run_config
    from textgym.cli.runlock import lock_holder
    from textgym.cli.runs import summarize_metrics

    from textgym.trainers import read_checkpoint
    from textgym.trainers.reporting.metrics import lines_by_update

    try:
        config = run_config.load_toml(run / run_folder.CONFIG)
    except CLIError:
        config = {}
    summary = _read_json(run / run_folder.SUMMARY)
    lines, _ = lines_by_update(run / run_folder.METRICS) if (run / run_folder.METRICS).is_file() else ({}, 0)
    records = [json.loads(lines[u]) for u in sorted(lines)[-1:]]
    metrics = summarize_metrics(records)
    try:
        checkpoint = read_checkpoint(run / "checkpoint").get("update_count")
    except (OSError, ValueError):
        checkpoint = None
    holder = lock_holder(run)
    status = "training" if holder is not None else summary.get("status") or ("stopped" if lines else "new")
    return {
        "run": str(run),
        "env": config.get("env") or summary.get("env"),
        "algo": config.get("algo") or summary.get("algo"),
        "model": config.get("model") or summary.get("model"),
        "status": status.split(":")[0],
        "updates": metrics.get("updates"),
        "episodes": metrics.get("episodes"),
        "return_mean": metrics.get("last_return_mean"),
        "checkpoint_update": checkpoint,
        "modified": max((p.stat().st_mtime for p in run.iterdir()), default=run.stat().st_mtime),
    }


def run_folders(root: Path) -> list[Path]:
    """The run folders directly under ``root`` (a folder with a config.toml), newest first."""
    if not root.is_dir():
        raise CLIError(f"{root} is not a folder (give the folder that holds your runs: textgym runs DIR)")
    found = [p for p in root.iterdir() if p.is_dir() and (p / run_folder.CONFIG).is_file()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def run(root: Path, json_out: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = [describe(folder) for folder in run_folders(root)]
    if json_out:
        print(json.dumps(rows, indent=2))
        return
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    table = Table(title=f"{len(rows)} runs in {root}", title_justify="left")
    for column in ("run", "env", "algo", "model", "status", "updates", "episodes", "return", "checkpoint"):
        table.add_column(column, no_wrap=column in ("run", "env"))
    for row in rows:
        table.add_row(Path(row["run"]).name, str(row["env"] or "-"), str(row["algo"] or "-"),
                      str(row["model"] or "-"), row["status"], str(row["updates"] or 0),
                      str(row["episodes"] or 0),
                      f"{row['return_mean']:.3g}" if isinstance(row["return_mean"], (int, float)) else "-",
                      f"update {row['checkpoint_update']}" if row["checkpoint_update"] else "none")
    console.print(table)
