"""How often the top-layer re-scoring's one-time check keeps the fast path, with a bf16 acting copy.

The first update of a run checks, once, that re-scoring the adapted top layers from the frozen
layers' records (``PolicyConfig.trunk_in_act_dtype``) reproduces the full float32 pass; if not,
every update of the run re-scores the whole model (~1.7x slower, docs/results.md "Frozen layers in
bf16"). This plays a checkpoint's sampled policy on CartPole, acting in bf16, cuts the decisions
into samples of 8 (what the check reads) and counts, per sample:

* ``acting-gap rule``: the log-prob test of the check before commit ca6b3d6, on the copy's bf16
  records: the top path's largest log-prob gap to the full pass no larger than the acting
  copy's largest gap (plus float noise);
* ``check``: the check's verdict now (``TopRescorer`` run afresh on the sample: records that the
  float32 model makes itself, compared to float noise).

Usage:
    python bench/trunk_check.py CHECKPOINT [--episodes 16] [--steps 20]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

import textgym
from textgym.policy.frozen_trunk import TopRescorer
from textgym.policy.rescoring import FLOAT_TOLERANCE
from textgym.rollout import collect, decisions_of


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a checkpoint of textgym/CartPole-v1 with a top-layer adapter")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20, help="decisions per episode at most")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    state = json.loads((args.checkpoint / "trainer_state.json").read_text())
    env_kwargs = {k: v for k, v in (state.get("env_kwargs") or {}).items() if k != "max_episode_steps"}
    policy = textgym.Policy.load(args.checkpoint, act_dtype="bfloat16", trunk_in_act_dtype=True)
    venv = textgym.make_vec("textgym/CartPole-v1", num_envs=args.episodes, **env_kwargs)
    decisions = decisions_of(collect(policy, venv, episodes=args.episodes, seed=args.seed,
                                     max_episode_steps=args.steps).episodes)
    with torch.no_grad():
        top = policy.evaluate(decisions)  # the top path, from the copy's bf16 records
        plain = [copy.copy(d) for d in decisions]
        for d in plain:
            d.trunk = None
        full = policy.evaluate(plain)
    acting_gap = (full.old_logprobs - full.logprobs).abs()[:, 0]
    top_gap = (top.logprobs - full.logprobs).abs()[:, 0]
    samples = range(0, len(decisions) - 7, 8)
    rule = sum(bool(top_gap[k:k + 8].max() <= acting_gap[k:k + 8].max() + FLOAT_TOLERANCE) for k in samples)
    kept = 0
    for k in samples:
        policy._top_rescorer = TopRescorer()  # a fresh run's first check
        with torch.no_grad():
            policy.evaluate(decisions[k:k + 8])
        kept += all(policy._top_rescorer._verdicts.values())
    print(f"{args.checkpoint}: {len(decisions)} decisions, {len(samples)} samples of 8")
    print(f"  mean |log-prob gap| to the full pass: acting copy {acting_gap.mean():.4f}, top path {top_gap.mean():.4f}")
    print(f"  acting-gap rule on the bf16 records: top path kept in {rule} of {len(samples)}")
    print(f"  check (float32 records):             top path kept in {kept} of {len(samples)}")


if __name__ == "__main__":
    main()
