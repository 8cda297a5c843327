"""The live training display: the run's plan (:func:`plan_line`: which budget applies and when
the run stops), a rich progress bar over the planned updates with ETA, a line of statistics below
it (mean return, invalid-answer rate, decisions/s, KL), every few updates a sample answer, and
one line for each greedy check and each collapse alarm an update raised.

On a terminal it animates; the statistics have their own line so that the bar, the update
count and the ETA stay readable in an 80-column terminal. When stdout is not a terminal (CI,
pipes, log files) it prints a plain line every tenth of the run (or every minute of a slow one)
instead; with ``quiet`` it prints nothing. Messages go through :func:`textgym.cli.messages.say`
(styled on a terminal, plain elsewhere).
"""

from __future__ import annotations

import contextlib
import datetime
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

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


def plan_line(updates: int, done: int = 0, episodes_per_update: int | None = None,
              minutes: float | None = None, until: float | None = None, check_every: int | None = None,
              check_episodes: int | None = None, now: datetime.datetime | None = None,
              episodes_asked: int | None = None) -> str:
    """Which budget applies and when the run stops, in one line.

    Example:
        >>> at = datetime.datetime(2026, 1, 1, 14, 22)
        >>> plan_line(12, episodes_per_update=16, minutes=10, until=195, check_every=1, check_episodes=8, now=at)
        'plan: 12 updates of 16 episodes; stops after update 12, at 14:32 (10 min cap) or once the greedy return >= 195 (8 held-out episodes after every update), whichever comes first'
        >>> plan_line(1, episodes_per_update=32, episodes_asked=16)
        'plan: 1 update of 32 episodes (--episodes 16 rounded up to whole updates: 32 episodes); stops after update 1'

    Args:
        updates: the run's planned updates in all (its last update's number).
        done: updates done before this session (a resumed run).
        episodes_per_update: episodes of each update.
        minutes: the session's time cap.
        until: the early stop's threshold (``None``: no early stop).
        check_every: updates between greedy checks.
        check_episodes: episodes of each check.
        now: the session's start (default: now), for the clock time of the cap.
        episodes_asked: the run's ``episodes`` budget: when the updates play more (an update
            plays all its episodes), the line says so.
    """
    if done:
        span = f"updates {done + 1}-{updates}"
    else:
        span = f"{updates} update" + ("" if updates == 1 else "s")
    head = f"plan: {span}" + (f" of {episodes_per_update} episodes" if episodes_per_update else "")
    if episodes_asked and episodes_per_update and updates * episodes_per_update > episodes_asked:
        head += (f" (--episodes {episodes_asked} rounded up to whole updates: "
                 f"{updates * episodes_per_update} episodes)")
    stops = [f"after update {updates}"]
    if minutes:
        at = (now or datetime.datetime.now()) + datetime.timedelta(minutes=minutes)
        stops.append(f"at {at:%H:%M} ({minutes:g} min cap)")
    if until is not None:
        every = "after every update" if check_every == 1 else f"every {check_every} updates"
        check = f" ({check_episodes} held-out episodes {every})" if check_every else ""
        stops.append(f"once the greedy return >= {until:g}{check}")
    if len(stops) == 1:
        return f"{head}; stops {stops[0]}"
    return f"{head}; stops {', '.join(stops[:-1])} or {stops[-1]}, whichever comes first"


def progress_line(progress: Any, update: int | None = None) -> str:
    """What a rollout in progress is doing (a :class:`textgym.rollout.RolloutProgress`), one line:
    ``update 3: playing episodes 5/16, 40 decisions, eta 12s`` (``update``: the update it belongs
    to; ``None``: an evaluation).

    Example:
        >>> from textgym.rollout import RolloutProgress
        >>> progress_line(RolloutProgress(False, 4, 16, 40, 10.0), update=3)
        'update 3: playing episodes 4/16, 40 decisions, eta 30s'
        >>> progress_line(RolloutProgress(False, 16, 16, 160, 40.0, finished=True), update=3)
        'update 3: optimising on 160 decisions (the episodes took 40s)'
        >>> progress_line(RolloutProgress(True, 2, 8, 30, 5.0), update=3)
        'update 3: greedy check, episodes 2/8, 30 decisions, eta 15s'
        >>> progress_line(RolloutProgress(True, 0, 50, 100, 4.0, decisions_left=24_900))  # 50 x 500 steps
        'evaluating, episodes 0/50, 100 decisions, up to 16m36s more at this rate'
    """
    if progress.finished and not progress.greedy:
        return f"update {update}: optimising on {progress.decisions} decisions (the episodes took {progress.seconds:.0f}s)"
    phase = ("evaluating" if update is None else "greedy check") if progress.greedy else "playing"
    head = f"{phase}," if progress.greedy else phase
    line = f"{head} episodes {progress.episodes}/{progress.planned or '?'}, {progress.decisions} decisions"
    if progress.episodes and progress.planned:
        left = progress.seconds / progress.episodes * (progress.planned - progress.episodes)
        line += f", eta {left:.0f}s"
    at_most = getattr(progress, "decisions_left", None)
    if at_most is not None and progress.decisions and (progress.greedy or not progress.episodes):
        # every episode played to its step limit at the rate so far: a solved policy's real time
        line += f", up to {duration(progress.seconds / progress.decisions * at_most)} more at this rate"
    return line if update is None else f"update {update}: {line}"


def duration(seconds: float) -> str:
    """``42s``, ``12m05s`` or ``2h03m``.

    Example:
        >>> duration(42.4), duration(725), duration(7380)
        ('42s', '12m05s', '2h03m')
    """
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def check_line(check: dict[str, Any]) -> str:
    """``update 4 check: greedy return 132 on 8 held-out episodes (target 195)`` from a metrics
    line's ``check``."""
    capped = f", {check['max_steps']} steps max" if check.get("max_steps") else ""
    verdict = "solved" if check.get("solved") else f"target {_fmt(check.get('until'), 'g')}"
    return (f"update {check.get('update')} check: greedy return {_fmt(check.get('return_mean'))} on "
            f"{check.get('episodes')} held-out episodes{capped} ({verdict})")


def alarm_line(alarm: dict[str, Any]) -> str:
    """``update 6 alarm: <what was seen>: <hint>`` from one of a metrics line's ``alarms``."""
    return f"update {alarm.get('update')} alarm: {alarm.get('message')}: {alarm.get('hint')}"


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
        total: training updates of the whole run (the last update's number).
        done: updates already done (a resumed run).
        quiet: print nothing at all.
        sample_every: show a sample answer every this many updates (0: never).
        console: the rich console (default: stdout); its ``is_terminal`` picks the mode.
        description: the bar's label (the env's name).
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
                TextColumn("updates"),
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

    def progress(self, progress: Any, update: int) -> None:
        """Show what the update ``update`` is doing (a rollout's :class:`textgym.rollout.RolloutProgress`:
        playing its episodes, optimising, its greedy check) under the bar; off a terminal, a plain
        line when no line came for :data:`PLAIN_REPORT_SECONDS`."""
        if self.quiet:
            return
        line = progress_line(progress, update)
        if self._progress is not None:
            self._progress.stats = Text(line, no_wrap=True, overflow="ellipsis")
            self._progress.refresh()
        elif time.monotonic() - self._last_report >= PLAIN_REPORT_SECONDS:
            self._last_report = time.monotonic()
            say(line, console=self.console)

    def update(self, metrics: dict[str, Any]) -> None:
        """Advance to the update of ``metrics``, show its statistics, and a line for its greedy
        check and for each alarm it raised (an alarm is raised once, when it starts)."""
        if self.quiet:
            return
        update = metrics.get("update")
        done = update if isinstance(update, int) else 0
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
            say(f"update {update}/{self.total}: {metrics.get('episodes')} episodes | {stats}",
                console=self.console)
        if isinstance(metrics.get("check"), dict):
            self.log(check_line(metrics["check"]), style="green" if metrics["check"].get("solved") else None)
        for alarm in metrics.get("alarms") or []:
            self.log(alarm_line(alarm), style="yellow")


@contextlib.contextmanager
def evaluation_progress(console: Console | None = None) -> Iterator[None]:
    """While the block evaluates (``textgym eval``), show its progress on stderr: on a terminal a
    status line (:func:`progress_line`: episodes done, decisions, ETA), elsewhere plain lines
    (:class:`PlainProgress`)."""
    from textgym.rollout import watch

    console = console or Console(file=sys.stderr)
    with contextlib.ExitStack() as stack:
        status = stack.enter_context(console.status("evaluating...")) if console.is_terminal else None

        def show(progress: Any) -> None:
            status.update(progress_line(progress))

        stack.enter_context(watch(show if status is not None else PlainProgress(console)))
        yield


#: Off a terminal, an evaluation's first progress line (its ETA from the first steps) comes
#: after this many seconds of playing.
ETA_AFTER_SECONDS = 10.0


class PlainProgress:
    """An evaluation's progress off a terminal (a log): a :func:`progress_line` once the rollout
    has played :data:`ETA_AFTER_SECONDS` (how long it will take, from the first steps), then every
    :data:`PLAIN_REPORT_SECONDS`; by the rollout's own clock, which a new rollout restarts.

    Example:
        >>> from textgym.rollout import RolloutProgress
        >>> report = PlainProgress(Console(width=200))
        >>> for seconds in (2.0, 12.0, 30.0, 75.0):
        ...     report(RolloutProgress(True, 0, 50, int(seconds * 40), seconds, decisions_left=25_000 - int(seconds * 40)))
        evaluating, episodes 0/50, 480 decisions, up to 10m13s more at this rate
        evaluating, episodes 0/50, 3000 decisions, up to 9m10s more at this rate
    """

    def __init__(self, console: Console):
        self.console, self.next_at, self.seconds = console, ETA_AFTER_SECONDS, 0.0

    def __call__(self, progress: Any) -> None:
        if progress.seconds < self.seconds:  # another rollout (the next checkpoint)
            self.next_at = ETA_AFTER_SECONDS
        self.seconds = progress.seconds
        if progress.decisions and progress.seconds >= self.next_at:
            self.next_at = progress.seconds + PLAIN_REPORT_SECONDS
            say(progress_line(progress), console=self.console)
