"""The documentation's relative links resolve, and the README stays short.

Every relative link in the repository's markdown files (README.md, docs/, cli/, bench/results/...)
must name a file or folder that exists, and a ``#fragment`` must name a heading of the target
file, so that moving a result or renaming a section cannot silently break the docs.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250
#: docs/results.md holds the current figures, one section per topic; history stays in git.
RESULTS_MAX_LINES = 700

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def markdown_files() -> list[Path]:
    skip = {".git", "node_modules", "build", "dist"}
    # every virtual env (.venv, make test-oldest's .venv-oldest) holds other projects' docs
    return sorted(p for p in ROOT.rglob("*.md")
                  if not skip.intersection(p.relative_to(ROOT).parts)
                  and not any(part.startswith(".venv") for part in p.relative_to(ROOT).parts)
                  and not any(part.endswith(".egg-info") for part in p.parts))


def strip_code(text: str) -> str:
    """Code blocks and inline code may show link syntax that is not a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    body = strip_code(text)
    return INLINE_LINK.findall(body) + REFERENCE_LINK.findall(body)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: formatting dropped, lower case, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").lower()
    kept = [c for c in text
            if c in " -_" or unicodedata.category(c)[0] in "LN"]
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_slug_follows_github():
    assert slug("REINFORCE, GRPO and PPO") == "reinforce-grpo-and-ppo"
    assert slug("The test suite's learning tests") == "the-test-suites-learning-tests"
    assert slug("`textgym train` and [the CLI](cli/README.md)") == "textgym-train-and-the-cli"
    assert slug("Why it learns: the wording") == "why-it-learns-the-wording"


def test_links_skips_code_and_finds_both_forms():
    text = ("See [a](a.md#x), ![img](b.png) and [ref].\n\n[ref]: c/d.md\n"
            "`[not](code.md)`\n```\n[not](block.md)\n```\n")
    assert links(text) == ["a.md#x", "b.png", "c/d.md"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path):
    broken = []
    for target in links(path.read_text(encoding="utf-8")):
        if EXTERNAL.match(target):
            continue
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading #{fragment} in {resolved.relative_to(ROOT)}")
    assert not broken, f"{path.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def test_markdown_files_are_found():
    found = {p.relative_to(ROOT).as_posix() for p in markdown_files()}
    assert {"README.md", "docs/design.md", "docs/results.md",
            "bench/results/probes/README.md"} <= found


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}"


def test_results_page_is_short():
    lines = (ROOT / "docs" / "results.md").read_text(encoding="utf-8").count("\n")
    assert lines <= RESULTS_MAX_LINES, (
        f"docs/results.md has {lines} lines, at most {RESULTS_MAX_LINES}: replace a superseded "
        "figure instead of adding beside it (git keeps the old one)")


LAYOUT_ENTRY = re.compile(r"^( *)(\S+?/|\S+\.py)(?:\s|$)")


def design_layout() -> set[str]:
    """The paths named in docs/design.md's layout block: an entry is a line's first word ending in
    ``/`` or ``.py``, inside the folder of the nearest entry indented less."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    folders: list[tuple[int, str]] = []  # (indent, path) of the open folders
    named = set()
    for line in block.splitlines():
        entry = LAYOUT_ENTRY.match(line)
        if not entry:
            continue
        indent, name = len(entry.group(1)), entry.group(2)
        while folders and folders[-1][0] >= indent:
            folders.pop()
        path = "".join(folder for _, folder in folders[-1:]) + name
        named.add(path.rstrip("/"))
        if name.endswith("/"):
            folders.append((indent, path))
    return named


def test_design_layout_reads_nested_folders():
    named = design_layout()
    assert {"textgym", "textgym/policy", "textgym/policy/scoring.py", "cli/main.py"} <= named


def test_design_layout_names_every_module_and_only_real_paths():
    """docs/design.md's layout stays the tree: every module of textgym/ and cli/ is in it (with
    its line on what it owns), and every path it names exists."""
    modules = {p.relative_to(ROOT).as_posix() for folder in ("textgym", "cli")
               for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts}
    modules -= {m for m in modules if m.endswith("/__init__.py") and m.count("/") > 1}
    named = design_layout()
    missing = sorted(modules - named)
    assert not missing, "modules missing from docs/design.md's layout:\n" + "\n".join(missing)
    absent = sorted(path for path in named if not (ROOT / path).exists())
    assert not absent, "docs/design.md's layout names paths that do not exist:\n" + "\n".join(absent)
