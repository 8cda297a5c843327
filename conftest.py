"""The docstring examples of cli/, the folder that installs as ``textgym.cli`` (pyproject.toml's
``package-dir``), run against the module users import, ``textgym.cli.<name>``. Collected as
files, they would be imported a second time, as ``cli.<name>``: a copy whose classes are not
textgym's own."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from _pytest.doctest import DoctestModule

CLI_FOLDER = Path(__file__).parent / "cli"


class InstalledModuleDoctests(DoctestModule):
    """The doctests of a file of cli/, found in the module ``textgym.cli`` installs from it."""

    def _getobj(self):
        name = "textgym.cli" if self.path.stem == "__init__" else f"textgym.cli.{self.path.stem}"
        module = importlib.import_module(name)
        if Path(module.__file__).resolve() != self.path.resolve():
            raise ImportError(f"{name} is installed from {module.__file__}, not from {self.path} "
                              "(pip install -e . here)")
        return module


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent):
    collected = yield
    if file_path.parent != CLI_FOLDER:
        return collected
    return [InstalledModuleDoctests.from_parent(parent, path=file_path)
            if isinstance(node, DoctestModule) else node for node in collected]
