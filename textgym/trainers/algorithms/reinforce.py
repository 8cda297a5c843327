"""REINFORCE with a baseline, one decision at a time.

Each decision (a prompt and the answer the policy gave) is credited with the discounted return
from its step to the end of its episode. Returns become advantages by batch normalisation or an
EMA baseline (``baseline="batch"``, the default, is GEM's return batch normalisation, ReBN),
plus, with ``state_credit``, GiGPO's same-state advantage; the loss is ``-A * log pi(answer |
prompt)`` over the answer's tokens (or, in score mode, the chosen candidate's log-softmax), its
ratio to the rollout's log-probs clipped as PPO's (``clip_eps``, the default trust region), plus
the optional KL penalty and entropy bonus.

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

from collections.abc import Sequence
from typing import Any

import torch

from textgym.policy import Evaluation
from textgym.rollout import Episode, conversation_runs, decisions_of
from textgym.trainers.algorithms.reinforce_config import ReinforceConfig
from textgym.trainers.engine.early_stop import EarlyStop
from textgym.trainers.engine.loss_step import LossStep, skipped_update
from textgym.trainers.engine.losses import (
    EMABaseline,
    all_finite,
    clipped_surrogate,
    normalize,
    returns_to_go,
    same_state_advantages,
)
from textgym.trainers.engine.trainer import Trainer


class ReinforceTrainer(Trainer):
    """REINFORCE (Williams, 1992) over the decisions of whole episodes. See :class:`ReinforceConfig`."""

    config_class = ReinforceConfig
    config: ReinforceConfig

    def _init_algorithm(self) -> None:
        self.baseline = EMABaseline(self.config.ema_decay)

    def update(self, episodes: Sequence[Episode], stats: dict[str, Any] | None = None, *,
               check: EarlyStop | None = None) -> dict[str, Any]:
        """One REINFORCE update from completed ``episodes`` (see :meth:`Trainer.update`)."""
        # 0. Every update starts in the engine: the learning rate of this update (the schedule).
        episodes, started = self.begin_update(episodes)
        cfg = self.config
        decisions = decisions_of(episodes)

        # 1. Credit each decision with the discounted return from its step to the episode's end.
        returns = torch.cat([
            returns_to_go(torch.tensor([s.reward for s in ep.steps], dtype=torch.float32), cfg.gamma)
            for ep in episodes
        ])
        if self.process.agree_to_stop(not all_finite(returns)):  # every process skips, or none
            return self.finish_update(episodes, skipped_update("rewards"), started, stats, check)
        # 1'. Tree rollouts: every action of the branched states, each with its return from there.
        branched: dict[str, float] = {}
        if cfg.branch_turns:
            tree = self.grow_tree(episodes, cfg.branch_turns)
            decisions, returns, branched = tree.decisions, tree.returns, tree.stats

        # 2. Returns -> advantages: normalised over the batch, or minus an EMA of past returns
        #    (batch statistics over every process's decisions; `mine` is this process's part).
        all_returns, mine = self.global_batch(returns)
        if cfg.baseline == "batch":
            all_advantages = normalize(all_returns)
        elif cfg.baseline == "state":  # GiGPO's anchor states, the batch (ReBN) where a state is alone
            normalized = normalize(all_returns)
            weights = None
            if cfg.branch_value == "policy":  # each action by the policy's probability of it
                weights, _ = self.global_batch(torch.tensor([d.logprob for d in decisions]).exp())
            all_advantages = same_state_advantages(self.state_keys(decisions), normalized, fallback=normalized,
                                                   weights=weights)
        elif cfg.baseline == "ema":
            all_advantages = self.baseline.advantages(all_returns)
        else:
            all_advantages = all_returns
        # 2'. Per-state credit (GiGPO's step level): the same state's other decisions as baseline.
        all_advantages = self.with_state_credit(decisions, normalize(all_returns), all_advantages)
        advantages = all_advantages[mine]

        # 3. What every algorithm's loss shares: reference log-probs for the KL penalty, the
        #    acting-precision correction (once per update); entropy bonus and KL terms per minibatch.
        step = LossStep.prepare(self.policy, decisions, cfg, self.reference_memo)

        # 4. The objective: -A * log pi(answer) (each token importance-weighted when correcting),
        #    its ratio to the rollout's clipped as PPO's when clip_eps is set (the trust region).
        def objective(ev: Evaluation, weights: torch.Tensor | None,
                      idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            adv = advantages[idx].to(ev.logprobs.device)
            if cfg.clip_eps is not None:
                policy_loss, clip_frac = clipped_surrogate(ev.logprobs, ev.old_logprobs, adv, ev.mask,
                                                           cfg.clip_eps, weights, sum_units=True,
                                                           clip_eps_high=cfg.clip_eps_high)
                return policy_loss, {"policy_loss": policy_loss.item(), "clip_frac": clip_frac.item()}
            units = ev.logprobs * ev.mask if weights is None else ev.logprobs * weights
            logprob = units.sum(dim=1)  # log pi of the whole answer
            policy_loss = -(adv * logprob).mean()
            return policy_loss, {"policy_loss": policy_loss.item()}

        # 5. Minibatch steps over the batch (epochs, clipping, target-KL stop: Trainer.optimize).
        metrics = self.optimize(decisions, step.loss_fn(objective),
                                groups=None if cfg.branch_turns else conversation_runs(episodes))
        metrics["advantage_std"] = float(all_advantages.std(correction=0))
        metrics.update(branched)
        metrics.update(step.metrics)
        # 6. Every update ends in the engine: counters, online SFT, check, alarms, the metrics line.
        return self.finish_update(episodes, metrics, started, stats, check)

    def _algorithm_state(self) -> dict[str, Any]:
        return {"ema_baseline": self.baseline.value}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.baseline.value = state.get("ema_baseline")


__all__ = ["ReinforceConfig", "ReinforceTrainer"]
