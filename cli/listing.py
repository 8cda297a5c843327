"""``textgym envs``: every registered text env, its package, actions and description (``--json``:
also its reference policies and recommended training settings)."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table


def run(json_out: bool = False, family: str | None = None) -> None:
    import textgym

    if family is not None:
        _family_ids(family, json_out)
        return
    infos = textgym.list_envs()
    if json_out:
        rows = [
            {"id": i.id, "short_name": i.short_name, "source": i.source,
             "action_names": list(i.action_names) if i.action_names is not None else None,
             "description": i.description, "reference_policies": list(i.reference_policies),
             "training_defaults": i.training_defaults.to_dict() if i.training_defaults else None}
            for i in infos
        ]
        print(json.dumps(rows, indent=2))
        return
    console = Console()
    if not console.is_terminal:  # pipes and logs: no wrapping into narrow columns
        console = Console(width=200)
    table = Table(title=f"{len(infos)} text envs", title_justify="left", expand=False)
    table.add_column("id", style="bold", no_wrap=True)
    table.add_column("short name", no_wrap=True)
    table.add_column("package", no_wrap=True)
    table.add_column("actions")
    table.add_column("description")
    for info in infos:
        actions = ", ".join(info.action_names) if info.action_names is not None else "(free text)"
        table.add_row(info.id, info.short_name, info.source, actions, info.description)
    console.print(table)
    if not json_out:
        _families(console)


def _family_ids(prefix: str, json_out: bool) -> None:
    """The family's ids, one a line; an id that cannot be made on this machine (data its package
    downloads at run time, missing offline) says why beside it (``--json``: the ids alone)."""
    from textgym.cli.errors import CLIError

    from textgym.registry import UnknownEnvError, family_ids, list_families

    try:
        ids = family_ids(prefix)
    except UnknownEnvError as exc:
        raise CLIError(str(exc)) from exc
    if json_out:
        print(json.dumps(ids, indent=2))
        return
    [family] = [f for f in list_families() if f.prefix.lower() == prefix.strip().lower()]
    for env_id in ids:
        reason = family.why_unavailable(env_id.split("/", 1)[1])
        print(env_id + (f"  ({reason})" if reason else ""))


def _families(console: Console) -> None:
    """The env families: their ids are made on demand, so they are counted, not listed."""
    import importlib.util

    from textgym.registry import UnknownEnvError, list_families

    families = list_families()
    if not families:
        return
    table = Table(title=f"{len(families)} env families (any id of the package: PREFIX/ID)",
                  title_justify="left", expand=False)
    for column in ("family", "ids", "description", "list them with"):
        table.add_column(column, no_wrap=column != "description")
    for family in families:
        installed = not family.package or importlib.util.find_spec(family.package) is not None
        try:
            names = family.ids() if installed else None
        except UnknownEnvError:
            names = None
        count = None
        if names is not None:
            missing = sum(family.why_unavailable(name) is not None for name in names) if family.unavailable else 0
            count = f"{len(names)}" + (f" ({missing} unavailable offline)" if missing else "")
        table.add_row(f"{family.prefix}/...", count or f"not installed: pip install '{family.install}'",
                      family.description, f"textgym envs --family {family.prefix}")
    console.print(table)
