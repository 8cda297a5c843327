"""The phases of bench/throughput.py for two checkouts of textgym, interleaved, and their ratios.

Two versions of a package cannot share one process, so each checkout gets a worker process that
loads the model once and then times one phase at a time when asked. The phases alternate
between the two workers (base, new, base, new, ...), many short times each, and every ratio is
taken between neighbours: on a shared machine whose load changes by the minute, both sides of a
ratio see the same load. The median ratio per phase is reported.

Phases (16 envs of CartPole, as bench/throughput.py): score mode; score mode in conversation
mode (history full); generate mode, 8 new tokens; re-scoring (forward and backward of 32
score-mode decisions; the full model trains, no adapter, so that both versions do the same).

Usage:
    git worktree add --detach /tmp/base <commit before the change>
    OMP_NUM_THREADS=1 python bench/compare_checkouts.py --base /tmp/base --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

WORKER = r'''
import sys, time
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(int(sys.argv[3]))
import textgym
from textgym import models
from textgym.policy import Policy, PolicyConfig
from textgym.rollout import collect, decisions_of

name, envs = sys.argv[2], 16
model, tokenizer = models.load(name)


def policy(mode, **settings):
    return Policy(model, tokenizer, config=PolicyConfig.for_model(name, mode=mode, seed=0, **settings), name=name)


def rollout(p, decisions, seed=0):
    venv = textgym.make_vec("textgym/CartPole-v1", num_envs=envs, seed=seed)
    collect(p, venv, steps=envs, seed=seed + 1000)  # warm-up: the prefix cache
    start = time.perf_counter()
    result = collect(p, venv, steps=decisions, seed=seed)
    return time.perf_counter() - start, result


score = policy("score")
kept = decisions_of(rollout(score, 32)[1].episodes) or None
phases = {
    "score (16 envs)": lambda: rollout(score, 64)[0],
    "score, conversation (16 envs, history full)": lambda: rollout(policy("score", history="full"), 64)[0],
    "generate (16 envs, 8 new tokens)": lambda: rollout(policy("generate", max_new_tokens=8), 32)[0],
}


def rescore():
    _, result = rollout(score, 32, seed=1)
    batch = decisions_of(result.episodes + result.unfinished)[:32]
    start = time.perf_counter()
    ev = score.evaluate(batch)
    ev.logprobs[ev.mask].sum().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


phases["re-scoring (32 decisions, forward + backward)"] = rescore
print("\t".join(phases), flush=True)
for line in sys.stdin:
    print(phases[line.strip()](), flush=True)
'''


class Worker:
    """A process of one checkout that times a phase when asked."""

    def __init__(self, checkout: Path, model: str, threads: int):
        self.process = subprocess.Popen([sys.executable, "-c", WORKER, str(checkout), model, str(threads)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=checkout)
        self.phases = self.process.stdout.readline().strip().split("\t")

    def time(self, phase: str) -> float:
        self.process.stdin.write(phase + "\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--new", type=Path, default=HERE, help="the checkout measured (default: this one)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each worker")
    parser.add_argument("--rounds", type=int, default=5, help="base/new pairs per phase")
    args = parser.parse_args(argv)
    base, new = Worker(args.base, args.model, args.threads), Worker(args.new, args.model, args.threads)
    started = time.perf_counter()
    try:
        ratios: dict[str, list[float]] = {phase: [] for phase in base.phases if phase in new.phases}
        for _ in range(args.rounds):
            for phase, values in ratios.items():
                first_base = values and len(values) % 2  # alternate which side goes first
                if first_base:
                    b, n = base.time(phase), new.time(phase)
                else:
                    n, b = new.time(phase), base.time(phase)
                values.append(b / n)  # seconds: base over new is new's speed-up
            print(" ".join(f"{v[-1]:.2f}" for v in ratios.values()), flush=True)
    finally:
        base.close()
        new.close()
    print(f"\nnew / base speed ({args.model}, {args.threads} torch thread(s) each, median of {args.rounds} "
          f"interleaved pairs, {time.perf_counter() - started:.0f} s):")
    for phase, values in ratios.items():
        print(f"  {phase:<48} {statistics.median(values):5.2f}x  ({', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
