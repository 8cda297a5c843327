"""Accuracy of an untrained model on a reasoning-gym task, on held-out items, before any training.

``textgym eval`` takes a bare model's env settings from the env's registration; a reasoning-gym
task's difficulty is its config (env kwargs), so this probe passes them: it plays ``--items``
held-out items (seeds from 1,000,000, as ``textgym eval``) greedily in generate mode with the
env's generate-mode policy settings (the answer tag prefilled, stopped at ``</answer>``), and
prints the mean score (the dataset's own ``score_answer``; 1.0 = right) and a few answers.

    python bench/probes/reasoning_prior.py --task basic_arithmetic \
        --config '{"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}' --items 200
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

import textgym
from textgym import seeds
from textgym.registry import training_defaults
from textgym.trainers.engine.evaluation import evaluate_greedy


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="basic_arithmetic")
    parser.add_argument("--config", default="{}", help="the dataset's config as JSON (env kwargs)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=seeds.EVAL_BASE)  # held-out evaluation seeds
    args = parser.parse_args()

    env_id = f"reasoning_gym/{args.task}"
    config = json.loads(args.config)
    settings = dict(training_defaults(env_id, "generate").policy)
    policy = textgym.Policy.from_pretrained(args.model, mode="generate", **settings)
    venv = textgym.make_vec(env_id, num_envs=args.num_envs, **config)
    start = time.monotonic()
    result = evaluate_greedy(policy, venv, episodes=args.items, seed=args.seed)
    result.update(task=args.task, config=config, model=args.model, policy=settings,
                  seconds=round(time.monotonic() - start, 1))
    env = textgym.make(env_id, **config)
    examples = []
    for i in range(3):
        obs, info = env.reset(seed=args.seed + i)
        answer = policy.act([obs], [info["system_prompt"]], greedy=True)[0].text
        *_, end = env.step(answer)
        examples.append({"question": obs, "answer": answer, "reference": end["answer"], "score": end["score"]})
    result["examples"] = examples
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
