"""Trainers: REINFORCE, GRPO and PPO behind one interface.

Example:
    >>> import textgym
    >>> from textgym.trainers import make_trainer
    >>> model, tok = textgym.models.load("tiny")
    >>> policy = textgym.Policy(model, tok, mode="score")
    >>> trainer = make_trainer("grpo", policy, env="textgym/Bandit-v0",
    ...                        config={"num_envs": 8, "episodes_per_update": 16})
    >>> metrics = trainer.train(updates=1)            # one dict per update
    >>> result = trainer.evaluate(episodes=16)        # greedy, held-out seeds
    >>> 0.0 <= result["return_mean"] <= 1.0
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from textgym.policy import Policy
from textgym.rollout import Envs
from textgym.trainers.base import Trainer
from textgym.trainers.config import (
    CONFIGS,
    GRPOConfig,
    PPOConfig,
    ReinforceConfig,
    SFTConfig,
    TrainConfig,
    config_for,
)
from textgym.trainers.early_stop import EarlyStop
from textgym.trainers.grpo import GRPOTrainer
from textgym.trainers.ppo import PPOTrainer
from textgym.trainers.reinforce import ReinforceTrainer

if TYPE_CHECKING:
    from textgym.distributed import ProcessContext

TRAINERS: dict[str, type[Trainer]] = {
    "reinforce": ReinforceTrainer,
    "grpo": GRPOTrainer,
    "ppo": PPOTrainer,
}


def make_trainer(algorithm: str, policy: Policy, env: str | Envs | None = "textgym/Bandit-v0",
                 config: TrainConfig | dict | None = None, out_dir: str | Path | None = None,
                 env_kwargs: dict[str, Any] | None = None, process: ProcessContext | None = None) -> Trainer:
    """A trainer for ``algorithm`` (``"reinforce"``, ``"grpo"`` or ``"ppo"``).

    Args:
        algorithm: which algorithm.
        policy: a :class:`textgym.Policy`.
        env: a text env id or a ``TextVectorEnv``.
        config: the algorithm's config, a dict of its fields, a config of another algorithm
            (its shared fields are kept), or ``None`` for defaults.
        out_dir: where metrics and checkpoints go.
        env_kwargs: passed to ``textgym.make_vec`` when ``env`` is an id.
        process: this process's place in a data-parallel run (default:
            :func:`textgym.distributed.init`: one process unless a launcher started several).
    """
    algorithm = algorithm.lower()
    if algorithm not in TRAINERS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {sorted(TRAINERS)}")
    return TRAINERS[algorithm](policy, env=env, config=config_for(algorithm, config), out_dir=out_dir,
                               env_kwargs=env_kwargs, process=process)


def resume(path: str | Path, policy: Policy | None = None, env: str | Envs | None = None,
           out_dir: str | Path | None = None, process: ProcessContext | None = None) -> Trainer:
    """Continue the run saved in checkpoint ``path`` (see :meth:`Trainer.resume`)."""
    return Trainer.resume(path, policy=policy, env=env, out_dir=out_dir, process=process)


__all__ = [
    "CONFIGS",
    "TRAINERS",
    "EarlyStop",
    "GRPOConfig",
    "GRPOTrainer",
    "PPOConfig",
    "PPOTrainer",
    "ReinforceConfig",
    "ReinforceTrainer",
    "SFTConfig",
    "TrainConfig",
    "Trainer",
    "config_for",
    "make_trainer",
    "resume",
]
