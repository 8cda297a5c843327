"""Can the model learn the state -> action mapping at all, given clean labels?

Fine-tunes a fresh LoRA adapter (as the trainers make it) with supervised steps on labelled
observations and prints greedy score-mode accuracy on train and held-out observations after each
epoch. If this is slow, RL (whose per-decision signal is much noisier) cannot be fast either.

Tasks:
    cartpole   256 observations from random play, label: push toward the pole's rotation
    blackjack  every hand without a usable ace, label: HIT up to 11 (``--hit-up-to``), else STICK

``--rendering old`` renders Blackjack as textgym did until 2026-11-23 (``Your total 14. Dealer
shows 10.``) instead of the current renderer (which spells out the chance that a hit busts).

    python bench/probes/supervised_separability.py cartpole --lr 1e-3 --lora-layers 8 --epochs 3
    python bench/probes/supervised_separability.py blackjack --lora-layers 8 --rendering old
"""

import argparse
import random
import time

import gymnasium as gym
import torch

import textgym
from textgym.envs.classic import BlackjackText, CartPoleText
from textgym.trainers import make_trainer
from textgym.trainers.engine.sft import Demonstration, demonstration_decisions, sft_on_decisions


def old_blackjack_text(obs) -> str:
    """textgym's Blackjack renderer until 2026-11-23."""
    total, dealer, usable_ace = obs
    return (f"Your total {total}{' with a usable ace' if usable_ace else ''}. "
            f"Dealer shows {'an ace' if dealer == 1 else dealer}.")


def labelled(task: str, rendering: str = "textgym", hit_up_to: int = 11) -> tuple[str, list[str], list[tuple[str, str]]]:
    rng = random.Random(0)
    if task == "cartpole":
        env, render, rows = gym.make("CartPole-v1"), CartPoleText(), []
        state, _ = env.reset(seed=0)
        while len(rows) < 256:
            rows.append((render(state), "RIGHT" if state[3] > 0 else "LEFT"))
            state, _, terminated, truncated, _ = env.step(rng.randrange(2))
            if terminated or truncated:
                state, _ = env.reset(seed=len(rows))
        return "textgym/CartPole-v1", ["LEFT", "RIGHT"], rows
    render = BlackjackText() if rendering == "textgym" else old_blackjack_text
    rows = [(render((total, dealer, 0)), "HIT" if total <= hit_up_to else "STICK")
            for total in range(4, 22) for dealer in range(1, 11)]
    return "textgym/Blackjack-v1", ["STICK", "HIT"], rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["cartpole", "blackjack"])
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lora-layers", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rendering", choices=["textgym", "old"], default="textgym",
                        help="blackjack: the current renderer or the one before 2026-11-23")
    parser.add_argument("--hit-up-to", type=int, default=11, help="blackjack: label HIT up to this total")
    args = parser.parse_args()

    env_id, actions, rows = labelled(args.task, args.rendering, args.hit_up_to)
    random.Random(0).shuffle(rows)
    train, test = rows[: len(rows) * 3 // 4], rows[len(rows) * 3 // 4:]
    policy = textgym.Policy.from_pretrained(args.model, mode="score", seed=0)
    trainer = make_trainer("reinforce", policy, env=env_id, config={"lora_layers": args.lora_layers, "num_envs": 2})
    system_prompt = trainer.venv.envs[0].get_wrapper_attr("system_prompt")

    def accuracy(part: list[tuple[str, str]]) -> float:
        with torch.no_grad():
            decisions = policy.act([obs for obs, _ in part], [system_prompt] * len(part),
                                   [actions] * len(part), greedy=True)
        return sum(d.text == label for d, (_, label) in zip(decisions, part)) / len(part)

    decisions = demonstration_decisions(policy, [Demonstration(obs, label) for obs, label in train], system_prompt)
    optimizer = torch.optim.AdamW(trainer.trainable_parameters(), lr=args.lr)
    majority = max(sum(label == a for _, label in rows) for a in actions) / len(rows)
    print(f"{args.task}: e.g. {train[0]}; majority label {majority:.2f}")
    print(f"epoch 0: train {accuracy(train):.3f}  held-out {accuracy(test):.3f}", flush=True)
    started = time.monotonic()
    for epoch in range(1, args.epochs + 1):
        loss = sft_on_decisions(policy, decisions, optimizer, batch_size=16, epochs=1, seed=epoch)
        policy.clear_cache()  # the weights changed: drop the cached system-prompt KV
        print(f"epoch {epoch}: loss {loss:.3f}  train {accuracy(train):.3f}  held-out {accuracy(test):.3f}"
              f"  ({time.monotonic() - started:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
