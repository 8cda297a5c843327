"""Layers point down: what each part of the package may import (docs/design.md's layout).

Read from the source (every ``import``, module-level or inside a function; those under
``if TYPE_CHECKING:`` are annotations only and do not count), so a new upward import fails here
with the module and the line that made it.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "textgym"


def imports_of(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``path`` that runs (not under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    annotations_only = {id(node) for block in ast.walk(tree)
                        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
                        for statement in block.body for node in ast.walk(statement)}
    found = []
    for node in ast.walk(tree):
        if id(node) in annotations_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, node.module)]
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def modules(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in ((PACKAGE / part).rglob("*.py") if (PACKAGE / part).is_dir()
                                                 else [PACKAGE / part]))


def reaching(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return [f"{os.path.relpath(path, PACKAGE.parent)}:{line} imports {module}"
            for path in paths for line, module in imports_of(path)
            if any(module == f or module.startswith(f + ".") for f in forbidden)]


LAYERS = [
    # (what, its modules, what they must not import)
    ("the trainers' engine never imports an algorithm or the public API above it",
     modules("trainers/engine", "trainers/state", "trainers/reporting"),
     ("textgym.trainers.algorithms", "textgym.trainers.make_trainer", "textgym.trainers.resume",
      "textgym.trainers.trainer_class", "textgym.trainers.config_for")),
    ("a run's state and reports never import the engine",
     modules("trainers/state", "trainers/reporting"), ("textgym.trainers.engine",)),
    ("the registry, the envs and the training defaults sit below the trainers",
     modules("registry.py", "training_defaults.py", "envs"), ("textgym.trainers",)),
    ("the trainers reach an env through the registry, never a game module",
     modules("trainers"), ("textgym.envs",)),
]


@pytest.mark.parametrize(("what", "paths", "forbidden"), LAYERS, ids=[layer[0] for layer in LAYERS])
def test_layers_point_down(what, paths, forbidden):
    assert paths
    assert not reaching(paths, forbidden), what + ":\n" + "\n".join(reaching(paths, forbidden))


def test_an_upward_import_is_found(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import textgym.trainers\n"
                      "def f():\n    from textgym.trainers import make_trainer\n")
    [found] = reaching([module], ("textgym.trainers.make_trainer",))  # the one under TYPE_CHECKING: not
    assert found.endswith("m.py:5 imports textgym.trainers.make_trainer")
