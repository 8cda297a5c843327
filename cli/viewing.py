"""``textgym view RUN [RUN...]``: one self-contained HTML page of one or several runs.

The page holds everything inline (CSS, the curves as SVG drawn here, a small script; no network):
the learning curves against updates, several runs overlaid (the sampled mean return with the
greedy checks that decide "solved" and their threshold; the invalid-answer rate on a 0-based
axis; the KL of each update's step, and to the reference where the run has a KL penalty; the
entropy), each run's settings (``config.toml``) and outcome (``summary.json``), and its episode
transcripts (``transcripts.jsonl``, :mod:`textgym.transcripts`) browsable by update: the
first update's episodes (the policy before training) beside the chosen update's, invalid answers
highlighted, filtered by source and return. A run still being written works: a line torn at the
end of ``metrics.jsonl`` or ``transcripts.jsonl`` is skipped.

Run text (observations, answers, settings) reaches the page only HTML-escaped (:func:`html.escape`)
or inside a JSON block whose ``<``, ``>`` and ``&`` are escaped, and the script writes it with
``textContent``: an observation holding ``<script>`` is shown, never run.
"""

from __future__ import annotations

import html
import json
import math
import re
import webbrowser
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from textgym.cli.errors import CLIError
from textgym.cli.messages import say
from textgym.cli.plotting import read_metrics, with_checks

from textgym import run_folder

#: (metrics key, companion key drawn dashed or None, panel title) of the curves, in page order;
#: a panel no run has data for is left out. The return panel puts the greedy checks (the
#: evaluations that decide "solved", :func:`textgym.cli.plotting.with_checks`) beside the sampled
#: return, with the threshold they are held to. ``kl`` is how far each update moved the policy
#: (the KL between the policy that played the rollout and the updated one), not a distance from
#: the start; ``ref_kl``, the KL to the reference policy, is logged when the trainer has a KL
#: penalty (``kl_coef``).
CURVES = (
    ("return_mean", "check_return_mean", "mean return: sampled (solid), greedy checks (dashed, dots)"),
    ("invalid_rate", None, "invalid-answer rate"),
    ("kl", "ref_kl", "KL: step of each update (solid), to the reference (dashed) (symmetric log)"),
    ("entropy", None, "entropy"),
)
#: Curves of rates: their axis starts at 0 and never runs below it (0..1 when every value is 0).
RATES = {"invalid_rate"}
#: Curves drawn on a symmetric-log axis (linear below the value): a collapse can log a KL of 1e15.
SYMLOG = {"kl": 1e-4}
#: At most this many points per curve (evenly strided): a 1,000-update run stays a light page.
MAX_POINTS = 400
#: About this many characters of transcripts at most embedded per run: those of the first and last
#: updates and of updates evenly spread between them (a page of ~10 MB opens in a second).
MAX_TRANSCRIPT_BYTES = 8_000_000
_UPDATE = re.compile(r'"update":\s*(\d+)')
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _symlog(y: float, threshold: float) -> float:
    return math.copysign(math.log10(1 + abs(y) / threshold), y)


def _series(records: Sequence[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    points = [(float(r["update"]), y) for r in records
              if isinstance(r.get("update"), int) and (y := _number(r.get(key))) is not None]
    stride = max(1, math.ceil(len(points) / MAX_POINTS))
    return points if stride == 1 else points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    step = 10 ** math.floor(math.log10((high - low) / count))
    for factor in (1, 2, 5, 10):
        if (high - low) / (step * factor) <= count:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [round(first + i * step, 12) for i in range(int((high - first) / step) + 1)]


def _label(value: float) -> str:
    return f"{value:.3g}"


def _until(records: Sequence[dict[str, Any]]) -> float | None:
    """The threshold the run's greedy checks are held to (the last check's ``until``)."""
    checks = [r["check"] for r in records if isinstance(r.get("check"), dict)]
    return _number(checks[-1].get("until")) if checks else None


def curve_svg(key: str, title: str, runs: Sequence[tuple[str, list[dict[str, Any]]]],
              companion: str | None = None) -> str | None:
    """An SVG panel of ``key`` against updates, one line per run, and ``companion`` (dashed, with
    dots) where the run has it (``None``: no run has ``key``). A rate's axis starts at 0."""
    series = [(name, _series(records, key)) for name, records in runs]
    if not any(points for _, points in series):
        return None
    extra = [(name, _series(records, companion) if companion else []) for name, records in runs]
    thresholds = sorted({u for _, records in runs if (u := _until(records)) is not None}) \
        if companion == "check_return_mean" else []
    threshold = SYMLOG.get(key)
    scale = (lambda y: _symlog(y, threshold)) if threshold else (lambda y: y)
    xs = [x for _, points in series + extra for x, _ in points]
    ys = [scale(y) for _, points in series + extra for _, y in points] + thresholds
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if key in RATES:  # a rate is never negative: 0..max, or 0..1 when it is 0 throughout
        y0, y1 = 0.0, (y1 if y1 > 0 else 1.0)
    elif y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    width, height, left, right, top, bottom = 460, 240, 56, 12, 26, 34
    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)
    def py(y: float) -> float:
        return height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom)
    parts = [(f'<svg class="curve" data-metric="{html.escape(key)}" viewBox="0 0 {width} {height}" '
              f'width="{width}" height="{height}" role="img" aria-label="{html.escape(title)}">'),
             f'<text x="{left}" y="16" class="title">{html.escape(title)}</text>',
             (f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
              'class="frame"/>')]
    if threshold:  # ticks at 0 and at the powers of ten in range, labelled with their real values
        y_ticks = [(0.0, "0")] + [(s * _symlog(10.0 ** e, threshold), ("-" if s < 0 else "") + f"1e{e}")
                                  for e in range(math.floor(math.log10(threshold)), 17) for s in (1, -1)]
        y_ticks = [(t, label) for t, label in y_ticks if y0 <= t <= y1]
        if len(y_ticks) > 6:
            y_ticks = y_ticks[:: math.ceil(len(y_ticks) / 6)]
    else:
        y_ticks = [(t, _label(t)) for t in _ticks(y0, y1)]
    for t, label in y_ticks:
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{py(t):.1f}" y2="{py(t):.1f}" class="grid"/>'
                     f'<text x="{left - 4}" y="{py(t) + 4:.1f}" class="tick" text-anchor="end">{label}</text>')
    for t in _ticks(x0, x1):
        parts.append(f'<text x="{px(t):.1f}" y="{height - bottom + 14}" class="tick" '
                     f'text-anchor="middle">{_label(t)}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 4}" class="tick" '
                 'text-anchor="middle">update</text>')
    for i, (name, points) in enumerate(series):
        if not points:
            continue
        color = COLORS[i % len(COLORS)]
        coordinates = " ".join(f"{px(x):.1f},{py(scale(y)):.1f}" for x, y in points)
        parts.append(f'<polyline points="{coordinates}" stroke="{color}" class="line" '
                     f'data-run="{html.escape(name)}"><title>{html.escape(name)}</title></polyline>')
        if len(points) == 1:
            x, y = points[0]
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(scale(y)):.1f}" r="3" fill="{color}"/>')
    for i, (name, points) in enumerate(extra):
        if not points:
            continue
        color = COLORS[i % len(COLORS)]
        coordinates = " ".join(f"{px(x):.1f},{py(scale(y)):.1f}" for x, y in points)
        parts.append(f'<polyline points="{coordinates}" stroke="{color}" class="line companion" '
                     f'stroke-dasharray="5 3" data-series="{html.escape(companion or "")}" '
                     f'data-of-run="{html.escape(name)}"><title>{html.escape(name)}</title></polyline>')
        parts.extend(f'<circle cx="{px(x):.1f}" cy="{py(scale(y)):.1f}" r="3" fill="{color}">'
                     f'<title>{html.escape(name)}: update {x:g}, {html.escape(companion or "")} {y:.4g}'
                     f'</title></circle>' for x, y in points)
    for until in thresholds:  # what a greedy check must reach for the run to count as solved
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{py(until):.1f}" y2="{py(until):.1f}" '
                     f'class="until" stroke="#888" stroke-dasharray="1 3"/>'
                     f'<text x="{width - right - 2}" y="{py(until) - 3:.1f}" class="tick" '
                     f'text-anchor="end">solved at &#8805; {_label(until)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _transcripts(run: Path) -> tuple[list[dict[str, Any]], int]:
    """The run's transcript lines to embed (about :data:`MAX_TRANSCRIPT_BYTES` at most) and how
    many well-formed ones it has. Only the lines embedded are parsed in full."""
    from textgym.transcripts import transcript_lines, well_formed  # torch-free

    lines = transcript_lines(run)
    if lines and well_formed(lines[-1]) is None:  # being written: torn lines elsewhere fail later
        lines.pop()
    by_update: dict[int, list[str]] = {}
    for line in lines:
        found = _UPDATE.search(line, 0, 200)
        if found is not None:
            by_update.setdefault(int(found.group(1)), []).append(line)
    total_bytes = sum(len(line) for lines in by_update.values() for line in lines)
    updates = sorted(by_update)
    if total_bytes > MAX_TRANSCRIPT_BYTES and len(updates) > 2:
        keep = max(2, int(len(updates) * MAX_TRANSCRIPT_BYTES / total_bytes))
        updates = sorted({updates[round(i * (len(updates) - 1) / (keep - 1))] for i in range(keep)})
    records = [record for update in updates for line in by_update[update]
               if (record := well_formed(line)) is not None]
    return records, sum(len(lines) for lines in by_update.values())


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _summary(run: Path) -> dict[str, Any]:
    try:
        summary = json.loads(_read_text(run / run_folder.SUMMARY) or "{}")
    except json.JSONDecodeError:  # being rewritten
        return {}
    return summary if isinstance(summary, dict) else {}


def _json_for_script(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``</script>``, no ``<!--``."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, default=str)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _names(runs: Sequence[Path]) -> list[str]:
    """Display names of the runs: folder names, made unique with their parents when they clash."""
    names = [run.resolve().name for run in runs]
    return [str(run) if names.count(name) > 1 else name for run, name in zip(runs, names)]


def build_report(runs: Sequence[str | Path]) -> str:
    """The HTML page of ``runs`` (run folders). Raises CLIError for a folder that is not a run
    (no ``metrics.jsonl``, and no ``config.toml`` of a run just started)."""
    folders = [Path(run) for run in runs]
    for folder in folders:
        if not folder.is_dir():
            raise CLIError(f"no run folder at {folder}")
    # A run whose first update is still going has its config.toml only: its page waits for data.
    loaded = [(name, [] if not (folder / run_folder.METRICS).exists() and (folder / run_folder.CONFIG).is_file()
               else with_checks(read_metrics(folder))) for name, folder in zip(_names(folders), folders)]
    panels = [svg for key, companion, title in CURVES
              if (svg := curve_svg(key, title, loaded, companion)) is not None]
    data, sections = [], []
    for i, ((name, records), folder) in enumerate(zip(loaded, folders)):
        transcripts, total = _transcripts(folder)
        summary = _summary(folder)
        data.append({"name": name, "color": COLORS[i % len(COLORS)], "transcripts": transcripts,
                     "total": total})
        outcome = ", ".join(f"{k}: {summary[k]}" for k in ("status", "env", "algo", "model", "mode", "updates",
                                                           "first_return_mean", "last_return_mean")
                            if k in summary)
        last = records[-1] if records else {}
        progress = (f"{len(records)} update{'' if len(records) == 1 else 's'}"
                    + (f", {last.get('episodes')} episodes" if last else ""))
        sections.append(
            f'<details class="settings"><summary><span class="swatch" style="background:'
            f'{COLORS[i % len(COLORS)]}"></span>{html.escape(name)}: {html.escape(progress)}'
            f'{" — " + html.escape(outcome) if outcome else ""}</summary>'
            f'<pre>{html.escape(_read_text(folder / run_folder.CONFIG)) or "(no config.toml)"}</pre></details>')
    legend = "".join(f'<span class="legend"><span class="swatch" style="background:{COLORS[i % len(COLORS)]}">'
                     f'</span>{html.escape(name)}</span>' for i, (name, _) in enumerate(loaded))
    title = "textgym: " + ", ".join(name for name, _ in loaded)
    return (_PAGE.replace("{title}", html.escape(title))
            .replace("{legend}", legend)
            .replace("{curves}", "".join(panels) or '<p class="empty">No metrics yet.</p>')
            .replace("{settings}", "".join(sections))
            .replace("{data}", _json_for_script(data)))


def run(runs: Sequence[Path], out: Path, open_page: bool = False) -> Path:
    """The ``view`` command: write the page to ``out`` (and open it in a browser)."""
    page = build_report(runs)
    out = Path(out)
    if out.parent and not out.parent.is_dir():
        raise CLIError(f"cannot write {out}: folder {out.parent} does not exist")
    out.write_text(page, encoding="utf-8")
    say(f"wrote {out}")
    if open_page:
        webbrowser.open(out.resolve().as_uri())
    return out


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>{title}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #222; background: #fafafa; }
h1 { font-size: 20px; margin: 0 0 8px; } h2 { font-size: 16px; margin: 20px 0 8px; }
.curves { display: flex; flex-wrap: wrap; gap: 8px; }
svg.curve { background: #fff; border: 1px solid #ddd; }
svg .title { font-size: 13px; font-weight: 600; } svg .tick { font-size: 10px; fill: #555; }
svg .frame { fill: none; stroke: #bbb; } svg .grid { stroke: #eee; }
svg .line { fill: none; stroke-width: 1.6; }
.legend { margin-right: 16px; } .swatch { display: inline-block; width: 12px; height: 12px;
  margin-right: 4px; vertical-align: middle; border-radius: 2px; }
details.settings { margin: 4px 0; } details.settings pre { background: #fff; border: 1px solid #ddd;
  padding: 8px; max-height: 320px; overflow: auto; }
.controls { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin-bottom: 8px; }
.controls input[type=number] { width: 6em; } .controls input[type=range] { width: 260px; }
.columns { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
.column h3 { font-size: 15px; margin: 4px 0; }
.episode { background: #fff; border: 1px solid #ddd; border-radius: 4px; margin-bottom: 10px; padding: 6px 8px; }
.episode .head { font-weight: 600; margin-bottom: 4px; }
.episode table { border-collapse: collapse; width: 100%; table-layout: fixed; }
.episode td, .episode th { border-top: 1px solid #eee; padding: 3px 4px; vertical-align: top;
  text-align: left; font-size: 12px; }
.episode th { color: #666; font-weight: 500; }
.episode td.obs, .episode td.ans { white-space: pre-wrap; overflow-wrap: anywhere; font-family: ui-monospace, monospace; }
tr.invalid td.ans { background: #fdd; color: #900; font-weight: 600; }
.badge { display: inline-block; padding: 0 5px; border-radius: 3px; font-size: 11px; background: #eee; margin-left: 4px; }
.badge.bad { background: #fdd; color: #900; }
.empty { color: #777; font-style: italic; }
</style></head>
<body>
<h1>{title}</h1>
<div>{legend}</div>
<h2>Learning curves</h2>
<div class="curves" id="curves">{curves}</div>
<h2>Settings</h2>
{settings}
<h2>Transcripts</h2>
<div class="controls" id="controls">
  <label>run <select id="run"></select></label>
  <label>source <select id="source"><option value="train">train</option><option value="check">check</option>
    <option value="eval">eval</option></select></label>
  <label>update <input type="range" id="update" min="0" max="0" step="1"> <span id="update-label"></span></label>
  <label>return from <input type="number" id="rmin" step="any"></label>
  <label>to <input type="number" id="rmax" step="any"></label>
  <label><input type="checkbox" id="invalid-only"> invalid answers only</label>
  <span id="counts" class="empty"></span>
</div>
<div class="columns">
  <div class="column" id="before"><h3></h3><div class="list"></div></div>
  <div class="column" id="after"><h3></h3><div class="list"></div></div>
</div>
<script type="application/json" id="data">{data}</script>
<script>
"use strict";
const RUNS = JSON.parse(document.getElementById("data").textContent);
const $ = (id) => document.getElementById(id);
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}
function fmt(v) { return typeof v === "number" ? (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : +v.toFixed(4)) : String(v); }
const runSelect = $("run");
RUNS.forEach((run, i) => runSelect.append(new Option(run.name + " (" + run.total + " episodes)", i)));
function current() { return RUNS[+runSelect.value] || {transcripts: []}; }
function ofSource() { return current().transcripts.filter((t) => t.source === $("source").value); }
function updatesOf(lines) { return [...new Set(lines.map((t) => t.update))].sort((a, b) => a - b); }
function passes(t) {
  const lo = parseFloat($("rmin").value), hi = parseFloat($("rmax").value);
  if (!isNaN(lo) && !(t["return"] >= lo)) return false;
  if (!isNaN(hi) && !(t["return"] <= hi)) return false;
  if ($("invalid-only").checked && !(t.invalid > 0)) return false;
  return true;
}
function episodeCard(t) {
  const card = el("div", "episode");
  const head = el("div", "head", t.source + " · update " + t.update + " · episode " + t.index + " · return " + fmt(t["return"]) + " · " + t.length + " steps");
  if (t.outcome) head.append(el("span", "badge", t.outcome));
  if (t.truncated) head.append(el("span", "badge", "truncated"));
  if (t.invalid > 0) head.append(el("span", "badge bad", t.invalid + " invalid"));
  card.append(head);
  const table = el("table");
  const header = el("tr");
  [["#", "4%"], ["observation", "44%"], ["answer", "24%"], ["action", "12%"], ["reward", "8%"], ["log-prob", "8%"]].forEach(([name, width]) => {
    const th = el("th", "", name); th.style.width = width; header.append(th);
  });
  table.append(header);
  t.steps.forEach((s, i) => {
    const parse = s.parse || {valid: true};
    const row = el("tr", parse.valid ? "valid" : "invalid");
    row.append(el("td", "", i + 1), el("td", "obs", s.observation), el("td", "ans", s.answer));
    row.append(el("td", "", parse.valid ? (parse.action ?? "") + (parse.parser ? " (" + parse.parser + ")" : "") : "invalid"));
    let reward = fmt(s.reward);
    if (s.reward_terms) reward += " = " + Object.entries(s.reward_terms).map(([k, v]) => k + " " + fmt(v)).join(", ");
    row.append(el("td", "", reward), el("td", "", fmt(s.logprob)));
    table.append(row);
  });
  card.append(table);
  return card;
}
function fill(column, title, lines) {
  column.querySelector("h3").textContent = title;
  const list = column.querySelector(".list");
  list.replaceChildren();
  const shown = lines.filter(passes);
  if (!shown.length) list.append(el("p", "empty", lines.length ? "No episode passes the filters." : "No transcripts."));
  shown.forEach((t) => list.append(episodeCard(t)));
  return shown.length;
}
function render() {
  const lines = ofSource(), updates = updatesOf(lines), slider = $("update");
  slider.max = Math.max(0, updates.length - 1);
  if (+slider.value > +slider.max || slider.dataset.fresh !== "no") { slider.value = slider.max; slider.dataset.fresh = "no"; }
  const chosen = updates[+slider.value], first = updates[0];
  $("update-label").textContent = updates.length ? chosen + " of " + updates[updates.length - 1] : "none";
  const a = fill($("before"), first === undefined ? "Before training" : "First update (" + first + "): before training", lines.filter((t) => t.update === first));
  const b = fill($("after"), chosen === undefined ? "After training" : "Update " + chosen, lines.filter((t) => t.update === chosen));
  $("counts").textContent = (a + b) + " episodes shown; " + lines.length + " " + $("source").value + " episodes embedded of " + current().total + " in the run";
}
runSelect.addEventListener("change", () => { $("update").dataset.fresh = "yes"; render(); });
$("source").addEventListener("change", () => { $("update").dataset.fresh = "yes"; render(); });
["update", "rmin", "rmax", "invalid-only"].forEach((id) => $(id).addEventListener("input", render));
if (!RUNS.some((r) => r.transcripts.some((t) => t.source === "train"))) {
  const other = RUNS.flatMap((r) => r.transcripts).find(() => true);
  if (other) $("source").value = other.source;
}
render();
</script>
</body></html>
"""
