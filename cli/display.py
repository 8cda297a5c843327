"""The live training display: a rich progress bar with ETA, a line of statistics below it (mean
return, invalid-answer rate, decisions/s, KL) and, every few updates, a sample answer.

On a terminal it animates; the statistics have their own line so that the bar, the episode
count and the ETA stay readable in an 80-column terminal. When stdout is not a terminal (CI,
pipes, log files) it prints a plain line every tenth of the run (or every minute of a slow one)
instead; with ``quiet`` it prints nothing. Messages go through :func:`textgym.cli.messages.say`
(styled on a terminal, plain elsewhere).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from collections.abc import Iterable

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from textgym.cli.messages import say, styled


#: Off a terminal, a progress line is printed every tenth of the run, or after this many seconds
#: without one (slow runs).
PLAIN_REPORT_SECONDS = 60.0


def _fmt(value: Any, spec: str = ".3g") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def stats_line(metrics: dict[str, Any]) -> str:
    """``return 21.4 | len 21.4 | invalid 0.0% | 54 dec/s`` from one update's metrics."""
    invalid = metrics.get("invalid_rate")
    parts = [
        f"return {_fmt(metrics.get('return_mean'))}",
        f"len {_fmt(metrics.get('length_mean'))}",
        f"invalid {format(invalid, '.1%') if isinstance(invalid, (int, float)) else '-'}",
        f"{_fmt(metrics.get('decisions_per_s'), '.1f')} dec/s",
    ]
    if isinstance(metrics.get("win_rate"), (int, float)):
        parts.insert(1, f"win {metrics['win_rate']:.0%}")
    if isinstance(metrics.get("kl"), (int, float)):
        parts.append(f"kl {metrics['kl']:.3g}")
    return " | ".join(parts)


def sample_line(sample: dict[str, Any], width: int = 60) -> str:
    """The tail of a sample's prompt (its observation), the answer and the reward, one line."""
    prompt = " ".join(str(sample.get("prompt", "")).split())
    answer = " ".join(str(sample.get("answer", "")).split())
    if len(prompt) > width:
        prompt = "..." + prompt[-(width - 3):]
    if len(answer) > width:
        answer = answer[: width - 3] + "..."
    return f"{prompt!r} -> {answer!r} (reward {_fmt(sample.get('reward'))})"


class ProgressWithStats(Progress):
    """A Rich progress bar with one line of text below it (the latest update's statistics)."""

    def __init__(self, *columns: Any, stats: str = "", **kwargs: Any):
        self.stats = Text(stats)  # before Progress.__init__, which renders once
        super().__init__(*columns, **kwargs)

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        yield self.stats


class LiveDisplay:
    """Progress of a training run, driven by the trainer's per-update metrics.

    Args:
        total: training episodes of the whole run.
        done: episodes already done (a resumed run).
        quiet: print nothing at all.
        sample_every: show a sample answer every this many updates (0: never).
        console: the rich console (default: stdout); its ``is_terminal`` picks the mode.
    """

    def __init__(self, total: int, done: int = 0, quiet: bool = False, sample_every: int = 5,
                 console: Console | None = None, description: str = "training"):
        self.console = console or Console(file=sys.stdout)
        self.quiet = quiet
        self.live = self.console.is_terminal and not quiet
        self.total = total
        self.sample_every = sample_every
        self._next_report = done + max(1, total // 10)
        self._last_report = time.monotonic()
        self._progress: ProgressWithStats | None = None
        if self.live:
            self._progress = ProgressWithStats(
                TextColumn("{task.description}", style="bold", markup=False),
                BarColumn(bar_width=None),  # the bar takes what the other columns leave
                MofNCompleteColumn(),
                TextColumn("episodes"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
                expand=True,
                stats="collecting the first batch...",
            )
            self._task = self._progress.add_task(description, total=total, completed=done)

    def __enter__(self) -> LiveDisplay:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def log(self, message: str | Text, style: str | None = None) -> None:
        """A line of text (above the progress bar on a terminal), styled on a terminal only."""
        if self.quiet:
            return
        console = self._progress.console if self._progress is not None else self.console
        say(message, style=style, console=console)

    def update(self, metrics: dict[str, Any]) -> None:
        """Advance to the episode count of ``metrics`` and show its statistics."""
        if self.quiet:
            return
        done = int(metrics.get("episodes") or 0)
        update = metrics.get("update")
        stats = stats_line(metrics)
        if self._progress is not None:
            # One line, cut with an ellipsis rather than wrapped mid-figure on a narrow terminal.
            self._progress.stats = Text(f"update {update} | {stats}", no_wrap=True,
                                        overflow="ellipsis")
            self._progress.update(self._task, completed=min(done, self.total))
            samples = metrics.get("samples") or []
            if samples and self.sample_every and isinstance(update, int) \
                    and update % self.sample_every == 0:
                self.log(styled((f"update {update} sample:", "dim"), " ",
                                sample_line(samples[0])))
        elif (done >= self._next_report or done >= self.total
              or time.monotonic() - self._last_report >= PLAIN_REPORT_SECONDS):
            self._next_report = done + max(1, self.total // 10)
            self._last_report = time.monotonic()
            say(f"update {update}: {done}/{self.total} episodes | {stats}", console=self.console)
