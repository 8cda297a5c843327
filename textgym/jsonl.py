"""JSON Lines, read as JSON Lines: one record per ``"\\n"``-terminated line.

``str.splitlines()`` also splits at U+2028, U+2029, U+0085, ``\\x0b``, ``\\x0c`` and
``\\x1c``-``\\x1e``, which JSON may hold unescaped inside a string (a transcript written with
``ensure_ascii=False`` keeps an env's U+2028 as it is): splitting there tears a good line in two
and the reader drops it. Every reader of a ``.jsonl`` file in textgym splits here.

Example:
    >>> lines('{"text": "a\\u2028b"}\\n{"n": 2}\\n')
    ['{"text": "a\\u2028b"}', '{"n": 2}']
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["lines", "numbered_lines", "read_lines"]


def lines(text: str) -> list[str]:
    """The non-blank lines of a JSON Lines text, split at ``"\\n"`` only (a ``"\\r"`` before it
    is dropped: a file edited on Windows)."""
    return [line.removesuffix("\r") for line in text.split("\n") if line.strip()]


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """``(line number from 1, line)`` for the non-blank lines of a JSON Lines text (for messages
    that name the line), split as :func:`lines` splits."""
    return [(number, line.removesuffix("\r")) for number, line in enumerate(text.split("\n"), start=1)
            if line.strip()]


def read_lines(path: str | Path) -> list[str]:
    """The non-blank lines of a JSON Lines file (undecodable bytes replaced), unparsed."""
    return lines(Path(path).read_text(encoding="utf-8", errors="replace"))
