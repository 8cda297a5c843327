"""A trainer's checkpoint: what it holds of a run, and how a run continues from it.

:mod:`~textgym.trainers.state.checkpoint` owns the folder format (atomic writes, weights, optimizer
tensors, RNG states); this module says what of a :class:`~textgym.trainers.Trainer` goes in its
``trainer_state.json`` (the algorithm and its config, the env, the counters, the metrics window,
the alarm history, the algorithm's own state, the policy's record) and puts it back:
:func:`write` (the main process's part of ``Trainer.save_checkpoint``), :func:`load` (into a
trainer of the same run: ``Trainer.load_state``) and :func:`resume` (a trainer rebuilt from the
checkpoint alone: ``Trainer.resume``).

The state is the run's global one (counters, window, rank 0's RNG), so a run may resume with
more or fewer data-parallel processes than wrote it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from textgym import distributed
from textgym.trainers.reporting import alarms
from textgym.trainers.reporting.metrics import METRICS_FILE
from textgym.trainers.state import checkpoint as ckpt

if TYPE_CHECKING:
    from textgym.distributed import ProcessContext
    from textgym.policy import Policy
    from textgym.rollout import Envs
    from textgym.trainers.engine.trainer import Trainer

__all__ = ["load", "optimizers", "resume", "write"]


def optimizers(trainer: Trainer) -> dict[str, torch.optim.Optimizer]:
    """The trainer's optimizers by checkpoint name: ``policy``, and ``sft`` once online SFT made one."""
    found = {"policy": trainer.optimizer}
    if trainer.online_sft.optimizer is not None:
        found["sft"] = trainer.online_sft.optimizer
    return found


def write(trainer: Trainer, path: Path) -> Path:
    """Write ``trainer``'s checkpoint to ``path`` (atomically; :func:`textgym.trainers.state.checkpoint.save_checkpoint`)."""
    state = {
        "algorithm": trainer.algorithm,
        "config": trainer.config.to_dict(),
        "env_id": trainer.env_id,
        "env_kwargs": trainer.env_kwargs,
        "out_dir": str(trainer.out_dir) if trainer.out_dir is not None else None,
        "update_count": trainer.update_count,
        "episodes_seen": trainer.episodes_seen,
        "decisions_seen": trainer.decisions_seen,
        "nonfinite_updates": trainer.nonfinite_updates,
        "wall_time": trainer.wall_time(),
        "schedule_total": trainer.schedule_total,
        "recent": list(trainer.recent),
        "alarm_history": [stats.to_dict() for stats in trainer.alarm_history],
        "warm_started": trainer.alarm_reference.warm_started,
        "algorithm_state": trainer._algorithm_state(),
        "policy": ckpt.policy_record(trainer.policy),
    }
    return ckpt.save_checkpoint(path, policy=trainer.policy, optimizers=optimizers(trainer), state=state,
                                value_head=trainer._value_head(), reference=trainer.policy.reference_state(),
                                files={METRICS_FILE: trainer.writer.lines_up_to(trainer.update_count)})


def load(trainer: Trainer, path: str | Path) -> dict[str, Any]:
    """Load checkpoint ``path`` of this run into ``trainer`` (weights, optimizers, counters, RNG,
    metrics window, alarm history, algorithm state; ``metrics.jsonl`` and transcripts continue
    from it); returns the checkpoint's state."""
    state = ckpt.read_state(path)
    if state.get("optimizers", {}).get("sft"):
        trainer.online_sft.make_optimizer(trainer.trainable_parameters())
    state = ckpt.load_checkpoint(path, model=trainer.model, optimizers=optimizers(trainer),
                                 value_head=trainer._value_head())
    _hyperparameters_from_config(trainer)
    reference = ckpt.checkpoint_dir(path) / ckpt.REFERENCE_FILE
    if reference.is_file():  # the KL reference: a warm start's adapter, or a full fine-tune's copy
        trainer.policy.load_reference_state(ckpt.load_tensors(reference))
    trainer.update_count = state["update_count"]
    trainer.episodes_seen = state["episodes_seen"]
    trainer.decisions_seen = state["decisions_seen"]
    trainer.nonfinite_updates = state.get("nonfinite_updates", 0)
    trainer.clock = (state["wall_time"], time.monotonic())
    trainer.schedule_total = state.get("schedule_total")
    trainer.recent.clear()
    # checkpoints written before outcomes were tracked hold 3-tuples
    trainer.recent.extend((*r, None)[:4] for r in state["recent"])
    trainer.alarm_history = [alarms.UpdateStats.from_metrics(stats) for stats in state.get("alarm_history", [])]
    trainer.alarm_reference = dataclasses.replace(trainer.alarm_reference,
                                                  warm_started=bool(state.get("warm_started", False)))
    trainer._load_algorithm_state(state.get("algorithm_state", {}))
    trainer.writer.resume(ckpt.checkpoint_dir(path), trainer.update_count)  # metrics.jsonl, tb/
    trainer.transcripts.resume(trainer.update_count)
    return state


def _hyperparameters_from_config(trainer: Trainer) -> None:
    """Set the loaded optimizers' learning rates and weight decay from ``trainer.config``: a
    checkpoint's optimizer state carries the values it was saved with, and a resumed run may have
    changed them (``TrainConfig.with_changes``); the moments are kept."""
    for group, fresh in zip(trainer.optimizer.param_groups, trainer._param_groups(), strict=True):
        group["base_lr"] = group["lr"] = fresh["base_lr"]
        group["weight_decay"] = trainer.config.weight_decay
    if trainer.online_sft.optimizer is not None:
        for group in trainer.online_sft.optimizer.param_groups:
            group["lr"] = trainer.config.sft_lr


def resume(path: str | Path, trainer_class: Callable[[str], type[Trainer]], policy: Policy | None = None,
           env: str | Envs | None = None, out_dir: str | Path | None = None,
           process: ProcessContext | None = None, changes: dict[str, Any] | None = None,
           env_kwargs: dict[str, Any] | None = None) -> Trainer:
    """A trainer of the algorithm, config and env recorded in checkpoint ``path``, loaded from it:
    ``trainer_class(algorithm)`` builds it (the algorithms sit above this module; see
    ``Trainer.resume`` for the other arguments). ``changes``: settings of the algorithm's config
    that differ from the recorded ones from now on (``TrainConfig.with_changes``: not the seeds
    nor the adapter's shape); the optimizer's moments are kept. The config is checked before a
    model loads."""
    state = ckpt.read_state(path)
    config = dict(state["config"])
    algorithm = config.pop("algorithm", state["algorithm"])
    cls = trainer_class(algorithm)
    try:
        config = cls.config_class.coerce(config)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{ckpt.checkpoint_dir(path) / ckpt.STATE_FILE}: {exc}") from None
    if changes:
        config = config.with_changes(changes)
    process = process if process is not None else distributed.init()
    if policy is None:  # on this process's device (its GPU in a multi-GPU run)
        policy = ckpt.policy_from_record(state.get("policy", {}),
                                         device=process.device if process.is_distributed else None)
    env = env if env is not None else state["env_id"]
    if env is None:
        raise ValueError("the checkpoint's env was a vector env object: pass env=")
    out_dir = out_dir if out_dir is not None else state.get("out_dir")
    env_kwargs = env_kwargs if env_kwargs is not None else state.get("env_kwargs")
    trainer = cls(policy, env=env, config=config, out_dir=out_dir, env_kwargs=env_kwargs,
                  process=process)
    trainer.load_state(path)
    return trainer
