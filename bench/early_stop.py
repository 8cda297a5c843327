"""What the greedy early-stop check costs on textgym/CartPole-v1, against the same run without it.

In one process, two trainers with the env's registered settings
(``textgym.registry.training_defaults("cartpole", "score")``: REINFORCE, 16 episodes of 8 envs per
update, a check of 8 held-out episodes capped at 200 steps every 2 updates) and the same seed:

1. the baseline: ``train(updates=N)`` without a check;
2. the same run with the registered check, its threshold out of reach so that every check runs
   and the run does all N updates.

The check never changes training (its envs and seeds are its own, the policy's sampling is
reseeded by every rollout), so both runs make the same updates: the difference in wall time is
the checks' cost. Each run is repeated (interleaved) and the fastest kept. Printed: each run's
seconds, the checks' own seconds (``check.seconds`` of the metrics, the direct measure; the
difference between the runs is noisier on a shared machine) and their share of the run, and the
decisions the checks made against the training decisions. With the tiny random model the episodes are short (greedy and sampled alike); with a
policy that balances the pole, a training episode runs up to 500 steps and a check episode at most
200, which bounds a check at 8 x 200 decisions against an update's 16 x 200-500.

Usage:
    python bench/early_stop.py                                   # tiny model, 6 updates (~2 min)
    python bench/early_stop.py --model smollm2-135m --updates 4  # the real model (minutes)
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import textgym
from textgym.registry import training_defaults
from textgym.trainers import EarlyStop, make_trainer

ENV_ID = "textgym/CartPole-v1"


def run(policy: textgym.Policy, updates: int, early_stop: EarlyStop | None) -> dict:
    defaults = training_defaults(ENV_ID, "score")
    config = {**defaults.trainer, "num_envs": defaults.num_envs, "lr": defaults.lr, "seed": 0}
    trainer = make_trainer("reinforce", policy, env=ENV_ID, config=config, env_kwargs=dict(defaults.env_kwargs))
    started = time.perf_counter()
    history = trainer.train(updates=updates, early_stop=early_stop)
    seconds = time.perf_counter() - started
    checks = [m["check"] for m in history if "check" in m]
    return {
        "updates": len(history),
        "seconds": seconds,
        "training_decisions": history[-1]["decisions"],
        "returns": [round(m["return_mean"], 3) for m in history],
        "checks": len(checks),
        "check_seconds": sum(c["seconds"] for c in checks),
        "check_returns": [c["return_mean"] for c in checks],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--updates", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each (the fastest is kept)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    defaults = training_defaults(ENV_ID, "score")
    # the registered check, with a threshold no policy reaches: every check runs
    check = EarlyStop(until=1e9, every=defaults.check_every, episodes=defaults.check_episodes,
                      max_steps=defaults.check_max_steps)
    model, tokenizer = textgym.models.load(args.model)
    results: dict[str, list[dict]] = {"baseline": [], "with checks": []}
    for _ in range(args.repeats):  # interleaved, so that a busy spell does not favour one of them
        for name, early_stop in (("baseline", None), ("with checks", check)):
            policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0, name=args.model)
            results[name].append(run(policy, args.updates, early_stop))
    base, checked = (min(runs, key=lambda r: r["seconds"]) for runs in results.values())
    assert base["returns"] == checked["returns"], "the check changed training"

    decisions = checked["training_decisions"]
    # CartPole's return is its length (1 per step): the checks' decisions are their returns summed
    check_decisions = sum(r * check.episodes for r in checked["check_returns"])
    summary = {
        "model": args.model, "updates": args.updates, "check": {"every": check.every, "episodes": check.episodes,
                                                                "max_steps": check.max_steps},
        "baseline_seconds": round(base["seconds"], 2), "with_checks_seconds": round(checked["seconds"], 2),
        "checks": checked["checks"], "check_seconds": round(checked["check_seconds"], 2),
        "check_share": round(checked["check_seconds"] / checked["seconds"], 3),
        "overhead_vs_baseline": round(checked["seconds"] / base["seconds"] - 1, 3),
        "training_decisions": decisions, "check_decisions": round(check_decisions),
        "check_returns": checked["check_returns"],
    }
    print(f"{args.model}, {args.updates} updates of CartPole (registered settings), check every {check.every} "
          f"updates on {check.episodes} episodes capped at {check.max_steps} steps")
    print(f"  baseline:    {summary['baseline_seconds']:7.2f} s")
    print(f"  with checks: {summary['with_checks_seconds']:7.2f} s  ({summary['checks']} checks, "
          f"{summary['check_seconds']:.2f} s = {summary['check_share']:.1%} of the run; "
          f"{summary['overhead_vs_baseline']:+.1%} vs the baseline)")
    print(f"  decisions:   {decisions} training, {summary['check_decisions']} in checks "
          f"({summary['check_decisions'] / decisions:.1%})")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
