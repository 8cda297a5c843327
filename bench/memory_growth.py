"""RSS growth of a long tiny-model run (issue #34 item 15): the tiny model on the Bandit, 8 episodes
per update, 1 thread; prints RSS after 100 updates and after N more.

    python bench/memory_growth.py RUN_DIR 600             # as the trainer is
    python bench/memory_growth.py RUN_DIR 600 unbounded   # baseline: the alarm history unbounded
"""

import gc
import sys
import time

import torch

import textgym
from textgym.policy import Policy
from textgym.trainers import make_trainer
from textgym.trainers.reporting import alarms


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def main() -> None:
    out, more = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:
        alarms.bounded = lambda history, keep=0: list(history)
    torch.set_num_threads(1)
    policy = Policy(*textgym.models.load("tiny"), mode="score", seed=0)
    config = {"num_envs": 8, "episodes_per_update": 8, "minibatch_size": 8, "checkpoint_every": 0}
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=config, out_dir=out)
    trainer.train(updates=100)
    gc.collect()
    before, started = rss_mb(), time.time()
    trainer.train(updates=more)
    gc.collect()
    after = rss_mb()
    print(f"RSS after 100 updates {before:.0f} MB, after {100 + more} {after:.0f} MB, "
          f"growth {after - before:.1f} MB, {time.time() - started:.0f}s")


if __name__ == "__main__":
    main()
