"""``textgym envs``: every registered text env, its package, actions and description (``--json``:
also its reference policies and recommended training settings)."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table


def run(json_out: bool = False) -> None:
    import textgym

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
