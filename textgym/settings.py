"""Settings declared once: a dataclass field carries its default, its range and its help.

Every config dataclass of textgym (:class:`textgym.trainers.TrainConfig` and the algorithms',
:class:`textgym.policy.PolicyConfig`, the CLI's ``RunConfig``) declares each knob as a field
with :func:`setting`: the default, the allowed values (a range, or choices) and, for the
command line, the help panel. The field's docstring (the string below it, TRL style) is its
documentation; its first sentence is the short help ``textgym train --help`` shows. From these
declarations:

* :func:`check` validates an instance (each config's ``__post_init__`` calls it), so a value
  out of range fails where the setting is declared, whichever way it came in (Python, a TOML
  config file, a flag, a checkpoint);
* ``textgym.cli.options`` derives the Typer options of ``train`` and ``eval``.

This module is torch-free and cheap to import (``textgym --help`` reads it).

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Knobs:
    ...     lr: float = setting(1e-4, above=0)
    ...     '''Learning rate.'''
    ...     epochs: int = setting(1, at_least=1, at_most=100)
    ...     '''Passes over each batch.'''
    ...     def __post_init__(self):
    ...         check(self)
    >>> Knobs(epochs=0)
    Traceback (most recent call last):
    ...
    ValueError: epochs must be an integer in [1, 100], got 0
    >>> Knobs(lr=float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: lr must be a finite number > 0, got nan
    >>> from textgym.policy.config import PolicyConfig   # (a class defined in a file)
    >>> short_help(PolicyConfig, "max_new_tokens")
    'Generate mode: the answer length limit in tokens.'

"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import math
import numbers
import re
import textwrap
from collections.abc import Sequence
from dataclasses import MISSING
from functools import cache
from typing import Any

__all__ = ["Setting", "check", "check_value", "field_docs", "like", "passed_on", "setting", "setting_of",
           "short_help"]

_KEY = "textgym"  # the key of a field's metadata that holds its Setting


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a field allows, and how the command line shows it (the metadata of :func:`setting`).

    Args:
        at_least, at_most: inclusive bounds of a number.
        above, below: exclusive bounds of a number.
        choices: the allowed values (strings).
        finite: a float must be finite (NaN and infinities are refused).
        flag: the field is a command-line option: ``True`` (``--name``, from the field's name) or
            its declarations (``"--lora/--full"``).
        panel: the ``--help`` panel of its command-line option (``rich_help_panel``).
        metavar: the option's placeholder (e.g. ``K``, ``FILE``).
        default_text: what ``--help`` shows as the default when the field's own default is not
            what a run gets (e.g. ``"per env"``).
    """

    at_least: float | None = None
    at_most: float | None = None
    above: float | None = None
    below: float | None = None
    choices: tuple[Any, ...] | None = None
    finite: bool = True
    flag: bool | str = False
    panel: str | None = None
    metavar: str | None = None
    default_text: str | None = None
    docs_from: tuple[type, str] | None = dataclasses.field(default=None, compare=False)
    """The dataclass and field whose docstring documents this one (see :func:`like`)."""
    like_of: tuple[type, str] | None = dataclasses.field(default=None, compare=False)
    """The dataclass and field this one is declared like (:func:`like`): the setting it passes on
    (``RunConfig.lora`` is ``TrainConfig.use_lora``'s; see :func:`passed_on`)."""

    def describe(self, kind: str) -> str:
        """The allowed values in words: ``an integer >= 1``, ``a finite number in (0, 1]``."""
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        noun = {"int": "an integer", "float": "a finite number" if self.finite else "a number",
                "bool": "true or false", "str": "a string"}.get(kind, "a value")
        low = (self.at_least, "[") if self.at_least is not None else (self.above, "(")
        high = (self.at_most, "]") if self.at_most is not None else (self.below, ")")
        if low[0] is not None and high[0] is not None:
            return f"{noun} in {low[1]}{_num(low[0])}, {_num(high[0])}{high[1]}"
        if low[0] is not None:
            return f"{noun} {'>=' if low[1] == '[' else '>'} {_num(low[0])}"
        if high[0] is not None:
            return f"{noun} {'<=' if high[1] == ']' else '<'} {_num(high[0])}"
        return noun

    def allows(self, value: Any) -> bool:
        if self.choices is not None:
            return value in self.choices
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and self.finite and not math.isfinite(value):
                return False
            if isinstance(value, float) and math.isnan(value):
                return False
            return ((self.at_least is None or value >= self.at_least)
                    and (self.at_most is None or value <= self.at_most)
                    and (self.above is None or value > self.above)
                    and (self.below is None or value < self.below))
        return True


def _num(value: float) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return f"{value:_}" if abs(value) >= 10**5 else str(value)


def setting(default: Any = MISSING, *, default_factory: Any = MISSING, at_least: float | None = None,
            at_most: float | None = None, above: float | None = None, below: float | None = None,
            choices: Sequence[Any] | None = None, finite: bool = True, flag: bool | str = False,
            panel: str | None = None, metavar: str | None = None,
            default_text: str | None = None) -> Any:
    """A dataclass field with its allowed values (see :class:`Setting`); ``None`` is allowed
    exactly when the field's type says so (``int | None``)."""
    rule = Setting(at_least=at_least, at_most=at_most, above=above, below=below,
                   choices=tuple(choices) if choices is not None else None, finite=finite,
                   flag=flag, panel=panel, metavar=metavar, default_text=default_text)
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={_KEY: rule})


def like(cls: type, name: str, default: Any = MISSING, **changes: Any) -> Any:
    """A field declared like field ``name`` of dataclass ``cls`` (its range, and its docstring
    for the help) with another default and ``changes`` to its :class:`Setting`: a setting that
    another config passes on (the CLI's ``num_envs`` to ``TrainConfig.num_envs``) is declared
    once."""
    source = {f.name: f for f in dataclasses.fields(cls)}[name]
    rule = dataclasses.replace(setting_of(source), docs_from=setting_of(source).docs_from or (cls, name),
                               like_of=(cls, name), **changes)
    if default is MISSING:
        default = source.default
    return dataclasses.field(default=default, metadata={_KEY: rule})


def passed_on(cls: type, to: type) -> dict[str, str]:
    """The fields of dataclass ``cls`` declared :func:`like` a field of ``to`` (or of a base class
    of ``to``): ``{field of cls: field of to}``, the settings ``cls`` passes on to a ``to``.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Inner:
        ...     use_lora: bool = setting(True)
        >>> @dataclass
        ... class Outer:
        ...     lora: bool = like(Inner, "use_lora")
        ...     name: str = "x"
        >>> passed_on(Outer, Inner)
        {'lora': 'use_lora'}
    """
    out = {}
    for field in dataclasses.fields(cls):
        source = setting_of(field).like_of
        if source is not None and issubclass(to, source[0]):
            out[field.name] = source[1]
    return out


def setting_of(field: dataclasses.Field) -> Setting:
    """The :class:`Setting` of a field (an unconstrained one for a plain field)."""
    return field.metadata.get(_KEY) or Setting()


def kind_of(field: dataclasses.Field) -> tuple[str, bool]:
    """The base type name of a field (``int``, ``float``, ``bool``, ``str``, or another) and whether
    it may be ``None``; from its annotation (a string under ``from __future__ import annotations``)."""
    annotation = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    parts = [p.strip() for p in annotation.split("|")]
    optional = "None" in parts
    parts = [p for p in parts if p != "None"]
    return (parts[0] if len(parts) == 1 else "|".join(parts)), optional


def check_value(field: dataclasses.Field, value: Any) -> Any:
    """``value`` checked against the field's type and :class:`Setting` (an int is accepted for a
    float field and returned as a float).

    Raises:
        ValueError: one line naming the setting, what it allows and the value given.
    """
    kind, optional = kind_of(field)
    rule = setting_of(field)
    if value is None:
        if optional:
            return None
        raise ValueError(f"{field.name} must be {rule.describe(kind)}, got None")
    ok = True
    if kind == "int":
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if ok:
            value = int(value)
    elif kind == "float":
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if ok:
            value = float(value)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "str":
        ok = isinstance(value, str)
    if not ok or not rule.allows(value):
        raise ValueError(f"{field.name} must be {rule.describe(kind)}, got {value!r}")
    return value


def check(config: Any) -> None:
    """Check every field of a dataclass instance that is declared with :func:`setting` (and
    write back the coerced value: a float field given ``1`` holds ``1.0``).

    Raises:
        ValueError: the first field whose value is out of its range (one line).
    """
    frozen = type(config).__dataclass_params__.frozen  # type: ignore[attr-defined]
    for field in dataclasses.fields(config):
        if _KEY not in field.metadata:
            continue
        value = getattr(config, field.name)
        checked = check_value(field, value)
        if checked is not value:
            if frozen:
                object.__setattr__(config, field.name, checked)
            else:
                setattr(config, field.name, checked)


@cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring of each field of a dataclass (the string literal below its declaration),
    from its source and its base classes'; ``{}`` when the source is not available."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for statement, following in itertools.pairwise(body):
            if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                    and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


def short_help(cls: type, name: str) -> str:
    """The first sentence of a field's docstring, without reST markup: its ``--help`` line."""
    doc = field_docs(cls).get(name)
    if doc is None:
        field = {f.name: f for f in dataclasses.fields(cls)}.get(name)
        source = setting_of(field).docs_from if field is not None else None
        doc = field_docs(source[0]).get(source[1], "") if source is not None else ""
    doc = re.sub(r":\w+:`~?([^`]+)`", r"\1", doc).replace("``", "")
    doc = " ".join(doc.split())
    match = re.match(r"(.+?(?<!e\.g)(?<!i\.e)\.)(\s|$)", doc)
    return match.group(1) if match else doc
