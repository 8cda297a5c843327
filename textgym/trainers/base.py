"""The Trainer base: rollouts, the optimisation loop, metrics, checkpoints, evaluation.

An algorithm (``reinforce.py``, ``grpo.py``, ``ppo.py``) subclasses :class:`Trainer` and writes
one method, ``_update(episodes) -> dict``, readable top to bottom. Everything the algorithms
share lives here: LoRA set-up, the learning-rate schedule, minibatches with gradient
accumulation and clipping, the NaN guard, the reference policy's log-probs for the KL penalty,
metrics, checkpoints, and greedy evaluation on held-out seeds.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from textgym.outcomes import outcome_of, outcome_rates
from textgym.trainers import checkpoint as ckpt
from textgym.trainers.config import TrainConfig, config_for
from textgym.trainers.losses import approx_kl, masked_mean
from textgym.trainers.metrics import METRICS_FILE, MetricsWriter

logger = logging.getLogger("textgym.trainers")

# Training seeds live far above the evaluation seeds (TrainConfig.eval_seed, default 1e6).
_TRAIN_SEED_BASE = 10_000_000
_SEEDS_PER_UPDATE = 10_000


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def add_lora(model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module:
    """Wrap ``model`` in a fresh LoRA adapter (peft); a model that already has one is returned as is.

    Target modules: ``config.lora_target_modules``, else the model registry's defaults for this
    model (those present in it), else every linear layer; in the top ``config.lora_layers``
    transformer layers only when that is set.
    """
    if ckpt.is_peft_model(model):
        return model
    from peft import LoraConfig, get_peft_model

    targets: Any = config.lora_target_modules
    if targets is None:
        from textgym import models

        name = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
        wanted = set(models.spec(name).lora_target_modules)
        present = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        targets = sorted(wanted & present) or "all-linear"
    layers: dict[str, Any] = {}
    if config.lora_layers is not None:
        depth = getattr(getattr(model, "config", None), "num_hidden_layers", None)
        if not depth:
            raise ValueError("lora_layers needs a model whose config has num_hidden_layers")
        layers = {"layers_to_transform": list(range(max(0, depth - config.lora_layers), depth)),
                  "layers_pattern": "layers"}
    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=targets, bias="none", task_type="CAUSAL_LM", **layers)
    with warnings.catch_warnings():  # transformers' deprecation chatter from inside peft
        warnings.simplefilter("ignore", FutureWarning)
        return get_peft_model(model, lora)


def lr_factor(update: int, warmup: int, total: int | None, schedule: str) -> float:
    """Multiplier of the peak learning rate at (0-based) ``update``."""
    if warmup and update < warmup:
        return (update + 1) / warmup
    if schedule == "constant" or not total:
        return 1.0
    progress = min(1.0, (update - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def env_return(episode: Any) -> float:
    """The env's own return of an episode (before reward shaping) when recorded, else the sum of rewards."""
    return float(getattr(episode, "env_return", episode.return_))


def decisions_of(episodes: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """All decisions of ``episodes`` in order, and the steps they belong to."""
    steps = [step for episode in episodes for step in episode.steps]
    return [step.decision for step in steps], steps


def flat_units(values: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """Per row, the values at the real units (so they can be re-padded to another batch's shape)."""
    return [row[m].detach().cpu() for row, m in zip(values, mask)]


def pad_units(units: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`flat_units` for a batch with ``mask``: a tensor shaped like ``mask``."""
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    out[mask] = torch.cat([u.float() for u in units]).to(mask.device)
    return out


def centred_logprobs(ev: Any, decisions: Sequence[Any], weight: float) -> torch.Tensor:
    """Score mode: the chosen candidates' log-probs ``[B, 1]`` with the shared shift of their
    gradient scaled by ``1 - weight``.

    Decisions that share a candidate set form a group; within it each candidate's log-prob
    ``l_k(s)`` becomes ``l_k(s) - weight * (mean_s l_k - stopgrad(mean_s l_k))``: the same value,
    but a gradient step no longer gets credit for moving ``l_k`` in every state of the group at
    once, only for moving it in some states relative to the others.
    """
    chosen = list(ev.logprobs[:, 0].unbind())
    groups: dict[tuple, list[int]] = {}
    for row, decision in enumerate(decisions):
        groups.setdefault(tuple(map(tuple, decision.candidates)), []).append(row)
    for rows in groups.values():
        if len(rows) < 2:
            continue
        logprobs = torch.stack([ev.candidate_logprobs[r] for r in rows])  # [n, K]
        shift = logprobs.mean(dim=0)
        logprobs = logprobs - weight * (shift - shift.detach())
        for j, r in enumerate(rows):
            chosen[r] = logprobs[j, decisions[r].action_index]
    return torch.stack(chosen)[:, None]


class Trainer:
    """Alternates rollouts and updates of a :class:`textgym.Policy` on a text env.

    Args:
        policy: the policy to train (its model gets a LoRA adapter unless ``config.use_lora`` is False).
        env: a text env id (a vector env of ``config.num_envs`` is made), a ``TextVectorEnv``, or
            ``None`` when the caller feeds episodes to :meth:`update` itself.
        config: the algorithm's config, a dict of its fields, or ``None`` for defaults.
        out_dir: where ``metrics.jsonl``, TensorBoard files and checkpoints go (``None``: nowhere).
        env_kwargs: passed to ``textgym.make_vec`` when ``env`` is an id.
    """

    algorithm = "base"

    def __init__(self, policy: Any, env: Any = "textgym/Bandit-v0", config: TrainConfig | dict | None = None,
                 out_dir: str | Path | None = None, env_kwargs: dict[str, Any] | None = None):
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
        # (env return, length, invalid answers, outcome or None) of the latest episodes
        self.recent: deque[tuple[float, int, int, str | None]] = deque(maxlen=self.config.metrics_window)
        self.replay: list[Any] = []  # episodes kept for online SFT

        self._init_algorithm()
        self.optimizer = torch.optim.AdamW(self._param_groups(), weight_decay=self.config.weight_decay)
        self.sft_optimizer: torch.optim.Optimizer | None = None

    # --- hooks for the algorithms ----------------------------------------------------------

    def _init_algorithm(self) -> None:
        """Create algorithm-specific state (value head, baseline...)."""

    def _extra_param_groups(self) -> list[dict[str, Any]]:
        """Optimizer parameter groups besides the policy's (e.g. the value head)."""
        return []

    def _update(self, episodes: list[Any]) -> dict[str, float]:
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
        if self.config.use_lora:
            model = add_lora(model, self.config)
            model.eval()  # no dropout: acting and re-scoring must see the same function
            self.policy.model = model
        else:
            if ckpt.is_peft_model(model):
                raise ValueError("use_lora=False but the policy's model already has a LoRA adapter")
            if hasattr(self.policy, "parameters_to_train"):
                self.policy.parameters_to_train()  # also snapshots the frozen reference policy
            for p in model.parameters():
                p.requires_grad_(True)
        return model

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _param_groups(self) -> list[dict[str, Any]]:
        groups = [{"params": self.trainable_parameters(), "lr": self.config.lr, "base_lr": self.config.lr}]
        return groups + self._extra_param_groups()

    def _all_parameters(self) -> list[torch.nn.Parameter]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    # --- the loop ------------------------------------------------------------------------------

    def rollout_seed(self, update: int | None = None) -> int:
        """The env seed of update ``update``'s rollout (sub-env i gets seed + i): resumable, held out from eval."""
        update = self.update_count if update is None else update
        return _TRAIN_SEED_BASE + self.config.seed * 1_000_000_000 + update * _SEEDS_PER_UPDATE

    def collect(self) -> Any:
        """Play ``config.episodes_per_update`` episodes with the current policy (sampling)."""
        from textgym.rollout import collect

        self._need_env("collect")
        return collect(self.policy, self.venv, episodes=self.config.episodes_per_update,
                       seed=self.rollout_seed())

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

    def update(self, episodes: Sequence[Any], stats: dict[str, Any] | None = None) -> dict[str, Any]:
        """One update of the policy from completed episodes; returns (and logs) its metrics.

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

        self.update_count += 1
        self.episodes_seen += len(episodes)
        decisions, steps = decisions_of(episodes)
        self.decisions_seen += len(decisions)
        for ep in episodes:
            self.recent.append((env_return(ep), int(ep.length), int(ep.invalid_count), outcome_of(ep)))
        sft_metrics = self._maybe_online_sft(episodes)
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
            metrics["decisions_per_s"] = float(stats.get("decisions", len(decisions))) / seconds
            tokens = float(stats.get("prompt_tokens", 0)) + float(stats.get("answer_tokens", 0))
            if tokens:
                metrics["tokens_per_s"] = tokens / seconds
        metrics["samples"] = [
            {"prompt": s.observation, "answer": s.decision.text, "reward": float(s.reward)}
            for s in steps[: self.config.log_samples]
        ]
        self.writer.write(metrics)
        return metrics

    # --- the optimisation loop the algorithms share ---------------------------------------

    def optimize(self, num_decisions: int, loss_fn: Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, float]]],
                 epochs: int | None = None, target_kl: float | None = None) -> dict[str, float]:
        """Minimise ``loss_fn`` over shuffled minibatches of decision indices for ``epochs`` passes.

        ``loss_fn(indices) -> (loss, stats)`` returns the mean loss over those decisions and
        float statistics (``"kl"``, the approximate KL between the rollout policy and the
        current one, drives the target-KL early stop: no more epochs once an epoch's mean KL
        exceeds ``target_kl``, and, within an epoch, no more steps once a minibatch's KL exceeds
        ``1.5 * target_kl``, as in Stable-Baselines3's PPO, so one update with a single epoch
        cannot run away either). Each minibatch is split into
        ``gradient_accumulation_steps`` chunks whose gradients add up; the global gradient norm
        is clipped (per parameter group) before the step. A non-finite loss or gradient stops the update before
        that optimizer step (the weights stay as they were), and is logged.
        """
        cfg = self.config
        epochs = cfg.epochs if epochs is None else epochs
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        epochs_done, steps, stopped_nonfinite, stopped_kl = 0, 0, False, False
        for _ in range(epochs):
            epoch_kl: list[float] = []
            perm = torch.randperm(num_decisions)
            for start in range(0, num_decisions, cfg.minibatch_size):
                minibatch = perm[start:start + cfg.minibatch_size]
                self.optimizer.zero_grad(set_to_none=True)
                finite = True
                minibatch_kl: list[float] = []
                for chunk in minibatch.chunk(min(cfg.gradient_accumulation_steps, len(minibatch))):
                    loss, stats = loss_fn(chunk)
                    if not torch.isfinite(loss):
                        finite = False
                        break
                    (loss * len(chunk) / len(minibatch)).backward()
                    for key, value in {"loss": loss.item(), **stats}.items():
                        sums[key] = sums.get(key, 0.0) + float(value)
                        counts[key] = counts.get(key, 0) + 1
                    if "kl" in stats:
                        minibatch_kl.append(float(stats["kl"]))
                epoch_kl.extend(minibatch_kl)
                if (finite and target_kl is not None and minibatch_kl
                        and float(np.mean(minibatch_kl)) > 1.5 * target_kl):
                    stopped_kl = True  # the policy already moved too far: no step on this minibatch
                    break
                if finite:
                    # Clip each parameter group on its own: the value head's large early gradients
                    # must not shrink the policy's step.
                    max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else float("inf")
                    for group in self.optimizer.param_groups:
                        grad_norm = torch.nn.utils.clip_grad_norm_(group["params"], max_norm)
                        finite = finite and bool(torch.isfinite(grad_norm))
                if not finite:
                    self.optimizer.zero_grad(set_to_none=True)
                    stopped_nonfinite = True
                    break
                self.optimizer.step()
                steps += 1
            if stopped_nonfinite or stopped_kl:
                break
            epochs_done += 1
            if target_kl is not None and epoch_kl and float(np.mean(epoch_kl)) > target_kl:
                break
        self.optimizer.zero_grad(set_to_none=True)
        out = {key: sums[key] / counts[key] for key in sums}
        out["epochs"] = epochs_done
        out["optimizer_steps"] = steps
        if stopped_kl:
            out["kl_stop"] = True
        if stopped_nonfinite:
            self.nonfinite_updates += 1
            logger.warning("update %d: non-finite loss or gradient; skipped the rest of the update "
                           "(weights not changed by it)", self.update_count + 1)
            out["nonfinite"] = True
        return out

    def skip_nonfinite(self, *tensors: torch.Tensor) -> dict[str, Any] | None:
        """If any input of the loss (rewards, advantages...) is not finite, skip the update: metrics, else None."""
        if all(bool(torch.isfinite(t).all()) for t in tensors):
            return None
        self.nonfinite_updates += 1
        logger.warning("update %d: non-finite rewards or advantages; update skipped", self.update_count + 1)
        return {"nonfinite": True, "epochs": 0}

    @torch.no_grad()
    def reference_units(self, decisions: Sequence[Any], batch_size: int | None = None) -> list[torch.Tensor]:
        """Per decision, the reference policy's log-probs of its units (adapter disabled)."""
        batch_size = batch_size or self.config.minibatch_size
        out: list[torch.Tensor] = []
        with self.policy.reference():
            for start in range(0, len(decisions), batch_size):
                ev = self.policy.evaluate(list(decisions[start:start + batch_size]))
                out.extend(flat_units(ev.logprobs, ev.mask))
        return out

    @staticmethod
    def rollout_kl(ev: Any) -> float:
        """Approximate KL(rollout policy || current policy) over ``ev``'s units.

        The units were sampled from the rollout policy, so the k3 estimator takes the rollout
        log-probs as the sampling side (CleanRL's ``(ratio - 1) - log ratio``): it grows like
        ``-log ratio`` when the update makes a sampled answer unlikely, instead of like
        ``1 / ratio`` (which overflowed to 1e15 once a collapsing policy gave a sampled answer
        probability 1e-16)."""
        return masked_mean(approx_kl(ev.old_logprobs, ev.logprobs.detach()), ev.mask).item()

    def add_reference_kl(self, loss: torch.Tensor, ev: Any, ref: list[torch.Tensor] | None,
                         indices: torch.Tensor, stats: dict[str, float]) -> torch.Tensor:
        """``loss + kl_coef * KL(policy || reference)`` over the minibatch's units, logged as
        ``ref_kl``. ``ref`` comes from :meth:`reference_units` (``None``: no penalty)."""
        if ref is None:
            return loss
        ref_logprobs = pad_units([ref[i] for i in indices.tolist()], ev.mask)
        ref_kl = masked_mean(approx_kl(ev.logprobs, ref_logprobs), ev.mask)
        stats["ref_kl"] = ref_kl.item()
        return loss + self.config.kl_coef * ref_kl

    def evaluate_batch(self, decisions: Sequence[Any], indices: torch.Tensor) -> Any:
        """``policy.evaluate`` on the decisions at ``indices`` (with grad), with the chosen
        log-probs centred over the batch when ``config.state_centering`` is set."""
        batch = [decisions[i] for i in indices.tolist()]
        ev = self.policy.evaluate(batch)
        if self.config.state_centering and ev.candidate_logprobs is not None:
            ev = dataclasses.replace(ev, logprobs=centred_logprobs(ev, batch, self.config.state_centering))
        return ev

    # --- warm start and online SFT ---------------------------------------------------------

    def warm_start(self, demonstrations: Any, config: Any = None) -> list[float]:
        """SFT on demonstrations (a JSONL path or a list) before RL; returns the loss per epoch.

        Demonstrations without a system prompt get the env's. See :func:`textgym.trainers.sft.sft`.
        """
        from textgym.trainers.sft import sft

        try:
            system_prompt = self.venv.envs[0].get_wrapper_attr("system_prompt")
        except AttributeError:  # no env, or an env without TextObservation
            system_prompt = ""
        return sft(self.policy, demonstrations, system_prompt=system_prompt, config=config,
                   parameters=self.trainable_parameters())

    # --- online SFT on the best episodes ---------------------------------------------------

    def _maybe_online_sft(self, episodes: list[Any]) -> dict[str, float]:
        cfg = self.config
        if not cfg.sft_every:
            return {}
        self.replay.extend(episodes)
        self.replay = self.replay[-cfg.replay_size:]
        if self.update_count % cfg.sft_every:
            return {}
        from textgym.trainers.sft import sft_on_decisions

        best = sorted(self.replay, key=lambda ep: float(ep.return_), reverse=True)
        best = best[: max(1, int(len(best) * cfg.sft_top_fraction))]
        decisions, _ = decisions_of(best)
        if self.sft_optimizer is None:
            self.sft_optimizer = torch.optim.AdamW(self.trainable_parameters(), lr=cfg.sft_lr)
        loss = sft_on_decisions(self.policy, decisions, self.sft_optimizer, batch_size=cfg.minibatch_size,
                                epochs=1, max_grad_norm=cfg.max_grad_norm)
        return {"sft_loss": loss, "sft_decisions": len(decisions)}

    # --- evaluation ----------------------------------------------------------------------------

    def evaluate(self, episodes: int = 100, seed: int | None = None, num_envs: int | None = None) -> dict[str, Any]:
        """Greedy play on held-out seeds (``config.eval_seed`` by default): mean return, length,
        invalid rate, and win/draw/loss rates when the env reports outcomes (games)."""
        from textgym.rollout import collect

        seed = self.config.eval_seed if seed is None else seed
        self._need_env("evaluate")
        if self.env_id is not None:
            import textgym

            n = num_envs or min(episodes, max(self.config.num_envs, 16))
            venv = textgym.make_vec(self.env_id, num_envs=n, seed=seed, **self.env_kwargs)
        else:
            venv = self.venv
        rollout = collect(self.policy, venv, episodes=episodes, seed=seed, greedy=True)
        eps = rollout.episodes[:episodes]
        returns = np.array([env_return(ep) for ep in eps])
        lengths = np.array([int(ep.length) for ep in eps])
        invalid = sum(int(ep.invalid_count) for ep in eps)
        return {
            "episodes": len(eps),
            "return_mean": float(returns.mean()),
            "return_std": float(returns.std()),
            "length_mean": float(lengths.mean()),
            "invalid_rate": invalid / max(1, int(lengths.sum())),
            **outcome_rates([outcome_of(ep) for ep in eps]),
            "seed": seed,
        }

    # --- checkpoints ---------------------------------------------------------------------------

    def wall_time(self) -> float:
        return self._wall_time_before + time.monotonic() - self._started

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Write a checkpoint (default ``<out_dir>/checkpoint``) atomically."""
        if path is None:
            if self.out_dir is None:
                raise ValueError("save_checkpoint() needs a path when the trainer has no out_dir")
            path = self.out_dir / "checkpoint"
        optimizers = {"policy": self.optimizer}
        if self.sft_optimizer is not None:
            optimizers["sft"] = self.sft_optimizer
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
            "policy": {key: getattr(self.policy, key, None)
                       for key in ("name", "mode", "temperature", "normalization", "max_new_tokens")},
        }
        return ckpt.save_checkpoint(path, model=self.model, optimizers=optimizers, state=state,
                                    value_head=self._value_head(),
                                    files={METRICS_FILE: self.writer.lines_up_to(self.update_count)})

    def load_state(self, path: str | Path) -> dict[str, Any]:
        """Load a checkpoint of this run into this trainer (weights, optimizer, counters, RNG)."""
        state = ckpt.read_state(path)
        if state.get("optimizers", {}).get("sft") and self.sft_optimizer is None:
            self.sft_optimizer = torch.optim.AdamW(self.trainable_parameters(), lr=self.config.sft_lr)
        optimizers = {"policy": self.optimizer}
        if self.sft_optimizer is not None:
            optimizers["sft"] = self.sft_optimizer
        state = ckpt.load_checkpoint(path, model=self.model, optimizers=optimizers, value_head=self._value_head())
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
    def resume(cls, path: str | Path, policy: Any = None, env: Any = None,
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
            settings = {k: v for k, v in state.get("policy", {}).items() if v is not None}
            name = settings.pop("name", None)
            if name is None:
                raise ValueError("the checkpoint does not name its base model: pass resume(path, policy=...)")
            import textgym

            model, tokenizer = textgym.models.load(name)
            policy = textgym.Policy(model, tokenizer, name=name, **settings)
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
