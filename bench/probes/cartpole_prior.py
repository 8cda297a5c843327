"""Does the *untrained* model already lean toward the right push? It depends on the wording.

Plays random CartPole episodes, takes 160 of their states, and scores LEFT and RIGHT for each
with SmolLM2-135M under several renderings of the same state (system prompt and answer format
as in ``textgym/CartPole-v1``). For each rendering it prints the correlation of the model's
preference ``log P(RIGHT) - log P(LEFT)`` with "the pole turns right" and with "the pole leans
right", and how often its greedy answer pushes the way the pole turns (the "push toward the
spin" controller alone lasts ~194 steps; random play ~22).

RL sharpens what a model already prefers far more easily than it teaches something new: in this
repo's CartPole probes (``bench/results/probes/README.md``) a rendering the model did not read
left every trainer at random play, while ``textgym``'s current renderer (first row) starts with
a preference that already points the right way.

    python bench/probes/cartpole_prior.py [--states 160]
"""

import argparse

import gymnasium as gym
import numpy as np
import torch

import textgym
from textgym.envs.classic import CartPoleText


def side(value: float) -> str:
    return "left" if value < 0 else "right"


def old_renderer(s) -> str:
    """textgym's CartPole renderer until 2026-11-23: every number has a direction word."""
    x, v, a, w = s
    where = "center" if abs(x) < 0.5 else (f"near {side(x)} edge" if abs(x) > 1.6 else f"{side(x)} of center")
    moving = "still" if abs(v) < 0.05 else f"moving {side(v)}"
    lean = "upright" if abs(a) < 0.01 else f"{'falling' if abs(a) > 0.12 else 'leaning'} {side(a)}"
    turning = "steady" if abs(w) < 0.05 else f"turning {side(w)}"
    return f"Cart {x:+.2f} {where}, velocity {v:+.2f} {moving}. Pole {a:+.2f} rad {lean}, spin {w:+.2f} {turning}."


RENDERINGS = {
    "textgym (pole first, one word)": CartPoleText(),
    "pole only, one word": lambda s: f"Pole {s[2]:+.2f} rad, spin {s[3]:+.2f} turning {side(s[3])}.",
    "cart first, one word": lambda s: (f"Cart {s[0]:+.2f}, velocity {s[1]:+.2f}. "
                                       f"Pole {s[2]:+.2f} rad, spin {s[3]:+.2f} turning {side(s[3])}."),
    "numbers only": lambda s: f"Cart {s[0]:+.2f}, velocity {s[1]:+.2f}. Pole {s[2]:+.2f} rad, spin {s[3]:+.2f}.",
    "a word for every number (old)": old_renderer,
}


def random_states(count: int, seed: int = 0) -> np.ndarray:
    env, rng, states = gym.make("CartPole-v1"), np.random.default_rng(seed), []
    for episode in range(200):
        obs, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            states.append(obs.copy())
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
            done = terminated or truncated
        if len(states) >= 4 * count:
            break
    return np.array(states)[rng.permutation(len(states))[:count]]


@torch.no_grad()
def preference_for_right(model, tokenizer, policy, system_prompt, texts) -> np.ndarray:
    """log P(RIGHT) - log P(LEFT) of the next token after each chat-formatted prompt."""
    left, right = (tokenizer(a, add_special_tokens=False)["input_ids"][0] for a in ("LEFT", "RIGHT"))
    prefs = []
    for i in range(0, len(texts), 16):
        rows = [policy.prompt_ids(system_prompt, t) for t in texts[i:i + 16]]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), tokenizer.pad_token_id or 0)
        mask = torch.zeros_like(ids)
        for j, row in enumerate(rows):  # left padding: the next token is at the last column
            ids[j, width - len(row):], mask[j, width - len(row):] = torch.tensor(row), 1
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -1]
        prefs.append(logits[:, right] - logits[:, left])
    return torch.cat(prefs).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=160)
    args = parser.parse_args()
    torch.set_num_threads(2)
    policy = textgym.Policy.from_pretrained("smollm2-135m", mode="score")
    model, tokenizer = policy.model, policy.tokenizer
    _, info = textgym.make("textgym/CartPole-v1").reset(seed=0)
    states = random_states(args.states)
    turns_right, leans_right = states[:, 3] > 0, states[:, 2] > 0
    print(f"{len(states)} states from random play; untrained SmolLM2-135M")
    print(f"{'rendering':32s} {'corr(pref, turns R)':>20s} {'corr(pref, leans R)':>20s} "
          f"{'greedy follows spin':>20s} {'mean P(RIGHT)':>14s}")
    for name, render in RENDERINGS.items():
        pref = preference_for_right(model, tokenizer, policy, info["system_prompt"],
                                    [render(s) for s in states])
        follows = ((pref > 0) == turns_right).mean()
        print(f"{name:32s} {np.corrcoef(pref, turns_right)[0, 1]:+20.2f} "
              f"{np.corrcoef(pref, leans_right)[0, 1]:+20.2f} {follows:20.2f} "
              f"{(1 / (1 + np.exp(-pref))).mean():14.3f}")
    print(f"for scale: example rendering {CartPoleText()(states[0])!r}")


if __name__ == "__main__":
    main()
