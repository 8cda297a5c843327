"""Adapter onto TRL's ``GRPOTrainer``: textgym envs played through a ``rollout_func``.

For users who want TRL's scale-out path (accelerate, DeepSpeed, vLLM) on textgym envs. Each
dataset row is an env start (the first observation of a seeded episode, as a chat prompt); TRL
asks for ``num_generations`` completions of it, and the rollout function plays that many
episodes from the same seed. A multi-step episode becomes one multi-turn completion: the
model's answers (trained on) interleaved with the env's next observations (masked out with
``env_mask``, TRL's mechanism for env feedback). The reward is the episode's return.

Unlike textgym's own trainers, the model acts on the whole conversation so far (TRL scores the
completion as one sequence), so prompts grow with the episode: keep ``max_turns`` small.

Example:
    >>> import textgym
    >>> from textgym.trainers.trl import make_trl_grpo_trainer
    >>> model, tok = textgym.models.load("tiny")
    >>> trainer = make_trl_grpo_trainer(model, tok, "textgym/Bandit-v0", num_prompts=8,
    ...     args=dict(max_steps=1, per_device_train_batch_size=4, num_generations=2))
    >>> _ = trainer.train()                       # doctest: +SKIP

``import trl`` takes seconds, so this module imports it only when a trainer is made.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict, deque
from typing import Any

import torch


class TextgymRollout:
    """The ``rollout_func`` for TRL's ``GRPOTrainer``: plays textgym episodes with the trained model.

    Args:
        env_id: a text env id.
        tokenizer: the model's tokenizer (its chat template renders the conversation).
        seeds_by_prompt: for each prompt (system prompt, first observation), the env seeds that
            start with it (filled by :func:`make_trl_grpo_trainer` when it builds the dataset).
        num_generations: completions per prompt (TRL's ``num_generations``): consecutive copies
            of a prompt share one seed.
        max_turns: decisions per episode at most (an episode cut here gets the return so far).
        max_new_tokens: tokens per answer.
        max_completion_length: tokens of the whole multi-turn completion at most.
        temperature: sampling temperature.
        env_kwargs: passed to ``textgym.make``.
    """

    def __init__(self, env_id: str, tokenizer: Any, seeds_by_prompt: dict[tuple[str, str], list[int]],
                 num_generations: int, max_turns: int = 8, max_new_tokens: int = 16,
                 max_completion_length: int = 256, temperature: float = 1.0,
                 env_kwargs: dict[str, Any] | None = None):
        import textgym

        self.env_id, self.tokenizer = env_id, tokenizer
        self.seeds = {key: deque(seeds) for key, seeds in seeds_by_prompt.items()}
        self.num_generations = num_generations
        self.max_turns, self.max_new_tokens = max_turns, max_new_tokens
        self.max_completion_length, self.temperature = max_completion_length, temperature
        self.env_kwargs = dict(env_kwargs or {})
        self.env = textgym.make(env_id, **self.env_kwargs)
        self.episodes_played = 0
        self.returns: list[float] = []

    def _next_seed(self, prompt: list[dict[str, str]]) -> int:
        key = (prompt[0]["content"], prompt[-1]["content"])
        seeds = self.seeds.get(key)
        if not seeds:
            raise ValueError(f"prompt not made by make_trl_grpo_trainer for {self.env_id}: {key[1]!r}")
        seeds.rotate(-1)
        return seeds[-1]

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        model = trainer.accelerator.unwrap_model(trainer.model)
        out: dict[str, list] = defaultdict(list)
        seed, run = None, 0
        for i, prompt in enumerate(prompts):
            # Consecutive copies of a prompt are one GRPO group: num_generations episodes per seed.
            if i == 0 or prompt != prompts[i - 1] or run == self.num_generations:
                seed, run = self._next_seed(prompt), 0
            run += 1
            episode = self.play(model, prompt, seed)
            for key, value in episode.items():
                out[key].append(value)
        return dict(out)

    @torch.no_grad()
    def play(self, model: Any, prompt: list[dict[str, str]], seed: int) -> dict[str, Any]:
        """One episode from ``seed``: prompt ids, the multi-turn completion, its log-probs and env mask."""
        tok = self.tokenizer
        obs, info = self.env.reset(seed=seed)
        messages = [{"role": "system", "content": info.get("system_prompt", prompt[0]["content"])},
                    {"role": "user", "content": obs}]
        prompt_ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                             return_dict=False)
        ids, completion, logprobs, env_mask = list(prompt_ids), [], [], []
        total, end_ids = 0.0, {tok.eos_token_id}
        device = next(model.parameters()).device
        for _ in range(self.max_turns):
            budget = min(self.max_new_tokens, self.max_completion_length - len(completion))
            if budget <= 0:
                break
            # 1. The model answers on the conversation so far (sampled; log-probs kept).
            generated = model.generate(input_ids=torch.tensor([ids], device=device),
                                       attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=device),
                                       do_sample=True, temperature=self.temperature, top_p=1.0, top_k=0,
                                       max_new_tokens=budget, output_scores=True, return_dict_in_generate=True,
                                       pad_token_id=tok.pad_token_id)
            answer = generated.sequences[0, len(ids):].tolist()
            if any(t in end_ids for t in answer):
                answer = answer[:next(j for j, t in enumerate(answer) if t in end_ids) + 1]
            scores = torch.stack(generated.scores[:len(answer)])[:, 0].float()
            answer_logprobs = torch.log_softmax(scores, -1).gather(-1, torch.tensor(answer, device=device)[:, None])
            ids += answer
            completion += answer
            logprobs += answer_logprobs[:, 0].tolist()
            env_mask += [1] * len(answer)
            # 2. The env reads the answer text.
            text = tok.decode(answer, skip_special_tokens=True)
            obs, reward, terminated, truncated, info = self.env.step(text)
            total += float(reward)
            if terminated or truncated:
                break
            # 3. Its next observation joins the conversation as a user turn (masked out of the loss).
            feedback = self._feedback_ids(messages, text, obs, ended=bool(answer) and answer[-1] in end_ids)
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": obs}]
            if len(completion) + len(feedback) >= self.max_completion_length:
                break
            ids += feedback
            completion += feedback
            logprobs += [0.0] * len(feedback)
            env_mask += [0] * len(feedback)
        self.episodes_played += 1
        self.returns.append(total)
        return {"prompt_ids": list(prompt_ids), "completion_ids": completion, "logprobs": logprobs,
                "env_mask": env_mask, "env_return": total}

    def _feedback_ids(self, messages: list[dict[str, str]], answer: str, obs: str, ended: bool) -> list[int]:
        """Tokens between the model's answer and the next answer: end of turn, the user turn with
        ``obs``, the assistant header (rendered by the chat template, never hard-coded)."""
        tok = self.tokenizer
        history = messages + [{"role": "assistant", "content": answer}]
        full = tok.apply_chat_template(history + [{"role": "user", "content": obs}], add_generation_prompt=True,
                                       tokenize=False)
        upto = tok.apply_chat_template(history, tokenize=False)
        anchor = upto.rfind(answer.strip()) + len(answer.strip()) if answer.strip() else len(
            tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        suffix = full[anchor:]
        if ended and tok.eos_token and suffix.startswith(tok.eos_token):
            suffix = suffix[len(tok.eos_token):]  # the model already emitted the end-of-turn token
        return tok(suffix, add_special_tokens=False)["input_ids"]


def env_return_reward(prompts: list[Any], completions: list[Any], env_return: list[float], **kwargs: Any) -> list[float]:
    """TRL reward function: the return of the episode each completion played."""
    return [float(r) for r in env_return]


def make_trl_grpo_trainer(model: Any, tokenizer: Any, env: str = "textgym/Bandit-v0", *,
                          args: Any = None, num_prompts: int = 256, seed: int = 0, max_turns: int = 8,
                          max_new_tokens: int = 16, env_kwargs: dict[str, Any] | None = None,
                          peft_config: Any = None, extra_reward_funcs: tuple = (), **trainer_kwargs: Any) -> Any:
    """A ``trl.GRPOTrainer`` that trains ``model`` on text env ``env``.

    Args:
        model: a causal LM (or a hub id TRL can load).
        tokenizer: its tokenizer (needs a chat template).
        env: a text env id.
        args: a ``trl.GRPOConfig`` or a dict of its fields; defaults suited to CPU
            (``use_cpu`` when no GPU, ``bf16=False``, ``report_to="none"``, a temporary ``output_dir``).
        num_prompts: dataset size: env starts from seeds ``seed .. seed + num_prompts - 1``.
        seed: first env seed.
        max_turns: decisions per episode at most.
        max_new_tokens: tokens per answer.
        env_kwargs: passed to ``textgym.make``.
        peft_config: a ``peft.LoraConfig`` to train an adapter (TRL wraps the model).
        extra_reward_funcs: TRL reward functions added to the episode return (e.g. a format bonus).
        **trainer_kwargs: passed to ``GRPOTrainer``.
    """
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    import textgym

    if args is None or isinstance(args, dict):
        defaults = {"output_dir": tempfile.mkdtemp(prefix="textgym-trl-"), "report_to": "none", "bf16": False,
                        "use_cpu": not torch.cuda.is_available(), "logging_steps": 1, "max_completion_length": 128,
                        "per_device_train_batch_size": 8, "num_generations": 4, "learning_rate": 1e-5}
        args = GRPOConfig(**{**defaults, **(args or {})})

    # The dataset: one chat prompt per env start; remember which seeds give each prompt.
    probe = textgym.make(env, **(env_kwargs or {}))
    seeds_by_prompt: dict[tuple[str, str], list[int]] = defaultdict(list)
    rows = []
    for s in range(seed, seed + num_prompts):
        obs, info = probe.reset(seed=s)
        system = info.get("system_prompt", "")
        seeds_by_prompt[(system, obs)].append(s)
        rows.append([{"role": "system", "content": system}, {"role": "user", "content": obs}])
    probe.close()

    rollout = TextgymRollout(env, tokenizer, seeds_by_prompt, num_generations=args.num_generations,
                             max_turns=max_turns, max_new_tokens=max_new_tokens,
                             max_completion_length=args.max_completion_length, temperature=args.temperature,
                             env_kwargs=env_kwargs)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[env_return_reward, *extra_reward_funcs], args=args,
                          train_dataset=Dataset.from_dict({"prompt": rows}), rollout_func=rollout,
                          peft_config=peft_config, **trainer_kwargs)
    trainer.textgym_rollout = rollout  # for inspection: episodes played, returns
    return trainer


__all__ = ["TextgymRollout", "env_return_reward", "make_trl_grpo_trainer"]
