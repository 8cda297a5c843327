"""The observation and action space of a text env: any string up to a length limit."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

# Printable ASCII plus newline: what `sample()` draws from. `contains()` accepts any str.
_SAMPLE_ALPHABET = tuple(chr(c) for c in range(32, 127)) + ("\n",)


class TextSpace(spaces.Space[str]):
    """Any Python ``str`` of at most ``max_length`` characters.

    Gymnasium's :class:`~gymnasium.spaces.Text` only admits a fixed charset (by default
    letters and digits, no spaces or punctuation), which no LLM answer fits. This space
    admits every string, unicode and control characters included, up to ``max_length``.

    Example:
        >>> space = TextSpace(max_length=64)
        >>> space.contains('{"action": "LEFT"} because the pole leans left.')
        True
        >>> space.contains(3)
        False

    Args:
        max_length: the longest string the space contains.
        min_length: the shortest string ``sample()`` draws (``contains`` accepts shorter ones).
        seed: seed for ``sample()``.
    """

    def __init__(self, max_length: int = 4096, *, min_length: int = 0, seed: int | None = None):
        if max_length < 1 or min_length < 0 or min_length > max_length:
            raise ValueError(f"need 0 <= min_length <= max_length and max_length >= 1, "
                             f"got min_length={min_length}, max_length={max_length}")
        self.max_length = int(max_length)
        self.min_length = int(min_length)
        super().__init__(dtype=str, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random printable string with a length between ``min_length`` and ``min(max_length, 64)``."""
        high = min(self.max_length, max(self.min_length, 64))
        length = int(self.np_random.integers(self.min_length, high + 1))
        picks = self.np_random.integers(0, len(_SAMPLE_ALPHABET), size=length)
        return "".join(_SAMPLE_ALPHABET[i] for i in picks)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length

    def to_jsonable(self, sample_n):  # noqa: D102 - Gymnasium's interface
        return list(sample_n)

    def from_jsonable(self, sample_n):  # noqa: D102
        return list(sample_n)

