"""The Trainer base: the loop (collect, update, train), its bookkeeping, and the hooks algorithms fill.

An algorithm (``reinforce.py``, ``grpo.py``, ``ppo.py``) subclasses :class:`Trainer` and writes
one method, ``_update(episodes) -> dict``, readable top to bottom with the pieces it uses
imported by name: :mod:`~textgym.trainers.losses` (the pure maths), :mod:`~textgym.trainers.kl`
(KL to the rollout and reference policies), :mod:`~textgym.trainers.centering` (re-scoring a
minibatch) and :meth:`Trainer.optimize` (the minibatch loop of
:mod:`~textgym.trainers.optimization`, where every optimizer step happens). What the base keeps:
LoRA set-up (through :mod:`textgym.lora`), the learning-rate schedule, the per-update metrics
(assembled in :meth:`Trainer.update`, the one place), warm start and online SFT
(:mod:`~textgym.trainers.sft`), greedy evaluation (:mod:`~textgym.trainers.evaluation`),
checkpoints (:mod:`~textgym.trainers.checkpoint`), and what :meth:`Trainer.train` stops on: its
budgets (updates, episodes, a time cap checked inside an update too) and the greedy check of
:mod:`~textgym.trainers.early_stop`; every update's metrics carry the collapse alarms of
:mod:`~textgym.trainers.alarms` it raised.

Data parallelism (:mod:`textgym.distributed`): started by a launcher (``textgym train --processes
N``, ``torchrun``, ``accelerate launch``), every process builds the same trainer, which then plays
its shard of each update's episodes (the seeds one process would give them), trains on its own
decisions with gradients averaged across processes before each optimizer step, and reports and
checkpoints from the main process only; the replicas start from rank 0's weights and end every
update with identical weights. A process started without a launcher is a world of one: nothing
is communicated and the numbers are those of a plain single-process run.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from textgym import distributed, lora, run_folder, seeds
from textgym.distributed import ProcessContext
from textgym.outcomes import outcome_of, outcome_rates
from textgym.policy import Decision, Policy
from textgym.rollout import Envs, Episode, Rollout, Step, collect, decisions_of
from textgym.trainers import alarms
from textgym.trainers import checkpoint as ckpt
from textgym.trainers.config import SFTConfig, TrainConfig, config_for
from textgym.trainers.early_stop import CheckResult, EarlyStop
from textgym.trainers.evaluation import eval_envs, evaluate_greedy
from textgym.trainers.metrics import METRICS_FILE, MetricsWriter
from textgym.trainers.optimization import LossFn, lr_factor, run_minibatches
from textgym.trainers.sft import Demonstration, OnlineSFT, sft
from textgym.trainers.trackers import parse_report_to
from textgym.transcripts import Source, TranscriptWriter

logger = logging.getLogger("textgym.trainers")

EpisodeRecord = tuple[float, int, int, "str | None"]
"""What the metrics window keeps of an episode: (env return, length, invalid answers, outcome)."""

StopReason = Literal["budget", "solved", "time_limit", "callback", "env_failure"]
"""Why :meth:`Trainer.train` returned: its updates or episodes were spent, the greedy check
passed, the time cap came (the update in progress dropped), or the callback returned ``False``."""


def answer_of(step: Step) -> str:
    """The answer a decision amounts to: the action the env parsed from it, else its text."""
    name = (step.parse or {}).get("action_name")
    return str(name) if name is not None else step.decision.text.strip()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def skipped_update(what: str) -> dict[str, Any]:
    """The metrics of an update skipped because its inputs (``what``: rewards, advantages...) are
    not finite: the weights are left as they were."""
    logger.warning("non-finite %s: update skipped", what)
    return {"nonfinite": True, "epochs": 0}


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

    algorithm = "base"
    bootstraps_truncated = False
    """Whether the algorithm bootstraps truncated episodes from a value: its rollouts then ask for
    a decision at each truncated episode's final state (:attr:`textgym.rollout.Episode.bootstrap`)."""

    def __init__(self, policy: Policy, env: str | Envs | None = "textgym/Bandit-v0",
                 config: TrainConfig | dict | None = None, out_dir: str | Path | None = None,
                 env_kwargs: dict[str, Any] | None = None, process: ProcessContext | None = None):
        self.config = config_for(self.algorithm, config)
        self.process = process if process is not None else distributed.init()
        seed_everything(self.config.seed)
        self.policy = policy
        self.model = self._prepare_model()
        self.env_kwargs = dict(env_kwargs or {})
        if env is None:  # driven through update() only (e.g. by textgym.Agent)
            self.env_id, self.venv = None, None
        elif isinstance(env, str):
            import textgym

            self.env_id = env
            self.venv = textgym.make_vec(env, num_envs=self.config.num_envs, seed=self.config.seed,
                                         **self.env_kwargs)
        else:
            self.env_id = env.spec.id if getattr(env, "spec", None) is not None else None
            self.venv = env
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
        self._wall_time_before = 0.0  # wall time of earlier sessions of a resumed run
        self._started = time.monotonic()
        self._schedule_total = self.config.total_updates
        self.recent: deque[EpisodeRecord] = deque(maxlen=self.config.metrics_window)
        self.online_sft = OnlineSFT(self.config, self.process)
        self.alarm_history: list[alarms.UpdateStats] = []
        """What the collapse alarms read: one entry per update of the run (kept in checkpoints)."""
        self.alarm_reference = alarms.Reference(solved=self._registered_until(), target_kl=self.config.target_kl)
        """What the alarms compare with: the env's solved threshold (or the ``until`` of the
        running :meth:`train`'s early stop) and ``target_kl``."""
        self.stopped_by: StopReason | None = None
        """Why the last :meth:`train` returned (``None`` before one)."""
        self._check_envs: dict[tuple[int, int | None], Envs] = {}  # greedy_check's envs by (count, step cap)

        self._init_algorithm()
        self.optimizer = torch.optim.AdamW(self._param_groups(), weight_decay=self.config.weight_decay)
        if self.venv is not None:
            self.episode_shard()  # fails now if the update's episodes cannot be shared by the processes
        # Every replica starts from rank 0's weights (adapter, value head), whatever its own seed made.
        self.process.broadcast_parameters(self.optimized_parameters())

    # --- hooks for the algorithms ----------------------------------------------------------

    def _init_algorithm(self) -> None:
        """Create algorithm-specific state (value head, baseline...)."""

    def _extra_param_groups(self) -> list[dict[str, Any]]:
        """Optimizer parameter groups besides the policy's (e.g. the value head)."""
        return []

    def _update(self, episodes: list[Episode]) -> dict[str, float]:
        raise NotImplementedError

    def _algorithm_state(self) -> dict[str, Any]:
        """JSON-able algorithm state for checkpoints."""
        return {}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        pass

    def _value_head(self) -> torch.nn.Module | None:
        return None

    # --- set-up --------------------------------------------------------------------------

    def _registered_until(self) -> float | None:
        """The env's solved threshold, registered with its training defaults (``None``: it has
        none, or the trainer has no env id)."""
        if self.env_id is None:
            return None
        import gymnasium as gym

        from textgym.registry import training_defaults

        try:
            return training_defaults(self.env_id).until
        except gym.error.Error:  # an env textgym's registry does not know
            return None

    def _env_action_count(self) -> int:
        """How many action names the env offers (0 when unknown: no env, or none declared)."""
        if self.venv is None:
            return 0
        try:
            return len(self.venv.envs[0].get_wrapper_attr("action_names"))
        except (AttributeError, TypeError, IndexError):
            return 0

    def _prepare_model(self) -> torch.nn.Module:
        model = self.policy.model
        if not self.config.use_lora:
            if lora.is_peft_model(model):
                raise ValueError("use_lora=False but the policy's model already has a LoRA adapter")
            self.policy.parameters_to_train()  # also snapshots the frozen reference policy
            return model
        wanted = self.config.lora_settings()
        if not lora.is_peft_model(model):
            model = lora.add_lora(model, wanted, model_name=self.policy.name)
            self.policy.model = model
            return model
        # An adapter is already there (a loaded checkpoint): keep training it as it is.
        differences = lora.differences(model, wanted, model_name=self.policy.name)
        if differences:
            warnings.warn("the policy's model already has a LoRA adapter; training it as it is, not as the "
                          "config's lora_* fields describe (" + "; ".join(differences) + ")", stacklevel=3)
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.requires_grad_(True)
        return model

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
        process): :meth:`TrainConfig.episode_shard`.

        Raises:
            ValueError: ``episodes_per_update`` cannot give every process at least one episode (or
                GRPO group).
        """
        return self.config.episode_shard(self.process.world_size, self.process.rank)

    def collect(self, stop: Callable[[], bool] | None = None) -> Rollout:
        """Play this process's share of ``config.episodes_per_update`` episodes with the current
        policy (sampling); episode ``j`` of the update is reset with ``rollout_seed() + j``.

        Args:
            stop: asked before each vector step; once it returns ``True`` the rollout ends with
                fewer episodes than planned (:meth:`train`'s time cap).
        """
        self._need_env("collect")
        shard = self.episode_shard()
        return collect(self.policy, self.venv, episodes=len(shard), seed=self.rollout_seed() + shard.start,
                       stop=stop, max_episode_steps=self.config.max_train_episode_steps,
                       bootstrap=self.bootstraps_truncated)

    def _need_env(self, what: str) -> None:
        if self.venv is None and self.env_id is None:
            raise ValueError(f"{what}() needs an env: make the trainer with env=<id or TextVectorEnv>")

    def train(self, episodes: int | None = None, updates: int | None = None, seconds: float | None = None,
              callback: Callable[[dict[str, Any]], Any] | None = None,
              early_stop: EarlyStop | None = None) -> list[dict[str, Any]]:
        """Collect and update until a budget is spent or the env is solved; returns the metrics of
        every update. Why it returned is left in :attr:`stopped_by`.

        Budgets in updates or episodes do the same work on any machine; ``seconds`` is a cap on
        wall time, checked before each update and inside its rollout: when the cap comes while
        episodes are being collected, the rollout stops there and that update is dropped, so the
        trainer (and a checkpoint saved next) stays at the last complete update, and a resumed
        run replays the same episodes. An update whose rollout was complete is finished.

        With several processes, every one of them calls this; each stop (the time cap, the
        greedy check, a callback returning ``False`` on any rank) is agreed by all of them, so
        they stop after the same update (a rollout cut on one rank drops the update on all).

        Args:
            episodes: stop after this many more training episodes (of all processes).
            updates: stop after this many more updates.
            seconds: stop after this much more wall time (see above).
            callback: called with each update's metrics (on every process); returning ``False``
                stops training (a ``KeyboardInterrupt`` raised in it propagates after the metrics
                are written).
            early_stop: check greedily every few updates and stop once solved
                (:class:`~textgym.trainers.early_stop.EarlyStop`); its ``until`` is also the
                collapse alarms' reference.
        """
        if episodes is None and updates is None and seconds is None:
            raise ValueError("train() needs a budget: episodes=, updates= or seconds=")
        if early_stop is not None:
            self._check_seeds_are_held_out(early_stop)
            self.alarm_reference = dataclasses.replace(self.alarm_reference, solved=float(early_stop.until))
        if updates is not None and self.config.total_updates is None:
            self._schedule_total = self.update_count + updates
        start, episodes0, updates0 = time.monotonic(), self.episodes_seen, self.update_count
        deadline = start + seconds if seconds is not None else None
        out_of_time = (lambda: time.monotonic() >= deadline) if deadline is not None else None
        history: list[dict[str, Any]] = []
        self.stopped_by = None
        while self.stopped_by is None:
            if ((episodes is not None and self.episodes_seen - episodes0 >= episodes)
                    or (updates is not None and self.update_count - updates0 >= updates)):
                self.stopped_by = "budget"
                break
            if out_of_time is not None and self.process.agree_to_stop(out_of_time()):
                self.stopped_by = "time_limit"
                break
            rollout = self.collect(stop=out_of_time)
            # Sub-envs that failed for good (a remote env's server is gone): on while at least half
            # remain (their episodes were played by the others), else stop after a complete update.
            envs_lost = 2 * rollout.stats.get("failed_envs", 0) > self.config.num_envs
            if self.process.agree_to_stop(envs_lost and len(rollout.episodes) < len(self.episode_shard())):
                logger.warning("update %d dropped: too many envs failed", self.update_count + 1)
                self.stopped_by = "env_failure"
                break
            # The cap came inside the rollout (on any process): drop the partial update.
            if self.process.agree_to_stop(len(rollout.episodes) < len(self.episode_shard())):
                logger.info("time cap reached during update %d's rollout: update dropped", self.update_count + 1)
                self.stopped_by = "time_limit"
                break
            check = early_stop if early_stop is not None and early_stop.due(self.update_count + 1) else None
            metrics = self.update(rollout.episodes, stats=rollout.stats, check=check)
            history.append(metrics)
            if (self.config.checkpoint_every and self.out_dir is not None
                    and self.update_count % self.config.checkpoint_every == 0):
                self.save_checkpoint()
            asked_to_stop = callback is not None and callback(metrics) is False
            # The check's result is the same on every process; agreeing keeps the stop collective anyway.
            if self.process.agree_to_stop(bool(metrics.get("check", {}).get("solved"))):
                self.stopped_by = "solved"
            elif self.process.agree_to_stop(asked_to_stop):
                self.stopped_by = "callback"
            elif self.process.agree_to_stop(envs_lost):
                self.stopped_by = "env_failure"
        return history

    def _check_seeds_are_held_out(self, early_stop: EarlyStop) -> None:
        checked = early_stop.seeds()
        if self.config.eval_seed in checked or seeds.overlaps_training(checked):
            raise ValueError(f"the early-stop check's seeds {checked.start}..{checked.stop - 1} must not reach the "
                             f"evaluation seeds (from {self.config.eval_seed}) or the training seeds "
                             f"(from {seeds.TRAIN_BASE})")

    def update(self, episodes: Sequence[Episode], stats: dict[str, Any] | None = None, *,
               check: EarlyStop | None = None) -> dict[str, Any]:
        """One update of the policy from completed episodes; returns (and logs) its metrics.

        This is where every update's metrics are assembled, from the algorithm's losses, the
        window of recent episodes, the rollout's throughput, the update's answers
        (``top_answer``, ``top_answer_share``, ``answer_choices``), the greedy check if one is
        asked for (``check``) and the collapse alarms the update raised (``alarms``, a list of
        :class:`~textgym.trainers.alarms.Alarm` dicts, empty when none).

        With several processes, every one calls this with its own episodes; the metrics (the
        same on every process) are over all of them.

        Args:
            episodes: ``textgym.rollout.Episode`` objects (their steps hold the decisions).
            stats: the rollout's ``stats`` (decisions, tokens, seconds) for throughput figures.
            check: run this greedy check after the update (:meth:`greedy_check`).
        """
        episodes = list(episodes)
        if not episodes:
            raise ValueError("update() needs at least one episode")
        t0 = time.monotonic()
        factor = lr_factor(self.update_count, self.config.warmup_updates, self._schedule_total,
                           self.config.lr_schedule)
        for group in self.optimizer.param_groups:
            group["lr"] = group["base_lr"] * factor

        losses = self._update(episodes)
        for decision in decisions_of(episodes) + [ep.bootstrap for ep in episodes if ep.bootstrap is not None]:
            decision.trunk = None  # the frozen layers' records served this update: kept, they would pile up

        if losses.get("nonfinite"):
            self.nonfinite_updates += 1
        self.update_count += 1
        # Every process's episodes, in rank order: the counters and the window are global.
        records: list[EpisodeRecord] = self.process.gather(
            [(ep.env_return, ep.length, ep.invalid_count, outcome_of(ep)) for ep in episodes])
        self.episodes_seen += len(records)
        steps = [step for episode in episodes for step in episode.steps]
        self.decisions_seen += sum(r[1] for r in records)
        self.recent.extend(records)
        sft_metrics = self.online_sft.after_update(self.policy, episodes, self.update_count,
                                                   self.trainable_parameters())
        update_seconds = time.monotonic() - t0
        stats = self._rollout_stats(stats, update_seconds)

        window = list(self.recent)
        lengths = sum(w[1] for w in window)
        metrics: dict[str, Any] = {
            "update": self.update_count,
            "episodes": self.episodes_seen,
            "decisions": self.decisions_seen,
            "wall_time": round(self.wall_time(), 3),
            "return_mean": float(np.mean([w[0] for w in window])),
            "length_mean": float(np.mean([w[1] for w in window])),
            "invalid_rate": sum(w[2] for w in window) / max(1, lengths),
            **outcome_rates([w[3] for w in window]),
            **losses,
            **sft_metrics,
            "lr": self.optimizer.param_groups[0]["lr"],
        }
        seconds = update_seconds + float((stats or {}).get("seconds", 0.0))
        if stats and stats.get("cut_episodes"):  # episodes the rollout's step cap ended (this process's)
            metrics["cut_episodes"] = int(stats["cut_episodes"])
        if stats and "seconds" in stats:  # where the update's time went (the greedy check: check.seconds)
            metrics["rollout_seconds"] = round(float(stats["seconds"]), 3)
            metrics["update_seconds"] = round(update_seconds, 3)
        if stats and seconds > 0:
            metrics["decisions_per_s"] = float(stats.get("decisions", len(steps))) / seconds
            tokens = float(stats.get("prompt_tokens", 0)) + float(stats.get("answer_tokens", 0))
            if tokens:
                metrics["tokens_per_s"] = tokens / seconds
        if self.process.is_distributed:
            metrics["world_size"] = self.process.world_size
        for key in ("dropped_episodes", "failed_envs"):  # sub-env failures (a remote env's server)
            if stats and stats.get(key):
                metrics[key] = int(stats[key])
        metrics.update(self._answer_metrics(steps))
        if check is not None:
            metrics["check"] = self.greedy_check(check).to_dict()
            metrics["wall_time"] = round(self.wall_time(), 3)  # the check is part of the run's time
        self.alarm_history.append(alarms.UpdateStats.from_metrics(metrics))
        raised = alarms.raised(self.alarm_history, self.alarm_reference)
        self.alarm_history = alarms.bounded(self.alarm_history)  # bounded in memory and in checkpoints
        for alarm in raised:
            logger.info(alarm.line())
        metrics["alarms"] = [alarm.to_dict() for alarm in raised]
        metrics["samples"] = [
            {"prompt": s.observation, "answer": s.decision.text, "reward": float(s.reward)}
            for s in steps[: self.config.log_samples]
        ]
        self.writer.write(metrics)
        self.write_transcripts(episodes, "train")
        return metrics

    def write_transcripts(self, episodes: Sequence[Episode], source: Source) -> None:
        """A few of ``episodes`` to ``transcripts.jsonl`` and the trackers' tables (main process)."""
        self.writer.log_transcripts(self.transcripts.write(episodes, update=self.update_count, source=source),
                                    self.update_count)

    def _answer_metrics(self, steps: Sequence[Step]) -> dict[str, Any]:
        """The update's most common answer and its share of every process's decisions, when the
        env offers several answers (what the ``one_answer`` alarm reads)."""
        scored = [len(step.decision.candidates) for step in steps if step.decision.candidates is not None]
        choices = max(scored, default=0)
        if len(scored) < len(steps):  # generate mode: what the env offers is its action names
            choices = max(choices, self._env_action_count())
        gathered = self.process.gather([([answer_of(step) for step in steps], choices)])
        choices = max(k for _, k in gathered)
        if choices < 2:
            return {}
        top, share = alarms.answer_statistics(answer for answers, _ in gathered for answer in answers)
        return {"top_answer": top, "top_answer_share": share, "answer_choices": choices} if top is not None else {}

    def _rollout_stats(self, stats: dict[str, Any] | None, update_seconds: float) -> dict[str, Any] | None:
        """The throughput figures of the update: with several processes, decisions and tokens
        summed over them, time the slowest one's (rollout plus update)."""
        if not self.process.is_distributed or stats is None:
            return stats
        counted = ("decisions", "prompt_tokens", "answer_tokens")
        mine = [float(stats.get(key, 0.0)) for key in counted]
        totals = self.process.reduce_sum(mine)
        slowest = max(self.process.gather([float(stats.get("seconds", 0.0)) + update_seconds]))
        return {**dict(zip(counted, totals)), "seconds": slowest - update_seconds}

    def optimize(self, decisions: Sequence[Decision] | int, loss_fn: LossFn, epochs: int | None = None,
                 groups: Sequence[Sequence[int]] | None = None) -> dict[str, float]:
        """The algorithm's minibatch loop over this process's ``decisions`` (or their number) with
        this trainer's optimizer and config (epochs, minibatch size, accumulation, clipping,
        ``target_kl``, and ``max_chunk_answer_tokens`` when the decisions are given), planned over
        every process's decisions: see :func:`textgym.trainers.optimization.run_minibatches`.
        ``groups``: decisions kept in one minibatch (the turns of a conversation:
        :func:`textgym.rollout.conversation_runs`)."""
        cfg = self.config
        counts = None if isinstance(decisions, int) else [len(d.answer_ids) for d in decisions]
        return run_minibatches(self.optimizer, len(counts) if counts is not None else decisions, loss_fn,
                               epochs=cfg.epochs if epochs is None else epochs,
                               minibatch_size=cfg.minibatch_size,
                               gradient_accumulation_steps=cfg.gradient_accumulation_steps,
                               max_grad_norm=cfg.max_grad_norm, target_kl=cfg.target_kl, process=self.process,
                               groups=groups, token_counts=counts, max_chunk_tokens=cfg.max_chunk_answer_tokens)

    def global_batch(self, values: torch.Tensor) -> tuple[torch.Tensor, slice]:
        """Every process's per-decision (or per-episode) ``values`` in rank order, and this
        process's slice: batch statistics computed on the first are those of the global batch
        (:meth:`textgym.distributed.ProcessContext.concat`; one process: ``values`` itself)."""
        return self.process.concat(values)

    # --- warm start ---------------------------------------------------------------------------

    def warm_start(self, demonstrations: Sequence[Demonstration] | str | Path,
                   config: SFTConfig | None = None) -> list[float]:
        """SFT on demonstrations (a JSONL path or a list) before RL; returns the loss per epoch.

        Demonstrations without a system prompt get the env's. See :func:`textgym.trainers.sft.sft`.
        """
        try:
            system_prompt = self.venv.envs[0].get_wrapper_attr("system_prompt")
        except AttributeError:  # no env, or an env without TextObservation
            system_prompt = ""
        return sft(self.policy, demonstrations, system_prompt=system_prompt, config=config,
                   parameters=self.trainable_parameters(), process=self.process)

    # --- evaluation ----------------------------------------------------------------------------

    def evaluate(self, episodes: int = 100, seed: int | None = None, num_envs: int | None = None) -> dict[str, Any]:
        """Greedy play on held-out seeds (``config.eval_seed`` by default): mean return, length,
        invalid rate, and win/draw/loss rates when the env reports outcomes (games). With several
        processes, each plays its share of the episodes and every one gets the whole result."""
        seed = self.config.eval_seed if seed is None else seed
        self._need_env("evaluate")
        if self.env_id is not None:
            import textgym

            mine = max(1, len(self.process.shard(episodes)))
            n = num_envs or eval_envs(mine)
            venv = textgym.make_vec(self.env_id, num_envs=n, seed=seed, **self.env_kwargs)
        else:
            venv = self.venv
        return evaluate_greedy(self.policy, venv, episodes=episodes, seed=seed, process=self.process,
                               on_episodes=lambda played: self.write_transcripts(played, "eval"))

    def greedy_check(self, early_stop: EarlyStop) -> CheckResult:
        """Play the early stop's held-out episodes greedily, all together and capped at its
        ``max_steps`` (when the trainer was made from an env id), and compare their mean return
        with its ``until``. The check's envs are made once and reused (the episodes' seeds make
        every check play the same starts). With several processes, each plays its share and every
        one gets the same result."""
        self._need_env("greedy_check")
        started = time.monotonic()
        venv, cap = self.venv, None
        if self.env_id is not None:
            kwargs = dict(self.env_kwargs)
            if early_stop.max_steps is not None:  # the tighter of the check's cap and the run's own limit
                cap = min(early_stop.max_steps, kwargs.get("max_episode_steps") or early_stop.max_steps)
                kwargs["max_episode_steps"] = cap
            mine = max(1, len(self.process.shard(early_stop.episodes)))
            key = (eval_envs(mine), cap)
            if key not in self._check_envs:
                import textgym

                self._check_envs[key] = textgym.make_vec(self.env_id, num_envs=key[0], seed=early_stop.seed, **kwargs)
            venv = self._check_envs[key]
        result = evaluate_greedy(self.policy, venv, episodes=early_stop.episodes, seed=early_stop.seed,
                                 process=self.process,
                                 on_episodes=lambda played: self.write_transcripts(played, "check"))
        return CheckResult(update=self.update_count, return_mean=result["return_mean"], episodes=result["episodes"],
                           max_steps=cap, until=float(early_stop.until),
                           solved=result["return_mean"] >= early_stop.until,
                           seconds=round(time.monotonic() - started, 3))

    # --- checkpoints ---------------------------------------------------------------------------

    def wall_time(self) -> float:
        return self._wall_time_before + time.monotonic() - self._started

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        optimizers = {"policy": self.optimizer}
        if self.online_sft.optimizer is not None:
            optimizers["sft"] = self.online_sft.optimizer
        return optimizers

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Write a checkpoint (default ``<out_dir>/checkpoint``) atomically. With several processes,
        every one calls this; the main process writes (the replicas' states are identical) while
        the others wait, so none goes on before the checkpoint is complete."""
        if path is None:
            if self.out_dir is None:
                raise ValueError("save_checkpoint() needs a path when the trainer has no out_dir")
            path = self.out_dir / run_folder.CHECKPOINT
        path = Path(path)
        if self.process.is_main:
            self._write_checkpoint(path)
        self.process.barrier()
        return path

    def _write_checkpoint(self, path: Path) -> Path:
        state = {
            "algorithm": self.algorithm,
            "config": self.config.to_dict(),
            "env_id": self.env_id,
            "env_kwargs": self.env_kwargs,
            "out_dir": str(self.out_dir) if self.out_dir is not None else None,
            "update_count": self.update_count,
            "episodes_seen": self.episodes_seen,
            "decisions_seen": self.decisions_seen,
            "nonfinite_updates": self.nonfinite_updates,
            "wall_time": self.wall_time(),
            "schedule_total": self._schedule_total,
            "recent": list(self.recent),
            "alarm_history": [stats.to_dict() for stats in self.alarm_history],
            "algorithm_state": self._algorithm_state(),
            "policy": ckpt.policy_record(self.policy),
        }
        return ckpt.save_checkpoint(path, policy=self.policy, optimizers=self._optimizers(), state=state,
                                    value_head=self._value_head(),
                                    files={METRICS_FILE: self.writer.lines_up_to(self.update_count)})

    def load_state(self, path: str | Path) -> dict[str, Any]:
        """Load a checkpoint of this run into this trainer (weights, optimizer, counters, RNG).

        Every process loads the same checkpoint, whatever number of processes wrote it (its
        state is the global one: counters, metrics window, rank 0's RNG), so a run may resume
        with more or fewer processes."""
        state = ckpt.read_state(path)
        if state.get("optimizers", {}).get("sft"):
            self.online_sft.make_optimizer(self.trainable_parameters())
        state = ckpt.load_checkpoint(path, model=self.model, optimizers=self._optimizers(),
                                     value_head=self._value_head())
        self.update_count = state["update_count"]
        self.episodes_seen = state["episodes_seen"]
        self.decisions_seen = state["decisions_seen"]
        self.nonfinite_updates = state.get("nonfinite_updates", 0)
        self._wall_time_before = state["wall_time"]
        self._started = time.monotonic()
        self._schedule_total = state.get("schedule_total")
        self.recent.clear()
        # checkpoints written before outcomes were tracked hold 3-tuples
        self.recent.extend((*r, None)[:4] for r in state["recent"])
        self.alarm_history = [alarms.UpdateStats.from_metrics(stats) for stats in state.get("alarm_history", [])]
        self._load_algorithm_state(state.get("algorithm_state", {}))
        self.writer.resume(ckpt.checkpoint_dir(path), self.update_count)  # metrics.jsonl, tb/
        self.transcripts.resume(self.update_count)
        return state

    @classmethod
    def resume(cls, path: str | Path, policy: Policy | None = None, env: str | Envs | None = None,
               out_dir: str | Path | None = None, process: ProcessContext | None = None) -> Trainer:
        """Rebuild a trainer from a checkpoint and continue the same run.

        Args:
            path: the checkpoint folder.
            policy: a policy on the *same base model* (without adapter); default: one built from
                the model name and policy settings recorded in the checkpoint.
            env: the env (default: the checkpoint's env id).
            out_dir: where to keep writing metrics (default: the checkpoint's run folder).
            process: this process's place in a data-parallel run (default: :func:`textgym.distributed.init`).
        """
        from textgym.trainers import make_trainer

        state = ckpt.read_state(path)
        process = process if process is not None else distributed.init()
        if policy is None:  # on this process's device (its GPU in a multi-GPU run)
            policy = ckpt.policy_from_record(state.get("policy", {}),
                                             device=process.device if process.is_distributed else None)
        config = dict(state["config"])
        algorithm = config.pop("algorithm", state["algorithm"])
        env = env if env is not None else state["env_id"]
        if env is None:
            raise ValueError("the checkpoint's env was a vector env object: pass env=")
        out_dir = out_dir if out_dir is not None else state.get("out_dir")
        trainer = make_trainer(algorithm, policy, env=env, config=config, out_dir=out_dir,
                               env_kwargs=state.get("env_kwargs"), process=process)
        trainer.load_state(path)
        return trainer
