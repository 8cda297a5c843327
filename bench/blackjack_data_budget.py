"""How many hands Blackjack's target takes a learner that remembers every hand.

Monte Carlo control on a table (no model, no generalisation): every state's HIT and STICK keep the
mean return of the hands that took them there, play is greedy on those means with the exploration
floor's uniform draws mixed in (``--floor``, as the RL rows' ``explore_floor``), and the greedy
table's exact expected return (:func:`textgym.envs.classic.blackjack_value`) is printed after each
count of hands in ``--at``. It sets the scale of the RL rows' data budget: what a run of N hands can
reach when estimation, not the policy's form, is the limit.

Usage:
    python bench/blackjack_data_budget.py --seeds 0,1,2 --floor 0.2 --at 25600,51200,102400,204800
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from textgym.envs.classic import blackjack_value

HIT, STICK = 1, 0


def run(seed: int, floor: float, at: list[int]) -> dict[int, float]:
    """The greedy table's exact return after each count in ``at`` of hands (one seed)."""
    env = gym.make("Blackjack-v1")
    rng = np.random.default_rng(seed)
    sums: dict[tuple, np.ndarray] = {}
    counts: dict[tuple, np.ndarray] = {}

    def hits(state: tuple) -> bool:
        """Greedy on the means so far; a state never met HITs (the untrained model's play)."""
        if state not in counts:
            return True
        means = sums[state] / np.maximum(counts[state], 1)
        tried = counts[state] > 0
        if not tried.all():  # an action never tried is taken over one tried
            return not tried[STICK]
        return bool(means[HIT] > means[STICK])

    values = {}
    for hand in range(1, max(at) + 1):
        obs, _ = env.reset(seed=int(rng.integers(2**31)))
        visited, done, reward = [], False, 0.0
        while not done:
            state = (int(obs[0]), int(obs[1]), bool(obs[2]))
            action = int(rng.integers(2)) if rng.random() < floor else (HIT if hits(state) else STICK)
            obs, reward, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            visited.append((state, action))
        for state, action in visited:  # every visit: the hand's return, Blackjack has no discount
            sums.setdefault(state, np.zeros(2))[action] += reward
            counts.setdefault(state, np.zeros(2))[action] += 1
        if hand in at:
            values[hand] = blackjack_value(lambda total, dealer, usable: hits((total, dealer, usable)))
            print(f"seed {seed} floor {floor}: {hand:7d} hands, exact {values[hand]:+.4f}", flush=True)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--floor", type=float, default=0.2, help="probability of a uniform draw")
    parser.add_argument("--at", default="25600,51200,102400,204800", help="hand counts to report at")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    at = sorted(int(n) for n in args.at.split(","))
    results = {seed: run(int(seed), args.floor, at) for seed in args.seeds.split(",")}
    if args.json is not None:
        args.json.write_text(json.dumps({"command": "python " + " ".join(sys.argv), "floor": args.floor,
                                         "optimum": blackjack_value(), "exact_return": results},
                                        indent=1) + "\n")


if __name__ == "__main__":
    main()
