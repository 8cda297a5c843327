"""Stopping a training session on Ctrl-C or SIGTERM without losing work.

SIGTERM is what a cluster scheduler (or ``docker stop``, ``systemd``, ``kill``) sends before it
kills a job, so ``textgym train`` treats it like Ctrl-C:

* while the run trains (:class:`StopSignals`), the first Ctrl-C or SIGTERM asks it to stop
  after the current update, which then saves a checkpoint and summary.json; a second one stops
  at once (the last periodic checkpoint stays);
* before and after that (loading the model, the final evaluation), SIGTERM unwinds like
  Ctrl-C (:func:`sigterm_unwinds`), so the run folder's lock is released and a folder the
  session created but never wrote to is removed.

Signal handlers can only be installed from the main thread; elsewhere (a test runner's worker
thread) both are no-ops.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from textgym.cli.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated

#: The signals that stop a run cleanly, by the name messages give them.
STOP_SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


def exit_code(reason: str) -> int:
    """The exit code of a run stopped by ``reason`` (a value of :data:`STOP_SIGNALS`)."""
    return EXIT_TERMINATED if reason == "SIGTERM" else EXIT_INTERRUPTED


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``): cleanup
    code runs and the CLI exits with one line and code 143, instead of dying on the spot."""
    if not _in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class StopSignals:
    """While training: the first Ctrl-C or SIGTERM asks the run to stop after the current
    update; a second one stops at once.

    Args:
        notify: called with a one-line message when a stop is first requested (the live
            display's ``log``).

    Example:
        >>> messages = []
        >>> with StopSignals(lambda message, style=None: messages.append(message)) as stop:
        ...     stop.request("Ctrl-C")
        >>> stop.reason, messages[0][:42]
        ('Ctrl-C', 'Ctrl-C: stopping after this update to save')
    """

    def __init__(self, notify: Callable[..., None]):
        self.reason: str | None = None
        """What asked the run to stop ("Ctrl-C" or "SIGTERM"), or None."""
        self._notify = notify
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def __enter__(self) -> StopSignals:
        if _in_main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def request(self, reason: str) -> None:
        """Ask the run to stop after the current update (the first request is announced)."""
        if self.reason is None:
            self.reason = reason
            self._notify(f"{reason}: stopping after this update to save a checkpoint "
                         f"({reason} again to quit without saving).", style="yellow")

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:  # the second signal: stop now
            raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
        self.request(STOP_SIGNALS[signum])
