"""bench/throughput.py of two checkouts of textgym, run alternately on this machine, and the ratios.

Two versions of a package cannot share one process, so each run is a fresh process of the
checkout's own ``bench/throughput.py`` (which imports the checkout it sits in); the runs
alternate (base, new, base, new, ...) so that both see the same load on a shared machine, and
each ratio is taken within a round, its median reported.

Usage:
    git worktree add --detach /tmp/base <commit before the change>
    OMP_NUM_THREADS=1 python bench/compare_checkouts.py --base /tmp/base --rounds 2 -- \\
        --decisions 64 --gen-decisions 16 --baseline-decisions 4 --turns 40 --turn-envs 4 \\
        --rescore-decisions 64 --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def run(checkout: Path, args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        subprocess.run([sys.executable, str(checkout / "bench" / "throughput.py"), *args, "--json", str(out)],
                       check=True, stdout=subprocess.DEVNULL, cwd=checkout)
        return json.loads(out.read_text())


def figures(result: dict) -> dict[str, float]:
    """Decisions per second of every run of the result (re-scoring: decisions per second too)."""
    rates = {row["mode"]: row["decisions_per_s"] for row in result["runs"]}
    rates["conversation as episodes grow"] = result["turns"]["decisions_per_s"]
    for label, row in result["rescoring"].items():
        rates[f"re-scoring, {label}"] = 1 / row["seconds_per_decision"]
    return rates


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--new", type=Path, default=HERE, help="the checkout measured (default: this one)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("throughput_args", nargs=argparse.REMAINDER, help="after --: bench/throughput.py's")
    args = parser.parse_args(argv)
    passed = [a for a in args.throughput_args if a != "--"]
    ratios: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        base = figures(run(args.base, passed))
        new = figures(run(args.new, passed))
        for key in base:
            if key in new:
                ratios.setdefault(key, []).append(new[key] / base[key])
        print(f"round {round_ + 1}: " + ", ".join(f"{r[-1]:.2f}" for r in ratios.values()), flush=True)
    print(f"\nnew / base decisions per second (median of {args.rounds} alternating rounds):")
    for key, values in ratios.items():
        print(f"  {key:<78} {statistics.median(values):6.2f}x  ({', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
