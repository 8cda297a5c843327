"""A LlamaGym-style agent: subclass it, drive it with ``act`` / ``assign_reward`` / ``terminate_episode``.

For people who write their own env loop (as in LlamaGym) rather than using textgym's text envs.
A subclass says how the task is put to the model (:meth:`Agent.get_system_prompt`,
:meth:`Agent.format_observation`) and how an answer becomes an env action
(:meth:`Agent.extract_action`). The agent acts with a :class:`textgym.Policy`, keeps each
decision's token ids and log-probs, and trains with any textgym algorithm once its batch is full.

Two ways to build one:

* LlamaGym's: ``Agent(model, tokenizer, device, generate_config_dict, ppo_config_dict)``, with
  LlamaGym's defaults (below) and its dict keys mapped to textgym settings. A LlamaGym script
  runs after changing its import (and its model loading: TRL no longer ships value-head models;
  ``model, tokenizer = textgym.models.load(name)``).
* textgym's: ``Agent(model_or_name, tokenizer=None, device=None, *, algorithm=, config=, mode=,
  action_names=, default_action=, **policy_settings)``.

LlamaGym's form is used when either dict is given, or when no textgym setting is (``algorithm``,
``config``, ``mode``, ``action_names``, policy settings). Its defaults are LlamaGym's: PPO with a
KL penalty to the reference policy (TRL 0.7's ``PPOConfig`` defaults: ``lr`` 1e-5, ``kl_coef`` 0.2,
4 epochs, ``gamma`` 1, ``gae_lambda`` 0.95, ``clip_eps`` 0.2, ``value_clip`` 0.2, ``value_coef``
0.1, no gradient clipping), a batch of 16 turns in minibatches of 16, the whole episode as one
conversation in every prompt (``history="full"``), and free-text answers sampled with
``temperature`` 0.9, ``top_p`` 0.6 and at most 32 new tokens. The dict keys:

=====================================  ===========================================================
LlamaGym key                            textgym setting
=====================================  ===========================================================
``max_new_tokens``, ``temperature``,    the policy's setting of the same name
``top_p``                               (``generate/`` prefixes are dropped, as LlamaGym did)
``do_sample``                           ``False``: act greedily
``top_k``                               0 (LlamaGym's): none; other values are warned about
``stop_strings``                        ``stop``
``batch_size``                          turns per update (LlamaGym trains on exactly that many
                                        turns when an episode ends and keeps the rest)
``mini_batch_size``                     ``minibatch_size`` (in turns)
``learning_rate``, ``ppo_epochs``,      ``lr``, ``epochs``, ``gamma``, ``gae_lambda``,
``gamma``, ``lam``, ``cliprange``,      ``clip_eps``, ``value_clip``, ``value_coef``,
``cliprange_value``, ``vf_coef``,       ``kl_coef`` (a fixed coefficient: adaptive KL control
``init_kl_coef``                        is not implemented)
``early_stopping`` + ``target_kl``      ``target_kl`` (stop the update past it)
``max_grad_norm``,                      the trainer setting of the same name
``gradient_accumulation_steps``,
``seed``
=====================================  ===========================================================

Any other key (a tracker setting, ``adap_kl_ctrl=True``, ...) is a warning naming it. Keyword
arguments win over the dicts. Differences that remain: the KL penalty is a loss term rather than
a per-token reward; credit goes through PPO's value head and GAE across turns rather than
spreading a sparse final reward over the turns; a LoRA adapter is trained by default
(``config={"use_lora": False}`` trains every weight); an answer :meth:`extract_action` cannot read
plays ``default_action`` instead of returning ``None``, and stays in the conversation.

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

import dataclasses
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from textgym import models
from textgym.policy import Policy, PolicyConfig
from textgym.policy.conversation import Conversation
from textgym.rollout import Episode, Step
from textgym.trainers import CONFIGS, TrainConfig, make_trainer
from textgym.wrappers.invalid_answer import AnswerCounter, InvalidAnswerRule

logger = logging.getLogger("textgym.agent")

#: LlamaGym's ``generate_config_dict`` when none is given.
LLAMAGYM_GENERATE = {"max_new_tokens": 32, "do_sample": True, "top_p": 0.6, "top_k": 0, "temperature": 0.9}
#: LlamaGym's ``ppo_config_dict`` when none is given.
LLAMAGYM_PPO = {"batch_size": 16, "mini_batch_size": 16}
#: TRL 0.7's ``PPOConfig`` defaults (what LlamaGym trained with), as textgym PPO settings.
TRL_PPO_DEFAULTS = {"lr": 1e-5, "kl_coef": 0.2, "epochs": 4, "gamma": 1.0, "gae_lambda": 0.95, "clip_eps": 0.2,
                    "value_clip": 0.2, "value_coef": 0.1, "max_grad_norm": None}

_GENERATE_KEYS = {"max_new_tokens": "max_new_tokens", "temperature": "temperature", "top_p": "top_p",
                  "stop_strings": "stop"}
_PPO_KEYS = {"mini_batch_size": "minibatch_size", "forward_batch_size": "minibatch_size", "learning_rate": "lr",
             "ppo_epochs": "epochs", "gamma": "gamma", "lam": "gae_lambda", "cliprange": "clip_eps",
             "cliprange_value": "value_clip", "vf_coef": "value_coef", "init_kl_coef": "kl_coef",
             "max_grad_norm": "max_grad_norm", "gradient_accumulation_steps": "gradient_accumulation_steps",
             "seed": "seed"}


def llamagym_generate_settings(generate_config: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """LlamaGym's ``generate_config_dict`` -> ``(policy settings, act greedily)``; keys may carry
    a ``generate/`` prefix. A key with no textgym setting is a warning naming it."""
    settings: dict[str, Any] = {}
    greedy = False
    ignored = []
    for key, value in generate_config.items():
        name = key.split("/")[-1]
        if name in _GENERATE_KEYS:
            settings[_GENERATE_KEYS[name]] = tuple(value) if name == "stop_strings" else value
        elif name == "do_sample":
            greedy = not value
        elif name == "top_k" and not value:
            pass  # 0 / None: no top-k cut, as textgym samples
        else:
            ignored.append(key)
    if settings.get("temperature") == 0:  # Hugging Face's greedy spelling
        settings.pop("temperature")
        greedy = True
    if ignored:
        warnings.warn(f"generate_config_dict: {', '.join(map(repr, ignored))} "
                      f"{'has' if len(ignored) == 1 else 'have'} no textgym setting and "
                      f"{'is' if len(ignored) == 1 else 'are'} ignored (textgym samples with temperature "
                      f"and top_p)", stacklevel=3)
    return settings, greedy


def llamagym_ppo_settings(ppo_config: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """LlamaGym's ``ppo_config_dict`` (TRL 0.7 ``PPOConfig`` keys) -> ``(textgym PPO config
    fields, turns per update)``, on top of :data:`TRL_PPO_DEFAULTS`. A key with no textgym
    setting is a warning naming it."""
    fields = dict(TRL_PPO_DEFAULTS)
    fields["minibatch_size"] = LLAMAGYM_PPO["mini_batch_size"]
    turns = LLAMAGYM_PPO["batch_size"]
    ignored = []
    early_stopping, target_kl = False, 1.0  # TRL's defaults
    for key, value in ppo_config.items():
        if key == "batch_size":
            turns = int(value)
        elif key in _PPO_KEYS:
            fields[_PPO_KEYS[key]] = value
        elif key == "early_stopping":
            early_stopping = bool(value)
        elif key == "target_kl":
            target_kl = float(value)
        elif (key == "adap_kl_ctrl" and not value) or (key == "kl_penalty" and value == "kl"):
            pass  # what textgym does
        else:
            ignored.append(key)
    if early_stopping:
        fields["target_kl"] = target_kl
    if turns < 1:
        raise ValueError(f"ppo_config_dict: batch_size must be >= 1, got {turns}")
    if ignored:
        warnings.warn(f"ppo_config_dict: {', '.join(map(repr, ignored))} "
                      f"{'has' if len(ignored) == 1 else 'have'} no textgym setting and "
                      f"{'is' if len(ignored) == 1 else 'are'} ignored", stacklevel=3)
    return fields, turns


class Agent:
    """Base class of LlamaGym-style agents (override the three methods below).

    Args:
        model: a Hugging Face causal LM, or a model name/path for :func:`textgym.models.load`
            (``"smollm2-135m"``, ``"tiny"``, a hub id or a folder). A value-head wrapper (a model
            with a ``pretrained_model`` attribute, such as TRL's old
            ``AutoModelForCausalLMWithValueHead``) is unwrapped: PPO brings its own value head.
        tokenizer: the model's tokenizer (loaded with the model when ``model`` is a name).
        device: where the model runs (default: the model's device; CUDA if available for a name).
        generate_config_dict: LlamaGym's generation settings (see the module docstring).
        ppo_config_dict: LlamaGym's PPO settings (see the module docstring).
        algorithm: ``"reinforce"``, ``"grpo"`` or ``"ppo"`` (default: ``"ppo"`` in LlamaGym's
            form, else ``"reinforce"``). GRPO's groups are consecutive episodes here (the agent
            does not control env seeds).
        config: the algorithm's config (or a dict of its fields): learning rate, LoRA,
            ``episodes_per_update`` (the batch that triggers training in textgym's form), ...
        mode: ``"generate"`` (free text, parsed by :meth:`extract_action`, as in LlamaGym; the
            default) or ``"score"`` (the model picks one of ``action_names``: always well formed).
        action_names: the answers to choose from in score mode (each is passed to
            :meth:`extract_action`); optional in generate mode.
        default_action: the action played when :meth:`extract_action` raises or returns
            ``None`` (any env action: an int, a text command...).
        **policy_kwargs: policy settings (:class:`textgym.policy.PolicyConfig`: ``temperature``,
            ``max_new_tokens``, ``history`` (the episode as a conversation), ``seed``, ...), on top
            of the model registry's defaults for a model name.

    Attributes:
        model, tokenizer, device: the policy's model (with its LoRA adapter), tokenizer and device.
        current_episode_messages: the chat of the episode so far, as LlamaGym builds it.
        current_episode_rewards: the reward of each turn of the episode so far.
        current_batch: the turns waiting for the next update (``queries``, ``responses``,
            ``rewards``: token-id and reward tensors, as in LlamaGym).
    """

    def __init__(self, model: str | torch.nn.Module, tokenizer: Any = None, device: str | torch.device | None = None,
                 generate_config_dict: dict[str, Any] | None = None, ppo_config_dict: dict[str, Any] | None = None,
                 *, algorithm: str | None = None, config: TrainConfig | dict | None = None, mode: str | None = None,
                 action_names: Sequence[str] | None = None, default_action: Any = 0, **policy_kwargs: Any):
        llamagym = (generate_config_dict is not None or ppo_config_dict is not None
                    or (algorithm is None and config is None and mode is None and action_names is None
                        and not policy_kwargs))
        self.greedy = False
        self.batch_turns: int | None = None  # LlamaGym's batch: turns per update
        if llamagym:
            generate, self.greedy = llamagym_generate_settings(
                LLAMAGYM_GENERATE if generate_config_dict is None else generate_config_dict)
            fields, self.batch_turns = llamagym_ppo_settings(LLAMAGYM_PPO if ppo_config_dict is None else ppo_config_dict)
            policy_kwargs = {"history": "full", **generate, **policy_kwargs}
            algorithm = algorithm or "ppo"
            known = {f.name for f in dataclasses.fields(CONFIGS.get(algorithm, TrainConfig))}
            config = {**{k: v for k, v in fields.items() if k in known},
                      **(config.to_dict() if isinstance(config, TrainConfig) else config or {})}
            config.pop("algorithm", None)
        algorithm = algorithm or "reinforce"
        mode = mode or "generate"
        name = None
        if isinstance(model, str):
            name = model
            model, loaded_tokenizer = models.load(model, device=device)
            tokenizer = tokenizer or loaded_tokenizer
        model = getattr(model, "pretrained_model", model)  # a value-head wrapper: the language model inside
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
        window = self.policy.conversation_window
        self.conversation = Conversation(window) if window is not None else None
        self.current_episode: list[Step] = []     # the steps of the episode being played
        self.episodes: list[Episode] = []         # finished episodes (or parts) waiting for the next update
        # answers extract_action could not read (all time): the env's invalid-answer sequence,
        # with default_action as the fallback
        self.answers = AnswerCounter(InvalidAnswerRule(policy="default"))

    # --- LlamaGym's attributes -----------------------------------------------------------------

    @property
    def model(self) -> torch.nn.Module:
        """The language model being trained (with its LoRA adapter)."""
        return self.policy.model

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    @property
    def device(self) -> torch.device:
        return self.policy.device

    @property
    def current_episode_messages(self) -> list[dict[str, str]]:
        """The episode so far as chat messages: the system prompt, then each formatted observation
        and the model's answer to it (what the model read, in conversation mode)."""
        messages = [{"role": "system", "content": self.get_system_prompt()}]
        for step in self.current_episode:
            messages += [{"role": "user", "content": step.observation},
                         {"role": "assistant", "content": step.decision.text}]
        return messages

    @property
    def current_episode_rewards(self) -> list[float]:
        """The reward credited to each turn of the episode so far."""
        return [step.reward for step in self.current_episode]

    @property
    def current_batch(self) -> dict[str, list[torch.Tensor]]:
        """The turns waiting for the next update, as LlamaGym keeps them: per turn, the context's
        token ids (``queries``), the answer's (``responses``) and its reward (``rewards``)."""
        steps = [step for episode in self.episodes for step in episode.steps]
        return {"queries": [torch.tensor(s.decision.prompt_ids) for s in steps],
                "responses": [torch.tensor(s.decision.answer_ids) for s in steps],
                "rewards": [torch.tensor(s.reward) for s in steps]}

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

    def act(self, observation: Any, greedy: bool | None = None) -> Any:
        """The action for ``observation``. Always a usable action: when :meth:`extract_action`
        raises or returns ``None``, ``default_action`` is played and the turn is recorded invalid.
        ``greedy``: argmax / greedy decoding (default: sampling, unless ``do_sample=False``)."""
        text = self.format_observation(observation)
        conversations = [self.conversation] if self.conversation is not None else None
        [decision] = self.policy.act([text], [self.get_system_prompt()], [self.action_names],
                                     greedy=self.greedy if greedy is None else greedy, conversations=conversations)
        error = None
        try:
            action = self.extract_action(decision.text)
        except Exception as exc:  # noqa: BLE001 - a bad answer must never crash the loop
            action, error = None, f"{type(exc).__name__}: {exc}"
        if action is not None:
            record = self.answers.accept(decision.text, action, self._action_name(action),
                                         "extract_action")
        else:
            _, record = self.answers.refuse(decision.text, error=error)  # policy "default"
            action = self.default_action
            record = dataclasses.replace(record, action=action)
        self.current_episode.append(Step(decision=decision, reward=0.0, terminated=False, truncated=False,
                                         parse=record.to_dict(), observation=text, env_index=0))
        return action

    @property
    def invalid_count(self) -> int:
        """Answers :meth:`extract_action` could not read, since the agent was made."""
        return self.answers.invalid_count

    def _action_name(self, action: Any) -> str:
        """The name of an env action: its ``action_names`` entry (an index), else its text."""
        if isinstance(action, int) and 0 <= action < len(self.action_names):
            return self.action_names[action]
        return str(action)

    def assign_reward(self, reward: float) -> None:
        """Credit ``reward`` to the latest action (called after each ``env.step``; adds up if called twice)."""
        if not self.current_episode:
            raise RuntimeError("assign_reward() before any act(): there is no action to credit")
        self.current_episode[-1].reward += float(reward)

    def terminate_episode(self, train: bool = True) -> dict[str, Any]:
        """End the episode. With ``train=False`` the episode is dropped (e.g. an evaluation
        episode); else it joins the batch, and when the batch is full (``batch_size`` turns in
        LlamaGym's form, ``config.episodes_per_update`` episodes in textgym's) one update runs and
        its metrics are returned (else an empty dict)."""
        steps, self.current_episode = self.current_episode, []
        if self.conversation is not None:
            self.conversation.restart()
        if not train or not steps:  # e.g. an evaluation episode: not trained on
            return {}
        steps[-1].terminated = True
        self.episodes.append(Episode(steps=steps, system_prompt=self.get_system_prompt()))
        if self.batch_turns is None:
            if len(self.episodes) < self.config.episodes_per_update:
                return {}
            batch, self.episodes = self.episodes, []
        else:
            if sum(episode.length for episode in self.episodes) < self.batch_turns:
                return {}
            batch, self.episodes = _split_turns(self.episodes, self.batch_turns)
        return self.trainer.update(batch)

    def save(self, path: str) -> Path:
        """Checkpoint the agent's training state (adapter, optimizer, counters)."""
        return self.trainer.save_checkpoint(path)


def _split_turns(episodes: list[Episode], turns: int) -> tuple[list[Episode], list[Episode]]:
    """The first ``turns`` turns of ``episodes`` (an episode cut at the boundary ends there, not
    terminated: PPO bootstraps from its last value) and the rest, kept for the next batch."""
    batch: list[Episode] = []
    for k, episode in enumerate(episodes):
        room = turns - sum(e.length for e in batch)
        if episode.length <= room:
            batch.append(episode)
            continue
        head = Episode(steps=episode.steps[:room], system_prompt=episode.system_prompt)
        tail = Episode(steps=episode.steps[room:], system_prompt=episode.system_prompt, info=episode.info)
        return batch + ([head] if room else []), [tail] + episodes[k + 1:]
    return batch, []


__all__ = ["Agent", "llamagym_generate_settings", "llamagym_ppo_settings"]
