"""Error handling for the CLI: bad input prints one line on stderr and exits non-zero.

Every command runs inside :class:`TextgymGroup.main`, which turns a usage error (bad flag
value, missing argument), a :class:`CLIError` (bad input found by a command) or any other
exception into a single ``textgym: error: ...`` line. ``--debug`` (anywhere on the command
line) or ``TEXTGYM_DEBUG=1`` prints the full traceback instead.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

#: Exit codes: 1 for bad input or a failed command, 2 for command-line usage errors
#: (Click's convention), 130 for Ctrl-C and 143 for SIGTERM (128 + the signal's number, the
#: shell's convention).
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM where a command cannot stop cleanly: unwinds like Ctrl-C (see cli/stopping.py)."""


class CLIError(Exception):
    """A user-facing error: its message is printed as one line, without a traceback.

    Args:
        message: what went wrong and, where possible, how to fix it.
        exit_code: the process exit code (1 by default, 2 for command-line usage errors).
    """

    def __init__(self, message: str, exit_code: int = EXIT_ERROR):
        super().__init__(message)
        self.exit_code = exit_code


_OS_ERROR_REASONS = {
    errno.EACCES: "no permission to write there",
    errno.EPERM: "no permission to write there",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.ENAMETOOLONG: "the name is too long",
}


def os_error_reason(exc: OSError) -> str:
    """What an OSError means for the user, in plain words (no class name, no errno)."""
    return _OS_ERROR_REASONS.get(exc.errno, exc.strerror or str(exc))


#: An error line longer than this keeps its start and end (an over-long path would print kilobytes).
MAX_LINE = 600

_ANSI_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _one_line(message: str) -> str:
    """``message`` on one line, without terminal colour codes (Gymnasium colours its warnings),
    its middle cut when it is longer than :data:`MAX_LINE`."""
    text = " ".join(_ANSI_CODES.sub("", str(message)).split())
    if len(text) > MAX_LINE:
        text = f"{text[:MAX_LINE // 2]} [... {len(text) - MAX_LINE} characters ...] {text[-MAX_LINE // 2:]}"
    return text


def _one_line_warning(message: Warning | str, category: type[Warning], *args: Any,
                      **kwargs: Any) -> str:
    text = _one_line(str(message))
    return f"{text}\n" if text.startswith("textgym:") else f"textgym: warning: {text}\n"


def _fail(message: str, exit_code: int) -> None:
    from textgym.cli.messages import say

    say(f"textgym: error: {_one_line(message)}", style="bold red", err=True)
    sys.exit(exit_code)


class TextgymGroup(TyperGroup):
    """A Typer group whose errors are one line on stderr (tracebacks only with ``--debug``)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        args = list(sys.argv[1:] if args is None else args)
        debug = os.environ.get("TEXTGYM_DEBUG", "") not in ("", "0")
        if "--debug" in args:
            # Accept --debug anywhere; the group callback declares it so that --help lists it.
            debug = True
            args = ["--debug", *(a for a in args if a != "--debug")]
        if not debug:
            # Library deprecation chatter (transformers, peft) is noise for a CLI user; other
            # warnings (a plugin that failed to load, ...) are one line, like errors.
            warnings.filterwarnings("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.formatwarning = _one_line_warning
        try:
            result = super().main(
                args=args,
                prog_name=prog_name or "textgym",
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except typer.TyperException as exc:  # Click usage errors: bad flag value, missing arg
            if debug:
                traceback.print_exc()
            _fail(exc.format_message(), getattr(exc, "exit_code", EXIT_USAGE))
        except CLIError as exc:
            if debug:
                traceback.print_exc()
            _fail(str(exc), exc.exit_code)
        except Terminated:
            if debug:
                traceback.print_exc()
            _fail("terminated (SIGTERM)", EXIT_TERMINATED)
        except (KeyboardInterrupt, typer.Abort):
            if debug:
                traceback.print_exc()
            _fail("interrupted (Ctrl-C)", EXIT_INTERRUPTED)
        except Exception as exc:  # noqa: BLE001 - every failure becomes one readable line
            if debug:
                traceback.print_exc()
                sys.exit(EXIT_ERROR)
            _fail(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)", EXIT_ERROR)
        if not standalone_mode:
            return result
        sys.exit(result if isinstance(result, int) else 0)
