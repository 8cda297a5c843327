"""Experiment trackers a run reports to besides ``metrics.jsonl``: ``report_to``.

``tensorboard`` (the default; written by :class:`~textgym.trainers.reporting.metrics.MetricsWriter` when
the package is installed, skipped quietly when not), ``trackio`` and ``wandb`` (optional extras
``textgym[trackio]``, ``textgym[wandb]``; naming one that is not installed is an error at once).
Both get every update's scalar metrics and the update's transcripts as a table (one row per
step). Their own settings apply: trackio logs to a local database (``TRACKIO_DIR``, default
``~/.cache/huggingface/trackio``) unless told of a Space; wandb honours ``WANDB_MODE=offline``
(its files then stay under ``<run>/wandb``) and ``WANDB_PROJECT``. A resumed run continues the
same tracker run (its id is the run folder's).

Example:
    >>> parse_report_to("tensorboard, wandb")
    ('tensorboard', 'wandb')
    >>> parse_report_to("none")
    ()
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["REPORTERS", "Tracker", "check_report_to", "make_trackers", "parse_report_to", "transcript_rows"]

REPORTERS = ("tensorboard", "trackio", "wandb")
"""The trackers ``report_to`` may name."""

TABLE_COLUMNS = ["source", "update", "episode", "return", "step", "observation", "answer", "valid",
                 "action", "reward", "logprob"]
"""The columns of a transcripts table: one row per step of each transcript line."""


def parse_report_to(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """The tracker names of a ``report_to`` value (comma-separated text or a list; ``"none"``
    or empty: none). Raises ValueError on an unknown name."""
    if value is None:
        return ()
    parts = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(dict.fromkeys(p.strip().lower() for p in parts if p.strip()))
    if names in ((), ("none",)):
        return ()
    unknown = [n for n in names if n not in REPORTERS]
    if unknown:
        raise ValueError(f"report_to: unknown tracker {unknown[0]!r}; choose among {', '.join(REPORTERS)} "
                         "(comma-separated) or none")
    return names


def check_report_to(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """:func:`parse_report_to`, and each named optional tracker installed (ValueError naming the
    extra to install otherwise; tensorboard is skipped quietly where it is missing)."""
    names = parse_report_to(value)
    for name in names:
        if name != "tensorboard" and importlib.util.find_spec(name) is None:
            raise ValueError(f"report_to {name}: the {name} package is not installed "
                             f"(pip install 'textgym[{name}]')")
    return names


def transcript_rows(records: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Rows of :data:`TABLE_COLUMNS` for transcript lines (:mod:`textgym.transcripts`)."""
    rows = []
    for record in records:
        for t, step in enumerate(record["steps"]):
            parse = step.get("parse") or {}
            rows.append([record["source"], record["update"], record["index"], record["return"], t,
                         step["observation"], step["answer"], parse.get("valid", True), parse.get("action"),
                         step["reward"], step["logprob"]])
    return rows


def _run_id(out_dir: Path) -> str:
    """A tracker run id stable across sessions of a run folder (so ``--resume`` continues it)."""
    return "textgym-" + hashlib.sha1(str(out_dir.resolve()).encode()).hexdigest()[:12]


class Tracker:
    """One experiment tracker: scalars per update, transcripts as tables. trackio and wandb share
    one API (``run.log``, ``Table``, ``run.finish``); a subclass opens ``self.run`` on ``self.module``."""

    module: Any
    run: Any

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def log_transcripts(self, records: Sequence[dict[str, Any]], step: int) -> None:
        table = self.module.Table(columns=TABLE_COLUMNS, data=transcript_rows(records))
        self.run.log({"transcripts": table}, step=step)

    def close(self) -> None:
        self.run.finish()


class TrackioTracker(Tracker):
    """Reports to trackio (local by default); project ``TRACKIO_PROJECT`` or ``textgym``."""

    def __init__(self, out_dir: Path, config: dict[str, Any]):
        import trackio

        self.module = trackio
        self.run = trackio.init(project=os.environ.get("TRACKIO_PROJECT", "textgym"), name=out_dir.name,
                                config=config, resume="allow", embed=False,
                                auto_log_cpu=False, auto_log_gpu=False)  # the run's metrics only


class WandbTracker(Tracker):
    """Reports to Weights & Biases (``WANDB_MODE=offline`` keeps it on disk, in ``<run>/wandb``);
    project ``WANDB_PROJECT`` or ``textgym``."""

    def __init__(self, out_dir: Path, config: dict[str, Any]):
        import wandb

        self.module = wandb
        out_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "textgym"), name=out_dir.name,
                              id=_run_id(out_dir), resume="allow", dir=str(out_dir), config=config,
                              reinit="create_new")


_TRACKERS = {"trackio": TrackioTracker, "wandb": WandbTracker}


def make_trackers(names: Sequence[str], out_dir: Path, config: dict[str, Any]) -> list[Tracker]:
    """The trackers ``names`` (tensorboard aside: :class:`MetricsWriter` writes it) for a run folder."""
    return [_TRACKERS[name](out_dir, config) for name in names if name in _TRACKERS]
