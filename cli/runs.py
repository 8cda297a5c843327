"""Run folders: creation without clobbering, locking, config, summary.

A run folder holds ``config.toml`` (the resolved config), ``metrics.jsonl`` (one line per
update), ``checkpoint/`` (the latest checkpoint), ``curve.png`` (redrawn while training) and
``summary.json`` (written at the end); while a session trains into it, also ``.textgym.lock``
(see :mod:`textgym.cli.runlock`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from textgym.cli.errors import CLIError, os_error_reason
from textgym.cli.runlock import LOCK_FILE, RunLock, in_use_message, lock_holder

from textgym import run_folder

RUN_FILES = run_folder.RUN_FILES


def default_out(env_id: str, algo: str, root: str | Path = "runs") -> Path:
    """``runs/<env>-<algo>-<YYYYmmdd-HHMMSS>`` (the env's name without namespace and version)."""
    name = env_id.split("/")[-1]
    name = re.sub(r"-v\d+$", "", name).lower()
    return Path(root) / f"{name}-{algo}-{time.strftime('%Y%m%d-%H%M%S')}"


def looks_like_run(path: Path) -> bool:
    return any((path / name).exists() for name in RUN_FILES)


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a textgym run folder, being trained into or with a run in it (a lock,
    or ``config.toml`` beside a checkpoint or metrics): stricter than :func:`looks_like_run`, so
    that a project folder with a ``config.toml`` of its own is not one."""
    return (path / LOCK_FILE).exists() or ((path / run_folder.CONFIG).is_file() and any(
        (path / name).exists() for name in (run_folder.CHECKPOINT, run_folder.previous(Path(run_folder.CHECKPOINT)).name,
                                            run_folder.METRICS)))


def _contents(path: Path) -> list[Path]:
    """What a folder holds besides a lock file (a stale one is left by a killed session)."""
    return [child for child in path.iterdir() if child.name != LOCK_FILE]


def check_not_in_use(path: Path) -> None:
    """Raise CLIError naming the PID of the session that trains into ``path``, if one does."""
    holder = lock_holder(path)
    if holder is not None:
        raise CLIError(in_use_message(path, holder))


def check_new(path: Path, force: bool) -> None:
    """Raise CLIError unless a new run may start in ``path`` (nothing is changed on disk).

    A folder another session trains into is refused (naming its PID). An existing non-empty
    folder needs ``force``, and even then only a textgym run folder may be emptied: --force
    never deletes unrelated files. ``path`` must be a folder or creatable as one."""
    if path.exists() and not path.is_dir():
        raise CLIError(f"{path} exists and is not a folder")
    if path.is_dir():
        check_not_in_use(path)
        if _contents(path):
            if not force:
                raise CLIError(
                    f"run folder {path} already exists; use --resume {path} to continue it "
                    f"or --force to start over"
                )
            if not looks_like_run(path):
                raise CLIError(f"--force refuses to empty {path}: it is not a textgym run folder")
        return
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise CLIError(f"cannot create run folder {path}: {ancestor} is a file, not a folder")


def _make_folders(path: Path) -> list[Path]:
    """``mkdir -p path`` with a plain-words error; returns the folders created, outermost first
    (on failure the ones already created are removed again)."""
    missing = []
    folder = path
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    created: list[Path] = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:  # made meanwhile by someone else: not ours to remove
            continue
        except OSError as exc:
            _remove_empty(created)
            raise CLIError(f"cannot create run folder {path}: {os_error_reason(exc)} "
                           f"({folder.parent})") from exc
        created.append(folder)
    return created


def _remove_empty(folders: list[Path]) -> None:
    for folder in reversed(folders):
        try:
            folder.rmdir()  # only ever removes an empty folder
        except OSError:
            return


@contextmanager
def claim(path: Path, new: bool) -> Iterator[RunLock]:
    """Hold the run folder ``path`` for a training session: create it (a new run) and lock it.

    The lock is released however the session ends. A session that fails before it writes a file
    (a model that does not load, Ctrl-C while loading) leaves no folder it created behind, so
    a retry does not find a "run folder already exists".

    Raises:
        CLIError: the folder cannot be created or written, or another session holds it.
    """
    created = _make_folders(path) if new else []
    try:
        lock = RunLock(path).acquire()
    except BaseException:
        _remove_empty(created)
        raise
    try:
        yield lock
    finally:
        lock.release()
        _remove_empty(created)


def empty_for_new_run(path: Path) -> None:
    """Delete an old run's files (``--force``) from a locked run folder, keeping the lock."""
    for child in _contents(path):
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temporary file + rename)."""
    tmp = run_folder.temporary(path)
    tmp.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {value!r}")


def summarize_metrics(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Training summary from metrics records: first/last/best windowed return, first/last invalid
    rate and totals, the last greedy check (``check``: the one that solved the env, in a solved
    run), every alarm the updates raised (``alarms``, each with its update, in order) and the
    sampled answers of the first and last updates."""
    if not records:
        return {"updates": 0, "episodes": 0, "alarms": []}
    last = records[-1]
    returns = [r["return_mean"] for r in records if isinstance(r.get("return_mean"), (int, float))]
    summary: dict[str, Any] = {
        "updates": last.get("update", len(records)),
        "episodes": last.get("episodes"),
        "decisions": last.get("decisions"),
        "wall_time": last.get("wall_time"),
    }
    if returns:
        summary.update(
            first_return_mean=returns[0],
            last_return_mean=returns[-1],
            best_return_mean=max(returns),
        )
    wins = [r["win_rate"] for r in records if isinstance(r.get("win_rate"), (int, float))]
    if wins:
        summary.update(first_win_rate=wins[0], last_win_rate=wins[-1])
    invalid = [r["invalid_rate"] for r in records if isinstance(r.get("invalid_rate"), (int, float))]
    if invalid:
        summary["first_invalid_rate"] = invalid[0]
    for key in ("length_mean", "invalid_rate", "decisions_per_s", "kl", "entropy"):
        if key in last:
            summary[f"last_{key}"] = last[key]
    checks = [r["check"] for r in records if isinstance(r.get("check"), dict)]
    if checks:
        summary["check"] = checks[-1]
    summary["alarms"] = [alarm for r in records for alarm in r.get("alarms") or [] if isinstance(alarm, dict)]
    # what the model answered at the start and at the end (generate mode: did it learn the format?)
    sampled = [r["samples"] for r in records if r.get("samples")]
    if sampled:
        summary.update(first_samples=sampled[0], last_samples=sampled[-1])
    return summary


def with_stderr(result: dict[str, Any]) -> dict[str, Any]:
    """Add ``return_stderr`` to a trainer evaluation, whose ``return_std`` is numpy's
    population std (ddof=0): the standard error of the mean is then ``std / sqrt(n - 1)``."""
    n = int(result.get("episodes") or 0)
    std = result.get("return_std")
    if "return_stderr" not in result and isinstance(std, (int, float)):
        result = {**result, "return_stderr": std / math.sqrt(n - 1) if n > 1 else 0.0}
    return result
