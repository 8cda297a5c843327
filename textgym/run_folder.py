"""The run folder: the names of what ``textgym train`` (and a :class:`textgym.trainers.Trainer`
with an ``out_dir``) writes, declared once. Every reader and writer takes the names from here;
what each file holds is described once, for users, in cli/README.md ("The run folder"), which the
other documents link to.

::

    config.toml        the resolved run config (cli/config.py RunConfig): --resume reads it back
    metrics.jsonl      one JSON line per update (textgym.trainers.reporting.metrics)
    tb/                the same metrics for TensorBoard, when it is installed
    curve.png          learning curves, redrawn during the run
    summary.json       the outcome, written at the end (or when stopped, or when it failed)
    checkpoint/        the last checkpoint (textgym.trainers.state.checkpoint):
        trainer_state.json   counters, the algorithm's config, RNG states, the env id
        policy.json, adapter/ (or model/), tokenizer/   the policy (textgym.policy.persistence)
        optimizer.safetensors, metrics.jsonl (the lines up to the checkpoint), ...
    start/             a run with a warm start and RL updates: the checkpoint after the warm
                       start, before the first update (its starting point, which ``textgym
                       benchmark`` evaluates as ``start_eval``)
    .textgym.lock      held while a session uses the folder (cli/runlock.py)

A checkpoint is replaced atomically: written as ``checkpoint.tmp``, the previous one kept as
``checkpoint.old`` until the new one is in place (:func:`temporary`, :func:`previous`).

Example:
    >>> from pathlib import Path
    >>> Path("runs/a") / CONFIG, previous(Path("runs/a") / CHECKPOINT).name
    (PosixPath('runs/a/config.toml'), 'checkpoint.old')
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHECKPOINT", "CONFIG", "CURVE", "LOCK", "METRICS", "RUN_FILES", "START", "STATE", "SUMMARY",
           "TENSORBOARD", "previous", "temporary"]

CONFIG = "config.toml"
METRICS = "metrics.jsonl"
TENSORBOARD = "tb"
CURVE = "curve.png"
SUMMARY = "summary.json"
CHECKPOINT = "checkpoint"
#: The checkpoint of a warm-started run's starting point (after the warm start, before any update).
START = "start"
#: Inside a checkpoint folder: the trainer's JSON state.
STATE = "trainer_state.json"
LOCK = ".textgym.lock"
#: The files that make a folder a run folder (``--force`` replaces them).
RUN_FILES = (CONFIG, METRICS, CHECKPOINT, CURVE, SUMMARY, START)


def temporary(path: Path) -> Path:
    """Where ``path`` is written before it replaces the old one (``<name>.tmp``)."""
    return path.with_name(path.name + ".tmp")


def previous(path: Path) -> Path:
    """Where the old ``path`` waits while a new one replaces it (``<name>.old``)."""
    return path.with_name(path.name + ".old")
