"""Which answer wording and temperature make the *untrained* model answer validly in generate mode?

For a few envs and a few random-play states each, computes exactly (no sampling) the probability
that SmolLM2-135M, with the answer prefilled as ``{"action": "``, writes a valid action name and
then a closing quote: ``sum over valid names a of P_T(a | prompt + prefill) * P_T(a token that
starts with '"' | ... a)``, where ``P_T`` is the softmax of the logits divided by the temperature
``T`` (what generate mode samples from). Capitalisation variants and other closings count as
invalid here, so this is a lower bound of the valid rate.

Wordings (the sentence that ends the system prompt):

* ``word``: the ``word`` answer format, ``Answer with one word: cat or dog.`` (the prefill then
  contradicts the prompt);
* ``json``: the ``json`` answer format, ``Answer with JSON: {"action": "cat"} or {"action": "dog"}.``;
* ``json-like``: ``Answer with JSON like {"action": "cat"}, where the action is cat or dog.``

    python bench/probes/generate_wording.py --out bench/results/probes/generate/wording.log
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

import numpy as np
import torch

import textgym
from textgym import models
from textgym.baselines import random_policy
from textgym.policy import Policy
from textgym.registry import resolve_id
from textgym.wrappers.answer_format import ANSWER_FORMATS

PREFILL = ANSWER_FORMATS["json"].prefill
TEMPERATURES = (1.0, 0.7, 0.5, 0.3)


def json_like(names: list[str]) -> str:
    alternatives = ", ".join(names[:-1]) + " or " + names[-1]
    return f"Answer with JSON like {json.dumps({'action': names[0]})}, where the action is {alternatives}."


WORDINGS = {
    "word": lambda names: ANSWER_FORMATS["word"].instructions(names),
    "json": lambda names: ANSWER_FORMATS["json"].instructions(names),
    "json-like": json_like,
}


def random_play_states(env_id: str, instructions: str, count: int) -> list[tuple[str, str, list[str]]]:
    """``(system prompt, observation, valid actions)`` of ``count`` states of random play."""
    env = textgym.make(env_id, instructions=instructions)
    states, episode = [], 0
    while len(states) < count:
        obs, info = env.reset(seed=episode)
        system, player, done = info["system_prompt"], random_policy(env, seed=episode), False
        while not done and len(states) < count:
            states.append((system, obs, list(info["valid_actions"])))
            obs, _, terminated, truncated, info = env.step(player(info))
            done = terminated or truncated
        episode += 1
    return states


@torch.no_grad()
def valid_mass(policy: Policy, closers: torch.Tensor, system: str, observation: str,
               actions: list[str]) -> dict[float, float]:
    """P_T(valid name, then a closing quote) per temperature, for one state."""
    tokenizer, model = policy.tokenizer, policy.model
    prompt = policy.prompt_ids(system, observation) + tokenizer(PREFILL, add_special_tokens=False)["input_ids"]
    names = [tokenizer(a, add_special_tokens=False)["input_ids"] for a in actions]
    width = max(map(len, names)) + 1
    ids = torch.tensor([prompt + n + [tokenizer.pad_token_id] * (width - len(n)) for n in names])
    logits = model(ids).logits[:, len(prompt) - 1: len(prompt) - 1 + width].float()
    masses = {}
    for t in TEMPERATURES:
        logp = torch.log_softmax(logits / t, dim=-1)
        total = 0.0
        for i, name in enumerate(names):
            name_logp = sum(logp[i, j, token] for j, token in enumerate(name))
            total += float(torch.exp(name_logp + torch.logsumexp(logp[i, len(name), closers], 0)))
        masses[t] = total
    return masses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="bandit,cartpole,blackjack,taxi")
    parser.add_argument("--states", type=int, default=16, help="random-play states per env")
    parser.add_argument("--model", default=models.DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="also write the lines here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = models.load(args.model)
    policy = Policy(model, tokenizer, mode="generate")
    closers = torch.tensor([i for i in range(len(tokenizer)) if tokenizer.decode([i]).startswith('"')])
    lines = [(f"valid mass of the untrained {args.model}, prefill {PREFILL!r}, {args.states} random-play "
              f"states per env; columns: temperature")]
    print(lines[0], flush=True)
    for name in args.envs.split(","):
        env_id = resolve_id(name)
        names = list(textgym.make(env_id).get_wrapper_attr("action_names"))
        for wording, sentence in WORDINGS.items():
            start = time.perf_counter()
            per_state = [valid_mass(policy, closers, *state)
                         for state in random_play_states(env_id, sentence(names), args.states)]
            means = "  ".join(f"T {t}: {np.mean([m[t] for m in per_state]):.2f}" for t in TEMPERATURES)
            lines.append(f"{env_id:24s} {wording:10s} {means}   ({time.perf_counter() - start:.0f} s)")
            print(lines[-1], flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
