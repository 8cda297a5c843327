"""Decisions per second of score mode as the number of envs acting in one forward pass changes.

Every vector step is one forward pass for all envs, so more envs mean bigger matrix products and
fewer passes per decision, until the hardware is saturated. One process, one count after the other
(the first count is run twice, so the first measured figure is not the one that warms up the
allocator); the ratio column compares each count with the first.

Usage:
    OMP_NUM_THREADS=2 python bench/envs_per_forward.py --threads 2 --envs 4 8 16 32 64 \\
        --json bench/results/envs_per_forward.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

import textgym
from textgym import models
from textgym.policy import Policy, PolicyConfig
from textgym.rollout import collect


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="textgym/CartPole-v1")
    parser.add_argument("--envs", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--decisions", type=int, default=512, help="decisions measured per count")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = models.load(args.model)
    rows = []
    for i, envs in enumerate([args.envs[0], *args.envs]):
        policy = Policy(model, tokenizer, config=PolicyConfig.for_model(args.model, mode="score", seed=args.seed),
                        name=args.model)
        venv = textgym.make_vec(args.env, num_envs=envs, seed=args.seed)
        collect(policy, venv, steps=envs, seed=args.seed + 1000)  # fills the prefix cache
        stats = collect(policy, venv, steps=args.decisions, seed=args.seed).stats
        if i == 0:
            continue  # the warm-up count
        rows.append({"envs": envs, "decisions": stats["decisions"], "seconds": stats["seconds"],
                     "decisions_per_s": stats["decisions"] / stats["seconds"]})
        print(f"{envs:4d} envs: {rows[-1]['decisions_per_s']:6.2f} decisions/s "
              f"({rows[-1]['decisions_per_s'] / rows[0]['decisions_per_s']:.2f}x {rows[0]['envs']} envs)", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], check=False).stdout.strip()
    out = {"model": args.model, "env": args.env, "threads": torch.get_num_threads(), "commit": commit,
           "argv": sys.argv[1:] if argv is None else argv, "runs": rows}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
