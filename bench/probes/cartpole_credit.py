"""How much does each CartPole decision's REINFORCE advantage say about the right action?

Plays CartPole-v1 at random and measures the correlation between the batch-normalised discounted
return of each decision and whether the action pushed toward the pole's rotation (the "right"
action of a simple controller that balances for ~200 steps), with and without textgym's
pole-spin shaping (``textgym.make("textgym/CartPole-v1", shaping=w)``). Then trains a logistic
policy on the words the CartPole renderer prints (leaning/turning/moving left or right) with the
same REINFORCE update textgym uses (8 episodes per update), to show how fast the update learns
when the features are easy to read.

    python bench/probes/cartpole_credit.py
"""

import gymnasium as gym
import numpy as np


def spin_potential(state, weight):
    return -weight * abs(state[3])


def correlation(weight: float, gamma: float, episodes: int = 400) -> float:
    env, rng = gym.make("CartPole-v1"), np.random.default_rng(0)
    advantages, correct = [], []
    for episode in range(episodes):
        state, _ = env.reset(seed=episode)
        steps, done = [], False
        while not done:
            action = int(rng.random() < 0.5)
            new_state, reward, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            reward += spin_potential(new_state, weight) - spin_potential(state, weight)  # as textgym
            steps.append((int(action == (state[3] > 0)), reward))
            state = new_state
        ret = 0.0
        for is_correct, reward in reversed(steps):
            ret = reward + gamma * ret
            advantages.append(ret)
            correct.append(is_correct)
    a = np.array(advantages)
    return float(np.corrcoef((a - a.mean()) / a.std(), correct)[0, 1])


def features(state):
    x, velocity, angle, spin = state
    return np.array([1.0, angle > 0.01, angle < -0.01, spin > 0.05, spin < -0.05,
                     velocity > 0.05, velocity < -0.05], dtype=float)


def logistic_reinforce(step: float, seed: int, updates: int = 25, gamma: float = 0.8) -> list[float]:
    env, rng = gym.make("CartPole-v1"), np.random.default_rng(seed)
    w = np.zeros(7)
    w[0] = -0.2  # start like SmolLM2: P(RIGHT) ~0.45 everywhere
    curve = []
    for _ in range(updates):
        batch, lengths = [], []
        for _ in range(8):
            state, _ = env.reset(seed=int(rng.integers(1 << 30)))
            episode, done = [], False
            while not done:
                f = features(state)
                p = 1 / (1 + np.exp(-f @ w))
                action = int(rng.random() < p)
                state, reward, terminated, truncated, _ = env.step(action)
                done = terminated or truncated
                episode.append((f, action, p, reward))
            lengths.append(len(episode))
            ret, returns = 0.0, []
            for *_, reward in reversed(episode):
                ret = reward + gamma * ret
                returns.append(ret)
            batch += [(f, a, p, g) for (f, a, p, _), g in zip(episode, reversed(returns))]
        g = np.array([b[3] for b in batch])
        adv = (g - g.mean()) / (g.std() + 1e-8)
        grad = sum(A * (a - p) * f for (f, a, p, _), A in zip(batch, adv)) / len(batch)
        w += step * grad / (np.linalg.norm(grad) + 1e-8)  # a fixed-size step, like Adam's
        curve.append(float(np.mean(lengths)))
    return curve


if __name__ == "__main__":
    for weight in (0.0, 0.5, 1.0, 2.0):
        print(f"shaping {weight}: corr(advantage, right action) "
              + "  ".join(f"gamma {g}: {correlation(weight, g):.2f}" for g in (0.5, 0.8, 0.95)))
    for step in (0.1, 0.3):
        curve = np.mean([logistic_reinforce(step, seed) for seed in range(4)], axis=0)
        print(f"logistic policy, step {step}: mean length every 3rd update: "
              + " ".join(f"{x:.0f}" for x in curve[::3]))
