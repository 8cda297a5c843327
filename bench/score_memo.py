"""What the score-mode memo (``score_memo_bytes``) saves when an env revisits its states.

One process, one model: Blackjack's training settings (score mode, a LoRA adapter on the top 8
layers, acting in bf16, 32 envs), the same weights acting with the memo off and on. Each round
plays ``--episodes`` hands with each, alternating which goes first, so drift on a shared machine
hits both alike; the weights do not change between rounds (as within one update's rollout). Prints
seconds per 1,000 decisions, the ratio, and the prompt tokens each ran through the model.

Usage:
    OMP_NUM_THREADS=1 python bench/score_memo.py --threads 1 --json bench/results/score_memo.json
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

SETTINGS = ("off", "on")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="textgym/Blackjack-v1")
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memo-mib", type=float, default=64.0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    defaults = training_defaults(args.env)
    model, tokenizer = models.load(args.model)
    base = textgym.Policy(model, tokenizer, mode="score", name=args.model, act_dtype="bfloat16")
    trainer = make_trainer("grpo", base, env=args.env, env_kwargs=dict(defaults.env_kwargs),
                           config={**defaults.trainer, "num_envs": args.num_envs, "lora_layers": 8})
    policies = {"off": trainer.policy,
                "on": textgym.Policy(trainer.policy.model, tokenizer, mode="score", name=args.model,
                                     act_dtype="bfloat16", score_memo_bytes=int(args.memo_mib * 2**20))}
    venv = textgym.make_vec(args.env, num_envs=args.num_envs, seed=0, **defaults.env_kwargs)
    for policy in policies.values():  # warm-up: allocator, prefix cache, acting copy
        collect(policy, venv, episodes=args.num_envs, seed=1)
    runs: dict[str, list[float]] = {s: [] for s in SETTINGS}
    tokens: dict[str, list[float]] = {s: [] for s in SETTINGS}
    for r in range(args.rounds):
        for setting in (SETTINGS if r % 2 == 0 else SETTINGS[::-1]):
            policy = policies[setting]
            counters = dict(policy.counters)
            started = time.perf_counter()
            rollout = collect(policy, venv, episodes=args.episodes, seed=100 + r)
            seconds = time.perf_counter() - started
            decisions = len(decisions_of(rollout.episodes))
            runs[setting].append(1000 * seconds / decisions)
            tokens[setting].append((policy.counters["model_tokens"] - counters["model_tokens"]) / decisions)
            print(f"round {r}: memo {setting:3s} {runs[setting][-1]:6.2f} s per 1,000 decisions "
                  f"({decisions} decisions)", flush=True)
    mean = {s: sum(v) / len(v) for s, v in runs.items()}
    print(f"memo off {mean['off']:.2f}, on {mean['on']:.2f} s per 1,000 decisions: {mean['off'] / mean['on']:.2f}x "
          f"faster with it; model tokens per decision {sum(tokens['off']) / args.rounds:.1f} and "
          f"{sum(tokens['on']) / args.rounds:.1f} ({torch.get_num_threads()} threads)")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], check=False).stdout.strip()
    out = {"model": args.model, "env": args.env, "threads": torch.get_num_threads(), "commit": commit,
           "argv": sys.argv[1:] if argv is None else argv, "seconds_per_1000_decisions": runs, "mean": mean,
           "model_tokens_per_decision": tokens}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
