"""Parsers: an LLM's raw answer -> the index of a valid action name.

A parser is any object with a ``name`` and ``__call__(text, action_names) -> ParseResult | None``
(``None``: no match). :class:`ParserChain` tries parsers in order; the default chain is
JSON, then an answer tag, then regex, then keyword. Every built-in parser is total (it never raises, whatever
the text) and bounded in work, so a 1 MB answer costs milliseconds.

Example:
    >>> chain = default_parser()
    >>> chain('I think {"action": "left"} is safest.', ["LEFT", "RIGHT"])
    ParseResult(action_index=0, action_name='LEFT', parser='json')
    >>> chain("**Action:** RIGHT", ["LEFT", "RIGHT"])
    ParseResult(action_index=1, action_name='RIGHT', parser='regex')
    >>> chain("Not left... right!", ["LEFT", "RIGHT"])
    ParseResult(action_index=1, action_name='RIGHT', parser='keyword')
    >>> chain("jump", ["LEFT", "RIGHT"]) is None
    True
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "DEFAULT_REGEX_PATTERNS",
    "FunctionParser",
    "JSONParser",
    "KeywordParser",
    "ParseResult",
    "Parser",
    "ParserChain",
    "RegexParser",
    "TagParser",
    "answer_text",
    "as_parser",
    "box_grid",
    "box_instructions",
    "default_parser",
    "parse_numbers",
]


@dataclass(frozen=True)
class ParseResult:
    """What a parser found in an answer.

    Args:
        action_index: index into the ``action_names`` the parser was given.
        action_name: ``action_names[action_index]``.
        parser: the ``name`` of the parser that matched.
    """

    action_index: int | None
    action_name: str | None
    parser: str | None


class Parser:
    """Base class of the parsers. Subclass it and implement :meth:`__call__`.

    Example:
        >>> class Last(Parser):
        ...     name = "last-word"
        ...     def __call__(self, text, action_names):
        ...         words = text.split()
        ...         if words and words[-1] in action_names:
        ...             i = list(action_names).index(words[-1])
        ...             return ParseResult(i, action_names[i], self.name)
        ...         return None
        >>> Last()("go LEFT", ["LEFT", "RIGHT"]).action_index
        0
    """

    name: str = "parser"

    def __call__(self, text: str, action_names: Sequence[str]) -> ParseResult | None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def _result(self, index: int, table: _NameTable) -> ParseResult:
        return ParseResult(index, table.names[index], self.name)


# --------------------------------------------------------------------------- name matching

# Separators inside a multi-word name ("move north", "MOVE_NORTH", "move-north") are
# interchangeable: a whitespace run, an underscore run or one hyphen between word characters.
# A leading "-" (as in "-1") is never touched.
_SEPARATOR = re.compile(r"(?<=\w)(?:\s+|_+|-)(?=\w)")
_STRIP_CHARS = " \t\r\n\"'`*.,;:!?()[]{}<>"
_MAX_NAME_LOOKUP = 200  # a candidate longer than any sane action name is not looked up


def _normalize(text: str) -> str:
    return _SEPARATOR.sub(" ", text.strip(_STRIP_CHARS).lower())


def _name_regex(name: str) -> str:
    """A regex for one action name, with flexible internal separators."""
    parts = re.split(r"(?:\s+|_+|-)", name.strip())
    if len(parts) > 1 and all(p and (p[0].isalnum() or p[0] == "_") for p in parts):
        return r"(?:\s{1,8}|_{1,8}|-)".join(re.escape(p) for p in parts)
    return re.escape(name.strip())


class _NameTable:
    """Lookups for one list of action names (cached per tuple of names)."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.exact = {}
        self.normalized = {}
        for i, name in enumerate(names):
            self.exact.setdefault(name, i)
            self.normalized.setdefault(_normalize(name), i)
        self.has_separators = any(_SEPARATOR.search(n.strip()) for n in names)
        # Numbers name actions here ("1".."9" squares): a number is then never read as an index,
        # or naming a square that is not listed (taken) would pick another one.
        self.numeric_names = any(n.strip().isdecimal() for n in names)
        # Longest names first so that "move north" wins over "move" in an alternation.
        ordered = sorted({n.strip() for n in names if n.strip()}, key=len, reverse=True)
        self.alternation = "|".join(_name_regex(n) for n in ordered) or r"(?!x)x"
        self.alternation_lower = "|".join(_name_regex(n.lower()) for n in ordered) or r"(?!x)x"

    def index(self, candidate: str) -> int | None:
        """Index of the name that ``candidate`` spells (case/spacing-insensitive), or None."""
        if len(candidate) > _MAX_NAME_LOOKUP:
            return None
        i = self.exact.get(candidate)
        if i is None:
            i = self.normalized.get(_normalize(candidate))
        return i

    def from_value(self, value: Any) -> int | None:
        """A JSON value -> index: a name, or an int index (a numeric *name* wins over an index)."""
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            by_name = self.exact.get(str(value))
            if by_name is not None or self.numeric_names:
                return by_name
            return value if 0 <= value < len(self.names) else None
        if isinstance(value, str):
            i = self.index(value)
            if i is None:
                stripped = value.strip()
                if 0 < len(stripped) <= 6 and stripped.isdecimal() and stripped.isascii():
                    return self.from_value(int(stripped))
            return i
        return None


@lru_cache(maxsize=256)
def _table(names: tuple[str, ...]) -> _NameTable:
    return _NameTable(names)


def _get_table(action_names: Sequence[str]) -> _NameTable:
    names = action_names if isinstance(action_names, tuple) else tuple(action_names)
    return _table(names)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


# --------------------------------------------------------------------------- JSON

_OBJECT_START = re.compile(r'\{\s{0,64}"')
_JSON_DECODER = json.JSONDecoder()


class JSONParser(Parser):
    """Finds a JSON object with an action key anywhere in the answer.

    Handles bare JSON, JSON inside prose, JSON in a code fence (```json ... ```), and an answer
    that ends inside its last object (``{"action": "LEFT"`` or ``{"action": "LEFT``: a prefilled
    answer stopped at its closing quote or by the length limit).
    Keys and values are case-insensitive; the value is an action name or an integer index
    into ``action_names`` (``{"action": 1}``; when the names are themselves numbers, a
    number is only ever read as a name). When several objects carry an action key the *last* one
    decides; a wrongly typed value (list, null, bool, dict, unknown name) is no match.
    Objects nested in other objects are searched too (``{"reply": {"action": "LEFT"}}``).

    Example:
        >>> JSONParser()('```json\\n{"Action": "right"}\\n```', ["LEFT", "RIGHT"])
        ParseResult(action_index=1, action_name='RIGHT', parser='json')
        >>> JSONParser()('{"action": 0}', ["LEFT", "RIGHT"]).action_name
        'LEFT'
        >>> JSONParser()('{"action": "right"', ["LEFT", "RIGHT"]).action_name
        'RIGHT'
        >>> JSONParser()('{"action": ["LEFT"]}', ["LEFT", "RIGHT"]) is None
        True

    Args:
        keys: the keys that hold the action (compared case-insensitively).
        max_candidates: at most this many ``{"`` positions (the last ones) are decoded.
        max_object_chars: an object longer than this is not decoded (bounds the work).
    """

    name = "json"

    def __init__(
        self,
        keys: Iterable[str] = ("action", "move", "choice", "answer"),
        max_candidates: int = 64,
        max_object_chars: int = 65536,
    ):
        self.keys = tuple(k.lower() for k in keys)
        self.max_candidates = int(max_candidates)
        self.max_object_chars = int(max_object_chars)

    def __repr__(self) -> str:
        return f"JSONParser(keys={self.keys!r})"

    def __call__(self, text: str, action_names: Sequence[str]) -> ParseResult | None:
        if "{" not in text:
            return None
        table = _get_table(action_names)
        found = None  # the value of the last object that has an action key
        for obj in self._objects(text):
            value = self._find(obj, depth=0)
            if value is not _MISSING:
                found = value
        if found is None or found is _MISSING:
            return None
        index = table.from_value(found)
        return None if index is None else self._result(index, table)

    def _objects(self, text: str) -> list[Any]:
        """The top-level JSON objects among the last ``max_candidates`` object starts, in order."""
        starts: list[int] = []
        end = len(text)
        scans = 0
        while len(starts) < self.max_candidates and scans < 64 * self.max_candidates:
            pos = text.rfind("{", 0, end)
            if pos < 0:
                break
            scans += 1
            if _OBJECT_START.match(text, pos):
                starts.append(pos)
            end = pos
        objects = []
        covered = -1  # end of the last decoded object: starts before it are nested in it
        for pos in reversed(starts):
            if pos < covered:
                continue
            chunk = text[pos : pos + self.max_object_chars]
            try:
                obj, length = _JSON_DECODER.raw_decode(chunk)
            except (ValueError, RecursionError):
                if pos != starts[0] or len(text) - pos > self.max_object_chars:
                    continue
                obj, length = _close_unterminated(chunk), len(chunk)  # the answer's last object
            if isinstance(obj, dict):
                objects.append(obj)
                covered = pos + length
        return objects

    def _find(self, obj: Any, depth: int) -> Any:
        """The value of the first action key in ``obj`` (breadth first, 4 levels deep)."""
        if isinstance(obj, dict):
            for key, value in obj.items():
                if isinstance(key, str) and key.strip().lower() in self.keys:
                    return value
            children = list(obj.values())
        elif isinstance(obj, list):
            children = obj
        else:
            return _MISSING
        if depth >= 4:
            return _MISSING
        for child in children[:64]:
            if isinstance(child, (dict, list)):
                value = self._find(child, depth + 1)
                if value is not _MISSING:
                    return value
        return _MISSING


_MISSING = object()

# How an answer cut short inside its last object is closed: after its value (a prefilled
# '{"action": "' stopped at the closing quote), inside its value (stopped by the length limit).
_CLOSINGS = ("}", '"}')


def _close_unterminated(chunk: str) -> Any:
    """The object that ``chunk`` (an object start running to the end of the answer) was cut
    short of, or ``None``: a trailing comma is dropped, then each of :data:`_CLOSINGS` is tried."""
    body = chunk.rstrip().removesuffix(",").rstrip()
    for closing in _CLOSINGS:
        try:
            obj, length = _JSON_DECODER.raw_decode(body + closing)
        except (ValueError, RecursionError):
            continue
        if length == len(body) + len(closing):
            return obj
    return None


# --------------------------------------------------------------------------- answer tag


class TagParser(Parser):
    """The action in the *last* ``<answer>...</answer>`` tag: reasoning first, then the answer.

    The tag's content is an action name (case/spacing-insensitive) or, failing that, the last
    action name it mentions. An answer that ends inside its last tag (``<answer>LEFT``, cut by a
    length limit) is read too. Text before the tag, however many actions it mentions, does not
    count.

    Example:
        >>> TagParser()("LEFT looks risky. <answer>RIGHT</answer>", ["LEFT", "RIGHT"])
        ParseResult(action_index=1, action_name='RIGHT', parser='answer')
        >>> TagParser(tag="move")("<move>I go left</move>", ["LEFT", "RIGHT"]).action_name
        'LEFT'
        >>> TagParser()("no tag: RIGHT", ["LEFT", "RIGHT"]) is None
        True

    Args:
        tag: the tag's name (matched case-insensitively).
        max_chars: only the last ``max_chars`` characters of an answer are searched, and at most
            this many characters of a tag's content are read.
    """

    name = "answer"

    def __init__(self, tag: str = "answer", max_chars: int = 4096):
        if not re.fullmatch(r"[A-Za-z][\w.-]{0,63}", tag):
            raise ValueError(f"a tag name is a letter followed by letters, digits, '_', '.' or '-', got {tag!r}")
        self.tag = tag
        self.max_chars = int(max_chars)
        self._open = re.compile(f"<{re.escape(tag)}\\s{{0,8}}>", re.IGNORECASE)
        self._close = re.compile(f"</{re.escape(tag)}\\s{{0,8}}>", re.IGNORECASE)
        self._keyword = KeywordParser(max_scans=256)

    def __repr__(self) -> str:
        return f"TagParser(tag={self.tag!r})"

    def _content(self, text: str) -> str | None:
        """The last tag's content (to the end of the text when it is not closed), or ``None``."""
        if len(text) > self.max_chars:
            text = text[-self.max_chars :]
        last = None
        for last in self._open.finditer(text):
            pass
        if last is None:
            return None
        content = text[last.end() :]
        close = self._close.search(content)
        return content[: close.start()] if close else content

    def __call__(self, text: str, action_names: Sequence[str]) -> ParseResult | None:
        content = self._content(text)
        if content is None:
            return None
        table = _get_table(action_names)
        index = table.index(content)
        if index is None:
            found = self._keyword(content, table.names)
            index = None if found is None else found.action_index
        return None if index is None else self._result(index, table)


# --------------------------------------------------------------------------- regex

def _words(*words: str) -> str:
    """An alternation of lowercase words, each preceded by a word boundary.

    The boundary is checked by a lookbehind placed *after* the first letter, so that the
    regex engine can still skip quickly to positions that start with one of the letters.
    """
    return "(?:" + "|".join(f"{w[0]}(?<!\\w{w[0]}){re.escape(w[1:])}" for w in words) + ")"


#: Default :class:`RegexParser` patterns, tried in order; ``{actions}`` stands for an
#: alternation of the action names. They are matched against the lowercased answer. All
#: quantifiers are bounded: no catastrophic backtracking.
DEFAULT_REGEX_PATTERNS: tuple[str, ...] = (
    # "Action: RIGHT", "action = right", "**Action:** RIGHT", "'action': 'LEFT'",
    # "Final answer: LEFT", "The best move is LEFT", "Action -> LEFT"
    _words("action", "actions", "move", "choice", "decision", "answer")
    + r"(?!\w)\W{0,6}?\s{0,8}(?::|=>|->|=|-|\bis\b|\bwill be\b)\s{0,8}\W{0,6}?"
    r"(?P<action>{actions})(?!\w)",
    # "I choose LEFT", "I'll take the action RIGHT", "press FIRE", "go north"
    _words("choose", "chose", "choosing", "pick", "picking", "select", "selecting", "take",
           "taking", "go", "going", "play", "playing", "press", "pressing")
    + r"\s{1,8}(?:the\s{1,8})?(?:action\s{1,8})?\W{0,3}(?P<action>{actions})(?!\w)",
)


class RegexParser(Parser):
    """Finds an action with regular expressions, e.g. ``Action: RIGHT``.

    Each pattern is either a template with an ``{actions}`` placeholder (replaced by an
    alternation of the escaped action names) and a named group ``action``, or a plain
    regex whose group ``action`` (or group 1) captures a name or an index. Patterns are
    tried in order; within a pattern the *last* match wins. Matching is case-insensitive.

    Example:
        >>> RegexParser()("Let me think. Action: move north", ["MOVE_NORTH", "MOVE_SOUTH"])
        ParseResult(action_index=0, action_name='MOVE_NORTH', parser='regex')
        >>> RegexParser([r"<act>(\\w+)</act>"])("<act>right</act>", ["LEFT", "RIGHT"]).action_index
        1

    Args:
        patterns: the patterns (str templates or compiled ``re.Pattern``). Default:
            :data:`DEFAULT_REGEX_PATTERNS`.
        flags: ``re`` flags for str patterns.
        max_chars: only the last ``max_chars`` characters of an answer are searched.
    """

    name = "regex"

    def __init__(
        self,
        patterns: Iterable[str | re.Pattern] | None = None,
        flags: int = re.IGNORECASE,
        max_chars: int = 1 << 20,
    ):
        self.patterns = tuple(DEFAULT_REGEX_PATTERNS if patterns is None else patterns)
        self.flags = flags
        # The default patterns are written in lowercase and run on the lowercased answer
        # without re.IGNORECASE: several times faster, as the engine can skip to candidate
        # first letters. User patterns run on the answer as given, with `flags`.
        self._lowercase = patterns is None
        self.max_chars = int(max_chars)
        self._compiled: dict[tuple[str, ...], list[re.Pattern]] = {}
        for p in self.patterns:  # fail at construction, not at the first answer
            if isinstance(p, str) and "{actions}" not in p:
                re.compile(p, flags)

    def __repr__(self) -> str:
        return f"RegexParser(patterns={len(self.patterns)})"

    def _compile(self, table: _NameTable) -> list[re.Pattern]:
        compiled = self._compiled.get(table.names)
        if compiled is None:
            compiled = []
            for p in self.patterns:
                if isinstance(p, re.Pattern):
                    compiled.append(p)
                else:
                    if self._lowercase:
                        source = p.replace("{actions}", table.alternation_lower)
                        compiled.append(re.compile(source, self.flags & ~re.IGNORECASE))
                    else:
                        source = p.replace("{actions}", table.alternation)
                        compiled.append(re.compile(source, self.flags))
            if len(self._compiled) > 64:
                self._compiled.clear()
            self._compiled[table.names] = compiled
        return compiled

    def __call__(self, text: str, action_names: Sequence[str]) -> ParseResult | None:
        table = _get_table(action_names)
        if len(text) > self.max_chars:
            text = text[-self.max_chars :]
        if self._lowercase:
            text = text.lower()
        for pattern in self._compile(table):
            last = None
            for last in pattern.finditer(text):
                pass
            if last is None:
                continue
            groups = last.groupdict()
            captured = groups.get("action") if "action" in groups else (
                last.group(1) if pattern.groups else last.group(0))
            if captured is None:
                continue
            index = table.from_value(captured)
            if index is not None:
                return self._result(index, table)
        return None


# --------------------------------------------------------------------------- keyword


class KeywordParser(Parser):
    """The *last* whole-word, case-insensitive mention of an action name.

    Multi-word names match with any separator (``move north``, ``MOVE_NORTH``,
    ``move-north``); when two names end at the same place the longer one wins
    (``UP+FIRE`` over ``FIRE``). It is the lenient last resort: it ignores negation
    ("not LEFT"), so put stricter parsers before it.

    Example:
        >>> KeywordParser()("Left looks bad, so RIGHT.", ["LEFT", "RIGHT"]).action_name
        'RIGHT'
        >>> KeywordParser()("leftover", ["LEFT", "RIGHT"]) is None
        True

    Args:
        max_scans: at most this many occurrences of one name are examined (bounds the work
            on adversarial text such as ``"leftleftleft..."``).
    """

    name = "keyword"

    def __init__(self, max_scans: int = 10000):
        self.max_scans = int(max_scans)

    def __call__(self, text: str, action_names: Sequence[str]) -> ParseResult | None:
        table = _get_table(action_names)
        haystack = text.lower()
        if table.has_separators:
            haystack = _SEPARATOR.sub(" ", haystack)
        best: tuple[int, int, int] | None = None  # (end, length, -index)
        for needle, index in table.normalized.items():
            if not needle:
                continue
            end_pos = self._last_whole_word(haystack, needle)
            if end_pos is not None:
                key = (end_pos, len(needle), -index)
                if best is None or key > best:
                    best = key
        return None if best is None else self._result(-best[2], table)

    def _last_whole_word(self, haystack: str, needle: str) -> int | None:
        check_start = _is_word_char(needle[0])
        check_end = _is_word_char(needle[-1])
        end = len(haystack)
        for _ in range(self.max_scans):
            pos = haystack.rfind(needle, 0, end)
            if pos < 0:
                return None
            stop = pos + len(needle)
            if (not check_start or pos == 0 or not _is_word_char(haystack[pos - 1])) and (
                not check_end or stop == len(haystack) or not _is_word_char(haystack[stop])
            ):
                return stop
            end = pos + len(needle) - 1
        return None


# --------------------------------------------------------------------------- answer text


def answer_text(text: str) -> str | None:
    """What an answer says its action is, before it is matched to any name: the string value of
    the last JSON object's action key (an unterminated last object included), else the content of
    the last ``<answer>`` tag, else ``None``. For envs whose actions are free text (TextWorld's
    typed commands).

    Example:
        >>> answer_text('{"action": "open the box"')
        'open the box'
        >>> answer_text("Hm. <answer>go north</answer>"), answer_text("go north")
        ('go north', None)
    """
    json_parser = _ANSWER_JSON
    found = None
    if "{" in text:
        for obj in json_parser._objects(text):
            value = json_parser._find(obj, depth=0)
            if value is not _MISSING:
                found = value
    if isinstance(found, str):
        return found.strip()
    tag = _ANSWER_TAG._content(text)
    return None if tag is None else tag.strip()


# --------------------------------------------------------------------------- composition


ParserLike = Parser | Callable[[str, Sequence[str]], Any]


class FunctionParser(Parser):
    """Adapts a plain function ``f(text, action_names)`` into a :class:`Parser`.

    The function may return a :class:`ParseResult`, an ``int`` index, an action name
    (``str``) or ``None``.

    Example:
        >>> p = FunctionParser(lambda text, names: 1 if "->" in text else None, name="arrow")
        >>> p("->", ["LEFT", "RIGHT"])
        ParseResult(action_index=1, action_name='RIGHT', parser='arrow')
    """

    def __init__(self, fn: Callable[[str, Sequence[str]], Any], name: str | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "name", None) or getattr(fn, "__name__", "custom")

    def __repr__(self) -> str:
        return f"FunctionParser({self.name!r})"

    def __call__(self, text: str, action_names: Sequence[str]) -> ParseResult | None:
        out = self.fn(text, action_names)
        if out is None:
            return None
        if isinstance(out, ParseResult):
            if out.action_index is None:
                return None
            return ParseResult(out.action_index, out.action_name, out.parser or self.name)
        table = _get_table(action_names)
        index = table.from_value(out) if isinstance(out, (int, str)) else None
        return None if index is None else self._result(index, table)


def as_parser(parser: ParserLike | Sequence[ParserLike] | None) -> Parser:
    """Anything parser-like -> a :class:`Parser`: ``None`` gives :func:`default_parser`,
    a list gives a :class:`ParserChain`, a plain function a :class:`FunctionParser`."""
    if parser is None:
        return default_parser()
    if isinstance(parser, Parser):
        return parser
    if isinstance(parser, (list, tuple)):
        return ParserChain(parser)
    if callable(parser):
        return FunctionParser(parser)
    raise TypeError(
        f"parser must be a textgym Parser, a function f(text, action_names) or a list of them, "
        f"got {type(parser).__name__}"
    )


class ParserChain(Parser):
    """Tries parsers in order; the first match wins.

    Example:
        >>> chain = ParserChain([JSONParser(), KeywordParser()])
        >>> chain('{"action": "RIGHT"} (not LEFT)', ["LEFT", "RIGHT"]).parser
        'json'

    Args:
        parsers: :class:`Parser` objects or plain functions ``f(text, action_names)``.
    """

    name = "chain"

    def __init__(self, parsers: Sequence[ParserLike]):
        self.parsers = [as_parser(p) for p in parsers]
        if not self.parsers:
            raise ValueError("ParserChain needs at least one parser")

    def __repr__(self) -> str:
        return f"ParserChain({self.parsers!r})"

    def __call__(self, text: str, action_names: Sequence[str]) -> ParseResult | None:
        for parser in self.parsers:
            result = parser(text, action_names)
            if result is not None and result.action_index is not None:
                return result
        return None


def default_parser() -> ParserChain:
    """The default chain: :class:`JSONParser`, then :class:`TagParser` (``<answer>...</answer>``),
    then :class:`RegexParser`, then :class:`KeywordParser`."""
    return ParserChain([JSONParser(), TagParser(), RegexParser(), KeywordParser()])


_ANSWER_JSON = JSONParser()
_ANSWER_TAG = TagParser()


# --------------------------------------------------------------------------- continuous (Box) actions

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?!\w|\.\d)")
_MAX_NUMBER_TEXT = 65536  # a longer answer is read from its end (where the final answer is)


def parse_numbers(text: str, size: int) -> list[float] | None:
    """The ``size`` numbers an answer gives for a continuous action, else ``None``.

    The last JSON list of ``size`` numbers (``[0.5, -1]``, also as ``{"action": [0.5, -1]}``),
    else the last ``size`` numbers of the answer tag's content or, without a tag, of the text.
    Total and bounded like the other parsers.

    Example:
        >>> parse_numbers('{"action": [0.5, -1]}', 2), parse_numbers("Torque: -1.5 please", 1)
        ([0.5, -1.0], [-1.5])
        >>> parse_numbers("push left", 1) is None, parse_numbers("[1, 2, 3]", 2)
        (True, [2.0, 3.0])
    """
    if not isinstance(text, str) or size < 1:
        return None
    text = text[-_MAX_NUMBER_TEXT:]
    for chunk in reversed(re.findall(r"\[[^\[\]]{0,2000}\]", text)):
        try:
            values = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(values, list) and len(values) == size and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return [float(v) for v in values]
    tagged = _ANSWER_TAG._content(text) if "<" in text else None
    numbers = _NUMBER.findall(tagged if tagged is not None else text)
    if len(numbers) < size:
        return None
    try:
        values = [float(n) for n in numbers[-size:]]
    except ValueError:
        return None
    return values if all(math.isfinite(v) for v in values) else None


def _bounds(space: Any) -> tuple[Any, Any]:
    """The finite bounds of a Box space; an unbounded side is read as -1 or 1."""
    import numpy as np

    low = np.where(np.isfinite(space.low), space.low, -1.0).reshape(-1).astype(float)
    high = np.where(np.isfinite(space.high), space.high, 1.0).reshape(-1).astype(float)
    return low, high


def _format_number(value: float) -> str:
    text = format(round(float(value), 3), "g")
    return "0" if text == "-0" else text


def box_grid(space: Any) -> tuple[list[str], list[Any]]:
    """The named actions of a Box action space (for score mode and for the invalid-answer default):
    a grid of evenly spaced values per dimension, from the lower to the upper bound: 5 values for
    1 or 2 dimensions, 3 for 3 to 5 dimensions, and for more only the centre and the corners of
    each axis alone. An unbounded side is read as -1 or 1. A 1-D action is named by its number
    (``"-2"``, ``"-1"``, ``"0"``...), a larger one by its JSON list (``"[0, -1]"``).

    Example:
        >>> import gymnasium as gym
        >>> box_grid(gym.spaces.Box(-2.0, 2.0, (1,)))[0]
        ['-2', '-1', '0', '1', '2']
        >>> box_grid(gym.spaces.Box(-1.0, 1.0, (2,)))[0][:2]
        ['[-1, -1]', '[-1, -0.5]']
    """
    import itertools

    import numpy as np

    low, high = _bounds(space)
    dims = low.size
    if dims <= 5:
        bins = 5 if dims <= 2 else 3
        axes = [np.linspace(lo, hi, bins) for lo, hi in zip(low, high)]
        points = [np.array(p) for p in itertools.product(*axes)]
    else:
        centre = (low + high) / 2
        points = [centre]
        for i in range(dims):
            for end in (low[i], high[i]):
                point = centre.copy()
                point[i] = end
                points.append(point)
    shape, dtype = space.shape, space.dtype
    arrays = [p.reshape(shape).astype(dtype) for p in points]
    if dims == 1:
        names = [_format_number(p[0]) for p in points]
    else:
        names = ["[" + ", ".join(_format_number(v) for v in p) + "]" for p in points]
    return names, arrays


def box_instructions(space: Any) -> str:
    """The answer format of a Box action space, e.g. ``"Answer with a number from -2 to 2."``."""
    low, high = _bounds(space)
    if low.size == 1:
        return f"Answer with a number from {_format_number(low[0])} to {_format_number(high[0])}."
    ranges = ", ".join(f"{_format_number(lo)}..{_format_number(hi)}" for lo, hi in zip(low, high))
    return f"Answer with a JSON list of {low.size} numbers (ranges {ranges}), e.g. [{', '.join(['0'] * low.size)}]."
