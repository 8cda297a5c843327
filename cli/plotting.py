"""Learning curves from ``metrics.jsonl`` files (one JSON object per update).

Up to five quantities (mean return with the greedy checks dashed, win/loss rates of games, mean episode length,
invalid-answer rate, KL) against two x axes (episodes and wall time); several runs are
overlaid. A panel no run has data for is left out. The KL axis is symmetric-log: a policy that
collapses can log a KL of 1e15 once, and a linear axis would flatten every other point of
every run. Uses matplotlib's Agg backend in-process, so ``textgym train`` can redraw
``curve.png`` cheaply.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from textgym.cli.errors import CLIError

from textgym import jsonl, run_folder

# (metrics keys drawn in the panel, y label). ``kl`` is the approximate KL between the rollout
# policy and the updated one (how far each update moved); ``ref_kl``, logged when the trainer
# has a KL penalty, is the KL to the reference policy (dashed). Game outcomes (two-player
# games) come second.
PANELS = (
    (("return_mean", "check_return_mean"), "mean return"),  # dashed: the greedy checks
    (("win_rate", "loss_rate"), "win rate (solid), loss rate (dashed)"),
    (("length_mean",), "mean episode length"),
    (("invalid_rate",), "invalid-answer rate"),
    (("kl", "ref_kl"), "KL: per update (solid), to reference (dashed)"),
)
#: Panels whose values span many orders of magnitude: symmetric-log y axis, linear below this.
SYMLOG_PANELS = {"kl": 1e-4}
#: Panels of rates: their y axis starts at 0, never below (0..1 when the rate is 0 throughout).
RATE_PANELS = {"invalid_rate", "win_rate"}
X_AXES = (("episodes", "episodes"), ("wall_time", "wall time (s)"))


def metrics_path(run: str | Path) -> Path:
    """``run`` may be a run folder or a metrics.jsonl file."""
    run = Path(run)
    return run / run_folder.METRICS if run.is_dir() else run


def read_metrics(run: str | Path) -> list[dict[str, Any]]:
    """The update records of a run; a torn last line (run killed mid-write) is skipped."""
    if not Path(run).exists():
        raise CLIError(f"no run at {run}: no such folder or file")
    path = metrics_path(run)
    if not path.is_file():
        raise CLIError(f"no metrics in {run}: {path} does not exist")
    records = []
    lines = jsonl.numbered_lines(path.read_text(encoding="utf-8"))
    for number, line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == lines[-1][0]:  # the last line may be half-written
                break
            raise CLIError(f"{path}:{number}: not a JSON line ({exc})") from exc
    return records


def with_checks(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with each greedy check's mean return as ``check_return_mean`` (drawn beside the
    training return: the check decides whether the run is solved)."""
    return [{**r, "check_return_mean": r["check"].get("return_mean")} if isinstance(r.get("check"), dict) else r
            for r in records]


def run_env(run: str | Path) -> str | None:
    """The env a run trained on (its config.toml), or ``None`` when unknown."""
    folder = Path(run) if Path(run).is_dir() else Path(run).parent
    try:
        import tomllib

        return tomllib.loads((folder / run_folder.CONFIG).read_text(encoding="utf-8")).get("env")
    except (OSError, ValueError):
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _label(run: Path) -> str:
    run = Path(run)
    return (run.parent if run.name == run_folder.METRICS else run).name or str(run)


def figure_of(series: list[tuple[str, list[dict[str, Any]]]], title: str | None = None) -> Any:
    """A matplotlib Figure of the curves of ``series`` (``(label, metrics records)`` per run):
    one row per panel that some run has data for, one column per x axis."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    def points(records: list[dict[str, Any]], x_key: str, key: str) -> list[tuple[float, float]]:
        return [(r[x_key], r[key]) for r in records
                if _is_number(r.get(x_key)) and _is_number(r.get(key))]

    panels = [(keys, name) for keys, name in PANELS
              if any(points(records, x_key, key) for _, records in series
                     for key in keys for x_key, _ in X_AXES)]
    figure = Figure(figsize=(11, 3 * max(1, len(panels))), layout="constrained")
    if not panels:
        figure.text(0.5, 0.5, "no metrics recorded yet", ha="center", va="center", color="gray")
    axes = figure.subplots(len(panels), len(X_AXES), squeeze=False) if panels else []
    colors = [f"C{i % 10}" for i in range(len(series))]
    for row, (keys, name) in enumerate(panels):
        for col, (x_key, x_name) in enumerate(X_AXES):
            ax = axes[row][col]
            for (label, records), color in zip(series, colors):
                for key, style in zip(keys, ("-", "--")):
                    drawn = points(records, x_key, key)
                    if drawn:
                        xs, ys = zip(*drawn)
                        ax.plot(xs, ys, style, color=color, label=label if key == keys[0] else None,
                                marker="." if len(drawn) < 30 else None)
            if keys[0] in RATE_PANELS:
                top = max((y for _, records in series for key in keys for _, y in points(records, x_key, key)),
                          default=0.0)
                ax.set_ylim(0.0, 1.05 * top if top > 0 else 1.0)
            if keys[0] in SYMLOG_PANELS:
                ax.set_yscale("symlog", linthresh=SYMLOG_PANELS[keys[0]])
                ax.yaxis.get_major_locator().set_params(numticks=8)  # not one tick per decade
            ax.set_xlabel(x_name)
            ax.set_ylabel(name)
            ax.grid(alpha=0.3)
            if len(series) > 1 and row == 0 and ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="small")
    if title is None and len(series) == 1:
        title = series[0][0]
    if title:
        figure.suptitle(title)
    return figure


def plot_runs(runs: list[str | Path], out: str | Path, title: str | None = None) -> Path:
    """Draw the curves of ``runs`` (folders or metrics.jsonl files) into the PNG ``out``.

    The image is written to a temporary file and renamed, so a reader never sees half a PNG.
    """
    series = [(_label(Path(run)), with_checks(read_metrics(run))) for run in runs]
    envs = [run_env(run) for run in runs]
    if len({env for env in envs if env}) > 1:  # returns of different envs are not comparable: say so
        from textgym.cli.messages import say

        series = [(f"{label} ({env or '?'})", records) for (label, records), env in zip(series, envs)]
        title = (f"{title}: " if title else "") + "runs on different envs (returns not comparable)"
        say(f"textgym: warning: these runs trained on different envs ({', '.join(dict.fromkeys(e or '?' for e in envs))}): "
            "their returns are not comparable", err=True)
    figure = figure_of(series, title)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.png")
    figure.savefig(tmp, dpi=80)
    os.replace(tmp, out)
    return out
