"""How long `textgym view` takes on a long run: a synthetic run folder of UPDATES updates (one
metrics line each, 4 training transcripts per update of 1-50 CartPole-like steps, 4 check
transcripts every 10 updates), then the page built and written (what `textgym view` does after
its imports), against `textgym plot`'s PNG of the same run (the baseline, same process), and,
when Chromium and playwright are there, the page's load in headless Chromium.

    python bench/view_speed.py --updates 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from textgym.cli.plotting import plot_runs
from textgym.cli.viewing import build_report


def synthetic_run(folder: Path, updates: int) -> None:
    rng = random.Random(0)
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text('env = "textgym/CartPole-v1"\nalgo = "reinforce"\nmodel = "smollm2-135m"\n')
    with open(folder / "metrics.jsonl", "w") as metrics, open(folder / "transcripts.jsonl", "w") as transcripts:
        for update in range(1, updates + 1):
            progress = update / updates
            metrics.write(json.dumps({
                "update": update, "episodes": 32 * update, "wall_time": 2.0 * update,
                "return_mean": 10 + 190 * progress + rng.gauss(0, 5), "length_mean": 10 + 190 * progress,
                "invalid_rate": 0.2 * (1 - progress), "kl": abs(rng.gauss(0, 1e-3)), "entropy": 0.69 * (1 - progress),
                "samples": [{"prompt": "Pole -0.05 rad", "answer": "LEFT", "reward": 1.0}] * 3}) + "\n")
            sources = ["train"] * 4 + (["check"] * 4 if update % 10 == 0 else [])
            for index, source in enumerate(sources):
                length = rng.randint(1, 50)
                steps = [{"observation": f"Pole {rng.uniform(-0.2, 0.2):.2f} rad, spin {rng.uniform(-1, 1):.2f} "
                                         f"turning left; cart {rng.uniform(-2, 2):.2f} m moving right",
                          "answer": rng.choice(["LEFT", "RIGHT", "up?"]),
                          "parse": {"parser": "keyword", "valid": True, "action": "LEFT"}, "reward": 1.0,
                          "reward_terms": None, "logprob": -rng.random()} for _ in range(length)]
                transcripts.write(json.dumps({
                    "source": source, "update": update, "index": index, "seed": update * 10_000 + index,
                    "return": float(length), "shaped_return": float(length), "length": length, "invalid": 0,
                    "outcome": None, "truncated": False, "system_prompt": "Balance the pole.", "steps": steps}) + "\n")


def timed(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def browser_load_seconds(page_file: Path) -> float | None:
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if executable is None:
        return None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        page = browser.new_page()
        start = time.perf_counter()
        page.goto(page_file.as_uri())
        page.wait_for_selector("#after .episode")
        seconds = time.perf_counter() - start
        browser.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        synthetic_run(run, args.updates)
        sizes = {name: (run / name).stat().st_size for name in ("metrics.jsonl", "transcripts.jsonl")}
        page_file = Path(tmp) / "report.html"
        view = timed(lambda: page_file.write_text(build_report([run]), encoding="utf-8"), args.repeat)
        plot = timed(lambda: plot_runs([run], Path(tmp) / "curves.png"), args.repeat)
        load = browser_load_seconds(page_file)
        lines = (run / "transcripts.jsonl").read_text().count("\n")
        print(f"run: {args.updates} updates, metrics.jsonl {sizes['metrics.jsonl'] / 1e6:.2f} MB, "
              f"transcripts.jsonl {lines} lines {sizes['transcripts.jsonl'] / 1e6:.2f} MB")
        print(f"textgym view (build + write the page): {view:.2f} s (median of {args.repeat}); "
              f"page {page_file.stat().st_size / 1e6:.2f} MB")
        print(f"baseline textgym plot (matplotlib PNG), same run: {plot:.2f} s; view / plot = {view / plot:.2f}")
        if load is not None:
            print(f"page load in headless Chromium until the transcripts show: {load:.2f} s")


if __name__ == "__main__":
    main()
