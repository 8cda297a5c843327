"""Greedy evaluation of a run's checkpoint on held-out seeds, optionally with capped episodes.

``textgym eval`` plays full episodes. A good CartPole-v1 policy plays up to 500 steps, and on 2 CPU
cores 50 such episodes with the 135M model take ~35 minutes (25,000 decisions at ~12/s). Capped
at ``--max-steps`` steps, each episode's return is a lower bound of its full return (CartPole's
rewards are all +1), so a capped mean at or above a threshold proves the full mean is too, at a
fraction of the cost. The held-out seeds are ``textgym eval``'s (from 1,000,000), the env settings
the run's own (its ``env_kwargs``), the policy the checkpoint's.

Usage:
    .venv/bin/python bench/heldout.py runs/cartpole --episodes 50 --max-steps 200 --json out.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from textgym.seeds import EVAL_BASE


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run folder or a checkpoint folder")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--num-envs", type=int, default=50, help="episodes played side by side")
    parser.add_argument("--max-steps", type=int, default=None, help="cap each episode (default: the env's limit)")
    parser.add_argument("--seed", type=int, default=EVAL_BASE, help="first held-out seed (textgym eval's)")
    parser.add_argument("--json", type=Path, default=None, help="write the result here too")
    args = parser.parse_args()

    from textgym.trainers import Trainer

    checkpoint = args.run / "checkpoint" if (args.run / "checkpoint").is_dir() else args.run
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:  # the run folder is only read
        trainer = Trainer.resume(checkpoint, out_dir=scratch)
        if args.max_steps is not None:
            trainer.env_kwargs = {**trainer.env_kwargs, "max_episode_steps": args.max_steps}
        result = trainer.evaluate(episodes=args.episodes, seed=args.seed, num_envs=min(args.num_envs, args.episodes))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], check=False).stdout.strip()
    out = {"run": str(args.run), "episodes": args.episodes, "max_steps": args.max_steps, "seed": args.seed,
           "env_kwargs": trainer.env_kwargs, "seconds": time.perf_counter() - start, "commit": commit,
           "argv": sys.argv[1:], **{k: v for k, v in result.items() if isinstance(v, (int, float, str))}}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
