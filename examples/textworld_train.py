"""Train an LLM agent on small generated TextWorld games; report the win rate before and after.

The agent plays ``textgym/TextWorld-v0``: every episode is one of ``--games`` small adventures made
offline by TextWorld's generator (cached under ``$TEXTGYM_HOME/textworld``). The policy scores the
game's admissible commands (``score`` mode), so every answer is a real command. Win rates are
measured greedily, each game played once, on the training games and on ``--test-games`` games it
never trained on, beside a random player (uniform over the admissible commands, same step limit).

Run (the default setting: one-room games whose quest needs one command, at most 3 commands per
game; about 9 minutes on 2 cores):
    python examples/textworld_train.py
Longer quests:
    python examples/textworld_train.py --world-size 1 --quest-length 2 --max-steps 4
Smoke test (random tiny model, seconds of training: 6 updates on 2 games, which it learns to win):
    python examples/textworld_train.py --quick
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import textgym
from textgym.envs.textworld import generate_game
from textgym.rollout import collect
from textgym.trainers import ALGORITHMS, make_trainer


def model_win_rate(policy, env_kwargs: dict, num_envs: int) -> float:
    """Greedy win rate, every game of the pool played once (seeds 0..games-1)."""
    games = env_kwargs["games"]
    venv = textgym.make_vec("textgym/TextWorld-v0", num_envs=min(num_envs, games), seed=0, **env_kwargs)
    rollout = collect(policy, venv, episodes=games, seed=0, greedy=True)
    venv.close()
    return float(np.mean([bool(ep.info.get("won")) for ep in rollout.episodes]))


def random_win_rate(env_kwargs: dict, repeats: int = 20, seed: int = 0) -> float:
    """Win rate of a player that sends a uniformly random admissible command each turn."""
    env = textgym.make("textgym/TextWorld-v0", **env_kwargs)
    rng = np.random.default_rng(seed)
    wins = []
    for _ in range(repeats):
        for game in range(env_kwargs["games"]):
            _, info = env.reset(seed=game)
            done = False
            while not done:
                command = info["valid_actions"][rng.integers(len(info["valid_actions"]))]
                _, _, terminated, truncated, info = env.step(command)
                done = terminated or truncated
            wins.append(info["won"])
    env.close()
    return float(np.mean(wins))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="model name or folder (textgym.models.load)")
    parser.add_argument("--algorithm", default="reinforce", choices=ALGORITHMS)
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--episodes-per-update", type=int, default=16)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--normalization", default="token", choices=["sum", "token", "word"],
                        help="how a command's token log-probs become its score (textgym.Policy)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sampling temperature while training (greedy evaluation ignores it)")
    parser.add_argument("--lora-layers", type=int, default=8, help="adapt only the top N transformer layers")
    parser.add_argument("--gamma", type=float, default=0.9, help="discount: a quicker win is worth more")
    parser.add_argument("--entropy-coef", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--games", type=int, default=32, help="training games (game seeds 0..games-1)")
    parser.add_argument("--test-games", type=int, default=32, help="held-out games (game seeds 1000..)")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--nb-objects", type=int, default=3)
    parser.add_argument("--quest-length", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=3, help="commands per episode")
    parser.add_argument("--progress-reward", type=float, default=0.5,
                        help="weight of TextWorld's progress signal in the training reward (win rates "
                             "are measured by the game's own win flag)")
    parser.add_argument("--out-dir", default=None,
                        help="metrics.jsonl, checkpoints and results.json (before/after win rates) go here")
    parser.add_argument("--quick", action="store_true",
                        help="tiny random model, 6 updates of 8 episodes (lr 5e-3), 2 games")
    args = parser.parse_args()
    if args.quick:
        args.model, args.updates, args.games, args.test_games = "tiny", 6, 2, 2
        args.episodes_per_update, args.num_envs, args.lr = 8, 2, 5e-3

    if "textgym/TextWorld-v0" not in gym.registry:  # until textgym registers it on import
        from textgym.envs.textworld import register_envs

        register_envs()

    # score mode ranks the admissible commands itself: listing them in the prompt would only cost tokens
    game = dict(world_size=args.world_size, nb_objects=args.nb_objects, quest_length=args.quest_length,
                max_episode_steps=args.max_steps, list_commands=False)
    train_games = dict(game, games=args.games, first_game=0)
    test_games = dict(game, games=args.test_games, first_game=1000)

    started = time.time()
    print(f"generating/loading {args.games} + {args.test_games} games ...", flush=True)
    for kwargs in (train_games, test_games):   # make every game once, up front (cached on disk)
        for seed in range(kwargs["first_game"], kwargs["first_game"] + kwargs["games"]):
            generate_game(seed, args.world_size, args.nb_objects, args.quest_length)
    print(f"games ready in {time.time() - started:.0f}s", flush=True)
    random_train, random_test = random_win_rate(train_games), random_win_rate(test_games)
    print(f"random player: win rate {random_train:.2f} on training games, {random_test:.2f} on held-out games")

    policy = textgym.Policy.from_pretrained(args.model, mode="score", seed=args.seed,
                                            normalization=args.normalization, temperature=args.temperature)
    before_train = model_win_rate(policy, train_games, args.num_envs)
    before_test = model_win_rate(policy, test_games, args.num_envs)
    print(f"before: win rate {before_train:.2f} on training games, {before_test:.2f} on held-out games",
          flush=True)

    trainer = make_trainer(args.algorithm, policy, env="textgym/TextWorld-v0", out_dir=args.out_dir,
                           env_kwargs=dict(train_games, progress_reward=args.progress_reward),
                           config={"num_envs": args.num_envs, "episodes_per_update": args.episodes_per_update,
                                   "lr": args.lr, "lora_layers": args.lora_layers, "gamma": args.gamma,
                                   "entropy_coef": args.entropy_coef, "seed": args.seed})
    train_started = time.time()

    def report(metrics: dict) -> None:
        print(f"update {metrics['update']:3d}  return {metrics['return_mean']:+.2f}  "
              f"length {metrics['length_mean']:.2f}  loss {metrics.get('loss', float('nan')):+.3f}  "
              f"entropy {metrics.get('entropy', float('nan')):.2f}  "
              f"{metrics.get('decisions_per_s', 0):.1f} decisions/s", flush=True)

    trainer.train(updates=args.updates, callback=report)
    train_seconds = time.time() - train_started

    after_train = model_win_rate(policy, train_games, args.num_envs)
    after_test = model_win_rate(policy, test_games, args.num_envs)
    print(f"after:  win rate {after_train:.2f} on training games, {after_test:.2f} on held-out games")
    print(f"win rate on training games {before_train:.2f} -> {after_train:.2f}, "
          f"held-out {before_test:.2f} -> {after_test:.2f} (random {random_train:.2f} / {random_test:.2f}); "
          f"{trainer.episodes_seen} training episodes in {train_seconds / 60:.1f} min, "
          f"{(time.time() - started) / 60:.1f} min in all", flush=True)
    if args.out_dir:
        results = {"args": vars(args), "random": {"train": random_train, "test": random_test},
                   "before": {"train": before_train, "test": before_test},
                   "after": {"train": after_train, "test": after_test},
                   "training_episodes": trainer.episodes_seen, "training_seconds": round(train_seconds, 1)}
        Path(args.out_dir, "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
