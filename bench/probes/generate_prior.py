"""How often does the *untrained* model answer invalidly in generate mode, per built-in env?

For every built-in env, plays ``--decisions`` decisions (16 envs side by side, fixed seeds) with
SmolLM2-135M sampling free text, twice:

* **before**: the settings generate mode had before the answer formats: the env's ``word``
  answer format ("Answer with one word: LEFT or RIGHT."), the model registry's sampling defaults
  (temperature 1.0, top-p 1.0, 32 new tokens), no prefill, no stop string;
* **after**: the env's registered generate-mode defaults (``training_defaults(env, "generate")``:
  its ``env_kwargs``, e.g. ``answer_format="json"``, and its ``policy`` settings: prefill
  ``{"action": "``, the closing quote as stop string, a short ``max_new_tokens``, the temperature),
  what ``textgym train ENV --mode generate``, the Python API and bench/ start from.

It prints a table (invalid answers, answer tokens and decisions/s per env; the same model and
machine for both columns) and the most frequent answers, and writes the table to ``--out``.

    python bench/probes/generate_prior.py --out bench/results/probes/generate/prior.md
    python bench/probes/generate_prior.py --envs bandit,cartpole --decisions 64    # a quick look
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

import torch

import textgym
from textgym import models
from textgym.policy import Policy, PolicyConfig
from textgym.registry import resolve_id, training_defaults
from textgym.rollout import collect

BUILT_IN = ["bandit", "cartpole", "mountaincar", "acrobot", "blackjack", "frozenlake", "taxi",
            "cliffwalking", "tictactoe", "connectfour", "textworld"]


def measure(model, tokenizer, model_name: str, env_id: str, env_kwargs: dict, policy_settings: dict,
            decisions: int, num_envs: int, seed: int) -> dict:
    """Sample ``decisions`` decisions and count the invalid ones."""
    config = PolicyConfig.for_model(model_name, mode="generate", seed=seed, **policy_settings)
    policy = Policy(model, tokenizer, config=config, name=model_name)
    venv = textgym.make_vec(env_id, num_envs=num_envs, seed=seed, **env_kwargs)
    start = time.perf_counter()
    rollout = collect(policy, venv, steps=decisions, seed=seed)
    seconds = time.perf_counter() - start
    steps = [s for episode in rollout.episodes + rollout.unfinished for s in episode.steps]
    invalid = sum(1 for s in steps if s.parse is not None and not s.parse["valid"])
    answers = collections.Counter(s.decision.text for s in steps)
    return {"decisions": len(steps), "invalid_rate": invalid / len(steps),
            "answer_tokens": rollout.stats["answer_tokens"] / len(steps),
            "decisions_per_s": len(steps) / seconds,
            "parsers": dict(collections.Counter(s.parse["parser"] for s in steps if s.parse is not None)),
            "top_answers": answers.most_common(4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default=",".join(BUILT_IN), help="comma-separated env names")
    parser.add_argument("--decisions", type=int, default=256, help="decisions per env and setting")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=models.DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=("before", "after"), default=None,
                        help="measure one setting only (no table)")
    parser.add_argument("--out", type=Path, default=None, help="write the table (markdown) here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = models.load(args.model)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent, check=False).stdout.strip() or "unknown"
    rows = []
    for name in args.envs.split(","):
        env_id = resolve_id(name)
        generate = training_defaults(env_id, "generate")
        settings = {
            "before": ({}, {}),
            "after": (dict(generate.env_kwargs), dict(generate.policy)),
        }
        results = {}
        for label, (env_kwargs, policy_settings) in settings.items():
            if args.only not in (None, label):
                continue
            results[label] = measure(model, tokenizer, args.model, env_id, env_kwargs, policy_settings,
                                     args.decisions, args.num_envs, args.seed)
            r = results[label]
            print(f"{env_id:24s} {label:6s} invalid {r['invalid_rate']:6.1%}  answer tokens "
                  f"{r['answer_tokens']:5.1f}  {r['decisions_per_s']:5.2f} decisions/s  parsers {r['parsers']}",
                  flush=True)
            for text, count in r["top_answers"]:
                print(f"    {count:4d} x {text[:100]!r}", flush=True)
        rows.append((env_id, results, generate.policy))
    if args.only:
        return
    lines = [
        (f"Untrained {args.model}, generate mode, {args.decisions} sampled decisions per env and setting "
         f"({args.num_envs} envs, seed {args.seed}), commit {commit}."),
        "",
        "| env | invalid before | invalid after | answer tokens before / after | decisions/s before / after | after: policy settings |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for env_id, r, policy_settings in rows:
        b, a = r["before"], r["after"]
        lines.append(f"| {env_id} | {b['invalid_rate']:.1%} | {a['invalid_rate']:.1%} | "
                     f"{b['answer_tokens']:.1f} / {a['answer_tokens']:.1f} | "
                     f"{b['decisions_per_s']:.2f} / {a['decisions_per_s']:.2f} | "
                     f"`{dict(policy_settings)}` |")
    table = "\n".join(lines)
    print("\n" + table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
