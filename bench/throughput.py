"""Decisions per second of an LLM policy on textgym/CartPole-v1, against a LlamaGym-style baseline.

Measured in one process, one after the other:

1. textgym ``score`` mode, 16 envs: one batched call per vector step, shared-prefix KV reused.
2. textgym ``generate`` mode, 16 envs, 8 new tokens (sampled; the ``word`` answer format, no stop
   string: most answers run to the limit).
3. textgym ``generate`` mode with the env's registered generate-mode defaults
   (``training_defaults(env, "generate")``: the JSON answer format prefilled with
   ``{"action": "``, stopped at the closing quote, its temperature): what
   ``textgym train cartpole --mode generate`` acts with.
4. the baseline, written the way LlamaGym acts: one env, one Hugging Face ``generate`` call per step
   on the whole conversation so far (every earlier turn re-sent), 32 new tokens, sampled.
5. a plain torch matmul, for the FLOP/s the hardware gives (achieved model FLOP/s are
   ``2 x parameters x tokens run through the model / second``).

Peak memory is the process's resident set size (RSS, from /proc/self/statm sampled every 5 ms)
during each phase: it includes the model weights and Python, not only tensors.

Usage:
    python bench/throughput.py --json bench/results/throughput.json   # the full measurement
    python bench/throughput.py --decisions 32 --gen-decisions 16 --baseline-decisions 4   # quick check
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

import textgym
from textgym import models
from textgym.policy import Policy, PolicyConfig
from textgym.registry import training_defaults
from textgym.rollout import collect

ENV_ID = "textgym/CartPole-v1"


class PeakRSS:
    """Highest resident set size of this process while the block runs (sampled in a thread)."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.peak = 0
        self._stop = threading.Event()

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(self.interval)

    def __enter__(self):  # returns self
        self.peak = self._rss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())


def matmul_flops(size: int = 1536, repeats: int = 5, seconds: float = 2.0) -> float:
    """Best FLOP/s of an fp32 ``size x size`` matmul (what the CPU delivers to dense linear algebra)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    best = 0.0
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / repeats:
            a @ b
            n += 1
        best = max(best, 2 * size ** 3 * n / (time.perf_counter() - start))
    return best


def textgym_phase(model, tokenizer, model_name: str, mode: str, envs: int, decisions: int, new_tokens: int | None,
                  params: int, seed: int, label: str | None = None, env_kwargs: dict | None = None,
                  settings: dict | None = None) -> dict:
    settings = {**(settings or {}), **({"max_new_tokens": new_tokens} if new_tokens else {})}
    config = PolicyConfig.for_model(model_name, mode=mode, seed=seed, **settings)
    policy = Policy(model, tokenizer, config=config, name=model_name)
    venv = textgym.make_vec(ENV_ID, num_envs=envs, seed=seed, **(env_kwargs or {}))
    collect(policy, venv, steps=envs, seed=seed + 1000)  # warm-up: fills the prefix cache, allocators
    with PeakRSS() as memory:
        rollout = collect(policy, venv, steps=decisions, seed=seed)
    s = rollout.stats
    return {
        "mode": label or f"textgym {mode} ({envs} envs" + (f", {new_tokens} new tokens)" if mode == "generate" else ")"),
        "decisions": s["decisions"], "seconds": s["seconds"],
        "decisions_per_s": s["decisions"] / s["seconds"],
        "tokens_per_decision": s["model_tokens"] / s["decisions"],
        "prompt_tokens_per_decision": s["prompt_tokens"] / s["decisions"],
        "prompt_length": s["prompt_tokens_total"] / s["decisions"],
        "answer_tokens_per_decision": s["answer_tokens"] / s["decisions"],
        "model_flops": 2 * params * s["model_tokens"] / s["seconds"],
        "peak_rss_bytes": memory.peak,
        "invalid_rate": sum(ep_step.parse is not None and not ep_step.parse["valid"]
                            for ep_step in rollout.steps + [st for ep in rollout.unfinished for st in ep.steps])
        / s["decisions"],
    }


def baseline_phase(model, tokenizer, decisions: int, new_tokens: int, params: int, seed: int) -> dict:
    """LlamaGym's way: the whole conversation re-sent to ``model.generate`` at every step."""
    env = textgym.make(ENV_ID)
    torch.manual_seed(seed)
    obs, info = env.reset(seed=seed)
    messages = [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": obs}]
    tokens = prompt_tokens = invalid = 0
    with PeakRSS() as memory:
        start = time.perf_counter()
        for _ in range(decisions):
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            input_ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            with torch.no_grad():
                out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                     max_new_tokens=new_tokens, do_sample=True, temperature=1.0, top_p=1.0,
                                     pad_token_id=tokenizer.pad_token_id)
            answer_ids = out[0, input_ids.shape[1]:]
            answer = tokenizer.decode(answer_ids, skip_special_tokens=True)
            # generate() runs the prompt once and every new token but the last through the model
            tokens += input_ids.shape[1] + len(answer_ids) - 1
            prompt_tokens += input_ids.shape[1]
            obs, _reward, terminated, truncated, info = env.step(answer)
            invalid += not info["parse"]["valid"]
            messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": obs}]
            if terminated or truncated:
                obs, info = env.reset()
                messages = [{"role": "system", "content": info["system_prompt"]},
                            {"role": "user", "content": obs}]
        seconds = time.perf_counter() - start
    return {
        "mode": f"baseline: LlamaGym-style (1 env, full conversation, {new_tokens} new tokens)",
        "decisions": decisions, "seconds": seconds, "decisions_per_s": decisions / seconds,
        "tokens_per_decision": tokens / decisions, "prompt_tokens_per_decision": prompt_tokens / decisions,
        "prompt_length": prompt_tokens / decisions,
        "model_flops": 2 * params * tokens / seconds, "peak_rss_bytes": memory.peak,
        "invalid_rate": invalid / decisions,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="model name, hub id or folder")
    parser.add_argument("--envs", type=int, default=16, help="sub-envs in the textgym runs")
    parser.add_argument("--decisions", type=int, default=512, help="decisions measured in score mode")
    parser.add_argument("--gen-decisions", type=int, default=128, help="decisions measured in generate mode")
    parser.add_argument("--gen-tokens", type=int, default=8, help="new tokens per decision in generate mode")
    parser.add_argument("--baseline-decisions", type=int, default=32, help="decisions of the baseline")
    parser.add_argument("--baseline-tokens", type=int, default=32, help="new tokens per baseline decision")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the figures to this file (the recorded run: "
                             "bench/results/throughput.json)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tokenizer = models.load(args.model)
    params = models.num_parameters(model)
    print(f"model {args.model}: {params / 1e6:.1f}M parameters, {next(model.parameters()).dtype}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    generate_defaults = training_defaults(ENV_ID, "generate")
    rows = []
    for label, run in (
        ("score", lambda: textgym_phase(model, tokenizer, args.model, "score", args.envs, args.decisions, 1,
                                        params, args.seed)),
        ("generate", lambda: textgym_phase(model, tokenizer, args.model, "generate", args.envs,
                                           args.gen_decisions, args.gen_tokens, params, args.seed)),
        ("generate, env defaults", lambda: textgym_phase(
            model, tokenizer, args.model, "generate", args.envs, args.gen_decisions, None, params, args.seed,
            label=f"textgym generate ({args.envs} envs, env defaults: JSON prefill, stop, "
                  f"{generate_defaults.policy.get('max_new_tokens')} max)",
            env_kwargs=dict(generate_defaults.env_kwargs), settings=dict(generate_defaults.policy))),
        ("baseline", lambda: baseline_phase(model, tokenizer, args.baseline_decisions,
                                            args.baseline_tokens, params, args.seed)),
    ):
        print(f"running {label} ...", flush=True)
        rows.append(run())
    matmul = matmul_flops()

    print()
    print(f"{'run':<62} {'dec/s':>7} {'tok/dec':>8} {'prompt':>7} {'GFLOP/s':>8} {'peak RSS':>9} {'invalid':>7}")
    for r in rows:
        print(f"{r['mode']:<62} {r['decisions_per_s']:>7.2f} {r['tokens_per_decision']:>8.1f} "
              f"{r['prompt_length']:>7.1f} {r['model_flops'] / 1e9:>8.1f} "
              f"{r['peak_rss_bytes'] / 2**30:>7.2f}GB {r['invalid_rate']:>7.0%}")
    print(f"{'plain torch matmul (fp32 1536x1536)':<62} {'':>7} {'':>8} {'':>7} {matmul / 1e9:>8.1f}")
    score, generate, generate_env, baseline = rows
    ratios = {
        "score_vs_baseline_decisions_per_s": score["decisions_per_s"] / baseline["decisions_per_s"],
        "generate_vs_baseline_decisions_per_s": generate["decisions_per_s"] / baseline["decisions_per_s"],
        "generate_vs_score_decisions_per_s": generate["decisions_per_s"] / score["decisions_per_s"],
        "generate_env_defaults_vs_score_decisions_per_s": generate_env["decisions_per_s"] / score["decisions_per_s"],
        "score_model_flops_vs_matmul": score["model_flops"] / matmul,
        "generate_model_flops_vs_matmul": generate["model_flops"] / matmul,
        "baseline_model_flops_vs_matmul": baseline["model_flops"] / matmul,
    }
    print()
    print(f"score mode    : {ratios['score_vs_baseline_decisions_per_s']:.1f}x the baseline's decisions/s, "
          f"{ratios['score_model_flops_vs_matmul']:.0%} of matmul FLOP/s")
    print(f"generate mode : {ratios['generate_vs_baseline_decisions_per_s']:.1f}x the baseline's decisions/s, "
          f"{ratios['generate_model_flops_vs_matmul']:.0%} of matmul FLOP/s")
    print(f"generate mode : {ratios['generate_vs_score_decisions_per_s']:.0%} of score mode's decisions/s "
          f"({args.gen_tokens} new tokens); with the env's generate defaults "
          f"{ratios['generate_env_defaults_vs_score_decisions_per_s']:.0%}")
    print(f"baseline      : {ratios['baseline_model_flops_vs_matmul']:.0%} of matmul FLOP/s")
    print(f"peak RSS of the whole process (ru_maxrss): "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB")
    print("tok/dec: tokens run through the model per decision (prompt after prefix-cache reuse + answer);"
          " prompt: full prompt length in tokens; FLOP/s = 2 x parameters x tok/dec x dec/s")
    result = {"model": args.model, "parameters": params, "threads": torch.get_num_threads(),
              "runs": rows, "matmul_flops": matmul, "ratios": ratios, "argv": sys.argv[1:]}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
