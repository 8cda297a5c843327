"""Self-play on tic-tac-toe: one LLM policy plays both seats; win/draw/loss vs random and scripted.

Each update plays ``--games-per-update`` games in which the same policy answers for X and O
(``num_games`` at a time, one batched ``policy.act`` per turn), centres each seat's returns by a
per-role baseline (the first player wins more often whatever it does) and updates the policy
with the chosen trainer. After each update the policy plays greedily against a random and a
scripted opponent from both seats; the rates are printed and logged to ``--out-dir``.

Run (small setting):
    python examples/tictactoe_selfplay.py --updates 10
Smoke test (random tiny model):
    python examples/tictactoe_selfplay.py --quick
"""

from __future__ import annotations

import argparse
import time

import textgym
from textgym.selfplay import SelfPlay, SelfPlayConfig
from textgym.trainers import ALGORITHMS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--algorithm", default="reinforce", choices=ALGORITHMS)
    parser.add_argument("--game", default="tictactoe", choices=["tictactoe", "connect_four"])
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--games-per-update", type=int, default=16)
    parser.add_argument("--num-games", type=int, default=8, help="games played at once")
    parser.add_argument("--eval-games", type=int, default=40, help="per opponent, half from each seat")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--role-baseline", default="mean", choices=["mean", "ema", "none"])
    parser.add_argument("--out-dir", default=None)
    parser.add_argument("--quick", action="store_true", help="tiny random model, 1 update, few games")
    args = parser.parse_args()
    if args.quick:
        args.model, args.updates, args.games_per_update, args.num_games, args.eval_games = "tiny", 1, 4, 4, 4

    started = time.time()
    policy = textgym.Policy.from_pretrained(args.model, mode="score")
    run = SelfPlay(policy, args.algorithm,
                   SelfPlayConfig(game=args.game, num_games=args.num_games, games_per_update=args.games_per_update,
                                  eval_games=args.eval_games, role_baseline=args.role_baseline),
                   trainer_config={"lr": args.lr, "num_envs": 1}, out_dir=args.out_dir)
    before = run.evaluate()
    print(f"before: vs random win {before['vs_random/win_rate']:.2f} draw {before['vs_random/draw_rate']:.2f}, "
          f"vs scripted win {before['vs_scripted/win_rate']:.2f} draw {before['vs_scripted/draw_rate']:.2f}")
    history = run.train(updates=args.updates)   # evaluates after every update (eval_every=1)
    for m in history:
        line = (f"update {m['update']:3d}  self-play X win {m['first/win_rate']:.2f} "
                f"O win {m['second/win_rate']:.2f}  loss {m.get('loss', float('nan')):+.3f}")
        if "vs_random/win_rate" in m:
            line += (f"  vs random W/D/L {m['vs_random/win_rate']:.2f}/{m['vs_random/draw_rate']:.2f}/"
                     f"{m['vs_random/loss_rate']:.2f}  vs scripted W/D/L {m['vs_scripted/win_rate']:.2f}/"
                     f"{m['vs_scripted/draw_rate']:.2f}/{m['vs_scripted/loss_rate']:.2f}")
        print(line, flush=True)
    after = history[-1]                          # the last update is always evaluated
    print(f"vs random win rate {before['vs_random/win_rate']:.2f} -> {after['vs_random/win_rate']:.2f}, "
          f"vs scripted win+draw {before['vs_scripted/win_rate'] + before['vs_scripted/draw_rate']:.2f} -> "
          f"{after['vs_scripted/win_rate'] + after['vs_scripted/draw_rate']:.2f} ({time.time() - started:.0f}s)")


if __name__ == "__main__":
    main()
