"""Train on a textgym env with TRL's ``GRPOTrainer(environment_factory=...)``: the env's moves are tools.

TRL's other way to use textgym envs (``examples/trl_grpo.py`` plays them through a
``rollout_func``). Here TRL owns the loop: it makes one env per rollout, appends ``reset()``'s
text (the task) to the prompt, lets the model call the env's tools until it stops calling
tools, and rewards the rollout with ``get_reward()``.

Two kinds of env:

* ``--env calculator`` (the default): ``textgym.envs.calculator.ArithmeticCalculator``, whose
  methods ``add``, ``subtract``, ``multiply``, ``divide`` are the tools. The same class is
  textgym's tool env ``textgym/Calculator-v0`` (``textgym.tool_env(ArithmeticCalculator)``):
  one env definition for both trainers. Rewards: ``get_reward()`` (TRL's column named after the
  class: the last calculator result is the item's answer) and ``final_answer`` (the answer in
  the last message's ``<answer>`` tag is right), so a rollout earns reward with or without tools;
* any other text env id (``textgym.trainers.trl.environment_factory``: one ``act`` tool that
  makes a move; ``get_reward()`` the episode's return), a served one too
  (``--env openenv:http://127.0.0.1:8000``, after ``textgym serve cartpole``).

The model needs a chat template that renders tools and whose tool calls TRL can parse: a
ChatML model without one (SmolLM2) gets TRL's Qwen2.5 template (same ChatML tokens).

Run:
    python examples/trl_environment.py --env cartpole --max-steps 20
Smoke test (random tiny model, 1 step):
    python examples/trl_environment.py --quick
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from typing import Any


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="textgym model name, hub id or folder")
    parser.add_argument("--env", default="calculator",
                        help="calculator (the tool env) or a text env short name or id (openenv:URL too)")
    parser.add_argument("--max-steps", type=int, default=20, help="optimizer steps")
    parser.add_argument("--num-prompts", type=int, default=64, help="env starts (seeds) in the dataset")
    parser.add_argument("--num-generations", type=int, default=4, help="rollouts per start (a GRPO group)")
    parser.add_argument("--batch-size", type=int, default=8, help="completions per step")
    parser.add_argument("--max-tool-calls", type=int, default=8, help="moves per rollout at most")
    parser.add_argument("--max-completion-length", type=int, default=256, help="tokens of a whole rollout")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--output-dir", default=None, help="TRL's output folder (default: a temporary one)")
    parser.add_argument("--quick", action="store_true", help="random tiny model, 1 step, short rollouts")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.max_steps, args.num_prompts, args.batch_size = "tiny", 1, 4, 4
        args.num_generations, args.max_completion_length, args.max_tool_calls, args.lr = 2, 16, 2, 1e-3
    return args


def final_answer(completions: list[Any], environments: list[Any], **kwargs: Any) -> list[float]:
    """The calculator's score of the answer in each rollout's last message (a TRL reward function)."""
    rewards = []
    for completion, environment in zip(completions, environments, strict=True):
        last = completion[-1]["content"] if isinstance(completion, list) else completion
        text = last if isinstance(last, str) else ""
        rewards.append(environment.get_reward(text) if "<answer>" in text else 0.0)
    return rewards


def main(argv: Sequence[str] | None = None) -> Any:
    """Build the trainer, train, print the rewards; returns the trainer."""
    args = parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is marked experimental
    import torch
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    import textgym
    from textgym import lora
    from textgym.trainers import TrainConfig
    from textgym.trainers.trl import environment_dataset, environment_factory

    model, tokenizer = textgym.models.load(args.model)
    if "tools" not in (tokenizer.chat_template or ""):
        tokenizer.chat_template = qwen2_5_chat_template
    model = lora.add_lora(model, TrainConfig().lora_settings(), model_name=args.model)
    config = GRPOConfig(output_dir=args.output_dir or tempfile.mkdtemp(prefix="textgym-trl-env-"), report_to="none",
                        bf16=False, use_cpu=not torch.cuda.is_available(), logging_steps=1,
                        max_steps=args.max_steps, per_device_train_batch_size=args.batch_size,
                        num_generations=args.num_generations, learning_rate=args.lr,
                        max_completion_length=args.max_completion_length,
                        max_tool_calling_iterations=args.max_tool_calls)
    if args.env == "calculator":
        from textgym.envs.calculator import ArithmeticCalculator, task_prompt

        factory, rewards = ArithmeticCalculator, [final_answer]
        dataset = environment_dataset("textgym/Calculator-v0", args.num_prompts, prompt=task_prompt())
    else:
        factory, rewards = environment_factory(args.env), []
        dataset = environment_dataset(args.env, args.num_prompts)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, reward_funcs=rewards or None,
                          train_dataset=dataset, environment_factory=factory)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "reward" in h]
    print(f"{args.env}: {trainer.state.global_step} steps; per step: mean reward "
          f"{[round(h['reward'], 3) for h in logged]}, reward std {[round(h.get('reward_std', 0), 3) for h in logged]}, "
          f"tool calls per rollout {[round(h.get('tools/call_frequency', 0), 3) for h in logged]}, "
          f"grad norm {[round(h.get('grad_norm', 0), 4) for h in logged]}")
    return trainer


if __name__ == "__main__":
    main()
