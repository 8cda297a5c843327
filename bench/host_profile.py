"""Where the time of a vector step and of an update goes: a wall-clock breakdown by phase, and
torch.profiler's view of one vector step.

A vector step is one iteration of :func:`textgym.rollout.play`: every sub-env's pending request,
one ``policy.act`` call, every answer played in its env. Score mode, greedy, CartPole. Each phase
is timed by wrapping the functions that do it (exclusive times: a phase inside another is not
counted twice), so the same script measures any version of the code that has those functions:

- env physics: the Gymnasium env's own ``step`` / ``reset``
- rendering: the observation turned into text (``TextObservation.observation``)
- parse: the answer parsed into an action (``ParseAction._parse``)
- env wrappers: the rest of the text env's step (wrappers, info records, the rollout's ``Step``)
- chat template: the prompt text rendered (``ChatPrompts.render``)
- tokenization: the tokenizer's calls
- candidates: token ids and tries of the valid actions
- forward: the model's forward passes (synchronized on a GPU, so its time lands here)
- scoring: the candidates' log-probs and scores from the logits
- sampling: the choice of a candidate
- act bookkeeping: the rest of ``policy.act`` (prompt batching, ``Decision`` records)
- rollout bookkeeping: the rest of the loop (requests, episode records)

The update (REINFORCE on 64 envs' episodes) is split into the re-scoring forward (with grad), the
backward pass, the optimizer step, re-scoring's host work and the rest (losses, metrics).

On a CPU, with the tiny model, this isolates the host side: a GPU runs the forward much faster,
the rest stays.

Usage:
    OMP_NUM_THREADS=1 python bench/host_profile.py                      # 64 envs, tiny model, CPU
    python bench/host_profile.py --device cuda --model smollm2-135m --envs 64 256 1024
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

import textgym
from textgym.policy import Policy
from textgym.rollout import collect

ENV_ID = "textgym/CartPole-v1"


class PhaseClock:
    """Exclusive wall-clock seconds per phase: a wrapped call's time minus its wrapped callees'."""

    def __init__(self, synchronize: Callable[[], None] | None = None):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[float]] = []  # per open call: [time spent in wrapped callees]
        self._undo: list[Callable[[], None]] = []
        self.synchronize = synchronize

    def wrap(self, owner: object, name: str, phase: str, sync: bool = False) -> None:
        """Time ``owner.name`` (a class's method, a module's function or an object's attribute)
        as ``phase``; absent names are skipped (another version of the code)."""
        own = owner.__dict__ if isinstance(owner, type) else {}
        original = own.get(name, getattr(owner, name, None))
        if original is None:
            return
        inherited = isinstance(owner, type) and name not in own
        function = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
        clock = self

        @functools.wraps(function)
        def timed(*args, **kwargs):
            clock._stack.append([0.0])
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                if sync and clock.synchronize is not None:
                    clock.synchronize()
                elapsed = time.perf_counter() - start
                inner = clock._stack.pop()[0]
                clock.seconds[phase] += elapsed - inner
                clock.calls[phase] += 1
                if clock._stack:
                    clock._stack[-1][0] += elapsed

        replacement = type(original)(timed) if isinstance(original, (staticmethod, classmethod)) else timed
        setattr(owner, name, replacement)
        self._undo.append(lambda: delattr(owner, name) if inherited else setattr(owner, name, original))

    def count_collections(self) -> None:
        """Time Python's cyclic garbage collector as its own phase (it runs inside whatever call
        allocated the object that crossed its threshold)."""
        started: list[float] = []

        def callback(event: str, info: dict) -> None:
            if event == "start":
                self._stack.append([0.0])
                started.append(time.perf_counter())
                return
            elapsed = time.perf_counter() - started.pop()
            self.seconds["garbage collection"] += elapsed - self._stack.pop()[0]
            self.calls["garbage collection"] += 1
            if self._stack:
                self._stack[-1][0] += elapsed

        gc.callbacks.append(callback)
        self._undo.append(lambda: gc.callbacks.remove(callback))

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def instrument(clock: PhaseClock, policy: Policy, venv) -> None:
    """Wrap the functions of every phase (see the module's doc)."""
    import textgym.policy.policy as policy_module
    import textgym.policy.prompts as prompts_module
    import textgym.policy.sampling as sampling_module
    import textgym.policy.scoring as scoring_module
    import textgym.rollout as rollout_module
    from textgym.wrappers.parse_action import ParseAction
    from textgym.wrappers.text_observation import TextObservation

    env_class = type(venv.envs[0].unwrapped)
    clock.wrap(env_class, "step", "env physics")
    clock.wrap(env_class, "reset", "env physics")
    clock.wrap(TextObservation, "observation", "rendering")
    clock.wrap(ParseAction, "_parse", "parse")
    clock.wrap(rollout_module.EnvSlot, "answer", "env wrappers")
    clock.wrap(rollout_module.EnvSlot, "start", "env wrappers")
    clock.wrap(prompts_module.ChatPrompts, "render", "chat template")
    clock.wrap(type(policy.tokenizer), "__call__", "tokenization")
    for name in ("candidate_set", "candidate_sets"):
        clock.wrap(scoring_module.CandidateTokens, name, "candidates")
    for name in ("__init__", "ancestry"):
        clock.wrap(scoring_module.CandidateTrie, name, "candidates")
    clock.wrap(policy.model, "forward", "forward", sync=True)
    for name in ("score_candidates", "score_points", "candidate_scores", "score_batch"):
        clock.wrap(scoring_module, name, "scoring")
        clock.wrap(policy_module, name, "scoring")
    for name in ("sample_candidate", "sample_candidates"):
        clock.wrap(sampling_module, name, "sampling")
        clock.wrap(policy_module, name, "sampling")
    clock.wrap(policy_module.Policy, "act", "act bookkeeping")
    clock.wrap(rollout_module, "play", "rollout bookkeeping")
    clock.count_collections()


ROLLOUT_PHASES = ("env physics", "rendering", "parse", "env wrappers", "chat template", "tokenization",
                  "candidates", "forward", "scoring", "sampling", "act bookkeeping", "rollout bookkeeping",
                  "garbage collection")


def print_breakdown(title: str, clock: PhaseClock, phases: tuple[str, ...], total: float, steps: int,
                    decisions: int, unit: str) -> dict[str, float]:
    print(f"\n{title}: {total * 1000 / steps:.1f} ms per {unit}, {decisions / total:,.0f} decisions/s")
    print(f"  {'phase':<22} {'ms/' + unit:>10} {'share':>7} {'us/decision':>12}")
    accounted = 0.0
    rows = {}
    for phase in phases:
        seconds = clock.seconds.get(phase, 0.0)
        accounted += seconds
        rows[phase] = seconds
        print(f"  {phase:<22} {seconds * 1000 / steps:>10.2f} {seconds / total:>7.1%} "
              f"{seconds * 1e6 / decisions:>12.1f}")
    rest = total - accounted
    print(f"  {'(outside the phases)':<22} {rest * 1000 / steps:>10.2f} {rest / total:>7.1%} "
          f"{rest * 1e6 / decisions:>12.1f}")
    return rows


def rollout_breakdown(policy: Policy, envs: int, steps: int, seed: int, synchronize) -> None:
    venv = textgym.make_vec(ENV_ID, num_envs=envs, seed=seed)
    collect(policy, venv, steps=2 * envs, seed=seed + 1, greedy=True)  # warm-up: prefix cache, allocators
    clock = PhaseClock(synchronize)
    instrument(clock, policy, venv)
    try:
        started = time.perf_counter()
        rollout = collect(policy, venv, steps=steps * envs, seed=seed, greedy=True)
        total = time.perf_counter() - started
    finally:
        clock.restore()
    print_breakdown(f"vector step, {envs} envs (score, greedy, {ENV_ID})", clock, ROLLOUT_PHASES, total,
                    steps, rollout.stats["decisions"], "step")
    # The same steps, uninstrumented (the wrappers' own cost left out).
    started = time.perf_counter()
    plain = collect(policy, venv, steps=steps * envs, seed=seed, greedy=True)
    seconds = time.perf_counter() - started
    print(f"  uninstrumented: {seconds * 1000 / steps:.1f} ms per step, "
          f"{plain.stats['decisions'] / seconds:,.0f} decisions/s")


def profiler_table(policy: Policy, envs: int, seed: int, rows: int) -> None:
    """torch.profiler over a few vector steps: the operators that cost the most host time."""
    from torch.profiler import ProfilerActivity, profile

    venv = textgym.make_vec(ENV_ID, num_envs=envs, seed=seed)
    collect(policy, venv, steps=envs, seed=seed + 1, greedy=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if policy.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        collect(policy, venv, steps=3 * envs, seed=seed, greedy=True)
    sort = "self_cuda_time_total" if policy.device.type == "cuda" else "self_cpu_time_total"
    print(f"\ntorch.profiler, 3 vector steps at {envs} envs (sorted by {sort}):")
    print(prof.key_averages().table(sort_by=sort, row_limit=rows))


UPDATE_PHASES = ("re-scoring forward", "backward", "optimizer step", "re-scoring host", "update bookkeeping",
                 "garbage collection")


def update_breakdown(policy: Policy, envs: int, seed: int, synchronize) -> None:
    from textgym.trainers import make_trainer

    trainer = make_trainer("reinforce", policy, env=ENV_ID,
                           config={"num_envs": envs, "episodes_per_update": envs, "seed": seed})
    rollout = trainer.collect()
    trainer.update(rollout.episodes, rollout.stats)  # warm-up: optimizer state, allocators
    rollout = trainer.collect()
    decisions = rollout.stats["decisions"]
    clock = PhaseClock(synchronize)
    clock.wrap(policy.model, "forward", "re-scoring forward", sync=True)
    clock.wrap(torch.Tensor, "backward", "backward", sync=True)
    clock.wrap(type(trainer.optimizer), "step", "optimizer step", sync=True)
    clock.wrap(Policy, "evaluate", "re-scoring host")
    clock.wrap(type(trainer), "update", "update bookkeeping")
    clock.count_collections()
    try:
        started = time.perf_counter()
        trainer.update(rollout.episodes, rollout.stats)
        total = time.perf_counter() - started
    finally:
        clock.restore()
    print(f"\nthe rollout before it: {decisions / rollout.stats['seconds']:,.0f} decisions/s (sampled)")
    print_breakdown(f"one update, REINFORCE, {decisions} decisions of {envs} envs", clock, UPDATE_PHASES,
                    total, 1, decisions, "update")


@contextlib.contextmanager
def nothing() -> Iterator[None]:
    yield


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="model name (default: the tiny random model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--envs", type=int, nargs="+", default=[64], help="sub-envs side by side")
    parser.add_argument("--steps", type=int, default=20, help="vector steps timed per size")
    parser.add_argument("--profiler-rows", type=int, default=15, help="rows of torch.profiler's table (0: none)")
    parser.add_argument("--no-update", action="store_true", help="skip the update's breakdown")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    policy = Policy.from_pretrained(args.model, mode="score", device=args.device)
    synchronize = torch.cuda.synchronize if policy.device.type == "cuda" else None
    print(f"model {args.model} on {policy.device}, acting in {policy.act_precision}, "
          f"{torch.get_num_threads()} torch threads, torch {torch.__version__}")
    for envs in args.envs:
        rollout_breakdown(policy, envs, args.steps, args.seed, synchronize)
    if args.profiler_rows:
        profiler_table(policy, args.envs[0], args.seed, args.profiler_rows)
    if not args.no_update:
        update_breakdown(policy, args.envs[0], args.seed, synchronize)


if __name__ == "__main__":
    main()
