"""The training loop of :meth:`Trainer.train <textgym.trainers.Trainer.train>`: collect, update,
checkpoint, until a budget is spent or a stop comes.

Budgets in updates or episodes do the same work on any machine; ``seconds`` is a cap on wall
time, checked before each update and inside its rollout: when the cap comes while episodes are
being collected, the rollout stops there and that update is dropped, so the trainer (and a
checkpoint saved next) stays at the last complete update, and a resumed run replays the same
episodes. An update whose rollout was complete is finished.

The stops, in the order they are checked: the budget, the time cap (before an update, then
inside its rollout), sub-envs lost for good (a remote env's server gone: the run goes on while at
least half remain), and after each update the greedy check (solved), the callback (returning
``False``) and the lost sub-envs again. With several processes every one runs this loop and each
stop is agreed by all of them (``ProcessContext.agree_to_stop``), so they stop after the same
update (a rollout cut on one rank drops the update on all).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from textgym import seeds

if TYPE_CHECKING:
    from textgym.trainers.engine.early_stop import EarlyStop
    from textgym.trainers.engine.trainer import Trainer

__all__ = ["StopReason", "train"]

logger = logging.getLogger("textgym.trainers")

StopReason = Literal["budget", "solved", "time_limit", "callback", "env_failure"]
"""Why :meth:`Trainer.train` returned: its updates or episodes were spent, the greedy check
passed, the time cap came (the update in progress dropped), the callback returned ``False``, or
too many sub-envs failed for good."""


def train(trainer: Trainer, episodes: int | None, updates: int | None, seconds: float | None,
          callback: Callable[[dict[str, Any]], Any] | None, early_stop: EarlyStop | None) -> list[dict[str, Any]]:
    """Run ``trainer`` until a budget is spent or a stop comes (see the module docstring); returns
    the metrics of every update and leaves why it stopped in ``trainer.stopped_by``."""
    if episodes is None and updates is None and seconds is None:
        raise ValueError("train() needs a budget: episodes=, updates= or seconds=")
    if early_stop is not None:
        checked = early_stop.seeds()
        if trainer.config.eval_seed in checked or seeds.overlaps_training(checked):
            raise ValueError(f"the early-stop check's seeds {checked.start}..{checked.stop - 1} must not reach the "
                             f"evaluation seeds (from {trainer.config.eval_seed}) or the training seeds "
                             f"(from {seeds.TRAIN_BASE})")
        trainer.alarm_reference = dataclasses.replace(trainer.alarm_reference, solved=float(early_stop.until))
    if updates is not None and trainer.config.total_updates is None:
        trainer.schedule_total = trainer.update_count + updates
    process = trainer.process
    start, episodes0, updates0 = time.monotonic(), trainer.episodes_seen, trainer.update_count
    deadline = start + seconds if seconds is not None else None
    out_of_time = (lambda: time.monotonic() >= deadline) if deadline is not None else None
    history: list[dict[str, Any]] = []
    trainer.stopped_by = None
    while trainer.stopped_by is None:
        if ((episodes is not None and trainer.episodes_seen - episodes0 >= episodes)
                or (updates is not None and trainer.update_count - updates0 >= updates)):
            trainer.stopped_by = "budget"
            break
        if out_of_time is not None and process.agree_to_stop(out_of_time()):
            trainer.stopped_by = "time_limit"
            break
        rollout = trainer.collect(stop=out_of_time)
        # Sub-envs that failed for good (a remote env's server is gone): on while at least half
        # remain (their episodes were played by the others), else stop after a complete update.
        envs_lost = 2 * rollout.stats.get("failed_envs", 0) > trainer.config.num_envs
        if process.agree_to_stop(envs_lost and len(rollout.episodes) < len(trainer.episode_shard())):
            logger.warning("update %d dropped: too many envs failed", trainer.update_count + 1)
            trainer.stopped_by = "env_failure"
            break
        # The cap came inside the rollout (on any process): drop the partial update.
        if process.agree_to_stop(len(rollout.episodes) < len(trainer.episode_shard())):
            logger.info("time cap reached during update %d's rollout: update dropped", trainer.update_count + 1)
            trainer.stopped_by = "time_limit"
            break
        check = early_stop if early_stop is not None and early_stop.due(trainer.update_count + 1) else None
        metrics = trainer.update(rollout.episodes, stats=rollout.stats, check=check)
        history.append(metrics)
        if (trainer.config.checkpoint_every and trainer.out_dir is not None
                and trainer.update_count % trainer.config.checkpoint_every == 0):
            trainer.save_checkpoint()
        asked_to_stop = callback is not None and callback(metrics) is False
        # The check's result is the same on every process; agreeing keeps the stop collective anyway.
        if process.agree_to_stop(bool(metrics.get("check", {}).get("solved"))):
            trainer.stopped_by = "solved"
        elif process.agree_to_stop(asked_to_stop):
            trainer.stopped_by = "callback"
        elif process.agree_to_stop(envs_lost):
            trainer.stopped_by = "env_failure"
    return history
