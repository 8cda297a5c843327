"""Metrics of a training run: one JSON object per update in ``metrics.jsonl``, and TensorBoard
scalars when TensorBoard is installed.

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
from pathlib import Path
from typing import Any


def _jsonable(value: Any) -> Any:
    # NaN/inf are not JSON: write them as strings so the line stays parseable and the event visible.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class MetricsWriter:
    """Appends metrics to ``<out_dir>/metrics.jsonl`` (and TensorBoard event files in ``<out_dir>/tb``).

    Args:
        out_dir: the run's folder (created if missing). ``None`` writes nothing.
        tensorboard: also write TensorBoard scalars if the ``tensorboard`` package is installed.
    """

    def __init__(self, out_dir: str | Path | None, tensorboard: bool = True):
        self.path = None
        self._tb = None
        if out_dir is None:
            return
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / "metrics.jsonl"
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(out_dir / "tb"))
            except ImportError:  # TensorBoard is optional
                self._tb = None

    def write(self, metrics: dict[str, Any]) -> None:
        if self.path is None:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(_jsonable(metrics)) + "\n")
        if self._tb is not None:
            step = int(metrics.get("update", 0))
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "update":
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> MetricsWriter:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The metrics objects of a ``metrics.jsonl`` file (or of the run folder holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
