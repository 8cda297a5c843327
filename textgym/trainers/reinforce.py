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

from textgym.trainers.base import Trainer, decisions_of
from textgym.trainers.config import ReinforceConfig
from textgym.trainers.losses import EMABaseline, normalize, returns_to_go


class ReinforceTrainer(Trainer):
    """REINFORCE (Williams, 1992) over the decisions of whole episodes. See :class:`ReinforceConfig`."""

    algorithm = "reinforce"
    config: ReinforceConfig

    def _init_algorithm(self) -> None:
        self.baseline = EMABaseline(self.config.ema_decay)

    def _update(self, episodes: list[Any]) -> dict[str, float]:
        cfg = self.config
        decisions, _ = decisions_of(episodes)

        # 1. Credit each decision with the discounted return from its step to the episode's end.
        returns = torch.cat([
            returns_to_go(torch.tensor([s.reward for s in ep.steps], dtype=torch.float32), cfg.gamma)
            for ep in episodes
        ])
        if skipped := self.skip_nonfinite(returns):
            return skipped

        # 2. Returns -> advantages: normalised over the batch, or minus an EMA of past returns.
        if cfg.baseline == "batch":
            advantages = normalize(returns)
        elif cfg.baseline == "ema":
            advantages = self.baseline.advantages(returns)
        else:
            advantages = returns

        # 3. Reference log-probs for the KL penalty (adapter disabled), once per update.
        ref = self.reference_units(decisions) if cfg.kl_coef else None

        # 4. Loss per minibatch: -A * log pi(answer), KL penalty, entropy bonus.
        def loss_fn(idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            ev = self.evaluate_batch(decisions, idx)
            logprob = (ev.logprobs * ev.mask).sum(dim=1)  # log pi of the whole answer
            policy_loss = -(advantages[idx].to(logprob.device) * logprob).mean()
            entropy = ev.entropy.mean()
            loss = policy_loss - cfg.entropy_coef * entropy
            stats = {"policy_loss": policy_loss.item(), "entropy": entropy.item(),
                     "kl": self.rollout_kl(ev)}
            loss = self.add_reference_kl(loss, ev, ref, idx, stats)
            return loss, stats

        metrics = self.optimize(len(decisions), loss_fn, target_kl=cfg.target_kl)
        metrics["advantage_std"] = float(advantages.std(correction=0))
        return metrics

    def _algorithm_state(self) -> dict[str, Any]:
        return {"ema_baseline": self.baseline.value}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.baseline.value = state.get("ema_baseline")


__all__ = ["ReinforceConfig", "ReinforceTrainer"]
