"""Command-line options derived from the config dataclasses (one declaration per setting).

A setting is declared once, as a field of a config dataclass (``RunConfig``, ``PolicyConfig``,
``TrainConfig``) with :func:`textgym.settings.setting`: its default, its range or choices, its
``--help`` panel and whether it is a flag. :func:`option` turns such a field into a Typer option:

* the name: ``--field-name`` (or the field's ``flag`` declarations, e.g. ``--lora/--full``);
* the type and placeholder: from the annotation (``N``, ``X``, ``TEXT``, ``a|b`` for choices);
* the range: Typer's ``min``/``max`` from the field's inclusive bounds, so ``--episodes 0`` names
  the flag; the dataclass checks every bound again (NaN, open bounds) before anything loads;
* the help: the first sentence of the field's docstring; the default shown: the field's own, or
  its ``default_text`` when what a run gets depends on the env or the model.

Every derived option defaults to ``None`` ("not given"): the value of a setting comes from the
layers defaults < env < config file < flags (cli/config.py), and only given flags override.

:func:`with_settings` adds the options of a list of fields to a command function, which receives
them as one dict ``settings`` (no hand-written list of flags to keep in step).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Any

import typer
from rich.markup import escape

from textgym.settings import field_docs, kind_of, setting_of, short_help

_METAVARS = {"int": "N", "float": "X", "str": "TEXT"}
_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def _field(cls: type, name: str) -> dataclasses.Field:
    return {f.name: f for f in dataclasses.fields(cls)}[name]


def option(cls: type, name: str, *, default_text: str | None = None, panel: str | None = None,
           help_prefix: str = "", flag: str | None = None) -> tuple[Any, Any]:
    """The annotation and ``typer.Option`` of field ``name`` of config dataclass ``cls``.

    Args:
        default_text: what ``--help`` shows as the default, instead of the field's.
        panel: the ``--help`` panel, instead of the field's.
        help_prefix: text put in front of the help (e.g. ``"With --merge: "``).
        flag: the option's declarations, instead of the field's (``"--seed"`` for ``eval_seed``).
    """
    field = _field(cls, name)
    rule = setting_of(field)
    kind, _ = kind_of(field)
    flag = flag or (rule.flag if isinstance(rule.flag, str) else f"--{name.replace('_', '-')}")
    if default_text is None:
        default_text = rule.default_text
    if default_text is None and field.default is not dataclasses.MISSING and field.default is not None:
        default = field.default
        default_text = str(default)
        if kind == "bool":  # --lora/--full: the default's spelling; a lone --think: off
            default_text = flag.split("/")[0 if default else 1].lstrip("-") if "/" in flag else ""
    help_text = escape(help_prefix + short_help(cls, name))  # [quantize] is text, not markup
    extra: dict[str, Any] = {}
    if kind == "bool":
        pass  # a flag: no placeholder (see _flags_take_no_placeholder)
    elif rule.choices is not None:
        extra["metavar"] = "|".join(map(str, rule.choices))
    else:
        extra["metavar"] = rule.metavar or _METAVARS.get(kind, "VALUE")
        if kind in ("int", "float"):
            if rule.at_least is not None:
                extra["min"] = rule.at_least
            if rule.at_most is not None:
                extra["max"] = rule.at_most
    base = typing.Literal[tuple(rule.choices)] if rule.choices is not None else _TYPES.get(kind, str)
    annotation = base | None
    return annotation, typer.Option(
        None, *flag.split(" "), help=help_text, show_default=default_text or False,
        rich_help_panel=panel or rule.panel, **extra)


def with_settings(*specs: tuple[type, Sequence[str], dict[str, Any]]) -> Callable:
    """Decorator: add to a command function one option per field named in ``specs`` (each
    ``(config class, field names, option() keywords)``); the function gets the values given as
    ``settings={name: value or None}`` and keeps its own parameters (arguments, ``--out``, ...).

    The options come first in ``--help``'s panels, in the order of ``specs``."""

    def decorate(command: Callable) -> Callable:
        own = inspect.signature(command)
        hints = typing.get_type_hints(command)  # the command module's names, resolved
        params = [p.replace(annotation=hints.get(p.name, p.annotation))
                  for p in own.parameters.values() if p.name != "settings"]
        names: list[str] = []
        derived: list[inspect.Parameter] = []
        for cls, fields, keywords in specs:
            for name in fields:
                annotation, info = option(cls, name, **keywords)
                derived.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                                 default=info, annotation=annotation))
                names.append(name)
        arguments = [p for p in params if p.kind != inspect.Parameter.KEYWORD_ONLY
                     and not isinstance(p.default, typer.models.OptionInfo)]
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params if p not in arguments]
        signature = own.replace(parameters=[*arguments, *derived, *rest],
                                return_annotation=inspect.Signature.empty)

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            settings = {name: kwargs.pop(name) for name in names}
            return command(*args, settings=settings, **kwargs)

        del wrapper.__wrapped__  # Typer must read the new signature, not the command's
        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        return wrapper

    return decorate


def _flags_take_no_placeholder() -> None:
    """Typer's Rich help shows ``<bool>`` after every on/off flag (``--quiet <bool>``), as if it
    took a value: show nothing there, for every flag of every command (``--help`` too). Typer
    0.28 has no such method (the placeholder came with it): nothing to change there."""
    shown = getattr(typer.core.TyperOption, "display_type_rich", None)
    if shown is None:
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return None if self.is_flag and not self.count else shown(self, ctx)

    typer.core.TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_placeholder()


def flags_of(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` declared as command-line flags, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if setting_of(f).flag)


__all__ = ["field_docs", "flags_of", "option", "with_settings"]
