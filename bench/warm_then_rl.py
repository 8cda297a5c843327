"""A probe of RL settings on a score-mode env: an optional warm start, then RL updates, with the greedy
result on the same held-out episodes before the first update and every few updates after.

One process, one run. The warm start imitates one of the env's reference players (``--player``,
``--sft-episodes``, ``--sft-epochs``; ``--sft-episodes 0``: none) and can be saved (``--save``) and
started from again (``--init``), so that several RL settings start from the same policy. RL takes the
algorithm's config as JSON (``--config``, TrainConfig's and the algorithm's fields, ``"algorithm"``
picking it); the policy acts and updates in bf16 with the score memo on unless ``--policy`` says
otherwise. Every line of the log (``--out``, JSON Lines) is one event: the warm start's losses, a
greedy evaluation (``"eval"``: the held-out episodes from the trainer's ``eval_seed``, the same at
every point), an update's metrics.

Usage:
    OMP_NUM_THREADS=1 python bench/warm_then_rl.py --env textgym/TicTacToe-v0 --player optimal \\
        --sft-episodes 800 --sft-epochs 6 --save runs/ttt-warm --updates 0 --out ttt-warm.jsonl
    OMP_NUM_THREADS=1 python bench/warm_then_rl.py --init runs/ttt-warm --minutes 45 --eval-every 4 \\
        --config '{"algorithm": "reinforce", "baseline": "state", "branch_turns": 5, "importance_floor": 1.0,
                   "clip_eps_high": 4.0, "epochs": 2, "lr": 5e-4, "episodes_per_update": 64, "num_envs": 32}' \\
        --out ttt-tree.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

import textgym
from textgym.trainers import SFTConfig, make_trainer
from textgym.trainers.engine.sft import player_demonstrations

#: The metrics of an update that the log keeps.
KEPT = ("return_mean", "win_rate", "loss_rate", "kl", "entropy", "clip_frac", "importance_weight", "lr",
        "update_seconds", "rollout_seconds", "branched_states", "branches", "branch_decisions", "branch_seconds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="textgym/TicTacToe-v0")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--init", help="start from this saved policy or checkpoint (no warm start)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--player", default="optimal", help="the reference player the warm start imitates")
    parser.add_argument("--sft-episodes", type=int, default=0)
    parser.add_argument("--sft-epochs", type=int, default=3)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--save", help="save the policy after the warm start here (a checkpoint)")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=60.0, help="cap on the RL updates' wall time")
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--eval-episodes", type=int, default=400)
    parser.add_argument("--config", default="{}", help="the algorithm's config (JSON)")
    parser.add_argument("--policy", default="{}", help="policy settings over the bf16 defaults (JSON)")
    parser.add_argument("--env-kwargs", default="{}")
    parser.add_argument("--out", required=True, help="the log (JSON Lines, appended)")
    args = parser.parse_args()
    started = time.time()

    def say(**event) -> None:
        event["t"] = round(time.time() - started, 1)
        line = json.dumps(event)
        print(line, flush=True)
        with open(args.out, "a", encoding="utf-8") as log:
            log.write(line + "\n")

    say(args=vars(args), threads=torch.get_num_threads())
    settings = {"act_dtype": "bfloat16", "update_dtype": "bfloat16", "score_memo_bytes": 128 * 2**20,
                **json.loads(args.policy)}
    policy = (textgym.Policy.load(args.init, **settings) if args.init
              else textgym.Policy.from_pretrained(args.model, mode="score", **settings))
    config = {"seed": args.seed, "num_envs": 16, "lr": 1e-4, "lora_layers": 8, "gamma": 1.0, "kl_coef": 0.0,
              **json.loads(args.config)}
    algorithm = config.pop("algorithm", "grpo")
    if algorithm == "grpo":
        config.setdefault("group_size", 8)
    trainer = make_trainer(algorithm, policy, env=args.env, config=config, env_kwargs=json.loads(args.env_kwargs))
    if args.sft_episodes and not args.init:
        demos, _ = player_demonstrations(args.env, args.player, args.sft_episodes, seed=args.seed)
        losses = trainer.warm_start(demos, SFTConfig(lr=args.sft_lr, seed=args.seed), epochs=args.sft_epochs)
        say(warm=len(demos), losses=losses)
        if args.save:
            trainer.save_checkpoint(args.save)
    say(update=0, eval=trainer.evaluate(args.eval_episodes, num_envs=64))
    rl_started, update = time.time(), 0
    while update < args.updates and time.time() - rl_started < args.minutes * 60:
        metrics = trainer.train(updates=1)[-1]
        update += 1
        say(update=update, m={k: metrics.get(k) for k in KEPT})
        if update % args.eval_every == 0 or update == args.updates:
            say(update=update, eval=trainer.evaluate(args.eval_episodes, num_envs=64))
    say(done=True, updates=update)


if __name__ == "__main__":
    main()
