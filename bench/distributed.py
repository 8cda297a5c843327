"""Data parallelism on this machine: 1 process x 1 thread, 1 x 2 threads, 2 processes x 1 thread.

Part 1 measures, in one run, the same REINFORCE training on textgym/CartPole-v1 (SmolLM2-135M, score
mode, the env's registered training settings: ``textgym.registry.training_defaults``, a LoRA adapter
on the top 8 layers) in three configurations, each in fresh processes started one after the other:
decisions per second and seconds per update (rollout and update apart), as ratios to 1 process x 1
thread. The trainer is the one ``textgym train --processes N`` runs: every configuration plays the
same global batch of episodes per update with the same env seeds (``episode_shard``'s rule), each
process steps ``episodes_per_update / processes`` envs (one episode each), the minibatches are
planned over the global batch and the gradients averaged in the optimizer step. The gradient
all-reduce is timed apart from the wait for the slower process (a barrier just before it).

Part 2 computes the communication per optimizer step: the bytes one all-reduce of the gradients
carries with the trainer's default LoRA (r 16, the registry's target modules, every layer) and with
full fine-tuning, for a 135M, a 0.5B and a 7B model. The parameter counts come from building each
model from its config on PyTorch's meta device (no weights) and wrapping it with peft, so they are
counted by the same code that trains; the config numbers used are printed with them.

Usage:
    .venv/bin/python bench/distributed.py --json bench/results/distributed.json   # the measurement
    .venv/bin/python bench/distributed.py --model tiny --updates 1 --warmup 0 --episodes-per-update 4
    .venv/bin/python bench/distributed.py --estimate-only                          # part 2 only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

ENV_ID = "textgym/CartPole-v1"
#: (name, processes, threads per process)
CONFIGURATIONS = (("1 process x 1 thread", 1, 1), ("1 process x 2 threads", 1, 2),
                  ("2 processes x 1 thread", 2, 1))
# Model configs for the communication estimate (the fields that set the parameter shapes), from each
# model's config.json on the Hugging Face hub. SmolLM2-135M's is also read from the local model cache
# when present (and must agree).
MODEL_CONFIGS = {
    "SmolLM2-135M-Instruct": ("llama", {
        "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
        "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152, "tie_word_embeddings": True}),
    "Qwen2.5-0.5B-Instruct": ("qwen2", {
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}),
    "Qwen2.5-7B-Instruct": ("qwen2", {
        "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
        "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False}),
}
#: Link speeds for the worked estimate (bytes/s): assumptions, not measurements.
LINKS = {"10 Gb/s Ethernet": 1.25e9, "100 Gb/s InfiniBand": 12.5e9, "NVLink (~150 GB/s)": 150e9}


def log(msg: str) -> None:
    print(msg, flush=True)


# --- part 1: the timed runs ----------------------------------------------------------------------


def timed(ctx):
    """``ctx`` with its gradient all-reduce timed: a barrier first (the wait for the slower process,
    ``wait_s``), then the all-reduce itself (``allreduce_s``). Every rank averages gradients the same
    number of times, so the extra barrier is safe."""
    from textgym.distributed import ProcessContext

    @dataclass(frozen=True)
    class TimedContext(ProcessContext):
        seconds: dict = field(default_factory=lambda: {"wait_s": 0.0, "allreduce_s": 0.0})

        def average_gradients(self, parameters, weight=1.0, **kwargs):
            t0 = time.perf_counter()
            self.barrier()
            t1 = time.perf_counter()
            total = super().average_gradients(parameters, weight=weight, **kwargs)
            self.seconds["wait_s"] += t1 - t0
            self.seconds["allreduce_s"] += time.perf_counter() - t1
            return total

    return TimedContext(**{f.name: getattr(ctx, f.name) for f in fields(ProcessContext)})


def make_trainer(args: argparse.Namespace, ctx):
    """The REINFORCE trainer of ``textgym train cartpole`` (the env's registered settings), as this
    process's part of a data-parallel run."""
    import textgym
    from textgym.registry import training_defaults
    from textgym.trainers import make_trainer as make

    defaults = training_defaults(ENV_ID, "score")
    config = {**defaults.trainer, "lr": defaults.lr, "seed": args.seed,
              "episodes_per_update": args.episodes_per_update,
              "num_envs": max(1, args.episodes_per_update // ctx.world_size)}
    policy = textgym.Policy.from_pretrained(args.model, mode="score", seed=args.seed, device=ctx.device)
    return make("reinforce", policy, env=ENV_ID, config=config, env_kwargs=dict(defaults.env_kwargs),
                process=ctx)


def worker(args: argparse.Namespace) -> None:
    """One process of a configuration: warm-up updates, then timed ones; rank 0 writes the report."""
    import torch

    from textgym import distributed

    ctx = timed(distributed.init())
    trainer = make_trainer(args, ctx)
    updates = []
    for u in range(args.warmup + args.updates):
        ctx.barrier()
        t0 = time.perf_counter()
        rollout = trainer.collect()
        t1 = time.perf_counter()
        ctx.seconds.update(wait_s=0.0, allreduce_s=0.0)
        trainer.update(rollout.episodes, stats=rollout.stats)
        t2 = time.perf_counter()
        ctx.barrier()
        t3 = time.perf_counter()
        mine = {"decisions": int(rollout.stats["decisions"]), "rollout_s": t1 - t0, "update_s": t2 - t1,
                **ctx.seconds}
        ranks = ctx.gather([mine])
        if u >= args.warmup:
            updates.append({"seconds": t3 - t0, "decisions": sum(r["decisions"] for r in ranks),
                            "rollout_s": max(r["rollout_s"] for r in ranks),
                            "update_s": max(r["update_s"] for r in ranks),
                            "wait_s": max(r["wait_s"] for r in ranks),
                            "allreduce_s": max(r["allreduce_s"] for r in ranks),
                            "decisions_per_rank": [r["decisions"] for r in ranks]})
    checksums = ctx.gather([distributed.checksum(trainer.optimized_parameters())])
    if ctx.is_main:
        Path(args.report).write_text(json.dumps({
            "processes": ctx.world_size, "threads": torch.get_num_threads(), "updates": updates,
            "identical_weights": len(set(checksums)) == 1}))


def run_configuration(name: str, processes: int, threads: int, args: argparse.Namespace) -> dict:
    from textgym import distributed

    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [__file__, "--worker", "--report", str(report), "--model", args.model,
                   "--updates", str(args.updates), "--warmup", str(args.warmup),
                   "--episodes-per-update", str(args.episodes_per_update), "--seed", str(args.seed)]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        started = time.perf_counter()
        if processes == 1:
            code = subprocess.run([sys.executable, *command], env=env, check=False).returncode
        else:
            saved = os.environ.get("OMP_NUM_THREADS")
            os.environ["OMP_NUM_THREADS"] = str(threads)
            try:
                code = distributed.launch(command, processes=processes)
            finally:
                if saved is None:
                    os.environ.pop("OMP_NUM_THREADS")
                else:
                    os.environ["OMP_NUM_THREADS"] = saved
        if code != 0:
            raise SystemExit(f"{name}: exit code {code}")
        result = json.loads(report.read_text())
    result.update(name=name, wall_seconds=time.perf_counter() - started)
    timed = result["updates"]
    seconds = sum(u["seconds"] for u in timed)
    result["decisions_per_s"] = sum(u["decisions"] for u in timed) / seconds
    result["seconds_per_update"] = seconds / len(timed)
    for key in ("rollout_s", "update_s", "wait_s", "allreduce_s"):
        result[f"{key}_per_update"] = sum(u[key] for u in timed) / len(timed)
    return result


# --- part 2: the communication estimate ----------------------------------------------------------


def communication_estimate() -> list[dict]:
    """Trainable parameters and bytes per all-reduce with the default LoRA and with full fine-tuning."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    from textgym import models
    from textgym.trainers import TrainConfig

    defaults = TrainConfig()
    cached = models.textgym_home() / "models" / "smollm2-135m" / "config.json"
    rows = []
    for name, (model_type, shape) in MODEL_CONFIGS.items():
        if name.startswith("SmolLM2") and cached.is_file():
            local = json.loads(cached.read_text())
            mismatched = {k: (v, local.get(k)) for k, v in shape.items() if local.get(k) != v}
            if mismatched:
                raise SystemExit(f"{name}: config differs from the cached model's: {mismatched}")
        config = transformers.AutoConfig.for_model(model_type, **shape)
        with torch.device("meta"), warnings.catch_warnings():  # deprecation chatter inside peft
            warnings.simplefilter("ignore", FutureWarning)
            model = transformers.AutoModelForCausalLM.from_config(config)
        full = sum(p.numel() for p in model.parameters())
        targets = list(models.spec("smollm2-135m" if name.startswith("SmolLM2") else "qwen2.5-0.5b")
                       .lora_target_modules)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            lora = get_peft_model(model, LoraConfig(r=defaults.lora_r, lora_alpha=defaults.lora_alpha,
                                                    target_modules=targets, task_type="CAUSAL_LM"))
        adapter = sum(p.numel() for p in lora.parameters() if p.requires_grad)
        rows.append({"model": name, "config": shape, "lora_r": defaults.lora_r, "lora_targets": targets,
                     "parameters": full, "lora_parameters": adapter,
                     # the all-reduce carries fp32 gradients: 4 bytes per trainable parameter
                     "lora_bytes": 4 * adapter, "full_bytes": 4 * full})
    return rows


def print_estimate(rows: list[dict], measured: dict | None) -> None:
    log("\nCommunication per optimizer step: one all-reduce of the trainable parameters' fp32 gradients")
    log(f"  {'model':24s} {'parameters':>14s} {'LoRA parameters':>16s} {'LoRA':>9s} {'full fine-tuning':>17s}")
    for r in rows:
        log(f"  {r['model']:24s} {r['parameters']:14,d} {r['lora_parameters']:16,d} "
            f"{r['lora_bytes'] / 2**20:6.1f} MB {r['full_bytes'] / 2**30:14.2f} GB")
    log(f"  LoRA: r={rows[0]['lora_r']}, targets {', '.join(rows[0]['lora_targets'])}, every layer "
        "(TrainConfig's defaults, the model registry's target modules)")
    for r in rows:
        log(f"  {r['model']} config: " + ", ".join(f"{k}={v}" for k, v in r["config"].items()))
    log("  Time per step: a ring all-reduce sends and receives 2 (N-1)/N of the bytes per process, about "
        "twice them for many processes; on links of these (assumed) speeds:")
    for link, speed in LINKS.items():
        log(f"    {link:22s} " + "  ".join(
            f"{r['model'].split('-Instruct')[0]}: LoRA {2 * r['lora_bytes'] / speed * 1e3:.1f} ms, "
            f"full {2 * r['full_bytes'] / speed:.2f} s" for r in rows))
    if measured:
        log(f"  Measured here (2 processes, gloo over shared memory, CartPole's top-8-layer adapter): "
            f"all-reduce {measured['allreduce_s_per_update'] * 1e3:.1f} ms per update, waiting for the "
            f"slower rank {measured['wait_s_per_update']:.2f} s, of {measured['seconds_per_update']:.1f} s "
            "per update")


# --- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--updates", type=int, default=3, help="timed updates per configuration")
    parser.add_argument("--warmup", type=int, default=1, help="untimed updates first")
    parser.add_argument("--episodes-per-update", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--estimate-only", action="store_true", help="part 2 only (no training)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    results = []
    if not args.estimate_only:
        log(f"{ENV_ID}, {args.model}, score mode, REINFORCE: {args.episodes_per_update} episodes per update, "
            f"{args.warmup} warm-up + {args.updates} timed updates per configuration ({os.cpu_count()} cores)")
        for name, processes, threads in CONFIGURATIONS:
            log(f"\n{name} ...")
            results.append(run_configuration(name, processes, threads, args))
        base = results[0]
        log(f"\n  {'configuration':24s} {'decisions/update':>16s} {'s/update':>9s} {'rollout s':>9s} "
            f"{'update s':>9s} {'decisions/s':>11s} {'ratio':>6s}  identical weights")
        for r in results:
            log(f"  {r['name']:24s} {sum(u['decisions'] for u in r['updates']) / len(r['updates']):16.0f} "
                f"{r['seconds_per_update']:9.1f} {r['rollout_s_per_update']:9.1f} {r['update_s_per_update']:9.1f} "
                f"{r['decisions_per_s']:11.2f} {r['decisions_per_s'] / base['decisions_per_s']:6.2f}  "
                f"{r['identical_weights']}")
    estimate = communication_estimate()
    print_estimate(estimate, results[-1] if results else None)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "env": ENV_ID, "model": args.model, "episodes_per_update": args.episodes_per_update,
            "updates": args.updates, "warmup": args.warmup, "cores": os.cpu_count(),
            "configurations": results, "communication": estimate, "links_bytes_per_s": LINKS}, indent=1))
        log(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
