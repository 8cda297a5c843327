"""PPO's config: :class:`TrainConfig`'s fields, GAE and the value head's."""

from __future__ import annotations

from dataclasses import dataclass

from textgym.settings import like, setting
from textgym.trainers.engine.train_config import TrainConfig


@dataclass
class PPOConfig(TrainConfig):
    """Proximal Policy Optimization (Schulman et al., 2017) with a value head and GAE."""

    epochs: int = like(TrainConfig, "epochs", 4)
    """Passes over each batch."""
    gamma: float = like(TrainConfig, "gamma", 0.99)
    """Discount factor of returns and GAE."""
    gae_lambda: float = setting(0.95, at_least=0, at_most=1)
    """GAE lambda (1: Monte-Carlo returns, 0: one-step TD)."""
    clip_eps: float = setting(0.2, above=0)
    """Clip range of the policy's importance ratio."""
    value_clip: float | None = setting(0.2, above=0)
    """Clip range of the value update around the rollout's values (``None``: plain MSE)."""
    value_coef: float = setting(0.5, at_least=0)
    """Weight of the value loss."""
    value_lr: float = setting(1e-3, above=0)
    """Learning rate of the value head (it starts from scratch, so it learns faster than LoRA)."""
    value_hidden: int = setting(128, at_least=1)
    """Width of the value head's hidden layer."""
    value_detach: bool = setting(True)
    """Do not back-propagate the value loss into the language model (the value head reads the
    last hidden state as fixed features); keeps the policy's update clean."""
    normalize_advantages: bool = setting(True)
    """Normalise advantages over the batch."""

    #: The value head's width is the shape of its checkpointed weights.
    fixed_on_resume = (*TrainConfig.fixed_on_resume, "value_hidden")

    algorithm = "ppo"
    trainer = "textgym.trainers.algorithms.ppo:PPOTrainer"


__all__ = ["PPOConfig"]
