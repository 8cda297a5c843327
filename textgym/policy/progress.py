"""How long a greedy evaluation will take: a background reporter reading the policy's counters.

:class:`ActingProgress` prints, every ``every`` seconds while its block runs, the decisions made
so far, their rate and the most time left (the episodes' step limit bounds the decisions still
to come: a policy that solves CartPole plays every episode to its 500 steps, so the bound is
then the estimate).

Example:
    >>> counters = {"decisions": 0}
    >>> lines = []
    >>> with ActingProgress(counters, total=100, every=60.0, report=lines.append) as progress:
    ...     counters["decisions"] = 40
    ...     line = progress.line(elapsed=20.0)
    >>> line
    'acting: 40 decisions in 20 s (2.0/s); at most 30 s left (100 decisions at most)'
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Self

__all__ = ["ActingProgress"]


class ActingProgress:
    """Reports ``counters["decisions"]`` (a policy's counters) every ``every`` seconds, with the
    time left when at most ``total`` decisions are made in all (``None``: no bound known)."""

    def __init__(self, counters: dict, total: int | None, every: float, report: Callable[[str], None]):
        self.counters, self.total, self.every, self.report = counters, total, every, report
        self._start_decisions = counters.get("decisions", 0)
        self._started = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def line(self, elapsed: float) -> str:
        made = self.counters.get("decisions", 0) - self._start_decisions
        rate = made / elapsed if elapsed > 0 else 0.0
        text = f"acting: {made} decisions in {elapsed:.0f} s ({rate:.1f}/s)"
        if self.total is not None and rate > 0:
            left = max(0, self.total - made) / rate
            text += f"; at most {_duration(left)} left ({self.total} decisions at most)"
        return text

    def _run(self) -> None:
        while not self._done.wait(self.every):
            self.report(self.line(time.monotonic() - self._started))

    def __enter__(self) -> Self:
        self._started = time.monotonic()
        self._start_decisions = self.counters.get("decisions", 0)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
