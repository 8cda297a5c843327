"""REINFORCE with a baseline, one decision at a time.

Each decision (a prompt and the answer the policy gave) is credited with the discounted return
from its step to the end of its episode. Returns become advantages by batch normalisation or an
EMA baseline; the loss is ``-A * log pi(answer | prompt)`` over the answer's tokens (or, in
score mode, the chosen candidate's log-softmax), plus the optional KL penalty and entropy bonus.

Example:
    >>> import textgym
    >>> from textgym.trainers import make_trainer, ReinforceConfig
    >>> model, tok = textgym.models.load("tiny")
    >>> policy = textgym.Policy(model, tok, mode="score")
    >>> trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0",
    ...                        config=ReinforceConfig(num_envs=8, episodes_per_update=16))
    >>> history = trainer.train(updates=1)
    >>> {"return_mean", "policy_loss", "entropy", "kl"} <= set(history[0])
    True
"""

from __future__ import annotations

from typing import Any

import torch

from textgym.rollout import Episode, conversation_runs, decisions_of
from textgym.trainers.base import Trainer, skipped_update
from textgym.trainers.centering import evaluate_minibatch
from textgym.trainers.config import ReinforceConfig
from textgym.trainers.kl import reference_kl, reference_logprobs, rollout_kl
from textgym.trainers.losses import EMABaseline, all_finite, normalize, returns_to_go
from textgym.trainers.precision import ActingCorrection


class ReinforceTrainer(Trainer):
    """REINFORCE (Williams, 1992) over the decisions of whole episodes. See :class:`ReinforceConfig`."""

    algorithm = "reinforce"
    config: ReinforceConfig

    def _init_algorithm(self) -> None:
        self.baseline = EMABaseline(self.config.ema_decay)

    def _update(self, episodes: list[Episode]) -> dict[str, float]:
        cfg = self.config
        decisions = decisions_of(episodes)

        # 1. Credit each decision with the discounted return from its step to the episode's end.
        returns = torch.cat([
            returns_to_go(torch.tensor([s.reward for s in ep.steps], dtype=torch.float32), cfg.gamma)
            for ep in episodes
        ])
        if self.process.agree_to_stop(not all_finite(returns)):  # every process skips, or none
            return skipped_update("rewards")

        # 2. Returns -> advantages: normalised over the batch, or minus an EMA of past returns
        #    (batch statistics over every process's decisions; `mine` is this process's part).
        all_returns, mine = self.global_batch(returns)
        if cfg.baseline == "batch":
            all_advantages = normalize(all_returns)
        elif cfg.baseline == "ema":
            all_advantages = self.baseline.advantages(all_returns)
        else:
            all_advantages = all_returns
        advantages = all_advantages[mine]

        # 3. Reference log-probs for the KL penalty (adapter disabled), once per update.
        ref = reference_logprobs(self.policy, decisions, cfg.minibatch_size) if cfg.kl_coef else None
        # 3'. Acting in another precision: the rollout re-scored in the training one (mismatch, correction).
        correction = ActingCorrection.measure(self.policy, decisions, cfg.minibatch_size, cfg.act_correction,
                                              cfg.act_correction_cap)

        # 4. Loss per minibatch: -A * log pi(answer), KL penalty, entropy bonus.
        def loss_fn(idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            ev = evaluate_minibatch(self.policy, decisions, idx, cfg.state_centering)
            weights = None
            if correction is not None:
                ev, weights = correction.apply(ev, idx)
            units = ev.logprobs * ev.mask if weights is None else ev.logprobs * weights
            logprob = units.sum(dim=1)  # log pi of the whole answer (each token importance-weighted)
            policy_loss = -(advantages[idx].to(logprob.device) * logprob).mean()
            entropy = ev.entropy.mean()
            loss = policy_loss - cfg.entropy_coef * entropy
            stats = {"policy_loss": policy_loss.item(), "entropy": entropy.item(), "kl": rollout_kl(ev)}
            if ref is not None:
                ref_kl = reference_kl(ev, ref, idx)
                loss = loss + cfg.kl_coef * ref_kl
                stats["ref_kl"] = ref_kl.item()
            return loss, stats

        # 5. Minibatch steps over the batch (epochs, clipping, target-KL stop: Trainer.optimize).
        metrics = self.optimize(decisions, loss_fn, groups=conversation_runs(episodes))
        metrics["advantage_std"] = float(all_advantages.std(correction=0))
        if correction is not None:
            metrics.update(correction.metrics)
        return metrics

    def _algorithm_state(self) -> dict[str, Any]:
        return {"ema_baseline": self.baseline.value}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.baseline.value = state.get("ema_baseline")


__all__ = ["ReinforceConfig", "ReinforceTrainer"]
