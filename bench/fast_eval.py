"""Greedy evaluation speed: decisions/s of float32 at 16 envs per forward pass (the old
``textgym eval``) against the evaluation precision at more envs per pass, alternating.

Greedy score-mode acting on textgym/CartPole-v1 (the registry's env settings), inside
``Policy.evaluating()`` as ``textgym eval`` and the greedy checks act. Each repeat runs every
configuration once, one after the other, on the same weights (a machine whose load changes slows
them alike); the ratio to the first configuration and its median over repeats are printed, with
the time 25,000 decisions (50 CartPole episodes of 500 steps) would take at each median rate.
``--checkpoint RUN`` loads a trained run's adapter (its episodes are long, as in a real
evaluation); without it the base model plays (short episodes, the same work per decision).

Usage:
    OMP_NUM_THREADS=2 python bench/fast_eval.py --configs float32:16 bfloat16:16 bfloat16:50
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

import textgym
from textgym import models
from textgym.policy import Policy, PolicyConfig
from textgym.rollout import collect

ENV_ID = "textgym/CartPole-v1"
EVAL_DECISIONS = 25_000  # 50 held-out CartPole episodes of a solved policy, 500 steps each


def rate(policy: Policy, envs: int, decisions: int, seed: int, env_kwargs: dict) -> float:
    venv = textgym.make_vec(ENV_ID, num_envs=envs, seed=seed, **env_kwargs)
    try:
        with policy.evaluating():
            stats = collect(policy, venv, steps=decisions, seed=seed, greedy=True).stats
    finally:
        venv.close()
    return stats["decisions"] / stats["seconds"]


def load_policies(args: argparse.Namespace, dtypes: set[str]) -> tuple[dict[str, Policy], dict]:
    """One policy per precision, sharing the weights (the run's adapter loaded with ``--checkpoint``)."""
    from textgym.registry import training_defaults

    registered = training_defaults(ENV_ID, "score")
    env_kwargs = dict(registered.env_kwargs)
    model, tokenizer = models.load(args.model)
    if args.checkpoint is not None:
        from textgym.trainers import make_trainer

        policy = Policy(model, tokenizer, config=PolicyConfig.for_model(args.model, mode="score", **registered.policy),
                        name=args.model)
        trainer = make_trainer("reinforce", policy, env=ENV_ID, config=dict(registered.trainer), env_kwargs=env_kwargs)
        trainer.load_state(args.checkpoint / "checkpoint")
        model = trainer.policy.model
    policies = {}
    for dtype in sorted(dtypes):
        config = PolicyConfig.for_model(args.model, mode="score", seed=args.seed, eval_act_dtype=dtype,
                                        **registered.policy)
        policies[dtype] = Policy(model, tokenizer, config=config, name=args.model)
    return policies, env_kwargs


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--checkpoint", type=Path, default=None, help="a CartPole run folder (its adapter)")
    parser.add_argument("--configs", nargs="+", default=["float32:16", "bfloat16:16", "bfloat16:50"],
                        help="DTYPE:ENVS, the first is the baseline")
    parser.add_argument("--decisions", type=int, default=320, help="decisions per measurement (at least 8 steps)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = [(c.split(":")[0], int(c.split(":")[1])) for c in args.configs]
    policies, env_kwargs = load_policies(args, {d for d, _ in configs})
    print(f"model {args.model}{' + ' + str(args.checkpoint) if args.checkpoint else ' (untrained)'}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    for dtype, envs in configs:  # warm-up: the acting copies, the prefix caches, the allocator
        rate(policies[dtype], envs, envs, args.seed + 1000, env_kwargs)
    rows = []
    for repeat in range(args.repeats):
        rates = {f"{d}:{n}": rate(policies[d], n, max(args.decisions, 8 * n), args.seed + repeat, env_kwargs)
                 for d, n in configs}
        base = rates[args.configs[0]]
        rows.append(rates)
        print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v:.2f}/s ({v / base:.2f}x)" for k, v in rates.items()),
              flush=True)
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    ratios = {k: statistics.median(r[k] / r[args.configs[0]] for r in rows) for k in rows[0]}
    for key, median in medians.items():
        print(f"{key}: median {median:.2f} decisions/s, {ratios[key]:.2f}x {args.configs[0]}; "
              f"{EVAL_DECISIONS:,} decisions in {EVAL_DECISIONS / median / 60:.1f} min", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], check=False).stdout.strip()
    out = {"model": args.model, "checkpoint": str(args.checkpoint) if args.checkpoint else None, "commit": commit,
           "threads": torch.get_num_threads(), "argv": sys.argv[1:] if argv is None else argv, "repeats": rows,
           "median_rate": medians, "median_ratio": ratios,
           "minutes_for_25000": {k: EVAL_DECISIONS / v / 60 for k, v in medians.items()}}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
