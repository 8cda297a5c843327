"""The Trainer: collect, update, train; the state of a run between updates.

An algorithm (``algorithms/reinforce.py``, ``grpo.py``, ``ppo.py``) subclasses :class:`Trainer`
and writes :meth:`Trainer.update`, readable top to bottom and calling down into this engine:
:meth:`Trainer.begin_update` (the learning rate), its advantages
(:mod:`~textgym.trainers.engine.losses`), its objective inside the loss step all algorithms share
(:mod:`~textgym.trainers.engine.loss_step`), :meth:`Trainer.optimize`
(:mod:`~textgym.trainers.engine.optimization`, where every optimizer step happens) and
:meth:`Trainer.finish_update` (counters, online SFT, the metrics line). The engine never imports
an algorithm. The rest has one module per concern: :mod:`~textgym.trainers.engine.preparation` (seeds, LoRA,
envs), :mod:`~textgym.trainers.engine.loop` (budgets and stops of :meth:`Trainer.train`),
:mod:`~textgym.trainers.reporting.update_metrics` (the pieces of the metrics line :meth:`Trainer.update`
assembles), :mod:`~textgym.trainers.engine.evaluation` (held-out play, the greedy check),
:mod:`~textgym.trainers.engine.sft`, :mod:`~textgym.trainers.reporting.alarms` and
:mod:`~textgym.trainers.state.trainer_state` (checkpoints). Data parallelism (:mod:`textgym.distributed`):
every process builds the same trainer and plays its shard of each update (docs/design.md).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from textgym import distributed, run_folder, seeds
from textgym.distributed import ProcessContext
from textgym.policy import Decision, Policy
from textgym.rollout import Envs, Episode, Rollout, collect, decisions_of
from textgym.trainers.engine import branching, loop
from textgym.trainers.engine.branching import Tree
from textgym.trainers.engine.early_stop import CheckResult, EarlyStop, registered_until
from textgym.trainers.engine.evaluation import HeldOut
from textgym.trainers.engine.kl import ReferenceMemo
from textgym.trainers.engine.loop import StopReason
from textgym.trainers.engine.losses import same_state_advantages
from textgym.trainers.engine.optimization import LossFn, chunk_costs, lr_factor, run_minibatches
from textgym.trainers.engine.preparation import (
    make_envs,
    prepare_model,
    seed_everything,
    system_prompt_of,
)
from textgym.trainers.engine.sft import Demonstration, OnlineSFT, sft
from textgym.trainers.engine.train_config import SFTConfig, TrainConfig
from textgym.trainers.reporting import alarms, update_metrics
from textgym.trainers.reporting.metrics import MetricsWriter
from textgym.trainers.reporting.trackers import parse_report_to
from textgym.trainers.reporting.update_metrics import EpisodeRecord
from textgym.trainers.state import trainer_state
from textgym.transcripts import Source, TranscriptWriter

logger = logging.getLogger("textgym.trainers")


def state_key(decision: Decision) -> int:
    """The identity of the state a decision was taken in: its exact prompt tokens and valid
    actions (a hash of them: the same in every process)."""
    return hash((tuple(decision.prompt_ids), tuple(map(tuple, decision.candidates or ()))))


class Trainer:
    """Alternates rollouts and updates of a :class:`textgym.Policy` on a text env.

    Args:
        policy: the policy to train. With ``config.use_lora`` (the default) its model gets a LoRA
            adapter shaped by the config's ``lora_*`` fields; a model that already has one (e.g. a
            loaded checkpoint) keeps training it, with a warning if the config disagrees.
        env: a text env id (a vector env of ``config.num_envs`` is made), a ``TextVectorEnv``, or
            ``None`` when the caller feeds episodes to :meth:`update` itself.
        config: the algorithm's config, a dict of its fields, or ``None`` for defaults.
        out_dir: where ``metrics.jsonl``, TensorBoard files and checkpoints go (``None``: nowhere);
            with several processes, written by the main process only.
        env_kwargs: passed to ``textgym.make_vec`` when ``env`` is an id.
        process: this process's place in a data-parallel run (default:
            :func:`textgym.distributed.init`, a world of one unless a launcher started several).
    """

    config_class: type[TrainConfig] = TrainConfig
    """The algorithm's config class; its ``algorithm`` names the algorithm (:attr:`algorithm`)."""
    algorithm = TrainConfig.algorithm
    """The algorithm's name (``make_trainer``'s and the checkpoint's), set from :attr:`config_class`."""
    bootstraps_truncated = False
    """Whether the algorithm bootstraps truncated episodes from a value: its rollouts then ask for
    a decision at each truncated episode's final state (:attr:`textgym.rollout.Episode.bootstrap`)."""

    def __init__(self, policy: Policy, env: str | Envs | None = "textgym/Bandit-v0",
                 config: TrainConfig | dict | None = None, out_dir: str | Path | None = None,
                 env_kwargs: dict[str, Any] | None = None, process: ProcessContext | None = None):
        self.config = self.config_class.coerce(config)
        self.process = process if process is not None else distributed.init()
        seed_everything(self.config.seed)
        self.policy = policy
        self.model = prepare_model(policy, self.config)
        self.env_kwargs = dict(env_kwargs or {})
        self.env_id, self.venv = make_envs(env, self.config, self.env_kwargs, policy)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        trackers = parse_report_to(self.config.report_to)
        self.writer = MetricsWriter(self.out_dir if self.process.is_main else None,
                                    tensorboard="tensorboard" in trackers, trackers=trackers,
                                    run_config=self.config.to_dict())
        self.transcripts = TranscriptWriter(self.out_dir if self.process.is_main else None,
                                            per_update=self.config.transcripts,
                                            max_bytes=int(self.config.transcripts_max_mb * 1e6))

        self.update_count = 0
        self.episodes_seen = 0
        self.decisions_seen = 0
        self.nonfinite_updates = 0
        self.clock = (0.0, time.monotonic())  # (wall time of the run's earlier sessions, this one's start)
        self.schedule_total = self.config.total_updates
        """The update the learning-rate schedule ends at (``total_updates``, else the budget of :meth:`train`)."""
        self.recent: deque[EpisodeRecord] = deque(maxlen=self.config.metrics_window)
        self.online_sft = OnlineSFT(self.config, self.process)
        self.alarm_history: list[alarms.UpdateStats] = []
        """What the collapse alarms read: one entry per update of the run (kept in checkpoints)."""
        self.alarm_reference = alarms.Reference(solved=registered_until(self.env_id), target_kl=self.config.target_kl)
        """What the alarms compare with: the env's solved threshold (or the ``until`` of the
        running :meth:`train`'s early stop) and ``target_kl``."""
        self.stopped_by: StopReason | None = None
        """Why the last :meth:`train` returned (``None`` before one)."""
        self.held_out = HeldOut(self.env_id, self.env_kwargs, self.venv, self.process)
        """The envs of :meth:`evaluate` and :meth:`greedy_check`."""
        self.reference_memo = ReferenceMemo()
        """The reference policy's log-probs of decisions met so far (``kl_coef``, ``reference_memo``)."""

        self._init_algorithm()
        self.optimizer = torch.optim.AdamW(self._param_groups(), weight_decay=self.config.weight_decay)
        if self.venv is not None:
            self.episode_shard()  # fails now if the update's episodes cannot be shared by the processes
        # Every replica starts from rank 0's weights (adapter, value head), whatever its own seed made.
        self.process.broadcast_parameters(self.optimized_parameters())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.algorithm = cls.config_class.algorithm

    # --- hooks for the algorithms ----------------------------------------------------------

    def _init_algorithm(self) -> None:
        """Create algorithm-specific state (value head, baseline...)."""

    def _extra_param_groups(self) -> list[dict[str, Any]]:
        """Optimizer parameter groups besides the policy's (e.g. the value head)."""
        return []

    def _algorithm_state(self) -> dict[str, Any]:
        """JSON-able algorithm state for checkpoints."""
        return {}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        pass

    def _value_head(self) -> torch.nn.Module | None:
        return None

    # --- set-up --------------------------------------------------------------------------

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def optimized_parameters(self) -> list[torch.nn.Parameter]:
        """Every parameter the optimizer updates (the policy's and, for PPO, the value head's): what
        the processes of a data-parallel run keep identical."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _param_groups(self) -> list[dict[str, Any]]:
        groups = [{"params": self.trainable_parameters(), "lr": self.config.lr, "base_lr": self.config.lr}]
        return groups + self._extra_param_groups()

    @property
    def replay(self) -> list[Episode]:
        """Online SFT's replay buffer (episodes kept for imitation)."""
        return self.online_sft.replay

    # --- the loop ------------------------------------------------------------------------------

    def rollout_seed(self, update: int | None = None) -> int:
        """The env seed of update ``update``'s rollout (sub-env i gets seed + i): resumable, held out from eval."""
        update = self.update_count if update is None else update
        return seeds.rollout_seed(self.config.seed, update)

    def episode_shard(self) -> range:
        """The global indices of the episodes of an update this process plays (all of them in one
        process): :meth:`TrainConfig.episode_shard` (ValueError when a process would get none)."""
        return self.config.episode_shard(self.process.world_size, self.process.rank)

    def collect(self, stop: Callable[[], bool] | None = None) -> Rollout:
        """Play this process's share of ``config.episodes_per_update`` episodes with the current
        policy (sampling); episode ``j`` of the update is reset with ``rollout_seed() + j``. ``stop``:
        asked before each vector step, ends the rollout early when ``True`` (the time cap)."""
        self._need_env("collect")
        shard = self.episode_shard()
        with self.policy.exploring(self.config.explore_floor):
            return collect(self.policy, self.venv, episodes=len(shard), seed=self.rollout_seed() + shard.start,
                           stop=stop, max_episode_steps=self.config.max_train_episode_steps,
                           bootstrap=self.bootstraps_truncated)

    def grow_tree(self, episodes: Sequence[Episode], turns: int) -> Tree:
        """A tree rollout from this process's ``episodes`` (:func:`textgym.trainers.engine.branching.grow`):
        every other valid action at up to ``turns`` turns of each, played on from a replay of the
        episode on this trainer's envs, the turns drawn from the update's rollout seed."""
        self._need_env("grow_tree")
        rng = random.Random(self.rollout_seed() * 1_000_003 + self.process.rank)
        return branching.grow(self.policy, self.venv, episodes, turns, self.config.gamma, rng,
                              self.config.max_train_episode_steps)

    def _need_env(self, what: str) -> None:
        if self.venv is None and self.env_id is None:
            raise ValueError(f"{what}() needs an env: make the trainer with env=<id or TextVectorEnv>")

    def train(self, episodes: int | None = None, updates: int | None = None, seconds: float | None = None,
              callback: Callable[[dict[str, Any]], Any] | None = None,
              early_stop: EarlyStop | None = None) -> list[dict[str, Any]]:
        """Collect and update until a budget is spent or a stop comes; returns the metrics of every
        update, and leaves why it returned in :attr:`stopped_by` (budgets and stops:
        :mod:`textgym.trainers.engine.loop`). With several processes, every one calls this.

        Args:
            episodes: stop after this many more training episodes (of all processes).
            updates: stop after this many more updates.
            seconds: a cap on wall time, checked before each update and inside its rollout (the
                update in progress is dropped: the trainer stays at the last complete update).
            callback: called with each update's metrics (on every process); returning ``False``
                stops training (a ``KeyboardInterrupt`` raised in it propagates after the metrics
                are written).
            early_stop: check greedily every few updates and stop once solved
                (:class:`~textgym.trainers.engine.early_stop.EarlyStop`); its ``until`` is also the
                collapse alarms' reference.
        """
        return loop.train(self, episodes, updates, seconds, callback, early_stop)

    def update(self, episodes: Sequence[Episode], stats: dict[str, Any] | None = None, *,
               check: EarlyStop | None = None) -> dict[str, Any]:
        """One update of the policy from completed ``episodes``; returns (and logs) its metrics: the
        algorithm's losses, the window of recent episodes, the rollout's throughput (from its
        ``stats``), the update's answers, the greedy check ``check`` if given and the collapse
        alarms raised (``alarms``, empty when none). With several processes, every one calls this
        with its own episodes; the metrics are over all of them.

        Each algorithm writes it, top to bottom, calling down: :meth:`begin_update`, its advantages
        and objective (:class:`~textgym.trainers.engine.loss_step.LossStep`), :meth:`optimize`,
        :meth:`finish_update`."""
        raise NotImplementedError(f"{type(self).__name__} has no update(): an algorithm writes it")

    def begin_update(self, episodes: Sequence[Episode]) -> tuple[list[Episode], float]:
        """Every update's first step: ``episodes`` as a list and the update's start time (for
        :meth:`finish_update`); the learning rate of every parameter group set by the schedule.

        Raises:
            ValueError: no episodes.
        """
        episodes = list(episodes)
        if not episodes:
            raise ValueError("update() needs at least one episode")
        started = time.monotonic()
        factor = lr_factor(self.update_count, self.config.warmup_updates, self.schedule_total,
                           self.config.lr_schedule, self.config.lr_decay_from, self.config.lr_final)
        for group in self.optimizer.param_groups:
            group["lr"] = group["base_lr"] * factor
        return episodes, started

    def finish_update(self, episodes: list[Episode], losses: dict[str, Any], started: float,
                      stats: dict[str, Any] | None = None, check: EarlyStop | None = None) -> dict[str, Any]:
        """Every update's last step, once the algorithm optimized (``losses``: its metrics, or
        :func:`~textgym.trainers.engine.loss_step.skipped_update`'s): the counters and the window
        of recent episodes, online SFT, the greedy ``check``, the collapse alarms; the update's
        metrics line, the one place it is assembled, written and returned."""
        for decision in decisions_of(episodes) + [ep.bootstrap for ep in episodes if ep.bootstrap is not None]:
            decision.trunk = None  # the frozen layers' records served this update: kept, they would pile up

        if losses.get("nonfinite"):
            self.nonfinite_updates += 1
        self.update_count += 1
        # Every process's episodes, in rank order: the counters and the window are global.
        records: list[EpisodeRecord] = self.process.gather([update_metrics.episode_record(ep) for ep in episodes])
        self.episodes_seen += len(records)
        self.decisions_seen += sum(r[1] for r in records)
        self.recent.extend(records)
        sft_metrics = self.online_sft.after_update(self.policy, episodes, self.update_count,
                                                   self.trainable_parameters())
        update_seconds = time.monotonic() - started
        steps = [step for episode in episodes for step in episode.steps]
        metrics: dict[str, Any] = {
            "update": self.update_count,
            "episodes": self.episodes_seen,
            "decisions": self.decisions_seen,
            "wall_time": round(self.wall_time(), 3),
            **update_metrics.window_metrics(self.recent),
            **losses,
            **sft_metrics,
            "lr": self.optimizer.param_groups[0]["lr"],
            **update_metrics.rollout_metrics(steps, stats, update_seconds, self.process, self.venv),
        }
        if check is not None:
            metrics["check"] = self.greedy_check(check).to_dict()
            metrics["wall_time"] = round(self.wall_time(), 3)  # the check is part of the run's time
        self.alarm_history, raised = alarms.record(self.alarm_history, alarms.UpdateStats.from_metrics(metrics),
                                                   self.alarm_reference)  # bounded in memory and in checkpoints
        for alarm in raised:
            logger.info(alarm.line())
        metrics["alarms"] = [alarm.to_dict() for alarm in raised]
        metrics["samples"] = update_metrics.sample_records(steps, self.config.log_samples)
        self.writer.write(metrics)
        self.write_transcripts(episodes, "train")
        return metrics

    def write_transcripts(self, episodes: Sequence[Episode], source: Source) -> None:
        """A few of ``episodes`` to ``transcripts.jsonl`` and the trackers' tables (main process)."""
        self.writer.log_transcripts(self.transcripts.write(episodes, update=self.update_count, source=source),
                                    self.update_count)

    def optimize(self, decisions: Sequence[Decision] | int, loss_fn: LossFn, epochs: int | None = None,
                 groups: Sequence[Sequence[int]] | None = None) -> dict[str, float]:
        """The algorithm's minibatch loop over this process's ``decisions`` (or their number) with
        this trainer's optimizer and config, planned over every process's decisions
        (:func:`~textgym.trainers.engine.optimization.run_minibatches`). ``groups``: decisions kept in one
        minibatch (a conversation's turns: :func:`textgym.rollout.conversation_runs`). Without them,
        the decisions of one state are laid out in one minibatch (``config.minibatch_by_state``)."""
        cfg = self.config
        costs = None if isinstance(decisions, int) else chunk_costs(decisions, cfg.max_chunk_answer_tokens,
                                                                    cfg.max_chunk_tokens)
        # Decisions re-scored by one row (the same state) share a minibatch: the update runs it once.
        # Not with state_centering, which compares each minibatch's states with each other.
        by_state = not isinstance(decisions, int) and cfg.minibatch_by_state and not cfg.state_centering
        keys = [d.rescoring_key() for d in decisions] if by_state else None
        count = decisions if isinstance(decisions, int) else len(decisions)
        return run_minibatches(self.optimizer, count, loss_fn,
                               epochs=cfg.epochs if epochs is None else epochs,
                               minibatch_size=self.minibatch_size(count),
                               gradient_accumulation_steps=cfg.gradient_accumulation_steps,
                               max_grad_norm=cfg.max_grad_norm, target_kl=cfg.target_kl, process=self.process,
                               groups=groups, token_counts=costs, max_chunk_tokens=None if costs is None else 1.0,
                               keys=keys)

    def minibatch_size(self, decisions: int) -> int:
        """Decisions per minibatch of an update of this process's ``decisions``: the global batch
        cut into ``config.minibatches`` (else ``config.minibatch_size``)."""
        cfg = self.config
        if cfg.minibatches is None:
            return cfg.minibatch_size
        total = int(self.process.reduce_sum([decisions])[0]) if self.process.is_distributed else decisions
        return max(1, -(-total // cfg.minibatches))

    def with_state_credit(self, decisions: Sequence[Decision], values: torch.Tensor,
                          advantages: torch.Tensor, scopes: Sequence[int] | None = None) -> torch.Tensor:
        """``advantages`` plus ``config.state_credit`` times GiGPO's step-level advantage of
        ``values`` (per decision, over every process's batch: :func:`~textgym.trainers.losses.
        same_state_advantages`), the state being the decision's prompt and valid actions (within
        its scope, see :meth:`state_keys`); ``advantages`` unchanged when ``state_credit`` is 0."""
        if not self.config.state_credit:
            return advantages
        keys = self.state_keys(decisions, scopes)
        return advantages + self.config.state_credit * same_state_advantages(keys, values)

    def state_keys(self, decisions: Sequence[Decision], scopes: Sequence[int] | None = None) -> list[int]:
        """Every process's decisions' state identities (prompt and valid actions), in rank order.

        ``scopes`` (per decision, e.g. its GRPO group): decisions compare only within the same
        scope of the same process, so equal prompts in two scopes are two states."""
        if scopes is None:
            return self.process.gather([state_key(d) for d in decisions])
        return self.process.gather([hash((self.process.rank, scope, state_key(d)))
                                    for scope, d in zip(scopes, decisions, strict=True)])

    def global_batch(self, values: torch.Tensor) -> tuple[torch.Tensor, slice]:
        """Every process's per-decision (or per-episode) ``values`` in rank order, and this
        process's slice: batch statistics computed on the first are those of the global batch
        (:meth:`textgym.distributed.ProcessContext.concat`; one process: ``values`` itself)."""
        return self.process.concat(values)

    # --- warm start and held-out play ------------------------------------------------------------

    def warm_start(self, demonstrations: Sequence[Demonstration] | str | Path,
                   config: SFTConfig | None = None, *, epochs: int | None = None,
                   on_epoch: Callable[[int, int, float], Any] | None = None) -> list[float]:
        """SFT on demonstrations (a JSONL path or a list) before RL; returns the loss per epoch
        (``on_epoch(epoch, epochs, loss)`` after each).

        Demonstrations without a system prompt get the env's. ``config``: by default the
        trainer's ``sft_lr``, ``max_grad_norm`` and ``seed``; ``epochs`` overrides its epochs.
        The warm-started policy becomes the KL penalty's reference (``kl_coef``): RL is kept near
        the imitation, not pulled back to the untrained model. See :func:`textgym.trainers.engine.sft.sft`.
        """
        config = config or SFTConfig(lr=self.config.sft_lr, max_grad_norm=self.config.max_grad_norm,
                                     seed=self.config.seed)
        losses = sft(self.policy, demonstrations, system_prompt=system_prompt_of(self.venv), config=config,
                     epochs=epochs, parameters=self.trainable_parameters(), process=self.process,
                     on_epoch=on_epoch)
        self.policy.rebase_reference()
        self.alarm_reference = dataclasses.replace(self.alarm_reference, warm_started=True)
        return losses

    def evaluate(self, episodes: int = 100, seed: int | None = None, num_envs: int | None = None) -> dict[str, Any]:
        """Greedy play on held-out seeds (``config.eval_seed`` by default): mean return, length,
        invalid rate, and win/draw/loss rates when the env reports outcomes (games). With several
        processes, each plays its share of the episodes and every one gets the whole result."""
        self._need_env("evaluate")
        return self.held_out.evaluate(self.policy, episodes, self.config.eval_seed if seed is None else seed, num_envs,
                                      on_episodes=lambda played: self.write_transcripts(played, "eval"))

    def greedy_check(self, early_stop: EarlyStop) -> CheckResult:
        """Play the early stop's held-out episodes greedily, all together and capped at its
        ``max_steps``, and compare their mean return with its ``until`` (:meth:`HeldOut.check
        <textgym.trainers.engine.evaluation.HeldOut.check>`). With several processes, each plays its
        share and every one gets the same result."""
        self._need_env("greedy_check")
        return self.held_out.check(self.policy, early_stop, self.update_count,
                                   on_episodes=lambda played: self.write_transcripts(played, "check"))

    # --- checkpoints ---------------------------------------------------------------------------

    def wall_time(self) -> float:
        """Seconds of training so far, over every session of the run."""
        before, started = self.clock
        return before + time.monotonic() - started

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Write a checkpoint (default ``<out_dir>/checkpoint``) atomically (:mod:`~textgym.trainers.state.trainer_state`).
        With several processes, every one calls this; the main process writes (the replicas'
        states are identical) while the others wait, so none goes on before it is complete."""
        if path is None and self.out_dir is None:
            raise ValueError("save_checkpoint() needs a path when the trainer has no out_dir")
        path = Path(path) if path is not None else self.out_dir / run_folder.CHECKPOINT
        if self.process.is_main:
            trainer_state.write(self, path)
        self.process.barrier()
        return path

    def load_state(self, path: str | Path) -> dict[str, Any]:
        """Load a checkpoint of this run into this trainer (weights, optimizer, counters, RNG),
        whatever number of processes wrote it (:func:`textgym.trainers.state.trainer_state.load`)."""
        return trainer_state.load(self, path)

    @classmethod
    def resume(cls, path: str | Path, policy: Policy | None = None, env: str | Envs | None = None,
               out_dir: str | Path | None = None, process: ProcessContext | None = None,
               changes: dict[str, Any] | None = None, env_kwargs: dict[str, Any] | None = None) -> Trainer:
        """Rebuild a trainer from checkpoint ``path`` and continue the same run: ``policy`` on the
        *same base model* (without adapter; default: built from the checkpoint's record), ``env``
        (default: its env id), ``out_dir`` (default: its run folder), ``process`` (default:
        :func:`textgym.distributed.init`), ``changes`` (algorithm settings to continue with instead
        of the recorded ones, e.g. ``{"gamma": 0.95}``; :meth:`TrainConfig.with_changes`: the
        optimizer's moments are kept), ``env_kwargs`` (default: the checkpoint's; a resumed run
        changes only the step limit). Called on :class:`Trainer`, the checkpoint's algorithm
        picks the class among its subclasses (:meth:`subclass_for`)."""
        return trainer_state.resume(path, cls.subclass_for, policy=policy, env=env, out_dir=out_dir,
                                    process=process, changes=changes, env_kwargs=env_kwargs)

    @classmethod
    def subclass_for(cls, algorithm: str) -> type[Trainer]:
        """The trainer class of ``algorithm`` among this class and its subclasses: the algorithms
        subclass :class:`Trainer` (``textgym.trainers.Trainer`` loads them all).

        Raises:
            ValueError: no such trainer class is loaded.
        """
        found = {c.algorithm: c for c in _subclasses(cls)}
        if algorithm not in found:
            raise ValueError(f"no trainer of algorithm {algorithm!r} under {cls.__name__}; "
                             f"loaded: {sorted(found)}")
        return found[algorithm]


def _subclasses(cls: type[Trainer]) -> list[type[Trainer]]:
    """``cls`` and every subclass of it, depth first."""
    return [cls] + [sub for child in cls.__subclasses__() for sub in _subclasses(child)]
