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

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Torch-free: the configs and the algorithm registry (``textgym --help`` reads them); the trainers
# themselves import torch, so they load on first use (``from textgym.trainers import Trainer``).
from textgym.trainers.algorithms import (
    ALGORITHMS,
    CONFIGS,
    GRPOConfig,
    PPOConfig,
    ReinforceConfig,
    config_for,
    trainer_class,
)
from textgym.trainers.engine.early_stop import EarlyStop
from textgym.trainers.engine.train_config import SFTConfig, TrainConfig

if TYPE_CHECKING:
    from textgym.distributed import ProcessContext
    from textgym.policy import Policy
    from textgym.rollout import Envs
    from textgym.trainers.algorithms.grpo import GRPOTrainer
    from textgym.trainers.algorithms.ppo import PPOTrainer
    from textgym.trainers.algorithms.reinforce import ReinforceTrainer
    from textgym.trainers.engine.trainer import Trainer

_LAZY = {
    "Trainer": "textgym.trainers.engine.trainer",
    "ReinforceTrainer": "textgym.trainers.algorithms.reinforce",
    "GRPOTrainer": "textgym.trainers.algorithms.grpo",
    "PPOTrainer": "textgym.trainers.algorithms.ppo",
}


def __getattr__(name: str) -> Any:
    if name == "Trainer":  # with every algorithm loaded, so Trainer.resume finds the checkpoint's
        for algorithm in ALGORITHMS:
            trainer_class(algorithm)
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "TRAINERS":  # the trainer class of each algorithm (read from CONFIGS)
        return {algorithm: trainer_class(algorithm) for algorithm in ALGORITHMS}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_trainer(algorithm: str, policy: Policy, env: str | Envs | None = "textgym/Bandit-v0",
                 config: TrainConfig | dict | None = None, out_dir: str | Path | None = None,
                 env_kwargs: dict[str, Any] | None = None, process: ProcessContext | None = None) -> Trainer:
    """A trainer for ``algorithm`` (one of :data:`ALGORITHMS`: ``"reinforce"``, ``"grpo"``, ``"ppo"``).

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
    config = config_for(algorithm, config)  # ValueError naming the algorithms for an unknown one
    return trainer_class(algorithm)(policy, env=env, config=config, out_dir=out_dir,
                                    env_kwargs=env_kwargs, process=process)


def resume(path: str | Path, policy: Policy | None = None, env: str | Envs | None = None,
           out_dir: str | Path | None = None, process: ProcessContext | None = None) -> Trainer:
    """Continue the run saved in checkpoint ``path`` (see :meth:`Trainer.resume`)."""
    from textgym.trainers.state import trainer_state

    return trainer_state.resume(path, trainer_class, policy=policy, env=env, out_dir=out_dir, process=process)


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The JSON state of checkpoint ``path``, its counters and its algorithm's config checked
    before anything loads.

    Raises:
        ValueError: a counter or a config field out of its range (the file was edited).
    """
    from textgym.trainers.state.checkpoint import STATE_FILE, checkpoint_dir, read_state

    state = read_state(path)
    if isinstance(state.get("config"), dict):
        config = dict(state["config"])
        try:
            config_for(config.pop("algorithm", state.get("algorithm")), config)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{checkpoint_dir(path) / STATE_FILE}: {exc}") from None
    return state


__all__ = [
    "ALGORITHMS",
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
    "read_checkpoint",
    "resume",
]
