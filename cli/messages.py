"""One way to print a message for the user: styled on a terminal, plain text everywhere else.

Every status line of the CLI (``textgym: ...``, the live display's log lines, errors) goes
through :func:`say`. A style (``"yellow"``, ``"dim"``, ...) is rendered by Rich when the stream
is a terminal and dropped when it is a pipe, a file or a CI log, so no ``[yellow]...[/]`` ever
reaches a log file. The text itself is never parsed as markup: a path or a model answer holding
brackets prints as it is.

Example:
    >>> import io
    >>> from rich.console import Console
    >>> log = Console(file=io.StringIO(), force_terminal=False)
    >>> say("Stopping after this update.", style="yellow", console=log)
    >>> log.file.getvalue()
    'Stopping after this update.\\n'
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line assembled from plain strings and ``(text, style)`` pairs (no markup parsing).

    Example:
        >>> styled(("update 2 sample:", "dim"), " 'red' -> 'cat'").plain
        "update 2 sample: 'red' -> 'cat'"
    """
    return Text.assemble(*parts)


def say(message: str | Text, *, style: str | None = None, err: bool = False,
        console: Console | None = None) -> None:
    """Print ``message`` as one line: with ``style`` on a terminal, plain otherwise.

    Args:
        message: plain text (never read as markup) or a :class:`rich.text.Text`.
        style: a Rich style for the whole line (ignored off a terminal).
        err: print to stderr instead of stdout.
        console: print through this console (e.g. the live display's, so the line appears
            above its progress bar); default: a console on the current stdout or stderr.
    """
    text = message if isinstance(message, Text) else Text(str(message), style=style or "")
    if isinstance(message, Text) and style:
        text = text.copy()
        text.stylize(style)
    if console is None:
        # Made per call: the streams may have been replaced since import (tests, redirection).
        console = Console(stderr=err, highlight=False, emoji=False, markup=False)
    # soft_wrap: a long line stays one line (no wrapping at the console width in log files).
    console.print(text, soft_wrap=True, highlight=False)
    console.file.flush()
