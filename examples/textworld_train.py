"""Train an LLM agent on small generated TextWorld games; report the win rate before and after.

The agent plays ``textgym/TextWorld-v0``: every episode is one of ``--games`` small adventures made
offline by TextWorld's generator (cached under ``$TEXTGYM_HOME/textworld``). The policy scores the
game's admissible commands (``score`` mode), so every answer is a real command. Win rates are
measured greedily on the training games and on ``--test-games`` games it never trained on.

Run (small setting, a few minutes on 2 cores):
    python examples/textworld_train.py --updates 8
Smoke test (random tiny model, seconds of training):
    python examples/textworld_train.py --quick
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

import textgym
from textgym.envs.textworld import generate_game
from textgym.rollout import collect
from textgym.trainers import make_trainer


def win_rate(policy, env_kwargs: dict, episodes: int, seed: int, num_envs: int) -> tuple[float, float]:
    """Greedy win rate and mean return over ``episodes`` games."""
    venv = textgym.make_vec("textgym/TextWorld-v0", num_envs=num_envs, seed=seed, **env_kwargs)
    rollout = collect(policy, venv, episodes=episodes, seed=seed, greedy=True)
    wins = [bool(ep.info.get("won")) for ep in rollout.episodes]
    returns = [ep.info.get("episode", {}).get("return", ep.return_) for ep in rollout.episodes]
    venv.close()
    return sum(wins) / len(wins), sum(returns) / len(returns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="model name or folder (textgym.models.load)")
    parser.add_argument("--algorithm", default="reinforce", choices=["reinforce", "grpo", "ppo"])
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--episodes-per-update", type=int, default=16)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--games", type=int, default=8, help="training games (seeds 0..games-1)")
    parser.add_argument("--test-games", type=int, default=8, help="held-out games (seeds 1000..)")
    parser.add_argument("--eval-episodes", type=int, default=16)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--nb-objects", type=int, default=3)
    parser.add_argument("--quest-length", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=8, help="commands per episode")
    parser.add_argument("--progress-reward", type=float, default=0.5,
                        help="weight of TextWorld's progress signal in the training reward (win rates "
                             "are measured by the game's own win flag)")
    parser.add_argument("--out-dir", default=None, help="metrics.jsonl and checkpoints go here")
    parser.add_argument("--quick", action="store_true", help="tiny random model, 1 update, 2 games")
    args = parser.parse_args()
    if args.quick:
        args.model, args.updates, args.games, args.test_games = "tiny", 1, 2, 2
        args.episodes_per_update, args.eval_episodes, args.num_envs = 4, 4, 2

    if "textgym/TextWorld-v0" not in gym.registry:  # until textgym registers it on import
        from textgym.envs.textworld import register_envs

        register_envs()

    # score mode ranks the admissible commands itself: listing them in the prompt would only cost tokens
    game = dict(world_size=args.world_size, nb_objects=args.nb_objects, quest_length=args.quest_length,
                max_episode_steps=args.max_steps, list_commands=False)
    train_games = dict(game, games=args.games, first_game=0, progress_reward=args.progress_reward)
    test_games = dict(game, games=args.test_games, first_game=1000)

    started = time.time()
    print(f"generating/loading {args.games} + {args.test_games} games ...", flush=True)
    for kwargs in (train_games, test_games):   # make every game once, up front (cached on disk)
        for seed in range(kwargs["first_game"], kwargs["first_game"] + kwargs["games"]):
            generate_game(seed, args.world_size, args.nb_objects, args.quest_length)
    print(f"games ready in {time.time() - started:.0f}s", flush=True)

    policy = textgym.Policy.from_pretrained(args.model, mode="score")
    before_train = win_rate(policy, train_games, args.eval_episodes, seed=10_000, num_envs=args.num_envs)
    before_test = win_rate(policy, test_games, args.eval_episodes, seed=10_000, num_envs=args.num_envs)
    print(f"before: win rate {before_train[0]:.2f} on training games, {before_test[0]:.2f} on held-out games")

    trainer = make_trainer(args.algorithm, policy, env="textgym/TextWorld-v0", out_dir=args.out_dir,
                           env_kwargs=train_games,
                           config={"num_envs": args.num_envs, "episodes_per_update": args.episodes_per_update,
                                   "lr": args.lr})
    for metrics in trainer.train(updates=args.updates):
        print(f"update {metrics['update']:3d}  return {metrics['return_mean']:+.2f}  "
              f"length {metrics['length_mean']:.1f}  loss {metrics.get('loss', float('nan')):+.3f}  "
              f"{metrics.get('decisions_per_s', 0):.1f} decisions/s", flush=True)

    after_train = win_rate(policy, train_games, args.eval_episodes, seed=10_000, num_envs=args.num_envs)
    after_test = win_rate(policy, test_games, args.eval_episodes, seed=10_000, num_envs=args.num_envs)
    print(f"after:  win rate {after_train[0]:.2f} on training games, {after_test[0]:.2f} on held-out games")
    print(f"win rate on training games {before_train[0]:.2f} -> {after_train[0]:.2f}, "
          f"held-out {before_test[0]:.2f} -> {after_test[0]:.2f} ({time.time() - started:.0f}s)")


if __name__ == "__main__":
    main()
