"""The algorithms: REINFORCE, GRPO and PPO, each a :class:`~textgym.trainers.engine.trainer.Trainer`
whose ``update`` reads top to bottom and calls down into :mod:`textgym.trainers.engine`, with its
config beside it (``<algo>_config.py``).

This module is the algorithm registry, torch-free (``textgym --help`` reads it): each algorithm's
name, its config class and (``config.trainer``) its trainer, imported on first use.
"""

from __future__ import annotations

import importlib

from textgym.trainers.algorithms.grpo_config import GRPOConfig
from textgym.trainers.algorithms.ppo_config import PPOConfig
from textgym.trainers.algorithms.reinforce_config import ReinforceConfig
from textgym.trainers.engine.train_config import TrainConfig

#: The algorithm registry: each algorithm's name and its config class (whose ``trainer`` names its
#: trainer). Everything that lists the algorithms reads it (``make_trainer``, ``textgym train
#: --algo``, the run config's check); a new algorithm is one entry here.
CONFIGS: dict[str, type[TrainConfig]] = {
    cls.algorithm: cls for cls in (ReinforceConfig, GRPOConfig, PPOConfig)
}
#: The algorithms' names, in the order the CLI lists them.
ALGORITHMS: tuple[str, ...] = tuple(CONFIGS)


def config_class(algorithm: str) -> type[TrainConfig]:
    """The config class of ``algorithm``.

    Raises:
        ValueError: an unknown algorithm (naming the known ones).
    """
    if algorithm not in CONFIGS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {sorted(CONFIGS)}")
    return CONFIGS[algorithm]


def trainer_class(algorithm: str) -> type:
    """The trainer class of ``algorithm`` (imports it, and torch with it)."""
    module, name = config_class(algorithm).trainer.split(":")
    return getattr(importlib.import_module(module), name)


def config_for(algorithm: str, config: TrainConfig | dict | None = None) -> TrainConfig:
    """The config of ``algorithm`` from a config object, a dict of fields, or defaults
    (:meth:`TrainConfig.coerce`)."""
    return config_class(algorithm).coerce(config)


__all__ = ["ALGORITHMS", "CONFIGS", "GRPOConfig", "PPOConfig", "ReinforceConfig", "config_class",
           "config_for", "trainer_class"]
