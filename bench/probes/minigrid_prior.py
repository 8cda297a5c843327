"""What does the *untrained* model do on the MiniGrid/BabyAI text renderer?

Resets a ``minigrid/...`` text env on held-out seeds (from 1,000,000, as ``textgym eval``) and
asks the model, in score mode, for the greedy action in each first state: the distribution of
those actions is the model's prior over MiniGrid's own action names, before any training. It
also prints the prompt length (tokens of system prompt + observation), what every step pays.
Success rates of whole greedy episodes come from ``textgym eval ENV --model smollm2-135m``.

    python bench/probes/minigrid_prior.py [--env minigrid/BabyAI-GoToRedBallNoDists-v0] [--states 32]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

import textgym
from textgym import seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="minigrid/BabyAI-GoToRedBallNoDists-v0")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--states", type=int, default=32)
    parser.add_argument("--seed", type=int, default=seeds.EVAL_BASE)  # held-out evaluation seeds
    args = parser.parse_args()

    env = textgym.make(args.env)
    observations, prompts, valid = [], [], []
    for i in range(args.states):
        obs, info = env.reset(seed=args.seed + i)
        observations.append(obs)
        prompts.append(info["system_prompt"])
        valid.append(info["valid_actions"])
    policy = textgym.Policy.from_pretrained(args.model, mode="score")
    decisions = policy.act(observations, prompts, valid, greedy=True)
    counts = collections.Counter(d.text for d in decisions)
    tokens = [len(policy.tokenizer(p + "\n" + o)["input_ids"]) for p, o in zip(prompts, observations)]
    print(f"env {args.env}, model {args.model}, {args.states} first states (seeds {args.seed}..)")
    print("example observation:\n" + observations[0])
    print(f"prompt tokens (system + observation): mean {sum(tokens) / len(tokens):.0f}, max {max(tokens)}")
    print("greedy first actions: " + ", ".join(f"{name} {counts.get(name, 0)}" for name in valid[0]))


if __name__ == "__main__":
    main()
