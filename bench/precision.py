"""Acting throughput at the fast precision: decisions/s of ``act_dtype`` (default ``auto``) against float32.

On textgym/CartPole-v1 with 16 envs, in one process: score mode, then generate mode (8 new
tokens, sampled). Each repeat runs float32 and the other precision one after the other
(alternating, so a machine whose load changes slows both alike) on the same model weights;
the ratio of each repeat and their median are printed. ``auto`` first measures (or reads from
its cache) its choice, which is printed with the probe's timings.

Usage:
    python bench/precision.py                                   # auto vs float32, 3 repeats
    python bench/precision.py --act-dtype bfloat16 --decisions 48 --gen-decisions 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

import textgym
from textgym import models
from textgym.policy import Policy, PolicyConfig
from textgym.rollout import collect

ENV_ID = "textgym/CartPole-v1"


def decisions_per_second(policy: Policy, envs: int, decisions: int, seed: int) -> float:
    venv = textgym.make_vec(ENV_ID, num_envs=envs, seed=seed)
    try:
        stats = collect(policy, venv, steps=decisions, seed=seed).stats
    finally:
        venv.close()
    return stats["decisions"] / stats["seconds"]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="model name, hub id or folder")
    parser.add_argument("--act-dtype", default="auto", help="the precision compared with float32")
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--decisions", type=int, default=64, help="decisions per score-mode measurement")
    parser.add_argument("--gen-decisions", type=int, default=32, help="decisions per generate-mode measurement")
    parser.add_argument("--gen-tokens", type=int, default=8, help="new tokens per generate-mode decision")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["score", "generate"], choices=["score", "generate"])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = models.load(args.model)
    print(f"model {args.model}, {torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    results: dict = {"model": args.model, "act_dtype": args.act_dtype, "threads": torch.get_num_threads()}
    for mode, decisions, extra in (("score", args.decisions, {}),
                                   ("generate", args.gen_decisions, {"max_new_tokens": args.gen_tokens})):
        if mode not in args.modes:
            continue
        policies = {}
        for dtype in ("float32", args.act_dtype):
            config = PolicyConfig.for_model(args.model, mode=mode, seed=args.seed, act_dtype=dtype, **extra)
            policies[dtype] = Policy(model, tokenizer, config=config, name=args.model)
        fast = policies[args.act_dtype]
        chosen = fast.act_precision
        if fast.precision_choice is not None:
            print(f"auto chose {fast.precision_choice.describe()}", flush=True)
            results["auto"] = {"dtype": chosen, "probe_seconds": fast.precision_choice.seconds,
                               "agree": fast.precision_choice.agree, "cached": fast.precision_choice.cached}
        for policy in policies.values():  # warm-up: the acting copy, prefix cache, allocators
            decisions_per_second(policy, args.envs, args.envs, args.seed + 1000)
        rows = []
        for repeat in range(args.repeats):
            rates = {dtype: decisions_per_second(policy, args.envs, decisions, args.seed)
                     for dtype, policy in policies.items()}
            rows.append({**rates, "ratio": rates[args.act_dtype] / rates["float32"]})
            print(f"{mode} repeat {repeat + 1}: float32 {rates['float32']:.2f}/s, {args.act_dtype} "
                  f"({chosen}) {rates[args.act_dtype]:.2f}/s, ratio {rows[-1]['ratio']:.2f}x", flush=True)
        median = statistics.median(r["ratio"] for r in rows)
        print(f"{mode}: median ratio {args.act_dtype} ({chosen}) / float32 = {median:.2f}x", flush=True)
        results[mode] = {"chosen": chosen, "repeats": rows, "median_ratio": median}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
