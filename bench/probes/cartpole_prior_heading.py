"""Variants of the CartPole rendering: tokens per observation and the untrained model's prior.

For each wording of the same 160 random-play states: the mean tokens of an observation, the
correlation of the untrained SmolLM2-135M's preference for RIGHT with "the pole turns right"
(spin > 0) and with "the pole heads right" (angle + 0.3 x spin > 0, the heading word's quantity),
how often its greedy choice follows the heading, and its mean P(RIGHT).

    python bench/probes/cartpole_prior_heading.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

import textgym
from cartpole_prior import random_states, preference_for_right, side
from textgym.envs.classic import CartPoleText


def head(s, k=0.3):
    return s[2] + k * s[3]


R = {
 "now": CartPoleText(),
 "int units (x100)": lambda s: f"Pole {round(100*s[2]):+d}, spin {round(100*s[3]):+d} turning {side(s[3])}; cart {round(100*s[0]):+d}, velocity {round(100*s[1]):+d}.",
 "heading word, same numbers": lambda s: f"Pole {s[2]:+.2f} rad, spin {s[3]:+.2f}, falling {side(head(s))}; cart at {s[0]:+.2f}, velocity {s[1]:+.2f}.",
 "heading 'turning'": lambda s: f"Pole {s[2]:+.2f} rad, spin {s[3]:+.2f} turning {side(head(s))}; cart at {s[0]:+.2f}, velocity {s[1]:+.2f}.",
 "heading first, int": lambda s: f"Pole falling {side(head(s))}: angle {round(100*s[2]):+d}, spin {round(100*s[3]):+d}; cart {round(100*s[0]):+d}, velocity {round(100*s[1]):+d}.",
 "heading int": lambda s: f"Pole {round(100*s[2]):+d}, spin {round(100*s[3]):+d}, falling {side(head(s))}; cart {round(100*s[0]):+d}, velocity {round(100*s[1]):+d}.",
 "word only": lambda s: f"The pole is falling {side(head(s))}.",
}
torch.set_num_threads(1)
policy = textgym.Policy.from_pretrained("smollm2-135m", mode="score")
model, tok = policy.model, policy.tokenizer
_, info = textgym.make("textgym/CartPole-v1").reset(seed=0)
states = random_states(160)
turns_right = states[:, 3] > 0
heading_right = (states[:, 2] + 0.3 * states[:, 3]) > 0
print(f"{'rendering':30s} {'tokens':>6s} {'corr turns R':>12s} {'corr heading R':>14s} {'greedy=heading':>14s} {'mean P(R)':>9s}")
for name, r in R.items():
    texts = [r(s) for s in states]
    ntok = np.mean([len(tok(t)["input_ids"]) for t in texts])
    pref = preference_for_right(model, tok, policy, info["system_prompt"], texts)
    print(f"{name:30s} {ntok:6.1f} {np.corrcoef(pref, turns_right)[0,1]:+12.2f} {np.corrcoef(pref, heading_right)[0,1]:+14.2f} {((pref>0)==heading_right).mean():14.2f} {(1/(1+np.exp(-pref))).mean():9.3f}", flush=True)
print("example", R["heading int"](states[0]))
