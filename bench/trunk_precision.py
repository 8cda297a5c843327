"""The update's cost with the frozen layers in bf16 (``PolicyConfig.trunk_in_act_dtype``).

CartPole with the registry's settings (an adapter on the top 8 of SmolLM2-135M's 30 layers), three
trainers on copies of the same weights: float32 acting (the update runs the top layers from the
frozen layers' float32 records), bf16 acting (no records from the bf16 copy: the update runs the
whole model in float32) and bf16 acting with ``trunk_in_act_dtype`` (the update runs the top layers
from the bf16 copy's records). Each repeat collects one rollout per trainer and times its update
(the mismatch measurement, the minibatches' forward and backward passes, the optimizer step), one
trainer after the other (alternating); ratios are to float32's update in the same repeat.

Usage:
    OMP_NUM_THREADS=2 python bench/trunk_precision.py --repeats 3
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

from textgym import models
from textgym.policy import Policy, PolicyConfig
from textgym.registry import training_defaults
from textgym.trainers import make_trainer

ENV_ID = "textgym/CartPole-v1"
SETUPS = {"float32": {"act_dtype": "float32"}, "bfloat16": {"act_dtype": "bfloat16", "trunk_in_act_dtype": False},
          "bfloat16+trunk": {"act_dtype": "bfloat16", "trunk_in_act_dtype": True}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--episodes", type=int, default=4, help="episodes per update")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    registered = training_defaults(ENV_ID, "score")
    model, tokenizer = models.load(args.model)
    trainers = {}
    for name, settings in SETUPS.items():
        config = PolicyConfig.for_model(args.model, mode="score", seed=0, **registered.policy, **settings)
        policy = Policy(copy.deepcopy(model), tokenizer, config=config, name=args.model)
        trainers[name] = make_trainer(
            "reinforce", policy, env=ENV_ID, env_kwargs=dict(registered.env_kwargs),
            config={**registered.trainer, "num_envs": args.episodes, "episodes_per_update": args.episodes,
                    "seed": 0, "lr": registered.lr})
    print(f"model {args.model}, lora_layers {registered.trainer.get('lora_layers')}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    rows = []
    for repeat in range(args.repeats + 1):  # the first round warms up (copies, caches, the top path's check)
        row = {}
        for name, trainer in trainers.items():
            rollout = trainer.collect()
            started = time.perf_counter()
            metrics = trainer.update(rollout.episodes, stats=rollout.stats)
            seconds = time.perf_counter() - started
            decisions = rollout.stats["decisions"]
            row[name] = {"seconds": seconds, "decisions": decisions, "ms_per_decision": 1000 * seconds / decisions,
                         "act_mismatch_abs": metrics.get("act_mismatch_abs")}
        if repeat == 0:
            continue
        base = row["float32"]["ms_per_decision"]
        for value in row.values():
            value["ratio"] = base / value["ms_per_decision"]  # > 1: faster than float32
        rows.append(row)
        print(f"repeat {repeat}: " + ", ".join(
            f"{k} {v['ms_per_decision']:.0f} ms/decision ({v['ratio']:.2f}x, mismatch {v['act_mismatch_abs'] or 0:.4f})"
            for k, v in row.items()), flush=True)
    medians = {name: statistics.median(r[name]["ratio"] for r in rows) for name in SETUPS}
    print("median speed vs float32's update: " + ", ".join(f"{k} {v:.2f}x" for k, v in medians.items()), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], check=False).stdout.strip()
    out = {"model": args.model, "commit": commit, "threads": torch.get_num_threads(),
           "argv": sys.argv[1:] if argv is None else argv, "repeats": rows, "median_ratio": medians}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
