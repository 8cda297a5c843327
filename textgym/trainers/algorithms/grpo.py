"""GRPO for episodes: groups of G episodes from the same start, advantages relative to the group.

Each update plays groups of ``group_size`` episodes on blocks of ``group_size`` sub-envs, every
member of a group reset with the same seed (same start state), and gives each episode the advantage
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

from collections.abc import Callable, Sequence
from typing import Any

import torch

from textgym.policy import Evaluation
from textgym.rollout import Episode, Rollout, collect, conversation_runs, decisions_of
from textgym.trainers.algorithms.grpo_config import GRPOConfig
from textgym.trainers.engine.early_stop import EarlyStop
from textgym.trainers.engine.loss_step import LossStep, skipped_update
from textgym.trainers.engine.losses import (
    all_finite,
    clipped_surrogate,
    group_advantages,
    normalize,
    returns_to_go,
    turn_group_advantages,
)
from textgym.trainers.engine.trainer import Trainer


class GRPOTrainer(Trainer):
    """Group Relative Policy Optimization over whole episodes. See :class:`GRPOConfig`."""

    config_class = GRPOConfig
    config: GRPOConfig

    def _init_algorithm(self) -> None:
        if self.venv is not None and self.venv.num_envs % self.config.group_size:
            raise ValueError(f"num_envs ({self.venv.num_envs}) must be a multiple of group_size "
                             f"({self.config.group_size}) so that groups start together")

    def group_seed(self, group: int) -> int:
        """The env seed of every member of the update's group ``group`` (its global index).

        Group ``r * (n / G) + b`` (``n = num_envs``) is seeded ``rollout_seed() + r * n + b``, the
        seed that block ``b`` of one process's sub-envs plays in round ``r`` when that process plays
        every group; the same whichever process plays it.
        """
        n, per_round = self.venv.num_envs, self.venv.num_envs // self.config.group_size
        return self.rollout_seed() + (group // per_round) * n + group % per_round

    def collect(self, stop: Callable[[], bool] | None = None) -> Rollout:
        """Play this process's groups of the update, ``group_size`` episodes each from one start.

        Each block of ``group_size`` sub-envs plays one group per round, every member reset with
        the group's seed (:meth:`group_seed`); the sub-envs play their rounds independently (one
        rollout loop, no waiting for the slowest group). Episodes come back grouped: ``i * G ..
        i * G + G - 1`` form group ``i``. With several processes, each plays a consecutive block of
        whole groups (:meth:`episode_shard`). A rollout ended by ``stop`` (see
        :meth:`Trainer.collect`) comes back with its finished episodes, ungrouped.
        """
        self._need_env("collect")
        n, G = self.venv.num_envs, self.config.group_size
        shard = self.episode_shard()
        seeds = [self.group_seed(g) for g in range(shard.start // G, shard.stop // G)]
        # This process's group i is played by block i % (n / G) in round i // (n / G).
        groups, per_round = len(seeds), n // G
        rounds = -(-groups // per_round)
        schedule = [[seeds[r * per_round + i // G] for r in range(rounds) if r * per_round + i // G < groups]
                    for i in range(n)]
        with self.policy.exploring(self.config.explore_floor):
            rollout = collect(self.policy, self.venv, schedule=schedule, stop=stop,
                              max_episode_steps=self.config.max_train_episode_steps)
        if len(rollout.episodes) < len(shard):  # cut short: the trainer drops it
            return rollout
        by_env: dict[int, list[Episode]] = {}
        for episode in rollout.episodes:  # a sub-env's episodes finish in the order it played them
            by_env.setdefault(episode.steps[0].env_index, []).append(episode)
        episodes = [by_env[b * G + j][r] for r in range(rounds) for b in range(per_round)
                    if r * per_round + b < groups for j in range(G)]
        return Rollout(episodes=episodes, stats=rollout.stats)

    def update(self, episodes: Sequence[Episode], stats: dict[str, Any] | None = None, *,
               check: EarlyStop | None = None) -> dict[str, Any]:
        """One GRPO update from completed ``episodes`` in whole groups (see :meth:`Trainer.update`)."""
        # 0. Every update starts in the engine: the learning rate of this update (the schedule).
        episodes, started = self.begin_update(episodes)
        cfg = self.config
        G = cfg.group_size
        if len(episodes) % G:
            raise ValueError(f"GRPO needs whole groups: {len(episodes)} episodes is not a multiple of "
                             f"group_size {G} (episodes i*G .. i*G+G-1 form group i)")

        # 1. Advantage per episode: its return relative to the other members of its group.
        returns = torch.tensor([float(ep.return_) for ep in episodes], dtype=torch.float32)
        if self.process.agree_to_stop(not all_finite(returns)):  # every process skips, or none
            return self.finish_update(episodes, skipped_update("rewards"), started, stats, check)
        decisions = decisions_of(episodes)
        to_go = [returns_to_go(torch.tensor([float(s.reward) for s in ep.steps]), cfg.gamma) for ep in episodes]
        if cfg.credit == "episode":
            # 2. Every decision of an episode carries the episode's advantage.
            episode_adv = group_advantages(returns.view(-1, G), scale=cfg.scale_rewards).view(-1)
            advantages = torch.cat([episode_adv[i].repeat(len(ep.steps)) for i, ep in enumerate(episodes)])
        else:
            # 2'. Each decision: its return-to-go relative to the group's at the same turn.
            advantages = torch.cat([adv for g in range(0, len(episodes), G)
                                    for adv in turn_group_advantages(to_go[g:g + G], scale=cfg.scale_rewards)])
        # 2''. Per-state credit (GiGPO's step level): the same state's other decisions *in the same
        #      group* as baseline. Members of a group share the start seed, so equal states there
        #      also share the env's hidden randomness (the cards still to come in Blackjack): the
        #      comparison isolates the action, as common random numbers do.
        if cfg.state_credit:
            all_to_go, mine = self.global_batch(torch.cat(to_go))
            group_of = [i // G for i, ep in enumerate(episodes) for _ in ep.steps]
            advantages = self.with_state_credit(decisions, normalize(all_to_go), self.global_batch(advantages)[0],
                                                scopes=group_of)[mine]

        # 3. What every algorithm's loss shares: reference log-probs for the KL penalty, the
        #    acting-precision correction (once per update); entropy bonus and KL terms per minibatch.
        step = LossStep.prepare(self.policy, decisions, cfg, self.reference_memo)

        # 4. The objective: the clipped surrogate against the rollout's log-probs.
        def objective(ev: Evaluation, weights: torch.Tensor | None,
                      idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            adv = advantages[idx].to(ev.logprobs.device)
            policy_loss, clip_frac = clipped_surrogate(ev.logprobs, ev.old_logprobs, adv, ev.mask, cfg.clip_eps,
                                                      weights, clip_eps_high=cfg.clip_eps_high)
            return policy_loss, {"policy_loss": policy_loss.item(), "clip_frac": clip_frac.item()}

        # 5. Several epochs of minibatch steps (clipping, target-KL stop: Trainer.optimize).
        metrics = self.optimize(decisions, step.loss_fn(objective), groups=conversation_runs(episodes))
        with_signal = int((returns.view(-1, G).std(dim=1) > 0).sum())  # groups never span processes
        metrics.update(step.metrics)
        metrics["groups_with_signal"] = int(self.process.reduce_sum([with_signal])[0])
        # 6. Every update ends in the engine: counters, online SFT, check, alarms, the metrics line.
        return self.finish_update(episodes, metrics, started, stats, check)


__all__ = ["GRPOConfig", "GRPOTrainer"]
