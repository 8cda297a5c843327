"""What a decision costs in acting and in the update's re-scoring, with and without the two
savings: the output head reading contiguous hidden states (``kv_cache.contiguous_output_head``)
and re-scoring the adapted top layers alone (``textgym.policy.frozen_trunk``).

One process, one model, CartPole's training settings (score mode, a LoRA adapter on the top 8
layers). Each round plays ``--decisions`` decisions with ``--num-envs`` envs and re-scores them
with grad in minibatches of ``--minibatch`` (forward and backward, no optimizer step), in three
variants: ``strided`` (the head on transformers' strided view, the full model re-scored),
``contiguous`` (the head on a contiguous copy, the full model) and ``top`` (contiguous, the top
layers alone from the acting pass's records). Rounds alternate the variants, so drift on a shared
machine hits all alike. Prints milliseconds per decision and the ratios to ``strided``.

Usage:
    OMP_NUM_THREADS=2 python bench/update_cost.py --threads 2 --json bench/results/update_cost.json
    python bench/update_cost.py --env textgym/Blackjack-v1 --lora-layers 8   # candidates of two tokens
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

import textgym
from textgym import models
from textgym.policy.kv_cache import contiguous_output_head
from textgym.registry import training_defaults
from textgym.rollout import collect, decisions_of
from textgym.trainers import make_trainer

VARIANTS = ("strided", "contiguous", "top")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="textgym/CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--decisions", type=int, default=256)
    parser.add_argument("--minibatch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lora-layers", type=int, default=None,
                        help="the adapter on the top N layers (default: the env's registered setting)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    defaults = training_defaults(args.env)
    model, tokenizer = models.load(args.model)
    hook = contiguous_output_head(model)  # installed here, so that this script can take it off
    policy = textgym.Policy(model, tokenizer, mode="score", name=args.model)
    trainer = make_trainer("reinforce", policy, env=args.env, env_kwargs=dict(defaults.env_kwargs),
                           config={**defaults.trainer, "num_envs": args.num_envs,
                                   **({"lora_layers": args.lora_layers} if args.lora_layers else {})})
    venv = textgym.make_vec(args.env, num_envs=args.num_envs, seed=0, **defaults.env_kwargs)
    collect(policy, venv, steps=args.num_envs, seed=1)  # warm-up: allocator, prefix cache

    def measure(variant: str) -> dict[str, float]:
        started = time.perf_counter()
        rollout = collect(policy, venv, steps=args.decisions, seed=0)
        acting = time.perf_counter() - started
        decisions = decisions_of(rollout.episodes + rollout.unfinished)
        if variant != "top":
            for decision in decisions:
                decision.trunk = None  # no records: the whole model is re-scored
        started = time.perf_counter()
        for i in range(0, len(decisions), args.minibatch):
            evaluation = policy.evaluate(decisions[i:i + args.minibatch])
            evaluation.logprobs.sum().backward()
        trainer.optimizer.zero_grad(set_to_none=True)
        rescoring = time.perf_counter() - started
        return {"act_ms": 1000 * acting / len(decisions), "rescore_ms": 1000 * rescoring / len(decisions)}

    measure("top")  # warm-up, and the top path's one check against the full pass
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    installed = True
    for _ in range(args.rounds):
        for variant in VARIANTS:
            if variant == "strided":
                hook.remove()
            elif not installed:
                hook = contiguous_output_head(policy.model)
            installed = variant != "strided"
            runs[variant].append(measure(variant))
            print(f"{variant:10s} act {runs[variant][-1]['act_ms']:6.1f} ms/decision, "
                  f"re-score {runs[variant][-1]['rescore_ms']:6.1f} ms/decision", flush=True)
    mean = {v: {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]} for v, rs in runs.items()}
    base = mean["strided"]
    for variant in VARIANTS:
        total = mean[variant]["act_ms"] + mean[variant]["rescore_ms"]
        print(f"{variant:10s} act {mean[variant]['act_ms']:6.1f} + re-score {mean[variant]['rescore_ms']:6.1f} "
              f"= {total:6.1f} ms/decision ({(base['act_ms'] + base['rescore_ms']) / total:.2f}x strided)")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], check=False).stdout.strip()
    out = {"model": args.model, "env": args.env, "threads": torch.get_num_threads(), "commit": commit,
           "argv": sys.argv[1:] if argv is None else argv, "runs": runs, "mean": mean}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
