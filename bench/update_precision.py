"""What the update's pass costs in float32 and under bf16 autocast (``update_dtype``).

One process, one model, CartPole's training settings (score mode, a LoRA adapter on the top 8
layers, acting in bf16, so the update runs the top layers from the acting copy's records). Each
round plays ``--decisions`` decisions and re-scores them with grad in minibatches of
``--minibatch`` (forward and backward, no optimizer step) twice: by a policy whose
``update_dtype`` is float32 and by one whose is bfloat16, on the same weights and the same
decisions. Rounds alternate the two, so drift on a shared machine hits both alike. Prints
milliseconds per decision, the ratio, and how far the two passes' log-probs and gradients differ.

Usage:
    OMP_NUM_THREADS=1 python bench/update_precision.py --threads 1 --json bench/results/update_precision.json
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
from textgym.registry import training_defaults
from textgym.rollout import collect, decisions_of
from textgym.trainers import make_trainer

DTYPES = ("float32", "bfloat16")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="textgym/CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--decisions", type=int, default=256)
    parser.add_argument("--minibatch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    defaults = training_defaults(args.env)
    model, tokenizer = models.load(args.model)
    exact = textgym.Policy(model, tokenizer, mode="score", name=args.model, act_dtype="bfloat16")
    trainer = make_trainer("reinforce", exact, env=args.env, env_kwargs=dict(defaults.env_kwargs),
                           config={**defaults.trainer, "num_envs": args.num_envs})  # adds the adapter
    policies = {"float32": trainer.policy,
                "bfloat16": textgym.Policy(trainer.policy.model, tokenizer, mode="score", name=args.model,
                                           act_dtype="bfloat16", update_dtype="bfloat16")}
    params = trainer.policy.parameters_to_train()
    venv = textgym.make_vec(args.env, num_envs=args.num_envs, seed=0, **defaults.env_kwargs)
    collect(policies["float32"], venv, steps=args.num_envs, seed=1)  # warm-up: allocator, prefix cache

    def rescore(dtype: str, decisions: list) -> tuple[float, torch.Tensor, torch.Tensor]:
        for p in params:
            p.grad = None
        logprobs = []
        started = time.perf_counter()
        for i in range(0, len(decisions), args.minibatch):
            evaluation = policies[dtype].evaluate(decisions[i:i + args.minibatch])
            evaluation.logprobs.sum().backward()
            logprobs.append(evaluation.logprobs.detach())
        seconds = time.perf_counter() - started
        return seconds, torch.cat(logprobs), torch.cat([p.grad.flatten() for p in params])

    warm = collect(policies["float32"], venv, steps=args.minibatch, seed=2)
    for dtype in DTYPES:  # warm-up, and each policy's one check of the top path against the full pass
        rescore(dtype, decisions_of(warm.episodes + warm.unfinished)[:args.minibatch])
    runs: dict[str, list[float]] = {dtype: [] for dtype in DTYPES}
    gaps = []
    for r in range(args.rounds):
        rollout = collect(policies["float32"], venv, steps=args.decisions, seed=10 + r)
        decisions = decisions_of(rollout.episodes + rollout.unfinished)
        order = DTYPES if r % 2 == 0 else DTYPES[::-1]
        results = {}
        for dtype in order:
            seconds, logprobs, grad = rescore(dtype, decisions)
            results[dtype] = (logprobs, grad)
            runs[dtype].append(1000 * seconds / len(decisions))
            print(f"round {r}: {dtype:9s} re-score {runs[dtype][-1]:6.1f} ms/decision", flush=True)
        (lp32, g32), (lp16, g16) = results["float32"], results["bfloat16"]
        gaps.append({"logprob_max_abs": (lp16 - lp32).abs().max().item(),
                     "grad_cosine": torch.nn.functional.cosine_similarity(g16, g32, dim=0).item()})
        print(f"round {r}: log-probs differ by at most {gaps[-1]['logprob_max_abs']:.4f}, "
              f"gradient cosine {gaps[-1]['grad_cosine']:.4f}", flush=True)
    mean = {dtype: sum(v) / len(v) for dtype, v in runs.items()}
    print(f"float32 {mean['float32']:.1f} ms/decision, bfloat16 {mean['bfloat16']:.1f} ms/decision: "
          f"{mean['float32'] / mean['bfloat16']:.2f}x faster in bf16 ({torch.get_num_threads()} threads)")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], check=False).stdout.strip()
    out = {"model": args.model, "env": args.env, "threads": torch.get_num_threads(), "commit": commit,
           "argv": sys.argv[1:] if argv is None else argv, "ms_per_decision": runs, "mean": mean, "gaps": gaps}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
