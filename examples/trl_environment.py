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

A small model never writes a tool call of its own (SmolLM2-135M: 0 calls, reward 0, nothing for
GRPO to reinforce), so on the calculator the example first imitates (``--warm-start N``): TRL's
``SFTTrainer`` on the scripted player's solutions of N other items
(``textgym.envs.calculator.tool_conversation``: the question, one tool call per operation, the
tool's results, the answer), rendered by the same chat template with the same tool schemas as
GRPO's rollouts, the loss on the assistant's turns only; GRPO then goes on from that adapter.
What GRPO adds to imitation: ``--eval-items N`` scores N held-out items (those of ``textgym eval``;
the warm start and GRPO play items of the run's own training seeds, ``textgym.seeds``) with TRL's
own evaluation before GRPO and after it, one rollout an item sampled as GRPO samples, and prints
the solved rates and GRPO's gain with its paired standard error.

The model needs a chat template that renders tools and whose tool calls TRL can parse: a
ChatML model without one (SmolLM2) gets TRL's Qwen2.5 template (same ChatML tokens).

Run (results: docs/results.md, "Tool-calling envs"; bench/results/trl_environment_grpo_gain.log):
    python examples/trl_environment.py --eval-items 200   # the measured run: the defaults
    python examples/trl_environment.py --env cartpole --max-steps 20
Smoke test (random tiny model: a 1-step warm start, then 1 GRPO step):
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
    parser.add_argument("--max-steps", type=int, default=20, help="GRPO optimizer steps")
    parser.add_argument("--num-prompts", type=int, default=64, help="env starts (seeds) in the dataset")
    parser.add_argument("--num-generations", type=int, default=8, help="rollouts per start (a GRPO group)")
    parser.add_argument("--batch-size", type=int, default=16, help="completions per step")
    parser.add_argument("--max-tool-calls", type=int, default=4, help="tool calls per rollout at most")
    parser.add_argument("--max-completion-length", type=int, default=160,
                        help="tokens of a whole rollout (calls, results, answer)")
    parser.add_argument("--lr", type=float, default=3e-4, help="GRPO's learning rate (that of the measured runs)")
    parser.add_argument("--lora-layers", type=int, default=8, help="LoRA on the top this many layers")
    parser.add_argument("--warm-start", type=int, default=None,
                        help="scripted tool-calling solutions to imitate before GRPO (default: 64 on the "
                             "calculator, 0 elsewhere; only the calculator has them)")
    parser.add_argument("--warm-start-epochs", type=float, default=3.0)
    parser.add_argument("--warm-start-lr", type=float, default=1e-3)
    parser.add_argument("--warm-start-adapter", default=None,
                        help="a warm start's saved LoRA adapter (OUTPUT_DIR/warm_start) to go on from, "
                             "instead of training one")
    parser.add_argument("--lr-scheduler", default="constant", help="GRPO's learning-rate schedule (TRL's names)")
    parser.add_argument("--temperature", type=float, default=1.0, help="GRPO's sampling temperature")
    parser.add_argument("--eval-items", type=int, default=0,
                        help="calculator: score this many held-out items (textgym eval's) with TRL's evaluation "
                             "before and after GRPO, one rollout each, and print GRPO's paired gain")
    parser.add_argument("--seed", type=int, default=0,
                        help="the run seed: TRL's sampling and data order, and the items trained on (textgym.seeds)")
    parser.add_argument("--output-dir", default=None, help="TRL's output folder (default: a temporary one)")
    parser.add_argument("--quick", action="store_true",
                        help="random tiny model: a 1-step warm start and 1 GRPO step, short rollouts")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.max_steps, args.num_prompts, args.batch_size = "tiny", 1, 4, 4
        args.num_generations, args.max_completion_length, args.max_tool_calls, args.lr = 2, 16, 2, 1e-3
        args.warm_start_epochs = 1.0
        if args.warm_start is None and not args.warm_start_adapter:
            args.warm_start = 4
    if args.warm_start is None:
        args.warm_start = 64 if args.env == "calculator" and not args.warm_start_adapter else 0
    if args.warm_start and args.warm_start_adapter:
        parser.error("--warm-start trains an adapter, --warm-start-adapter loads one: give one of them")
    if args.warm_start and args.env != "calculator":
        parser.error(f"--warm-start imitates the calculator's scripted player; {args.env} has none")
    if args.eval_items and args.env != "calculator":
        parser.error(f"--eval-items scores the calculator's held-out items; {args.env} has no final-answer score")
    return args


class FinalAnswer:
    """The calculator's score of the answer in each rollout's last message (a TRL reward
    function). While :attr:`scores` is a dict it also keeps each item's score by its seed: the
    held-out evaluation reads them there, to pair the items before and after GRPO."""

    __name__ = "final_answer"  # TRL logs a reward function's rewards under its name

    def __init__(self) -> None:
        self.scores: dict[int, float] | None = None

    def __call__(self, completions: list[Any], environments: list[Any], **kwargs: Any) -> list[float]:
        rewards = []
        for completion, environment in zip(completions, environments, strict=True):
            last = completion[-1]["content"] if isinstance(completion, list) else completion
            text = last if isinstance(last, str) else ""
            rewards.append(environment.get_reward(text) if "<answer>" in text else 0.0)
        if self.scores is not None:
            self.scores.update(zip(map(int, kwargs["seed"]), rewards, strict=True))
        return rewards


def held_out_scores(trainer: Any, final_answer: FinalAnswer) -> dict[int, float]:
    """Each held-out item's score (TRL's own evaluation: one rollout an item, sampled as GRPO samples)."""
    final_answer.scores = {}
    try:
        trainer.evaluate()
        return final_answer.scores
    finally:
        final_answer.scores = None


def gain_line(before: dict[int, float], after: dict[int, float]) -> str:
    """The solved rates before and after GRPO on the same held-out items, and the paired gain."""
    from textgym.outcomes import mean_and_stderr

    items = sorted(before.keys() & after.keys())
    (b, b_se), (a, a_se) = mean_and_stderr([before[i] for i in items]), mean_and_stderr([after[i] for i in items])
    gain, gain_se = mean_and_stderr([after[i] - before[i] for i in items])
    return (f"held-out: {len(items)} items, solved {b:.1%} +- {b_se:.1%} before GRPO -> {a:.1%} +- {a_se:.1%} "
            f"after; GRPO's gain {gain:+.1%} +- {gain_se:.1%} (paired)")


def warm_start_dataset(items: int, seed: int) -> Any:
    """The scripted player's solutions of calculator items ``seed .. seed + items - 1`` as TRL SFT
    rows: each conversation starts with the prompt TRL's rollouts start with (the task, then
    ``reset()``'s question) and carries the tools GRPO gives the model."""
    from textgym.envs.calculator import ArithmeticCalculator, task_prompt, tool_conversation
    from textgym.trainers.trl import environment_tools, tool_sft_dataset

    conversations = []
    for item_seed in range(seed, seed + items):
        question, *turns = tool_conversation(item_seed)["messages"]
        conversations.append([{"role": "user", "content": task_prompt() + question["content"]}, *turns])
    return tool_sft_dataset(conversations, environment_tools(ArithmeticCalculator))


def warm_start(model: Any, tokenizer: Any, args: argparse.Namespace, output_dir: str) -> Any:
    """Imitation: TRL's SFTTrainer on :func:`warm_start_dataset`, the loss on the assistant's turns
    (the tool calls and the answer; TRL swaps in its training template with generation marks).
    Returns the trainer (its ``model`` is the adapter GRPO goes on from), which saves the adapter
    in ``output_dir/warm_start`` (``--warm-start-adapter`` goes on from it)."""
    import torch
    from trl import SFTConfig, SFTTrainer

    from textgym import seeds

    config = SFTConfig(output_dir=os.path.join(output_dir, "warm_start"), report_to="none", bf16=False,
                       use_cpu=not torch.cuda.is_available(), assistant_only_loss=True, logging_steps=1,
                       per_device_train_batch_size=4, num_train_epochs=args.warm_start_epochs,
                       learning_rate=args.warm_start_lr, lr_scheduler_type="constant", save_strategy="no",
                       gradient_checkpointing=False, seed=args.seed)
    trainer = SFTTrainer(model=model, processing_class=tokenizer, args=config,
                         train_dataset=warm_start_dataset(args.warm_start, seeds.demonstration_seed(args.seed)))
    trainer.train()
    trainer.save_model(config.output_dir)
    return trainer


def main(argv: Sequence[str] | None = None) -> Any:
    """Warm-start (calculator), build the GRPO trainer, train, print the rewards; returns the trainer."""
    args = parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is marked experimental
    import torch
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    import textgym
    from textgym import lora, seeds
    from textgym.trainers import TrainConfig
    from textgym.trainers.trl import environment_dataset, environment_factory

    output_dir = args.output_dir or tempfile.mkdtemp(prefix="textgym-trl-env-")
    model, tokenizer = textgym.models.load(args.model)
    if "tools" not in (tokenizer.chat_template or ""):
        tokenizer.chat_template = qwen2_5_chat_template
    if args.warm_start_adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.warm_start_adapter, is_trainable=True)
    else:
        model = lora.add_lora(model, TrainConfig(lora_layers=args.lora_layers).lora_settings(), model_name=args.model)
    imitation = warm_start(model, tokenizer, args, output_dir) if args.warm_start else None
    held_out = args.eval_items
    # no gradient checkpointing: with LoRA on the top layers only, the backward pass stops there
    config = GRPOConfig(output_dir=output_dir, report_to="none", bf16=False, use_cpu=not torch.cuda.is_available(),
                        logging_steps=1, max_steps=args.max_steps, per_device_train_batch_size=args.batch_size,
                        num_generations=args.num_generations, learning_rate=args.lr,
                        max_completion_length=args.max_completion_length, save_strategy="no",
                        max_tool_calling_iterations=args.max_tool_calls, gradient_checkpointing=False,
                        temperature=args.temperature, seed=args.seed, lr_scheduler_type=args.lr_scheduler,
                        num_generations_eval=1, per_device_eval_batch_size=args.batch_size)
    # textgym's seed layout: GRPO's prompts are training items of run seed --seed, the warm start
    # imitates that run's demonstration items, and the held-out items are textgym eval's
    first_prompt = seeds.rollout_seed(args.seed, 0)
    if args.env == "calculator":
        from textgym.envs.calculator import ArithmeticCalculator, task_prompt

        final_answer = FinalAnswer()
        factory, rewards = ArithmeticCalculator, [final_answer]
        dataset = environment_dataset("textgym/Calculator-v0", args.num_prompts, seed=first_prompt, prompt=task_prompt())
        eval_dataset = (environment_dataset("textgym/Calculator-v0", held_out, seed=seeds.EVAL_BASE,
                                            prompt=task_prompt()) if held_out else None)
    else:
        factory, rewards, eval_dataset = environment_factory(args.env), [], None
        dataset = environment_dataset(args.env, args.num_prompts, seed=first_prompt)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, reward_funcs=rewards or None,
                          train_dataset=dataset, eval_dataset=eval_dataset, environment_factory=factory)
    trainer.warm_start = imitation
    before = held_out_scores(trainer, final_answer) if held_out else {}
    trainer.train()
    if imitation is not None:
        losses = [h["loss"] for h in imitation.state.log_history if "loss" in h]
        print(f"warm start: {args.warm_start} scripted solutions, {imitation.state.global_step} steps, "
              f"loss {losses[0]:.3f} (first step) -> {losses[-1]:.3f} (last)")
    logged = [h for h in trainer.state.log_history if "reward" in h]  # the evaluations log "eval_reward"
    print(f"{args.env}: {trainer.state.global_step} steps; per step: mean reward "
          f"{[round(h['reward'], 3) for h in logged]}, reward std {[round(h.get('reward_std', 0), 3) for h in logged]}, "
          f"tool calls per rollout {[round(h.get('tools/call_frequency', 0), 3) for h in logged]}, "
          f"grad norm {[round(h.get('grad_norm', 0), 4) for h in logged]}")
    if held_out:
        trainer.held_out = (before, held_out_scores(trainer, final_answer))
        print(gain_line(*trainer.held_out))
    return trainer


if __name__ == "__main__":
    main()
