"""Does the *untrained* model's STICK/HIT choice follow the hand? It depends on the wording.

Scores the two actions with SmolLM2-135M (``textgym.Policy`` in score mode, exactly as the
trainers do) on every Blackjack state (player total 4-21, dealer card 1-10, usable ace or not)
under several renderings and system prompts. For each it prints the correlation of the model's
preference ``log P(STICK) - log P(HIT)`` with the player's total, how often its greedy answer
agrees with "stick at 17 or more", and the mean P(STICK) at low (<= 11, hitting is always safe),
middle (12-16) and high (>= 17) totals.

Unlike CartPole, no wording tried gives the untrained model a preference that follows the hand
(``bench/results/probes/blackjack/prior.log``): P(STICK) is ~0.1 for a total of 6 and of 20
alike. What the current wording does give is *learnability*: ``supervised_separability.py``.

Same idea as ``cartpole_prior.py``: RL sharpens a preference the model already has far more
easily than it teaches a new one (``bench/results/probes/README.md``: with the old wording every
trainer went to "always STICK" and stayed there).

    python bench/probes/blackjack_prior.py
"""

import numpy as np
import torch

import textgym
from textgym.envs.classic import BlackjackText, hit_bust_chance
from supervised_separability import old_blackjack_text  # bench/probes/ is on sys.path when run

SYSTEM = ("Play blackjack: finish closer to 21 than the dealer without going over. HIT takes "
          "a card, {stick} stops.")


def card(dealer: int) -> str:
    return "an ace" if dealer == 1 else str(dealer)


def risk_words(s) -> str:
    chance = hit_bust_chance(s[0], bool(s[2]))
    risk = ("cannot bust you" if chance == 0 else "may bust you" if chance < 0.5
            else "will likely bust you")
    return f"Your total {s[0]}: a hit {risk}. Dealer shows {card(s[1])}."


RENDERERS = {
    "textgym (bust chance)": BlackjackText(),
    "old: total, dealer": old_blackjack_text,
    "points short of 21": lambda s: f"Your total {s[0]}, {21 - s[0]} short of 21. Dealer shows {card(s[1])}.",
    "bust chance %": lambda s: (f"Your total {s[0]}: a hit busts you with chance "
                                f"{hit_bust_chance(s[0], bool(s[2])):.0%}. Dealer shows {card(s[1])}."),
    "risk words": risk_words,
}
# name -> (renderer, stick action name): each wording with STICK, some also with STAND.
RENDERINGS = {name: (render, "STICK") for name, render in RENDERERS.items()}
RENDERINGS.update({f"{name}, STAND": (RENDERERS[name], "STAND")
                   for name in ("old: total, dealer", "bust chance %", "risk words")})

STATES = [(total, dealer, ace) for total in range(4, 22) for dealer in range(1, 11) for ace in (0, 1)
          if not (ace and total < 12)]


def p_stick(policy: textgym.Policy, render, stick: str) -> np.ndarray:
    """P(stick) under the policy's own candidate scoring, for every state."""
    texts = [render(s) for s in STATES]
    actions = [stick, "HIT"]
    out = []
    for i in range(0, len(texts), 32):
        chunk = texts[i:i + 32]
        decisions = policy.act(chunk, [SYSTEM.format(stick=stick)] * len(chunk), [actions] * len(chunk),
                               greedy=True)
        for d in decisions:
            p = float(np.exp(d.logprob))
            out.append(p if d.action_index == 0 else 1 - p)
    return np.array(out)


def main() -> None:
    torch.set_num_threads(2)
    policy = textgym.Policy.from_pretrained("smollm2-135m", mode="score")
    total = np.array([s[0] for s in STATES])
    stick17 = total >= 17
    low, mid, high = total <= 11, (total >= 12) & (total <= 16), total >= 17
    print(f"{len(STATES)} Blackjack states; untrained SmolLM2-135M, score mode")
    print(f"{'rendering':24s} {'corr(pref, total)':>18s} {'greedy = stick>=17':>19s} "
          f"{'P(STICK) <=11':>14s} {'12-16':>7s} {'>=17':>7s}")
    for name, (render, stick) in RENDERINGS.items():
        p = np.clip(p_stick(policy, render, stick), 1e-6, 1 - 1e-6)
        pref = np.log(p) - np.log1p(-p)
        agree = ((p > 0.5) == stick17).mean()
        print(f"{name:24s} {np.corrcoef(pref, total)[0, 1]:+18.2f} {agree:19.2f} "
              f"{p[low].mean():14.3f} {p[mid].mean():7.3f} {p[high].mean():7.3f}", flush=True)
    print(f"for scale: example rendering {BlackjackText()(STATES[100])!r}")


if __name__ == "__main__":
    main()
