"""Decisions per second on a GPU: score mode, greedy, CartPole, at several numbers of envs side by
side, for whichever textgym is on the path (run it once per version, alternately, to compare: see
bench/gpu_session.sh); with ``--extras``, an update's decisions per second beside its rollout's,
generate mode's tokens per second against Hugging Face ``generate`` on the same prompts, and the
GPU-only refusals (int8 acting, a batch too large for the memory).

This file imports no textgym module of its own checkout: the textgym on ``PYTHONPATH`` (an
installed wheel of the version measured) is the one timed.

Usage:
    PYTHONPATH=/tmp/site python3 bench/gpu_compare.py --label new --envs 16 256 1024 --json new.json
"""

from __future__ import annotations

import argparse
import json
import time
import traceback

import torch

ENV_ID = "textgym/CartPole-v1"


def sync() -> None:
    """Wait for the GPU's queued work (a host clock then times it); nothing on a CPU."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def rollout_rates(policy, envs: list[int], steps: int, seed: int) -> dict[int, dict]:
    import textgym
    from textgym.rollout import collect

    rates = {}
    for n in envs:
        venv = textgym.make_vec(ENV_ID, num_envs=n, seed=seed)
        collect(policy, venv, steps=3 * n, seed=seed + 1, greedy=True)  # warm-up: prefix cache, allocator
        sync()
        started = time.perf_counter()
        rollout = collect(policy, venv, steps=steps * n, seed=seed, greedy=True)
        sync()
        seconds = time.perf_counter() - started
        s = rollout.stats
        rates[n] = {"decisions": s["decisions"], "seconds": seconds, "decisions_per_s": s["decisions"] / seconds,
                    "act_share": s["act_seconds"] / seconds, "env_share": s["env_seconds"] / seconds,
                    "prompt_tokens_total_per_decision": s["prompt_tokens_total"] / s["decisions"]}
        print(f"  {n:>5} envs: {s['decisions'] / seconds:10,.0f} decisions/s ({s['decisions']} in {seconds:.2f} s, "
              f"{s['act_seconds'] / seconds:.0%} in act, {s['env_seconds'] / seconds:.0%} in the envs)", flush=True)
    return rates


def update_rate(policy, envs: int, seed: int) -> dict:
    """One REINFORCE update on ``envs`` envs' episodes: its decisions per second beside the
    sampled rollout's that collected them."""
    from textgym.trainers import make_trainer

    trainer = make_trainer("reinforce", policy, env=ENV_ID,
                           config={"num_envs": envs, "episodes_per_update": envs, "seed": seed})
    rollout = trainer.collect()
    trainer.update(rollout.episodes, rollout.stats)  # warm-up
    rollout = trainer.collect()
    sync()
    started = time.perf_counter()
    trainer.update(rollout.episodes, rollout.stats)
    sync()
    seconds = time.perf_counter() - started
    d = rollout.stats["decisions"]
    result = {"envs": envs, "decisions": d, "rollout_decisions_per_s": d / rollout.stats["seconds"],
              "update_seconds": seconds, "update_decisions_per_s": d / seconds}
    print(f"  update ({envs} envs, {d} decisions): {d / seconds:,.0f} decisions/s; its rollout (sampled): "
          f"{d / rollout.stats['seconds']:,.0f} decisions/s", flush=True)
    return result


def generate_against_hf(model, tokenizer, rows: int, new_tokens: int, seed: int) -> dict:
    """Generate mode's tokens per second and HF ``generate``'s on the same prompts (greedy)."""
    import textgym
    from textgym.policy import Policy

    policy = Policy(model, tokenizer, mode="generate", max_new_tokens=new_tokens, seed=seed)
    venv = textgym.make_vec(ENV_ID, num_envs=rows, seed=seed)
    observations, infos = venv.reset()
    systems = [i["system_prompt"] for i in infos]
    policy.act(observations, systems, greedy=True)  # warm-up
    sync()
    started = time.perf_counter()
    decisions = policy.act(observations, systems, greedy=True)
    sync()
    ours = time.perf_counter() - started
    our_tokens = sum(len(d.answer_ids) for d in decisions)
    prompts = [d.prompt_ids for d in decisions]
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    ends = set(policy.end_ids)

    def hf() -> tuple[float, int]:
        sync()
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False,
                                 pad_token_id=pad)
        sync()
        tokens = 0
        for row in out[:, width:].tolist():
            for token in row:
                tokens += 1
                if token in ends:
                    break
        return time.perf_counter() - start, tokens

    hf()  # warm-up
    theirs, their_tokens = hf()
    result = {"rows": rows, "max_new_tokens": new_tokens, "textgym_tokens": our_tokens, "textgym_seconds": ours,
              "textgym_tokens_per_s": our_tokens / ours, "hf_tokens": their_tokens, "hf_seconds": theirs,
              "hf_tokens_per_s": their_tokens / theirs}
    print(f"  generate, {rows} prompts, up to {new_tokens} tokens: textgym {our_tokens / ours:,.0f} tokens/s "
          f"({our_tokens} in {ours:.2f} s), HF generate {their_tokens / theirs:,.0f} tokens/s "
          f"({their_tokens} in {theirs:.2f} s): {our_tokens / ours / (their_tokens / theirs):.2f}x", flush=True)
    return result


def refusals(policy) -> dict:
    """What the GPU-only checks say: the int8 probe's reason, and a batch too large for the card."""
    from textgym.policy.memory import check_acting_memory
    from textgym.policy.precision import choose_act_dtype

    choice = choose_act_dtype(policy.model, policy.tokenizer, policy.name or "model", policy.device, refresh=True)
    try:
        check_acting_memory(policy.model, policy.device, 10_000_000, 90, 8)
        memory = "no error"
    except MemoryError as exc:
        memory = str(exc)
    print(f"  auto precision on this GPU: {choice.describe()}\n  10,000,000 envs: {memory}", flush=True)
    return {"auto_precision": choice.describe(), "memory_check": memory}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--envs", type=int, nargs="+", default=[16, 256, 1024])
    parser.add_argument("--steps", type=int, default=15, help="vector steps timed per size")
    parser.add_argument("--extras", action="store_true")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import textgym
    from textgym.policy import Policy

    started = time.perf_counter()
    policy = Policy.from_pretrained(args.model, mode="score", device=args.device)
    result = {"label": args.label, "textgym": textgym.__file__,
              "device": torch.cuda.get_device_name() if policy.device.type == "cuda" else "cpu",
              "torch": torch.__version__, "model_dtype": str(next(policy.model.parameters()).dtype),
              "act_precision": policy.act_precision, "load_seconds": time.perf_counter() - started}
    print(f"{args.label}: {result['textgym']} on {result['device']}, {result['model_dtype']}, acting in "
          f"{result['act_precision']} (loaded in {result['load_seconds']:.1f} s)", flush=True)
    result["rollout"] = rollout_rates(policy, args.envs, args.steps, args.seed)
    if args.extras:
        # the update last: its trainer adds the LoRA adapter to the model
        for name, run in [("generate_16", lambda: generate_against_hf(policy.model, policy.tokenizer, 16, 32, 0)),
                          ("generate_256", lambda: generate_against_hf(policy.model, policy.tokenizer, 256, 32, 0)),
                          ("refusals", lambda: refusals(policy)),
                          ("update", lambda: update_rate(policy, 256, args.seed))]:
            try:
                result[name] = run()
            except Exception as exc:  # noqa: BLE001 - one failed extra must not lose the others
                traceback.print_exc()
                result[name] = {"error": f"{type(exc).__name__}: {exc}"}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
