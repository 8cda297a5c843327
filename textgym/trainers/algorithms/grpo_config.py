"""GRPO's config: :class:`TrainConfig`'s fields, the group size, the clip range and the credit of each decision."""

from __future__ import annotations

from dataclasses import dataclass

from textgym.settings import like, setting
from textgym.trainers.engine.train_config import TrainConfig


@dataclass
class GRPOConfig(TrainConfig):
    """Group Relative Policy Optimization (Shao et al., 2024), for episodes."""

    group_size: int = setting(4, at_least=2)
    """G: episodes per group. Members of a group start from the same env seed; each episode's
    advantage is its return normalised by the group's mean and std."""
    epochs: int = like(TrainConfig, "epochs", 2)
    """Passes over each batch (the clipped ratio keeps later passes close to the rollout policy)."""
    clip_eps: float = setting(0.2, above=0)
    """Clip range of the importance ratio against the rollout log-probs."""
    scale_rewards: bool = setting(True)
    """Divide group-centred returns by the group's std (``False``: only subtract the mean)."""
    credit: str = setting("episode", choices=("episode", "turn"))
    """How decisions get their advantage. ``"episode"``: every decision carries its episode's
    group-normalised return (the original GRPO; suits one final reward). ``"turn"``: each decision's
    discounted return-to-go (``gamma``) minus the group's mean return-to-go at the same turn, so a
    push that kept the pole up gets more credit than one that dropped it in the same episode
    (suits per-step rewards, e.g. CartPole)."""

    algorithm = "grpo"
    trainer = "textgym.trainers.algorithms.grpo:GRPOTrainer"

    @property
    def episodes_per_group(self) -> int:
        return self.group_size

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.episodes_per_update % self.group_size:
            raise ValueError(
                f"episodes_per_update ({self.episodes_per_update}) must be a multiple of "
                f"group_size ({self.group_size})"
            )


__all__ = ["GRPOConfig"]
