"""What does the *untrained* model do on the MiniGrid/BabyAI text renderer?

Resets a ``minigrid/...`` text env on held-out seeds (from 1,000,000, as ``textgym eval``) and
asks the model, in score mode, for the greedy action in each first state: the distribution of
those actions is the model's prior over MiniGrid's own action names, before any training. It
also prints the prompt length (tokens of system prompt + observation), what every step pays.
Success rates of whole greedy episodes come from ``textgym eval ENV --model smollm2-135m``.

``--checkpoint RUN/checkpoint`` (repeatable) also prints each policy's probability of every action
in a few states with the red ball in sight (the untrained model's first): how far RL moved
``forward``, the action BabyAI needs and the untrained model gives ~0.1%.

    python bench/probes/minigrid_prior.py [--env minigrid/BabyAI-GoToRedBallNoDists-v0] [--states 32]
    python bench/probes/minigrid_prior.py --checkpoint runs/babyai-rl/checkpoint
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

import textgym
from textgym import seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="minigrid/BabyAI-GoToRedBallNoDists-v0")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--states", type=int, default=32)
    parser.add_argument("--seed", type=int, default=seeds.EVAL_BASE)  # held-out evaluation seeds
    parser.add_argument("--checkpoint", action="append", default=[], help="a trained policy to probe too")
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
    if args.checkpoint:
        probe_ball_states(policy, "untrained", prompts[0], valid[0])
        for path in args.checkpoint:
            probe_ball_states(textgym.Policy.load(path), path, prompts[0], valid[0])


#: States with the red ball in sight, in the renderer's words (GoToRedBall's mission).
BALL_STATES = ["You see a red ball 1 step forward.", "You see a red ball 2 steps forward.",
               "You see a red ball 3 steps forward and 1 step left.", "You see a wall 3 steps forward."]


def probe_ball_states(policy: textgym.Policy, name: str, system_prompt: str, actions: list[str]) -> None:
    """Print ``policy``'s probability of each action in :data:`BALL_STATES` (the trainers' softmax
    over the candidates, as re-scored by :meth:`textgym.Policy.evaluate`)."""
    observations = [f"Mission: go to the red ball.\n{state}" for state in BALL_STATES]
    decisions = policy.act(observations, [system_prompt] * len(observations), [actions] * len(observations),
                           greedy=True)
    with torch.no_grad():
        logprobs = policy.evaluate(decisions).candidate_logprobs
    print(f"== {name}")
    for state, row in zip(BALL_STATES, logprobs):
        print(f"{state:52s} " + " ".join(f"{a}={p:.2g}" for a, p in zip(actions, row.float().exp().tolist())))


if __name__ == "__main__":
    main()
