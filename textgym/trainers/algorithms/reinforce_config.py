"""REINFORCE's config: :class:`TrainConfig`'s fields and how returns become advantages."""

from __future__ import annotations

from dataclasses import dataclass

from textgym.settings import like, setting
from textgym.trainers.engine.train_config import TrainConfig


@dataclass
class ReinforceConfig(TrainConfig):
    """REINFORCE with a baseline (Williams, 1992)."""

    lr: float = like(TrainConfig, "lr", 1e-4)
    """Peak learning rate (see :class:`TrainConfig`)."""
    baseline: str = setting("batch", choices=("batch", "ema", "none"))
    """How returns become advantages: ``"batch"`` (subtract the batch mean and divide by its std),
    ``"ema"`` (subtract an exponential moving average of past returns), or ``"none"``."""
    ema_decay: float = setting(0.9, at_least=0, at_most=1)
    """Decay of the EMA baseline (``baseline="ema"``): new = decay * old + (1 - decay) * batch mean."""

    algorithm = "reinforce"
    trainer = "textgym.trainers.algorithms.reinforce:ReinforceTrainer"


__all__ = ["ReinforceConfig"]
