"""``textgym view``: the self-contained page (curves, settings, transcripts), run text escaped, a run
still being written, the command's errors, and the page rendered in a real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from test_transcripts import INJECTION, Scripted
from textgym.cli.viewing import build_report

import textgym
from textgym.rollout import collect
from textgym.transcripts import TRANSCRIPTS_FILE, TranscriptWriter

CONFIG = 'env = "textgym/Bandit-v0"\nalgo = "reinforce"\nmodel = "<b>tiny</b>"\n'


def make_run(folder, updates=3, shift=0.0):
    """A run folder as `textgym train` leaves it mid-run: metrics and transcripts of ``updates``
    updates, each file ending in a line torn mid-write. Update 1's answers alternate between a
    valid one and an invalid one holding ``</script>``; the last update's are all valid."""
    folder.mkdir()
    (folder / "config.toml").write_text(CONFIG)
    lines = [json.dumps({"update": u, "episodes": 8 * u, "return_mean": shift + u / updates,
                         "invalid_rate": 0.5 / u, "kl": 1e-3 * u, "entropy": 0.7 - 0.1 * u}) for u in range(1, updates + 1)]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + '\n{"update": 99, "return_me')
    venv = textgym.make_vec("textgym/Bandit-v0", num_envs=2)
    writer = TranscriptWriter(folder, per_update=4)
    writer.write(collect(Scripted(["cat", INJECTION]), venv, episodes=4, seed=0).episodes, update=1, source="train")
    writer.write(collect(Scripted(["cat"]), venv, episodes=4, seed=0).episodes, update=updates, source="train")
    with open(folder / TRANSCRIPTS_FILE, "a") as f:
        f.write('{"source": "train", "update": 100, "steps": [{"observ')
    return folder


def embedded_data(page):
    return json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.DOTALL).group(1))


def test_the_page_is_self_contained_and_shows_run_text_escaped(tmp_path):
    page = build_report([make_run(tmp_path / "run")])
    assert page.count("<script") == 2  # the data block and the page's own script: nothing from the run
    assert "window.pwned" in page and "<script>window.pwned" not in page
    assert "&lt;b&gt;tiny&lt;/b&gt;" in page and "<b>tiny" not in page  # config.toml, escaped
    assert not re.search(r"https?:|\b(src|href)=|@import|url\(", page)  # nothing to fetch
    for metric in ("return_mean", "invalid_rate", "kl", "entropy"):
        assert f'data-metric="{metric}"' in page
    (run,) = embedded_data(page)
    # the torn last lines are skipped; the run text comes back intact from the escaped JSON
    assert [t["update"] for t in run["transcripts"]] == [1] * 4 + [3] * 4
    answers = [t["steps"][0]["answer"] for t in run["transcripts"]]
    assert answers[:2] == ["cat", INJECTION]
    points = re.search(r'<svg class="curve" data-metric="return_mean".*?<polyline points="([^"]+)"', page).group(1)
    assert len(points.split()) == 3  # one point per whole metrics line


def test_several_runs_are_overlaid(tmp_path, cli):
    first, second = make_run(tmp_path / "a"), make_run(tmp_path / "b", shift=1.0)
    out = tmp_path / "report.html"
    result = cli("view", first, second, "--out", out)
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.stdout
    page = out.read_text()
    for metric in ("return_mean", "entropy"):
        panel = re.search(rf'data-metric="{metric}".*?</svg>', page).group(0)
        assert re.findall(r'data-run="([^"]+)"', panel) == ["a", "b"]
    assert [run["name"] for run in embedded_data(page)] == ["a", "b"]


def test_a_missing_run_is_one_error_line_and_writes_nothing(tmp_path, cli):
    out = tmp_path / "report.html"
    result = cli("view", tmp_path / "nowhere", "--out", out)
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("textgym: error: ") and "nowhere" in lines[0], result.stderr
    assert not out.exists()
    (tmp_path / "empty").mkdir()
    result = cli("view", tmp_path / "empty", "--out", out)
    assert result.exit_code != 0 and "no metrics" in result.stderr and not out.exists()
    (tmp_path / "empty" / "config.toml").write_text(CONFIG)  # a run whose first update is going
    result = cli("view", tmp_path / "empty", "--out", out)
    assert result.exit_code == 0 and "No metrics yet." in out.read_text(), result.output


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no Chromium installed (Debian: apt-get install chromium; `make setup` does it where apt works)")
    return path


def test_the_page_in_a_real_browser_shows_curves_and_transcripts(tmp_path):
    executable = chromium()
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    page_file = tmp_path / "report.html"
    page_file.write_text(build_report([make_run(tmp_path / "run")]))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(page_file.as_uri())
            for metric in ("return_mean", "invalid_rate", "kl", "entropy"):
                line = page.locator(f'svg[data-metric="{metric}"] polyline')
                assert line.is_visible()
                assert line.bounding_box()["width"] > 100  # a drawn curve, not a dot
            before, after = page.locator("#before .episode"), page.locator("#after .episode")
            assert before.count() == 4 and after.count() == 4
            assert page.locator("#before h3").inner_text().startswith("First update (1)")
            assert page.locator("#after h3").inner_text() == "Update 3"
            # the run's </script> is shown as text, never run, and the invalid answer is highlighted
            invalid = page.locator("#before tr.invalid td.ans").first
            assert invalid.is_visible() and invalid.inner_text() == INJECTION
            assert invalid.evaluate("cell => getComputedStyle(cell).backgroundColor") == "rgb(255, 221, 221)"
            assert page.evaluate("window.pwned") is None
            assert after.first.locator("td.obs").inner_text().startswith("Color: ")
            page.check("#invalid-only")  # filters: only the episodes with an invalid answer stay
            assert before.count() == 2 and after.count() == 0
            page.uncheck("#invalid-only")
            page.fill("#rmin", "2")
            assert before.count() == 0 and "No episode passes the filters." in page.inner_text("#before")
            assert errors == []
        finally:
            browser.close()


def test_a_long_run_is_embedded_thinned_first_and_last_updates_kept(tmp_path, monkeypatch):
    from textgym.cli import viewing

    run = make_run(tmp_path / "run", updates=3)
    lines = (run / TRANSCRIPTS_FILE).read_text().splitlines()
    (run / TRANSCRIPTS_FILE).write_text("\n".join(lines[:-1]) + "\n")  # the torn line goes to the end again
    episodes = collect(Scripted(["dog"]), textgym.make_vec("textgym/Bandit-v0", num_envs=2), episodes=4, seed=0).episodes
    writer = TranscriptWriter(run, per_update=4)
    for update in range(4, 40):
        writer.write(episodes, update=update, source="train")
    with open(run / TRANSCRIPTS_FILE, "a") as f:
        f.write(lines[-1])
    line_bytes = len(lines[-2])
    monkeypatch.setattr(viewing, "MAX_TRANSCRIPT_BYTES", 10 * 4 * line_bytes)  # about 10 updates' lines
    (data,) = embedded_data(viewing.build_report([run]))
    updates = sorted({t["update"] for t in data["transcripts"]})
    assert updates[0] == 1 and updates[-1] == 39 and 5 <= len(updates) <= 11
    assert data["total"] == 4 * 38  # updates 1, 3 and 4..39; the torn line is not counted
