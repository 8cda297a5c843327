"""Train an LLM on a textgym env with TRL's GRPOTrainer (textgym's TRL adapter), in one process or many.

The env's starts become TRL's dataset; for each, TRL asks for ``--num-generations`` completions,
and the adapter plays that many episodes from the same seed, all of them batched, one generation
per turn (``textgym.trainers.trl``). The reward is the episode's return. A LoRA adapter
(``textgym.lora``'s settings) is trained unless ``--full``.

Run (one process):
    python examples/trl_grpo.py --env bandit --max-steps 20
Several processes on one machine (CPU: gloo; each process plays its share of the prompts):
    torchrun --nproc_per_node 2 examples/trl_grpo.py --env bandit --max-steps 20
Several GPUs or nodes, with your accelerate config (untested here: no GPU):
    accelerate launch --multi_gpu --num_processes 4 examples/trl_grpo.py --model qwen2.5-0.5b
With vLLM generating the answers (needs a GPU and ``pip install vllm``; untested here):
    accelerate launch --multi_gpu examples/trl_grpo.py --use-vllm --vllm-mode colocate
Smoke test (random tiny model, 2 steps):
    python examples/trl_grpo.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="textgym model name, hub id or folder")
    parser.add_argument("--env", default="bandit", help="text env short name or id")
    parser.add_argument("--max-steps", type=int, default=20, help="optimizer steps")
    parser.add_argument("--num-prompts", type=int, default=256, help="env starts in the dataset")
    parser.add_argument("--num-generations", type=int, default=4, help="episodes per start (a GRPO group)")
    parser.add_argument("--batch-size", type=int, default=8, help="completions per process per step")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--max-turns", type=int, default=4, help="decisions per episode at most")
    parser.add_argument("--max-new-tokens", type=int, default=8, help="tokens per answer")
    parser.add_argument("--max-completion-length", type=int, default=64, help="tokens of a whole episode")
    parser.add_argument("--full", action="store_true", help="train every weight instead of a LoRA adapter")
    parser.add_argument("--use-vllm", action="store_true", help="generate with TRL's vLLM engine")
    parser.add_argument("--vllm-mode", default="colocate", choices=["colocate", "server"])
    parser.add_argument("--output-dir", default=None, help="TRL's output folder (default: a temporary one)")
    parser.add_argument("--summary-dir", default=None,
                        help="write summary-rank<R>.json per process here (what each process did)")
    parser.add_argument("--quick", action="store_true", help="random tiny model, 2 steps, short episodes")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.max_steps, args.num_prompts, args.max_new_tokens = "tiny", 2, 16, 4
        args.max_completion_length, args.lr = 16, 1e-3
    return args


def main(argv: Sequence[str] | None = None,
         extra_reward_funcs: Sequence[Callable[..., list[float]]] = ()) -> Any:
    """Build the trainer, train, print a summary; returns the trainer."""
    args = parse_args(argv)
    import textgym
    from textgym import lora
    from textgym.trainers import TrainConfig
    from textgym.trainers.trl import make_trl_grpo_trainer

    env_id = textgym.registry.resolve_id(args.env)
    model, tokenizer = textgym.models.load(args.model)
    if not args.full:  # the adapter textgym's own trainers would train
        model = lora.add_lora(model, TrainConfig().lora_settings(), model_name=args.model)
    trl_args = {"max_steps": args.max_steps, "per_device_train_batch_size": args.batch_size,
                "num_generations": args.num_generations, "learning_rate": args.lr,
                "max_completion_length": args.max_completion_length, "use_vllm": args.use_vllm,
                **({"vllm_mode": args.vllm_mode} if args.use_vllm else {}),
                **({"output_dir": args.output_dir} if args.output_dir else {})}
    trainer = make_trl_grpo_trainer(model, tokenizer, env_id, args=trl_args, num_prompts=args.num_prompts,
                                    max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                                    extra_reward_funcs=extra_reward_funcs)
    trainer.train()

    rollout, accelerator = trainer.textgym_rollout, trainer.accelerator
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    if accelerator.is_main_process:
        print(f"{env_id}: {trainer.state.global_step} steps in {accelerator.num_processes} process(es); "
              f"mean reward per step {[round(r, 3) for r in rewards]}")
    if args.summary_dir:
        summary = {"rank": accelerator.process_index, "world_size": accelerator.num_processes, "pid": os.getpid(),
                   "global_step": trainer.state.global_step, "episodes": rollout.episodes_played,
                   "seeds": rollout.seeds, "returns": rollout.returns, "rewards": rewards}
        path = Path(args.summary_dir) / f"summary-rank{accelerator.process_index}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary))
    return trainer


if __name__ == "__main__":
    main()
