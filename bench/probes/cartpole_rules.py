"""Reference controllers for CartPole-v1: how long simple rules balance the pole.

Plays 50 episodes (seeds 0-49) of Gymnasium's CartPole-v1 with each rule and prints the mean
length. They put a trained text policy's length in context: "push the way the pole turns" is the
rule the CartPole renderer's one direction word names.

    python bench/probes/cartpole_rules.py
"""

import gymnasium as gym
import numpy as np

RULES = {
    "push the way the pole turns (spin > 0 -> RIGHT)": lambda obs: obs[3] > 0,
    "push the way the pole leans (angle > 0 -> RIGHT)": lambda obs: obs[2] > 0,
    "angle + 0.5 * spin > 0 -> RIGHT": lambda obs: obs[2] + 0.5 * obs[3] > 0,
    "always LEFT": lambda obs: False,
}


def mean_length(rule, episodes: int = 50) -> float:
    env, lengths = gym.make("CartPole-v1"), []
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        done, steps = False, 0
        while not done:
            obs, _, terminated, truncated, _ = env.step(int(rule(obs)))
            done, steps = terminated or truncated, steps + 1
        lengths.append(steps)
    return float(np.mean(lengths))


if __name__ == "__main__":
    for name, rule in RULES.items():
        print(f"{name:50s} {mean_length(rule):6.1f} steps")
