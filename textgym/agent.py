"""A LlamaGym-style agent: subclass it, drive it with ``act`` / ``assign_reward`` / ``terminate_episode``.

For people who write their own env loop (as in LlamaGym) rather than using textgym's text envs.
A subclass says how the task is put to the model (:meth:`Agent.get_system_prompt`,
:meth:`Agent.format_observation`) and how an answer becomes an env action
(:meth:`Agent.extract_action`). The agent acts with a :class:`textgym.Policy`, keeps each
decision's token ids and log-probs, and trains with any textgym algorithm once it has collected
``config.episodes_per_update`` episodes.

Example:
    >>> import re, gymnasium as gym, textgym
    >>> class BlackjackAgent(textgym.Agent):
    ...     def get_system_prompt(self):
    ...         return "You play blackjack. Answer 'Action: 0' to stick or 'Action: 1' to hit."
    ...     def format_observation(self, obs):
    ...         return f"You: {obs[0]}. Dealer: {obs[1]}. You have {'an' if obs[2] else 'no'} ace."
    ...     def extract_action(self, response):
    ...         return int(re.search(r"Action: ([01])", response).group(1))
    >>> agent = BlackjackAgent("tiny", mode="score", action_names=["Action: 0", "Action: 1"],
    ...                        config={"episodes_per_update": 4})
    >>> env = gym.make("Blackjack-v1")
    >>> obs, info = env.reset(seed=0)
    >>> action = agent.act(obs)
    >>> action in (0, 1)
    True
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from textgym import models
from textgym.policy import Policy, PolicyConfig
from textgym.rollout import Episode, Step
from textgym.trainers import TrainConfig, make_trainer

logger = logging.getLogger("textgym.agent")


class Agent:
    """Base class of LlamaGym-style agents (override the three methods below).

    Args:
        model: a Hugging Face causal LM, or a model name/path for :func:`textgym.models.load`
            (``"smollm2-135m"``, ``"tiny"``, a hub id or a folder).
        tokenizer: the model's tokenizer (loaded with the model when ``model`` is a name).
        device: where the model runs (default: CUDA if available, else CPU).
        algorithm: ``"reinforce"``, ``"grpo"`` or ``"ppo"``. GRPO's groups are consecutive
            episodes here (the agent does not control env seeds).
        config: the algorithm's config (or a dict of its fields): learning rate, LoRA,
            ``episodes_per_update`` (the batch that triggers training), ...
        mode: ``"generate"`` (free text, parsed by :meth:`extract_action`, as in LlamaGym) or
            ``"score"`` (the model picks one of ``action_names``: always a well-formed answer).
        action_names: the answers to choose from in score mode (each is passed to
            :meth:`extract_action`); optional in generate mode.
        default_action: the action used when :meth:`extract_action` fails or returns ``None``.
        **policy_kwargs: policy settings (:class:`textgym.policy.PolicyConfig`: temperature,
            max_new_tokens, seed, ...), on top of the model registry's defaults for a model name.
    """

    def __init__(self, model: str | torch.nn.Module, tokenizer: Any = None, device: str | torch.device | None = None,
                 *, algorithm: str = "reinforce", config: TrainConfig | dict | None = None, mode: str = "generate",
                 action_names: Sequence[str] | None = None, default_action: Any = 0, **policy_kwargs: Any):
        name = None
        if isinstance(model, str):
            name = model
            model, loaded_tokenizer = models.load(model, device=device)
            tokenizer = tokenizer or loaded_tokenizer
        if tokenizer is None:
            raise ValueError("Agent needs the model's tokenizer (or a model name to load both)")
        if mode == "score" and not action_names:
            raise ValueError("mode='score' needs action_names: the answers the model chooses from")
        if device is not None:
            model.to(device)
        self.action_names = list(action_names) if action_names else []
        self.default_action = default_action
        # A model name gets the model registry's defaults (PolicyConfig.for_model), as everywhere.
        settings = PolicyConfig.for_model(name, mode=mode, **policy_kwargs)
        self.policy = Policy(model, tokenizer, config=settings, device=device, name=name)
        self.trainer = make_trainer(algorithm, self.policy, env=None, config=config)
        self.config = self.trainer.config
        self.current_episode: list[Step] = []     # the steps of the episode being played
        self.episodes: list[Episode] = []         # finished episodes waiting for the next update
        self.invalid_count = 0                    # answers extract_action could not read (all time)

    # --- what a subclass writes ------------------------------------------------------------

    def get_system_prompt(self) -> str:
        """The task description and answer format (the same for every turn)."""
        raise NotImplementedError

    def format_observation(self, observation: Any) -> str:
        """The env observation as a short text."""
        raise NotImplementedError

    def extract_action(self, response: str) -> Any:
        """The env action named by the model's answer (may raise or return ``None`` if unreadable)."""
        raise NotImplementedError

    # --- the loop ------------------------------------------------------------------------------

    def act(self, observation: Any, greedy: bool = False) -> Any:
        """The action for ``observation``. Always a usable action: when :meth:`extract_action`
        raises or returns ``None``, ``default_action`` is played and the turn is recorded invalid."""
        text = self.format_observation(observation)
        [decision] = self.policy.act([text], [self.get_system_prompt()], [self.action_names], greedy=greedy)
        error = None
        try:
            action = self.extract_action(decision.text)
        except Exception as exc:  # noqa: BLE001 - a bad answer must never crash the loop
            action, error = None, f"{type(exc).__name__}: {exc}"
        valid = action is not None
        if not valid:
            action = self.default_action
            self.invalid_count += 1
        parse = {"raw": decision.text, "action": action, "valid": valid,
                 "policy": None if valid else "default", "error": error}
        self.current_episode.append(Step(decision=decision, reward=0.0, terminated=False, truncated=False,
                                         parse=parse, observation=text, env_index=0))
        return action

    def assign_reward(self, reward: float) -> None:
        """Credit ``reward`` to the latest action (called after each ``env.step``; adds up if called twice)."""
        if not self.current_episode:
            raise RuntimeError("assign_reward() before any act(): there is no action to credit")
        self.current_episode[-1].reward += float(reward)

    def terminate_episode(self, train: bool = True) -> dict[str, Any]:
        """End the episode. With ``train=False`` the episode is dropped (e.g. an evaluation
        episode); else it joins the batch, and when ``config.episodes_per_update`` episodes are
        waiting, one update runs and its metrics are returned (else an empty dict)."""
        steps, self.current_episode = self.current_episode, []
        if not train or not steps:  # e.g. an evaluation episode: not trained on
            return {}
        steps[-1].terminated = True
        self.episodes.append(Episode(steps=steps, system_prompt=self.get_system_prompt()))
        if len(self.episodes) < self.config.episodes_per_update:
            return {}
        batch, self.episodes = self.episodes, []
        return self.trainer.update(batch)

    def save(self, path: str) -> Path:
        """Checkpoint the agent's training state (adapter, optimizer, counters)."""
        return self.trainer.save_checkpoint(path)


__all__ = ["Agent"]
