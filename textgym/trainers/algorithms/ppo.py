"""PPO with a value head on the policy's last hidden state, GAE, and a target-KL stop.

A small MLP reads the language model's last hidden state at the last prompt position of every
decision and predicts the return from there. GAE turns rewards and values into advantages; the
policy takes clipped-ratio steps, the value head clipped-value steps, for several epochs per
batch, stopping early when the policy has moved more than ``target_kl`` from the rollout policy.
(TRL 1.x has no PPO; this is textgym's, in plain torch.)

Example:
    >>> import textgym
    >>> from textgym.trainers import make_trainer, PPOConfig
    >>> model, tok = textgym.models.load("tiny")
    >>> policy = textgym.Policy(model, tok, mode="score")
    >>> trainer = make_trainer("ppo", policy, env="textgym/Bandit-v0",
    ...                        config=PPOConfig(num_envs=8, episodes_per_update=16))
    >>> history = trainer.train(updates=1)
    >>> "value_loss" in history[0]
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from textgym.policy import Decision, Evaluation
from textgym.rollout import Episode, conversation_runs, decisions_of
from textgym.trainers.algorithms.ppo_config import PPOConfig
from textgym.trainers.algorithms.value_head import ValueHead
from textgym.trainers.engine.early_stop import EarlyStop
from textgym.trainers.engine.loss_step import LossStep, skipped_update
from textgym.trainers.engine.losses import (
    all_finite,
    clipped_surrogate,
    clipped_value_loss,
    gae,
    normalize,
)
from textgym.trainers.engine.trainer import Trainer


class PPOTrainer(Trainer):
    """Proximal Policy Optimization over per-decision steps. See :class:`PPOConfig`."""

    config_class = PPOConfig
    bootstraps_truncated = True
    config: PPOConfig

    def _init_algorithm(self) -> None:
        hidden_size = self.model.config.hidden_size
        device = next(self.model.parameters()).device
        self.value_head = ValueHead(hidden_size, self.config.value_hidden).to(device)

    def _extra_param_groups(self) -> list[dict[str, Any]]:
        lr = self.config.value_lr
        return [{"params": list(self.value_head.parameters()), "lr": lr, "base_lr": lr}]

    def _value_head(self) -> torch.nn.Module:
        return self.value_head

    def _values(self, decisions: list[Decision]) -> torch.Tensor:
        """The value head's estimate at every decision's state, without grad, in minibatches."""
        size = self.config.minibatch_size
        with torch.no_grad():
            return torch.cat([self.value_head(self.policy.evaluate(decisions[i:i + size]).hidden).float().cpu()
                              for i in range(0, len(decisions), size)])

    def update(self, episodes: Sequence[Episode], stats: dict[str, Any] | None = None, *,
               check: EarlyStop | None = None) -> dict[str, Any]:
        """One PPO update from completed ``episodes`` (see :meth:`Trainer.update`)."""
        # 0. Every update starts in the engine: the learning rate of this update (the schedule).
        episodes, started = self.begin_update(episodes)
        cfg = self.config
        decisions = decisions_of(episodes)

        # 1. Values of every decision's state under the current value head (no grad), once; then
        #    those of the truncated episodes' final states (their bootstrap decisions).
        bootstraps = [ep.bootstrap for ep in episodes if ep.bootstrap is not None]
        values, bootstrap_values = self._values(decisions + bootstraps).split([len(decisions), len(bootstraps)])

        # 2. GAE per episode. A terminated episode bootstraps from 0; any other (truncated, or a part
        #    of an episode) from the value of the state it reached, else of its last state (an estimate).
        advantages, returns, start = [], [], 0
        next_bootstrap = iter(bootstrap_values.tolist())
        for ep in episodes:
            T = len(ep.steps)
            ep_values = values[start:start + T]
            rewards = torch.tensor([s.reward for s in ep.steps], dtype=torch.float32)
            if ep.steps[-1].terminated:
                last_value = 0.0
            elif ep.bootstrap is not None:
                last_value = next(next_bootstrap)
            else:
                last_value = float(ep_values[-1])
            adv, ret = gae(rewards, ep_values, last_value, cfg.gamma, cfg.gae_lambda)
            advantages.append(adv)
            returns.append(ret)
            start += T
        advantages, returns = torch.cat(advantages), torch.cat(returns)
        if self.process.agree_to_stop(not all_finite(advantages, returns)):  # every process skips, or none
            skipped = skipped_update("rewards or advantages")
            return self.finish_update(episodes, skipped, started, stats, check)
        # Batch statistics over every process's decisions (`mine`: this process's part).
        all_advantages, mine = self.global_batch(advantages)
        if cfg.normalize_advantages and len(all_advantages) > 1:
            advantages = normalize(all_advantages)[mine]

        # 3. What every algorithm's loss shares: reference log-probs for the KL penalty, the
        #    acting-precision correction (once per update); entropy bonus and KL terms per minibatch.
        step = LossStep.prepare(self.policy, decisions, cfg, self.reference_memo)

        # 4. The objective: the clipped surrogate plus the clipped value loss.
        def objective(ev: Evaluation, weights: torch.Tensor | None,
                      idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            device = ev.logprobs.device
            policy_loss, clip_frac = clipped_surrogate(ev.logprobs, ev.old_logprobs, advantages[idx].to(device),
                                                       ev.mask, cfg.clip_eps, weights,
                                                       clip_eps_high=cfg.clip_eps_high)
            hidden = ev.hidden.detach() if cfg.value_detach else ev.hidden
            new_values = self.value_head(hidden)
            value_loss = clipped_value_loss(new_values, values[idx].to(device), returns[idx].to(device),
                                            cfg.value_clip)
            return policy_loss + cfg.value_coef * value_loss, {
                "policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "clip_frac": clip_frac.item()}

        # 5. Epochs of minibatch steps; stop once the policy moved past target_kl (Trainer.optimize).
        metrics = self.optimize(decisions, step.loss_fn(objective), groups=conversation_runs(episodes))
        metrics.update(step.metrics)
        all_values, _ = self.global_batch(values)
        all_returns, _ = self.global_batch(returns)
        metrics["value_mean"] = float(all_values.mean())
        metrics["explained_variance"] = float(
            1 - (all_returns - all_values).var(correction=0) / all_returns.var(correction=0).clamp(min=1e-8))
        # 6. Every update ends in the engine: counters, online SFT, check, alarms, the metrics line.
        return self.finish_update(episodes, metrics, started, stats, check)


__all__ = ["PPOConfig", "PPOTrainer"]
