"""What the reference memo (``TrainConfig.reference_memo``) saves of an update's reference pass.

With a KL penalty (``kl_coef``) every update runs the reference policy (the adapter disabled) over
its decisions. One process, one model: Blackjack with common cards at the ``rl`` suite's settings
(GRPO, groups of 8 hands, a LoRA adapter on the top 8 layers, acting and the update in bf16). A
first rollout fills the memo, as the updates before would; each round then collects a new rollout
(new seeds: the states met are a new update's) and runs its reference pass both ways, alternating
which goes first: every decision through the reference (``reference_memo = 0``), and the memo's
pass (only the decisions it does not hold). Prints seconds per 1,000 decisions, the ratio and the
share of decisions the memo served.

Usage:
    OMP_NUM_THREADS=2 python bench/reference_memo.py --threads 2 --json bench/results/reference_memo.json
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

import textgym
from textgym.rollout import decisions_of
from textgym.trainers import make_trainer
from textgym.trainers.engine.kl import ReferenceMemo, reference_logprobs

SETTINGS = ("every decision", "memo")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--hands", type=int, default=1024, help="hands per rollout (an update's batch)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    policy = textgym.Policy.from_pretrained(args.model, mode="score", act_dtype="bfloat16",
                                            update_dtype="bfloat16", score_memo_bytes=128 * 2**20)
    trainer = make_trainer("grpo", policy, env="textgym/Blackjack-v1", env_kwargs={"common_cards": True},
                           config={"num_envs": 32, "group_size": 8, "episodes_per_update": args.hands,
                                   "lora_layers": 8, "kl_coef": 0.03})
    batch = trainer.config.minibatch_size
    first = decisions_of(trainer.collect().episodes)
    reference_logprobs(policy, first, batch)  # warm-up: the allocator, the reference's first passes
    filled = ReferenceMemo()
    filled.logprobs(policy, first, batch, trainer.config.reference_memo)
    runs: dict[str, list[float]] = {s: [] for s in SETTINGS}
    served: list[float] = []
    for r in range(args.rounds):
        decisions = decisions_of(trainer.collect().episodes)
        for setting in (SETTINGS if r % 2 == 0 else SETTINGS[::-1]):
            memo = copy.deepcopy(filled)
            started = time.perf_counter()
            if setting == "memo":
                memo.logprobs(policy, decisions, batch, trainer.config.reference_memo)
                served.append(memo.hits / len(decisions))
            else:
                reference_logprobs(policy, decisions, batch)
            runs[setting].append(1000 * (time.perf_counter() - started) / len(decisions))
            print(f"round {r}: {setting:14s} {runs[setting][-1]:7.2f} s per 1,000 decisions "
                  f"({len(decisions)} decisions)", flush=True)
        filled.logprobs(policy, decisions, batch, trainer.config.reference_memo)  # as the next update finds it
    mean = {s: sum(v) / len(v) for s, v in runs.items()}
    print(f"reference pass: every decision {mean['every decision']:.2f}, memo {mean['memo']:.3f} s per 1,000 "
          f"decisions: {mean['every decision'] / mean['memo']:.1f}x faster; the memo served "
          f"{100 * sum(served) / len(served):.1f}% of the decisions ({torch.get_num_threads()} threads)")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], check=False).stdout.strip()
    out = {"model": args.model, "env": "textgym/Blackjack-v1", "threads": torch.get_num_threads(), "commit": commit,
           "argv": sys.argv[1:] if argv is None else argv, "seconds_per_1000_decisions": runs, "mean": mean,
           "served": served}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
