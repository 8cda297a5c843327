"""Metrics of a training run: one JSON object per update in ``metrics.jsonl``, and TensorBoard
scalars when TensorBoard is installed.

A checkpoint keeps a copy of the metrics lines up to its update (:meth:`MetricsWriter.lines_up_to`),
and resuming from it (:meth:`MetricsWriter.resume`) rewrites ``metrics.jsonl`` to exactly one
line per update up to the checkpoint, so a line torn by a crash is never lost and an update
redone after the checkpoint is never counted twice; TensorBoard's steps past the checkpoint
are superseded the same way.

Example:
    >>> import tempfile, json, pathlib
    >>> d = tempfile.mkdtemp()
    >>> with MetricsWriter(d, tensorboard=False) as w:
    ...     w.write({"update": 1, "return_mean": 0.5, "samples": []})
    >>> json.loads(pathlib.Path(d, "metrics.jsonl").read_text())["return_mean"]
    0.5
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textgym import jsonl, run_folder

METRICS_FILE = run_folder.METRICS


def _jsonable(value: Any) -> Any:
    # NaN/inf are not JSON: write them as strings so the line stays parseable and the event visible.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _scalars(metrics: dict[str, Any]) -> list[tuple[str, float]]:
    """The numbers of a metrics line for TensorBoard, a nested table's as ``table/key`` (the greedy
    check: ``check/return_mean``, ``check/solved`` as 0 or 1, ``check/seconds``)."""
    scalars = []
    for key, value in metrics.items():
        if isinstance(value, dict):
            scalars += [(f"{key}/{k}", float(v)) for k, v in value.items()
                        if isinstance(v, (int, float)) and v is not None]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            scalars.append((key, value))
    return scalars


def lines_by_update(path: str | Path) -> tuple[dict[int, str], int]:
    """The well-formed lines of a metrics file by update number (a later line of the same update
    wins), and how many lines were not well formed (torn, not JSON, or without an update)."""
    lines: dict[int, str] = {}
    bad = 0
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return lines, 0
    for line in jsonl.lines(text):
        try:
            update = json.loads(line).get("update")
        except (json.JSONDecodeError, AttributeError):
            bad += 1
            continue
        if isinstance(update, int) and not isinstance(update, bool) and update >= 1:
            lines[update] = line
        else:
            bad += 1
    return lines, bad


@dataclass(frozen=True)
class MetricsRepair:
    """What :meth:`MetricsWriter.resume` did to ``metrics.jsonl``.

    Args:
        updates: updates with a line now (1 .. the checkpoint's update, those that had one).
        past_checkpoint: lines of updates after the checkpoint, removed (the resumed run redoes
            those updates).
        malformed: lines removed because they were not well formed (torn by a crash, not JSON,
            or without an update number).
        restored: lines taken from the checkpoint's copy (torn or missing in the file).
    """

    updates: int
    past_checkpoint: int
    malformed: int
    restored: int


class MetricsWriter:
    """Appends metrics to ``<out_dir>/metrics.jsonl`` (and TensorBoard event files in ``<out_dir>/tb``).

    Nothing is created before the first :meth:`write` (a run that fails to start leaves no
    trace).

    Args:
        out_dir: the run's folder (created if missing). ``None`` writes nothing.
        tensorboard: also write TensorBoard scalars if the ``tensorboard`` package is installed.
        trackers: other trackers to report to, ``"trackio"`` and ``"wandb"``
            (:mod:`~textgym.trainers.reporting.trackers`), started at the first :meth:`write`.
        run_config: the settings the trackers record with the run.
    """

    def __init__(self, out_dir: str | Path | None, tensorboard: bool = True, trackers: Sequence[str] = (),
                 run_config: dict[str, Any] | None = None):
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.path = self.out_dir / METRICS_FILE if self.out_dir is not None else None
        self.tensorboard = tensorboard
        self._tb: Any = None
        self._tracker_names = tuple(trackers)
        self._run_config = dict(run_config or {})
        self._trackers: list[Any] | None = None
        self._purge_step: int | None = None
        self.repair: MetricsRepair | None = None
        """What the last :meth:`resume` did (``None`` before one)."""

    def _tensorboard(self) -> Any:
        """The TensorBoard writer, made at the first use (``None`` without TensorBoard)."""
        if self._tb is None and self.tensorboard and self.out_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # TensorBoard is optional
                self.tensorboard = False
                return None
            # purge_step: TensorBoard hides the events of earlier sessions from this step on.
            self._tb = SummaryWriter(log_dir=str(self.out_dir / run_folder.TENSORBOARD), purge_step=self._purge_step)
        return self._tb

    def write(self, metrics: dict[str, Any]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(_jsonable(metrics)) + "\n")
        step = int(metrics.get("update", 0))
        scalars = {key: value for key, value in _scalars(metrics) if key != "update"}
        tb = self._tensorboard()
        if tb is not None:
            for key, value in scalars.items():
                tb.add_scalar(key, value, step)
            tb.flush()
        for tracker in self._open_trackers():
            tracker.log(scalars, step)

    def _open_trackers(self) -> list[Any]:
        """The trackers besides TensorBoard, started at the first use."""
        if self._trackers is None:
            from textgym.trainers.reporting.trackers import make_trackers

            self._trackers = (make_trackers(self._tracker_names, self.out_dir, self._run_config)
                              if self.out_dir is not None and self._tracker_names else [])
        return self._trackers

    def log_transcripts(self, records: Sequence[dict[str, Any]], step: int) -> None:
        """Send transcript lines (:mod:`~textgym.transcripts`) to the trackers that show
        tables (trackio, wandb)."""
        if records and self.path is not None:
            for tracker in self._open_trackers():
                tracker.log_transcripts(records, step)

    def lines_up_to(self, update: int) -> str:
        """The metrics lines of updates ``1..update``, one per update, in order (what a
        checkpoint at ``update`` keeps beside its weights)."""
        if self.path is None:
            return ""
        lines, _ = lines_by_update(self.path)
        return "".join(f"{lines[u]}\n" for u in sorted(lines) if u <= update)

    def resume(self, checkpoint: str | Path, update: int) -> MetricsRepair | None:
        """Continue the run of the checkpoint folder ``checkpoint``, taken at ``update``.

        Rewrites ``metrics.jsonl`` (atomically) so that it holds one well-formed line for every
        update up to ``update``: the file's own line, else the checkpoint's copy of it; lines
        past the checkpoint (the resumed run redoes them) and torn lines go. TensorBoard events
        from step ``update + 1`` on are superseded. Returns what was changed (also kept in
        :attr:`repair`).
        """
        if self.path is None:
            return None
        on_disk, bad = lines_by_update(self.path)
        saved, _ = lines_by_update(Path(checkpoint) / METRICS_FILE)
        # The checkpoint's copy wins (it is what the checkpoint's state followed from); the
        # file's own line serves for checkpoints written without a copy.
        merged = {u: line for u, line in {**on_disk, **saved}.items() if u <= update}
        restored = sum(1 for u in merged if u not in on_disk)
        past = sum(1 for u in on_disk if u > update)
        text = "".join(f"{merged[u]}\n" for u in sorted(merged))
        old = self.path.read_bytes() if self.path.is_file() else b""
        if text.encode("utf-8") != old:
            tmp = run_folder.temporary(self.path)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, self.path)
        self._purge_step = update + 1
        if past and (self.out_dir / run_folder.TENSORBOARD).is_dir():
            self._tensorboard()  # hide the dropped steps now, even if no update follows
        self.repair = MetricsRepair(updates=len(merged), past_checkpoint=past, malformed=bad,
                                    restored=restored)
        return self.repair

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        for tracker in self._trackers or []:
            tracker.close()
        self._trackers = None

    def __enter__(self) -> MetricsWriter:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The metrics objects of a ``metrics.jsonl`` file (or of the run folder holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    return [json.loads(line) for line in jsonl.read_lines(path)]
