"""GRPO for episodes: groups of G episodes from the same start, advantages relative to the group.

Each update resets the vector env so that every block of ``group_size`` sub-envs shares one env
seed (same start state), plays one episode per sub-env, and gives each episode the advantage
``(return - group mean) / group std``. Every decision of an episode carries its episode's
advantage; with ``credit="turn"``, each decision instead gets its return-to-go relative to the
group's mean return-to-go at the same turn (per-step credit for envs with per-step rewards). The
policy then takes several epochs of clipped-ratio steps against the log-probs recorded at rollout
time, with an optional KL penalty to the reference policy.

Example:
    >>> import textgym
    >>> from textgym.trainers import make_trainer, GRPOConfig
    >>> model, tok = textgym.models.load("tiny")
    >>> policy = textgym.Policy(model, tok, mode="score")
    >>> trainer = make_trainer("grpo", policy, env="textgym/Bandit-v0",
    ...                        config=GRPOConfig(num_envs=8, episodes_per_update=16, group_size=4))
    >>> history = trainer.train(updates=1)
    >>> "clip_frac" in history[0]
    True
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from textgym.trainers.base import Trainer
from textgym.trainers.config import GRPOConfig
from textgym.trainers.losses import clipped_surrogate, group_advantages, returns_to_go, turn_group_advantages


class GRPOTrainer(Trainer):
    """Group Relative Policy Optimization over whole episodes. See :class:`GRPOConfig`."""

    algorithm = "grpo"
    config: GRPOConfig

    def _init_algorithm(self) -> None:
        if self.venv is not None and self.venv.num_envs % self.config.group_size:
            raise ValueError(f"num_envs ({self.venv.num_envs}) must be a multiple of group_size "
                             f"({self.config.group_size}) so that groups start together")

    def collect(self) -> Any:
        """Play ``episodes_per_update`` episodes in groups: each block of ``group_size`` sub-envs is
        reset with one shared seed and plays exactly one episode."""
        from textgym.rollout import collect

        cfg, n = self.config, self.venv.num_envs
        episodes, stats = [], {}
        base = self.rollout_seed()
        round_index = 0
        while len(episodes) < cfg.episodes_per_update:
            groups_now = min(n, cfg.episodes_per_update - len(episodes)) // cfg.group_size
            # One seed per group, repeated for its members (sub-envs beyond the needed groups get
            # their own seeds and their episodes are dropped).
            seeds = [base + round_index * n + i // cfg.group_size for i in range(n)]
            rollout = collect(self.policy, self.venv, episodes=n, seed=seeds)
            by_env = {}
            for ep in rollout.episodes:  # keep each sub-env's first episode (the one from the seed)
                by_env.setdefault(ep.steps[0].env_index, ep)
            for g in range(groups_now):
                members = [by_env.get(g * cfg.group_size + j) for j in range(cfg.group_size)]
                if all(m is not None for m in members):
                    episodes.extend(members)
            for key, value in rollout.stats.items():
                stats[key] = stats.get(key, 0) + value
            round_index += 1
        return SimpleNamespace(episodes=episodes, stats=stats)

    def _update(self, episodes: list[Any]) -> dict[str, float]:
        cfg = self.config
        G = cfg.group_size
        if len(episodes) % G:
            raise ValueError(f"GRPO needs whole groups: {len(episodes)} episodes is not a multiple of "
                             f"group_size {G} (episodes i*G .. i*G+G-1 form group i)")

        # 1. Advantage per episode: its return relative to the other members of its group.
        returns = torch.tensor([float(ep.return_) for ep in episodes], dtype=torch.float32)
        if skipped := self.skip_nonfinite(returns):
            return skipped
        decisions = [step.decision for ep in episodes for step in ep.steps]
        if cfg.credit == "episode":
            # 2. Every decision of an episode carries the episode's advantage.
            episode_adv = group_advantages(returns.view(-1, G), scale=cfg.scale_rewards).view(-1)
            advantages = torch.cat([episode_adv[i].repeat(len(ep.steps)) for i, ep in enumerate(episodes)])
        else:
            # 2'. Each decision: its return-to-go relative to the group's at the same turn.
            to_go = [returns_to_go(torch.tensor([float(s.reward) for s in ep.steps]), cfg.gamma)
                     for ep in episodes]
            advantages = torch.cat([adv for g in range(0, len(episodes), G)
                                    for adv in turn_group_advantages(to_go[g:g + G], scale=cfg.scale_rewards)])

        # 3. Reference log-probs for the KL penalty (adapter disabled), once per update.
        ref = self.reference_units(decisions) if cfg.kl_coef else None

        # 4. Several epochs of the clipped surrogate against the rollout's log-probs.
        def loss_fn(idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            ev = self.evaluate_batch(decisions, idx)
            adv = advantages[idx].to(ev.logprobs.device)
            policy_loss, clip_frac = clipped_surrogate(ev.logprobs, ev.old_logprobs, adv, ev.mask, cfg.clip_eps)
            entropy = ev.entropy.mean()
            loss = policy_loss - cfg.entropy_coef * entropy
            stats = {"policy_loss": policy_loss.item(), "entropy": entropy.item(), "clip_frac": clip_frac.item(),
                     "kl": self.rollout_kl(ev)}
            loss = self.add_reference_kl(loss, ev, ref, idx, stats)
            return loss, stats

        metrics = self.optimize(len(decisions), loss_fn, target_kl=cfg.target_kl)
        metrics["groups_with_signal"] = int((returns.view(-1, G).std(dim=1) > 0).sum())
        return metrics


__all__ = ["GRPOConfig", "GRPOTrainer"]
