"""An update's cost with each state's decisions in one minibatch (``minibatch_by_state``, the
default) against decisions shuffled one by one, on the same rollout, alternating.

A GRPO update on Blackjack from SmolLM2-135M (the ``rl`` suite's settings without state centering,
which keeps the shuffled layout): one rollout of ``--episodes`` hands is played, then updates on it
alternate between the two layouts, ``--repeats`` times each; each update's wall time, optimizer
steps and model rows re-scored are printed, then the ratio of the medians. ``--checkpoint``: start
from a trained run's state (a near-deterministic policy meets fewer states).

Usage:
    OMP_NUM_THREADS=2 python bench/update_layout.py --episodes 256 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import textgym
from textgym.rollout import decisions_of
from textgym.trainers import make_trainer

#: The rl suite's Blackjack row (textgym.benchmark._BLACKJACK_RL) without state centering.
SETTINGS = {"num_envs": 32, "group_size": 8, "lr": 3e-4, "explore_floor": 0.2, "state_credit": 1.0,
            "entropy_coef": 0.02, "kl_coef": 0.03, "gamma": 1.0, "lora_layers": 8, "state_centering": 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--checkpoint", default=None, help="a trainer checkpoint to start from")
    args = parser.parse_args()
    policy = textgym.Policy.from_pretrained(args.model, mode="score", act_dtype="bfloat16")
    trainer = make_trainer("grpo", policy, env="textgym/Blackjack-v1",
                           config={**SETTINGS, "episodes_per_update": args.episodes, "seed": 0})
    if args.checkpoint:
        trainer.load_state(args.checkpoint)
    rollout = trainer.collect()
    decisions = decisions_of(rollout.episodes)
    print(f"{len(decisions)} decisions in {len({d.rescoring_key() for d in decisions})} states", flush=True)
    rows: list[int] = []
    evaluate = policy.evaluate
    policy.evaluate = lambda batch: rows.append(len({d.rescoring_key() for d in batch})) or evaluate(batch)
    seconds: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.repeats):
        for by_state in (False, True):
            trainer.config = trainer.config.with_changes({"minibatch_by_state": by_state})
            rows.clear()
            started = time.perf_counter()
            metrics = trainer.update(rollout.episodes, stats=rollout.stats)
            seconds[by_state].append(time.perf_counter() - started)
            print(f"{'by state' if by_state else 'shuffled':9s} {seconds[by_state][-1]:6.1f} s, "
                  f"{metrics['optimizer_steps']} optimizer steps, {sum(rows)} rows re-scored", flush=True)
    shuffled, by_state = statistics.median(seconds[False]), statistics.median(seconds[True])
    print(f"median update: shuffled {shuffled:.1f} s, by state {by_state:.1f} s: {shuffled / by_state:.2f}x")


if __name__ == "__main__":
    main()
