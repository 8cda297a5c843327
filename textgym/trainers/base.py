"""The Trainer base: the loop (collect, update, train), its bookkeeping, and the hooks algorithms fill.

An algorithm (``reinforce.py``, ``grpo.py``, ``ppo.py``) subclasses :class:`Trainer` and writes
one method, ``_update(episodes) -> dict``, readable top to bottom with the pieces it uses
imported by name: :mod:`~textgym.trainers.losses` (the pure maths), :mod:`~textgym.trainers.kl`
(KL to the rollout and reference policies), :mod:`~textgym.trainers.centering` (re-scoring a
minibatch) and :meth:`Trainer.optimize` (the minibatch loop of
:mod:`~textgym.trainers.optimization`, where every optimizer step happens). What the base keeps:
LoRA set-up (through :mod:`textgym.lora`), the learning-rate schedule, the per-update metrics
(assembled in :meth:`Trainer.update`, the one place), warm start and online SFT
(:mod:`~textgym.trainers.sft`), greedy evaluation (:mod:`~textgym.trainers.evaluation`) and
checkpoints (:mod:`~textgym.trainers.checkpoint`).
"""

from __future__ import annotations

import logging
import random
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from textgym import lora
from textgym.outcomes import outcome_of, outcome_rates
from textgym.policy import Decision, Policy
from textgym.rollout import Envs, Episode, Rollout, collect
from textgym.trainers import checkpoint as ckpt
from textgym.trainers.config import SFTConfig, TrainConfig, config_for
from textgym.trainers.evaluation import evaluate_greedy
from textgym.trainers.metrics import METRICS_FILE, MetricsWriter
from textgym.trainers.optimization import LossFn, lr_factor, run_minibatches
from textgym.trainers.sft import Demonstration, OnlineSFT, sft

logger = logging.getLogger("textgym.trainers")

# Training seeds live far above the evaluation seeds (TrainConfig.eval_seed, default 1e6).
_TRAIN_SEED_BASE = 10_000_000
_SEEDS_PER_UPDATE = 10_000

EpisodeRecord = tuple[float, int, int, "str | None"]
"""What the metrics window keeps of an episode: (env return, length, invalid answers, outcome)."""


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
        out_dir: where ``metrics.jsonl``, TensorBoard files and checkpoints go (``None``: nowhere).
        env_kwargs: passed to ``textgym.make_vec`` when ``env`` is an id.
    """

    algorithm = "base"

    def __init__(self, policy: Policy, env: str | Envs | None = "textgym/Bandit-v0",
                 config: TrainConfig | dict | None = None, out_dir: str | Path | None = None,
                 env_kwargs: dict[str, Any] | None = None):
        self.config = config_for(self.algorithm, config)
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
        self.writer = MetricsWriter(self.out_dir)

        self.update_count = 0
        self.episodes_seen = 0
        self.decisions_seen = 0
        self.nonfinite_updates = 0
        self._wall_time_before = 0.0  # wall time of earlier sessions of a resumed run
        self._started = time.monotonic()
        self._schedule_total = self.config.total_updates
        self.recent: deque[EpisodeRecord] = deque(maxlen=self.config.metrics_window)
        self.online_sft = OnlineSFT(self.config)

        self._init_algorithm()
        self.optimizer = torch.optim.AdamW(self._param_groups(), weight_decay=self.config.weight_decay)

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
        return _TRAIN_SEED_BASE + self.config.seed * 1_000_000_000 + update * _SEEDS_PER_UPDATE

    def collect(self) -> Rollout:
        """Play ``config.episodes_per_update`` episodes with the current policy (sampling)."""
        self._need_env("collect")
        return collect(self.policy, self.venv, episodes=self.config.episodes_per_update, seed=self.rollout_seed())

    def _need_env(self, what: str) -> None:
        if self.venv is None and self.env_id is None:
            raise ValueError(f"{what}() needs an env: make the trainer with env=<id or TextVectorEnv>")

    def train(self, episodes: int | None = None, updates: int | None = None, seconds: float | None = None,
              callback: Callable[[dict[str, Any]], Any] | None = None) -> list[dict[str, Any]]:
        """Collect and update until a budget is spent; returns the metrics of every update.

        Args:
            episodes: stop after this many more training episodes.
            updates: stop after this many more updates.
            seconds: stop after this much more wall time (checked between updates).
            callback: called with each update's metrics; returning ``False`` stops training
                (a ``KeyboardInterrupt`` raised in it propagates after the metrics are written).
        """
        if episodes is None and updates is None and seconds is None:
            raise ValueError("train() needs a budget: episodes=, updates= or seconds=")
        if updates is not None and self.config.total_updates is None:
            self._schedule_total = self.update_count + updates
        start, episodes0, updates0 = time.monotonic(), self.episodes_seen, self.update_count
        history: list[dict[str, Any]] = []
        while True:
            if episodes is not None and self.episodes_seen - episodes0 >= episodes:
                break
            if updates is not None and self.update_count - updates0 >= updates:
                break
            if seconds is not None and time.monotonic() - start >= seconds:
                break
            rollout = self.collect()
            metrics = self.update(rollout.episodes, stats=rollout.stats)
            history.append(metrics)
            if (self.config.checkpoint_every and self.out_dir is not None
                    and self.update_count % self.config.checkpoint_every == 0):
                self.save_checkpoint()
            if callback is not None and callback(metrics) is False:
                break
        return history

    def update(self, episodes: Sequence[Episode], stats: dict[str, Any] | None = None) -> dict[str, Any]:
        """One update of the policy from completed episodes; returns (and logs) its metrics.

        This is where every update's metrics are assembled, from the algorithm's losses, the
        window of recent episodes and the rollout's throughput.

        Args:
            episodes: ``textgym.rollout.Episode`` objects (their steps hold the decisions).
            stats: the rollout's ``stats`` (decisions, tokens, seconds) for throughput figures.
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

        if losses.get("nonfinite"):
            self.nonfinite_updates += 1
        self.update_count += 1
        self.episodes_seen += len(episodes)
        steps = [step for episode in episodes for step in episode.steps]
        self.decisions_seen += len(steps)
        self.recent.extend((ep.env_return, ep.length, ep.invalid_count, outcome_of(ep)) for ep in episodes)
        sft_metrics = self.online_sft.after_update(self.policy, episodes, self.update_count,
                                                   self.trainable_parameters())
        update_seconds = time.monotonic() - t0

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
        if stats and seconds > 0:
            metrics["decisions_per_s"] = float(stats.get("decisions", len(steps))) / seconds
            tokens = float(stats.get("prompt_tokens", 0)) + float(stats.get("answer_tokens", 0))
            if tokens:
                metrics["tokens_per_s"] = tokens / seconds
        metrics["samples"] = [
            {"prompt": s.observation, "answer": s.decision.text, "reward": float(s.reward)}
            for s in steps[: self.config.log_samples]
        ]
        self.writer.write(metrics)
        return metrics

    def optimize(self, decisions: Sequence[Decision] | int, loss_fn: LossFn,
                 epochs: int | None = None) -> dict[str, float]:
        """The algorithm's minibatch loop over ``decisions`` (or their number) with this trainer's
        optimizer and config (epochs, minibatch size, accumulation, clipping, ``target_kl``, and
        ``max_chunk_answer_tokens`` when the decisions are given): see
        :func:`textgym.trainers.optimization.run_minibatches`."""
        cfg = self.config
        counts = None if isinstance(decisions, int) else [len(d.answer_ids) for d in decisions]
        return run_minibatches(self.optimizer, len(counts) if counts is not None else decisions, loss_fn,
                               epochs=cfg.epochs if epochs is None else epochs,
                               minibatch_size=cfg.minibatch_size,
                               gradient_accumulation_steps=cfg.gradient_accumulation_steps,
                               max_grad_norm=cfg.max_grad_norm, target_kl=cfg.target_kl,
                               token_counts=counts, max_chunk_tokens=cfg.max_chunk_answer_tokens)

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
                   parameters=self.trainable_parameters())

    # --- evaluation ----------------------------------------------------------------------------

    def evaluate(self, episodes: int = 100, seed: int | None = None, num_envs: int | None = None) -> dict[str, Any]:
        """Greedy play on held-out seeds (``config.eval_seed`` by default): mean return, length,
        invalid rate, and win/draw/loss rates when the env reports outcomes (games)."""
        seed = self.config.eval_seed if seed is None else seed
        self._need_env("evaluate")
        if self.env_id is not None:
            import textgym

            n = num_envs or min(episodes, max(self.config.num_envs, 16))
            venv = textgym.make_vec(self.env_id, num_envs=n, seed=seed, **self.env_kwargs)
        else:
            venv = self.venv
        return evaluate_greedy(self.policy, venv, episodes=episodes, seed=seed)

    # --- checkpoints ---------------------------------------------------------------------------

    def wall_time(self) -> float:
        return self._wall_time_before + time.monotonic() - self._started

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        optimizers = {"policy": self.optimizer}
        if self.online_sft.optimizer is not None:
            optimizers["sft"] = self.online_sft.optimizer
        return optimizers

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Write a checkpoint (default ``<out_dir>/checkpoint``) atomically."""
        if path is None:
            if self.out_dir is None:
                raise ValueError("save_checkpoint() needs a path when the trainer has no out_dir")
            path = self.out_dir / "checkpoint"
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
            "algorithm_state": self._algorithm_state(),
            "policy": ckpt.policy_record(self.policy),
        }
        return ckpt.save_checkpoint(path, model=self.model, optimizers=self._optimizers(), state=state,
                                    value_head=self._value_head(),
                                    files={METRICS_FILE: self.writer.lines_up_to(self.update_count)})

    def load_state(self, path: str | Path) -> dict[str, Any]:
        """Load a checkpoint of this run into this trainer (weights, optimizer, counters, RNG)."""
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
        self._load_algorithm_state(state.get("algorithm_state", {}))
        self.writer.resume(ckpt.checkpoint_dir(path), self.update_count)  # metrics.jsonl, tb/
        return state

    @classmethod
    def resume(cls, path: str | Path, policy: Policy | None = None, env: str | Envs | None = None,
               out_dir: str | Path | None = None) -> Trainer:
        """Rebuild a trainer from a checkpoint and continue the same run.

        Args:
            path: the checkpoint folder.
            policy: a policy on the *same base model* (without adapter); default: one built from
                the model name and policy settings recorded in the checkpoint.
            env: the env (default: the checkpoint's env id).
            out_dir: where to keep writing metrics (default: the checkpoint's run folder).
        """
        from textgym.trainers import make_trainer

        state = ckpt.read_state(path)
        if policy is None:
            policy = ckpt.policy_from_record(state.get("policy", {}))
        config = dict(state["config"])
        algorithm = config.pop("algorithm", state["algorithm"])
        env = env if env is not None else state["env_id"]
        if env is None:
            raise ValueError("the checkpoint's env was a vector env object: pass env=")
        out_dir = out_dir if out_dir is not None else state.get("out_dir")
        trainer = make_trainer(algorithm, policy, env=env, config=config, out_dir=out_dir,
                               env_kwargs=state.get("env_kwargs"))
        trainer.load_state(path)
        return trainer
