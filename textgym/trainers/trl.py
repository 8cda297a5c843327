"""Adapter onto TRL's ``GRPOTrainer``: textgym envs played through a ``rollout_func``.

For users who want TRL's own trainer and its scale-out path (accelerate, DeepSpeed, vLLM) on
textgym envs. Each dataset row is an env start: the first observation of an episode as a chat
prompt, with its env seed in the user message (``textgym_seed``), so that the members of a GRPO
group start from the same state on whichever process TRL gives them. TRL hands each process its
prompts (``num_generations`` copies of each), and :class:`TextgymRollout` plays one episode per
copy, all of them together: every turn, one batched generation for every running episode. A
multi-step episode becomes one multi-turn completion: the model's answers (trained on)
interleaved with the env's next observations (masked out with ``env_mask``, TRL's mechanism for
env feedback). The reward is the episode's return.

Where the answers come from:

* without vLLM: a :class:`textgym.Policy` around the trainer's model (:class:`PolicySampler`):
  one forward pass per turn over every running episode, identical contexts (a group's first
  turn) run once, the shared system-prompt prefix's KV cache reused;
* ``use_vllm=True``: TRL's vLLM engine (``trainer.vllm_generation``, colocated or server;
  :class:`VLLMSampler`), whose weights TRL syncs before each rollout. vLLM cannot be installed
  on the machine this was written on: that branch is exercised with a stand-in engine in the
  tests, not with vLLM itself.

The model acts on the whole conversation so far (TRL scores the completion as one sequence), so
prompts grow with the episode: keep ``max_turns`` small.

Example:
    >>> import textgym
    >>> from textgym.trainers.trl import make_trl_grpo_trainer
    >>> model, tok = textgym.models.load("tiny")
    >>> trainer = make_trl_grpo_trainer(model, tok, "textgym/Bandit-v0", num_prompts=8,
    ...     args=dict(max_steps=1, per_device_train_batch_size=4, num_generations=2))
    >>> _ = trainer.train()                       # TRL prints its logs
    {'loss': ...}
    >>> trainer.state.global_step
    1

Several processes: ``torchrun --nproc_per_node N script.py`` (CPU: gloo) or ``accelerate launch
--multi_gpu ...`` with the same script (``examples/trl_grpo.py``). ``import trl`` takes seconds,
so this module imports it only when a trainer is made.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

__all__ = ["SEED_KEY", "AnswerSampler", "PolicySampler", "TextgymRollout", "VLLMSampler", "env_return_reward",
           "environment_dataset", "environment_factory", "environment_tools", "make_trl_grpo_trainer",
           "tool_sft_dataset"]

#: The key of a dataset prompt's user message that holds its env seed.
SEED_KEY = "textgym_seed"

Answer = tuple[list[int], list[float]]
"""An answer's token ids and their log-probs under the sampling distribution."""


class AnswerSampler(Protocol):
    """Samples one answer per context (a conversation's token ids so far)."""

    def sample(self, contexts: Sequence[list[int]], max_new_tokens: int) -> list[Answer]: ...


class PolicySampler:
    """Answers from a :class:`textgym.Policy` around the trainer's model, one batched forward per turn.

    Rows with the same context (the members of a GRPO group on their first turn) are run through
    the model once and sampled independently; the prefix every context shares (the chat header
    and system prompt) keeps its KV cache across turns until the weights change. The model's
    train/eval mode is restored after each call (the policy samples in eval mode: no dropout).

    Args:
        model: the trainer's model, unwrapped (a causal LM, or a PEFT model around one).
        tokenizer: its tokenizer.
        temperature: sampling temperature (the log-probs are those of ``softmax(logits / T)``).
        top_p: nucleus sampling.
        seed: seed of the sampling generator.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, temperature: float = 1.0, top_p: float = 1.0,
                 seed: int | None = None):
        from textgym.policy import Policy

        with _mode_kept(model):
            self.policy = Policy(model, tokenizer, mode="generate", temperature=temperature, top_p=top_p,
                                 seed=seed)

    @torch.no_grad()
    def sample(self, contexts: Sequence[list[int]], max_new_tokens: int) -> list[Answer]:
        from textgym.policy.kv_cache import (
            run_prompts,
            shared_prefix_length,
            unique_rows,
            weights_version,
        )
        from textgym.policy.sampling import generate

        p = self.policy
        firsts, row_of = unique_rows([tuple(c) for c in contexts])
        distinct = [list(contexts[i]) for i in firsts]
        with _mode_kept(p.model):
            p.model.eval()
            batch, _ = run_prompts(p.model, distinct, shared_prefix_length(distinct), pad_id=p.pad_id,
                                   device=p.device, counters=p.counters, prefix_cache=p.prefix_cache,
                                   version=weights_version(p.model))
            if len(firsts) < len(contexts):  # each copy samples on its own KV row
                batch = batch.select_rows(row_of)
            answers = generate(p.model, batch, max_new_tokens=max_new_tokens, temperature=p.temperature,
                               top_p=p.top_p, greedy=False, generator=p.generator, end_ids=p.end_ids, stop=(),
                               tokenizer=p.tokenizer, counters=p.counters)
            return [(ids, logprobs) for ids, logprobs, _ in answers]


class VLLMSampler:
    """Answers from TRL's vLLM engine (``trainer.vllm_generation``), each context sampled once.

    TRL syncs the engine's weights before each rollout. In server mode (and with tensor
    parallelism) the engine's ``generate`` is a collective call: every process must make it the
    same number of times with the same number of prompts, so the rollout then keeps the processes
    in lockstep (:attr:`lockstep`; short lists are padded with a copy of their first context, whose
    answer is dropped).

    Args:
        generation: TRL's ``VLLMGeneration`` (its ``generate(prompts, images, num_generations)``).
        accelerator: the trainer's accelerator.
    """

    def __init__(self, generation: Any, accelerator: Any):
        self.generation = generation
        self.accelerator = accelerator
        collective = getattr(generation, "mode", "colocate") == "server" or \
            getattr(generation, "tensor_parallel_size", 1) > 1
        self.lockstep = collective and accelerator.num_processes > 1

    def most(self, count: int) -> int:
        """The largest ``count`` over the processes (this process's alone without lockstep)."""
        if not self.lockstep:
            return count
        counts = self.accelerator.gather(torch.tensor([count], device=self.accelerator.device))
        return int(counts.max())

    def sample(self, contexts: Sequence[list[int]], max_new_tokens: int, padding: list[int] | None = None) -> list[Answer]:
        contexts = [list(c) for c in contexts]
        n = len(contexts)
        width = self.most(n)
        if width > n:
            contexts += [padding or contexts[0]] * (width - n)
        if not contexts:
            return []
        generation = self.generation
        budget = generation.max_completion_length  # the engine reads its answer length from here
        generation.max_completion_length = max_new_tokens
        try:
            _, completions, logprobs, _ = generation.generate(prompts=contexts, images=None, num_generations=1)
        finally:
            generation.max_completion_length = budget
        # vLLM gives each token's top log-probs, the sampled token's first
        return [(list(ids), [float(lp[0]) for lp in lps]) for ids, lps in zip(completions[:n], logprobs[:n])]


@dataclass
class _Episode:
    """One episode being played as a multi-turn completion."""

    env: Any
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    completion: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    answer_tokens: int = 0
    total: float = 0.0
    done: bool = False

    @property
    def context(self) -> list[int]:
        return self.prompt_ids + self.completion


class TextgymRollout:
    """The ``rollout_func`` for TRL's ``GRPOTrainer``: plays textgym episodes with the trained model.

    Each prompt TRL passes starts one episode, from the seed its user message carries
    (:data:`SEED_KEY`); all of them are played together, one batched generation per turn.

    Args:
        env_id: a text env id.
        tokenizer: the model's tokenizer (its chat template renders the conversation).
        max_turns: decisions per episode at most (an episode cut here gets the return so far).
        max_new_tokens: tokens per answer.
        max_completion_length: tokens of the whole multi-turn completion at most.
        temperature: sampling temperature.
        top_p: nucleus sampling (without vLLM; vLLM takes TRL's ``top_p``).
        env_kwargs: passed to ``textgym.make``.
    """

    def __init__(self, env_id: str, tokenizer: Any, max_turns: int = 8, max_new_tokens: int = 16,
                 max_completion_length: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                 env_kwargs: dict[str, Any] | None = None):
        self.env_id, self.tokenizer = env_id, tokenizer
        self.max_turns, self.max_new_tokens = max_turns, max_new_tokens
        self.max_completion_length, self.temperature, self.top_p = max_completion_length, temperature, top_p
        self.env_kwargs = dict(env_kwargs or {})
        self.envs: list[Any] = []  # one per episode played at once, kept across calls
        self.episodes_played = 0
        self.returns: list[float] = []
        self.seeds: list[int] = []
        """The env seed of every episode played, in order."""
        self._sampler: PolicySampler | None = None

    def sampler(self, trainer: Any) -> PolicySampler | VLLMSampler:
        """vLLM when the trainer uses it, else a policy around the trainer's (unwrapped) model."""
        if getattr(trainer, "use_vllm", False):
            return VLLMSampler(trainer.vllm_generation, trainer.accelerator)
        model = trainer.accelerator.unwrap_model(trainer.model)
        if self._sampler is None or self._sampler.policy.model is not model:
            seed = getattr(getattr(trainer, "args", None), "seed", 0) + trainer.accelerator.process_index
            self._sampler = PolicySampler(model, self.tokenizer, self.temperature, self.top_p, seed=seed)
        return self._sampler

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        import textgym

        while len(self.envs) < len(prompts):
            self.envs.append(textgym.make(self.env_id, **self.env_kwargs))
        episodes = [self.start(env, prompt) for env, prompt in zip(self.envs, prompts)]
        sampler = self.sampler(trainer)
        end_ids = self._end_ids(trainer)
        for _ in range(self.max_turns):
            for episode in episodes:
                if len(episode.completion) >= self.max_completion_length:
                    episode.done = True
            running = [e for e in episodes if not e.done]
            if isinstance(sampler, VLLMSampler) and sampler.lockstep:
                if sampler.most(len(running)) == 0:  # every process is done
                    break
                answers = sampler.sample([e.context for e in running], self.max_new_tokens,
                                         padding=episodes[0].prompt_ids)
            elif not running:
                break
            else:
                answers = sampler.sample([e.context for e in running], self.max_new_tokens)
            for episode, (ids, logprobs) in zip(running, answers):
                self.answer(episode, ids, logprobs, end_ids)
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                "env_return": [], "answer_tokens": []}
        for episode in episodes:
            self.episodes_played += 1
            self.returns.append(episode.total)
            for key, value in (("prompt_ids", episode.prompt_ids), ("completion_ids", episode.completion),
                               ("logprobs", episode.logprobs), ("env_mask", episode.env_mask),
                               ("env_return", episode.total), ("answer_tokens", episode.answer_tokens)):
                out[key].append(value)
        return out

    def start(self, env: Any, prompt: list[dict[str, Any]]) -> _Episode:
        """Reset ``env`` with the seed of ``prompt`` (made by :func:`make_trl_grpo_trainer`)."""
        seed = prompt[-1].get(SEED_KEY)
        if seed is None:
            raise ValueError(f"the prompt has no {SEED_KEY!r}: make the dataset with make_trl_grpo_trainer "
                             f"(or give its user message the env seed): {prompt[-1].get('content')!r}")
        obs, info = env.reset(seed=int(seed))
        self.seeds.append(int(seed))
        messages = [{"role": "system", "content": info.get("system_prompt", prompt[0]["content"])},
                    {"role": "user", "content": obs}]
        prompt_ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                        return_dict=False)
        return _Episode(env=env, messages=messages, prompt_ids=list(prompt_ids))

    def answer(self, episode: _Episode, ids: list[int], logprobs: list[float], end_ids: set[int]) -> None:
        """Play one sampled answer: append it (trained on), step the env, append its next
        observation (masked out), or end the episode."""
        budget = min(self.max_new_tokens, self.max_completion_length - len(episode.completion))
        ids, logprobs = ids[:budget], logprobs[:budget]
        ended = next((j for j, t in enumerate(ids) if t in end_ids), None)
        if ended is not None:  # keep the end-of-turn token
            ids, logprobs = ids[:ended + 1], logprobs[:ended + 1]
        episode.completion += ids
        episode.logprobs += logprobs
        episode.env_mask += [1] * len(ids)
        episode.answer_tokens += len(ids)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        obs, reward, terminated, truncated, _ = episode.env.step(text)
        episode.total += float(reward)
        if terminated or truncated:
            episode.done = True
            return
        # The next observation joins the conversation as a user turn (masked out of the loss).
        feedback = self._feedback_ids(episode.messages, text, obs, ended=ended is not None)
        episode.messages += [{"role": "assistant", "content": text}, {"role": "user", "content": obs}]
        if len(episode.completion) + len(feedback) >= self.max_completion_length:
            episode.done = True
            return
        episode.completion += feedback
        episode.logprobs += [0.0] * len(feedback)
        episode.env_mask += [0] * len(feedback)

    def _end_ids(self, trainer: Any) -> set[int]:
        from textgym.policy.prompts import end_token_ids

        return end_token_ids(self.tokenizer, trainer.accelerator.unwrap_model(trainer.model))

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


@contextlib.contextmanager
def _mode_kept(model: torch.nn.Module) -> Iterator[None]:
    """Within the block the model may be switched to eval mode; its train/eval mode comes back after
    (TRL reads it to tell training from evaluation)."""
    training = model.training
    try:
        yield
    finally:
        model.train(training)


def env_return_reward(prompts: list[Any], completions: list[Any], env_return: list[float], **kwargs: Any) -> list[float]:
    """TRL reward function: the return of the episode each completion played."""
    return [float(r) for r in env_return]


def make_trl_grpo_trainer(model: Any, tokenizer: Any, env: str = "textgym/Bandit-v0", *,
                          args: Any = None, num_prompts: int = 256, seed: int = 0, max_turns: int = 8,
                          max_new_tokens: int = 16, env_kwargs: dict[str, Any] | None = None,
                          peft_config: Any = None, extra_reward_funcs: Sequence[Callable[..., list[float]]] = (),
                          **trainer_kwargs: Any) -> Any:
    """A ``trl.GRPOTrainer`` that trains ``model`` on text env ``env``.

    Run the script that calls it with ``torchrun`` or ``accelerate launch`` for several
    processes; TRL (accelerate) sets the processes up.

    Args:
        model: a causal LM (or a hub id TRL can load).
        tokenizer: its tokenizer (needs a chat template).
        env: a text env id.
        args: a ``trl.GRPOConfig`` or a dict of its fields; defaults suited to CPU
            (``use_cpu`` when no GPU, ``bf16=False``, ``report_to="none"``, a temporary ``output_dir``).
            ``use_vllm=True`` plays the episodes on TRL's vLLM engine.
        num_prompts: dataset size: env starts from seeds ``seed .. seed + num_prompts - 1``.
        seed: first env seed.
        max_turns: decisions per episode at most.
        max_new_tokens: tokens per answer.
        env_kwargs: passed to ``textgym.make``.
        peft_config: a ``peft.LoraConfig`` to train an adapter (TRL wraps the model).
        extra_reward_funcs: TRL reward functions added to the episode return (e.g. a format bonus);
            they also get ``env_return`` and ``answer_tokens`` (model tokens of the completion).
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

    # The dataset: one chat prompt per env start, its seed in the user message.
    probe = textgym.make(env, **(env_kwargs or {}))
    rows = []
    for s in range(seed, seed + num_prompts):
        obs, info = probe.reset(seed=s)
        rows.append([{"role": "system", "content": info.get("system_prompt", "")},
                     {"role": "user", "content": obs, SEED_KEY: s}])
    probe.close()

    rollout = TextgymRollout(env, tokenizer, max_turns=max_turns, max_new_tokens=max_new_tokens,
                             max_completion_length=args.max_completion_length, temperature=args.temperature,
                             top_p=args.top_p, env_kwargs=env_kwargs)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[env_return_reward, *extra_reward_funcs],
                          args=args, train_dataset=Dataset.from_dict({"prompt": rows}), rollout_func=rollout,
                          peft_config=peft_config, **trainer_kwargs)
    trainer.textgym_rollout = rollout  # for inspection: episodes played, returns, seeds
    return trainer


# --- TRL's environment_factory: a textgym env whose moves are tools ----------------------------------


def environment_factory(env_id: str, **env_kwargs: Any) -> type:
    """A class for ``trl.GRPOTrainer(environment_factory=...)`` (TRL >= 1.16): each instance plays
    text env ``env_id`` (any id ``textgym.make`` takes, ``"openenv:URL"`` included) and exposes it
    the way TRL's tool-calling loop reads an environment:

    * ``reset(**row) -> str``: starts an episode (seeded by the dataset row's ``seed`` column, if
      any) and returns the task and the first observation, which TRL appends to the prompt;
    * ``act(action: str) -> str``: one move (the one way to act in a text env: an answer, parsed
      by the env), returning the next observation; after the episode ended it changes nothing;
    * ``get_reward() -> float``: the episode's return so far, TRL's reward for the rollout.

    The model must call tools, so its chat template must render them and TRL must parse its
    calls (a Qwen-style ChatML template does both; ``examples/trl_environment.py``).

    Example:
        >>> from textgym.trainers.trl import environment_factory
        >>> Env = environment_factory("cartpole")
        >>> env = Env()
        >>> env.reset(seed=0).splitlines()[-1]
        'Pole -0.05 rad, spin -0.05 turning left; cart at +0.01, velocity -0.02.'
        >>> env.act("RIGHT").startswith("Pole"), env.get_reward()
        (True, 1.0)

    Args:
        env_id: the text env.
        **env_kwargs: passed to ``textgym.make``.
    """
    import textgym

    probe = textgym.make(env_id, **env_kwargs)
    try:
        names = probe.get_wrapper_attr("action_names")
    except AttributeError:
        names = None
    probe.close()
    choices = f"one of {', '.join(map(str, names))}" if names else "your answer, as the task asks"

    class TextgymToolEnv:
        def __init__(self) -> None:
            self.env = textgym.make(env_id, **env_kwargs)
            self.episode_return, self.done = 0.0, True

        def reset(self, **kwargs: Any) -> str:
            seed = kwargs.get("seed")
            observation, info = self.env.reset(seed=None if seed is None else int(seed))
            self.episode_return, self.done = 0.0, False
            task = info.get("system_prompt", "")
            return f"{task}\nCall the act tool to make each move.\n\n{observation}" if task else observation

        def act(self, action: str) -> str:
            if self.done:
                return "The episode is over."
            observation, reward, terminated, truncated, _ = self.env.step(action)
            self.episode_return += float(reward)
            self.done = bool(terminated or truncated)
            return f"{observation}\nThe episode is over." if self.done else observation

        def get_reward(self) -> float:
            return self.episode_return

    # TRL builds the tool's JSON schema from the signature and this docstring (Google style).
    TextgymToolEnv.act.__doc__ = (f"Make one move in the environment.\n\nArgs:\n    action: {choices}.\n\n"
                                  "Returns:\n    The next observation.")
    TextgymToolEnv.__name__ = TextgymToolEnv.__qualname__ = "TextgymToolEnv"
    return TextgymToolEnv


def environment_dataset(env_id: str, num_prompts: int, seed: int = 0, prompt: str = "Play the game.") -> Any:
    """A dataset for :func:`environment_factory`'s envs: ``num_prompts`` rows, each a short chat
    prompt (``reset`` appends the task and the first observation) and the env ``seed`` its
    ``reset`` gets, ``seed .. seed + num_prompts - 1``."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [[{"role": "user", "content": prompt}]] * num_prompts,
                              "seed": list(range(seed, seed + num_prompts))})


def environment_tools(environment: Any) -> list[dict[str, Any]]:
    """The JSON schemas of the tools ``GRPOTrainer(environment_factory=environment)`` gives the
    model: the env's public methods but ``reset`` and ``get_reward``, by name, as TRL lists them
    (TRL 1.16) and ``apply_chat_template(tools=...)`` renders them. Conversations rendered with
    these tools (SFT data, :func:`tool_sft_dataset`) share their system prompt with TRL's rollouts.

    Example:
        >>> from textgym.envs.calculator import ArithmeticCalculator
        >>> [tool["function"]["name"] for tool in environment_tools(ArithmeticCalculator)]
        ['add', 'divide', 'multiply', 'subtract']

    Args:
        environment: an ``environment_factory`` (a class or callable making the env) or an env.
    """
    import inspect

    from transformers.utils import get_json_schema

    is_factory = isinstance(environment, type) or not hasattr(environment, "reset")  # a class or a function
    instance = environment() if is_factory else environment
    return [get_json_schema(getattr(instance, name))
            for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]


def tool_sft_dataset(conversations: Sequence[list[dict[str, Any]]], tools: list[dict[str, Any]]) -> Any:
    """A dataset for TRL's ``SFTTrainer`` of tool-calling conversations (chat messages whose
    assistant turns carry ``tool_calls`` and whose ``tool`` turns the results), each rendered with
    ``tools`` (JSON schemas: :func:`environment_tools`): the ``messages`` and ``tools`` columns
    SFTTrainer reads (the tools as JSON, one schema list for every row)."""
    import json

    from datasets import Dataset

    listed = json.dumps(tools)
    return Dataset.from_list([{"messages": list(messages), "tools": listed} for messages in conversations])
