"""Same metrics before and after a refactor: each algorithm's first updates on the tiny model.

Runs REINFORCE, GRPO and PPO (plus PPO with the KL penalty, entropy bonus, state centering and
online SFT, so the shared loss terms are exercised) for 2 updates on the tiny model at fixed seeds
and dumps each run's ``metrics.jsonl`` lines to one JSON file; ``compare`` checks two dumps key by key and
lists every difference (timings excepted: they differ from run to run).

    python bench/structure_equivalence.py dump before.json      # on the unchanged tree
    python bench/structure_equivalence.py dump after.json       # after the change
    python bench/structure_equivalence.py compare before.json after.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import textgym
from textgym.trainers import make_trainer

#: (name, algorithm, env, config) of each run.
RUNS = [
    ("reinforce", "reinforce", "textgym/Bandit-v0", {"num_envs": 4, "episodes_per_update": 8}),
    ("grpo", "grpo", "textgym/Bandit-v0", {"num_envs": 4, "episodes_per_update": 8, "group_size": 4}),
    ("ppo", "ppo", "textgym/CartPole-v1",
     {"num_envs": 4, "episodes_per_update": 4, "max_train_episode_steps": 6, "minibatch_size": 8}),
    ("ppo_terms", "ppo", "textgym/CartPole-v1",
     {"num_envs": 4, "episodes_per_update": 4, "max_train_episode_steps": 6, "minibatch_size": 8,
      "kl_coef": 0.05, "entropy_coef": 0.01, "state_centering": 0.5, "sft_every": 1}),
    ("reinforce_ema", "reinforce", "textgym/CartPole-v1",
     {"num_envs": 4, "episodes_per_update": 4, "max_train_episode_steps": 5, "baseline": "ema",
      "lr_schedule": "linear", "warmup_updates": 1}),
]

#: Metrics that measure time (they differ between any two runs).
TIMED = {"wall_time", "update_seconds", "decisions_per_s", "steps_per_s", "episodes_per_s",
         "rollout_seconds", "policy_seconds", "env_seconds", "tokens_per_s"}


def run_all() -> dict[str, list[dict]]:
    dumps = {}
    for name, algorithm, env, config in RUNS:
        policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
        with tempfile.TemporaryDirectory() as out:
            trainer = make_trainer(algorithm, policy, env=env, config={**config, "report_to": "none"},
                                   out_dir=out)
            trainer.train(updates=2)
            trainer.save_checkpoint()
            lines = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
            result = trainer.evaluate(episodes=4)
        dumps[name] = lines + [{"evaluate": result}]
    return dumps


def differences(before, after, path: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in sorted(set(before) | set(after)):
            if key in TIMED or key.endswith(("_seconds", "_per_s")):
                continue
            if key not in before or key not in after:
                out.append(f"{path}/{key}: only {'after' if key in after else 'before'}")
            else:
                out += differences(before[key], after[key], f"{path}/{key}")
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [d for i, (b, a) in enumerate(zip(before, after)) for d in differences(b, a, f"{path}[{i}]")]
    return [] if before == after else [f"{path}: {before!r} != {after!r}"]


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        Path(sys.argv[2]).write_text(json.dumps(run_all(), indent=1, sort_keys=True))
    else:
        diffs = differences(*(json.loads(Path(p).read_text()) for p in sys.argv[2:4]))
        print("\n".join(diffs) or "identical (timings aside)")
        sys.exit(1 if diffs else 0)
