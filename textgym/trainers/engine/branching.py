"""Tree rollouts: every action of a training episode's states, each played on from a replay.

A sampled episode says how one action turned out in each state it met. At the turns chosen for
branching, every *other* valid action is played too: the env is reset with the episode's seed, the
episode's answers up to that turn are replayed, the other action is taken, and the policy plays the
episode on to its end. Each action of such a state then has a return from there (a Monte-Carlo
value, as VinePPO's, Kazemnejad et al., 2024, arXiv 2410.01679), all from the same seed (the env's
hidden draws are common to them, as in a GRPO group), and the update compares each with the state's
other actions (:func:`~textgym.trainers.engine.losses.same_state_advantages`). A blunder the policy
makes in a rare state is then measured against every move it could have made there, every time the
state is met, instead of waiting for an exploration draw to try the right one.

Branches are taken on purpose, not drawn: each one's decision is
:meth:`Decision.choosing <textgym.policy.Decision.choosing>` (behaviour probability 1), which an
update weighs by the policy's own probability of it, truncated and floored as other off-policy draws
(``TrainConfig.importance_cap``, ``importance_floor``; a floor of 1 weighs every action of a state
alike). The envs must replay exactly from a seed (every Gymnasium env seeded through ``reset`` does,
a remote server may not): a replay that does not reach the episode's own observation is an error.

Example:
    >>> import random, textgym
    >>> from textgym.rollout import collect
    >>> policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
    >>> envs = textgym.make_vec("textgym/Bandit-v0", num_envs=2)
    >>> episodes = collect(policy, envs, episodes=2, seed=0).episodes
    >>> tree = grow(policy, envs, episodes, turns=1, gamma=1.0, rng=random.Random(0))
    >>> len(tree.decisions) == 2 * len(envs.get_attr("action_names")[0])  # every animal of each state
    True
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import torch

from textgym.policy import Decision
from textgym.rollout import (
    EnvFaults,
    Envs,
    EnvSlot,
    Episode,
    _sub_envs,
    conversation_window,
    env_name,
    play,
    turn_valid_actions,
)
from textgym.step_cap import StepCap
from textgym.trainers.engine.losses import returns_to_go
from textgym.vector import SubEnvError

__all__ = ["Branch", "BranchSlot", "ReplayError", "Tree", "grow"]


class ReplayError(RuntimeError):
    """A replay of an episode did not reach the state the episode met: the env does not replay
    exactly from its seed, which tree rollouts need."""


@dataclass
class Branch:
    """One other action of a training episode's state, to be played on from a replay."""

    seed: int | None
    """The episode's reset seed."""
    prefix: list[str]
    """The episode's answers before the branch turn, replayed in order."""
    observation: str
    """What the episode's policy read at the branch turn: the replay must read the same."""
    decision: Decision
    """The episode's decision at the branch turn."""
    index: int
    """The candidate played instead of the episode's."""
    episode: Episode | None = None
    """Filled once played: the branch's action and what followed (:class:`BranchSlot`)."""


class BranchSlot(EnvSlot):
    """A sub-env playing :class:`Branch` es one after another: each one's reset and replay, its
    action taken without asking the policy, then the policy's play to the episode's end.

    A remote env's fault (:class:`~textgym.vector.SubEnvError`) while a branch plays replays that
    branch (three times in a row at most, as :class:`~textgym.rollout.EnvSlot` does); an env that
    fails to reset leaves with the branches it had not played, which are then missing from their
    states' comparisons (:attr:`lost`).
    """

    def __init__(self, env: gym.Env, index: int, branches: Sequence[Branch], cap: StepCap):
        self.branches = list(branches)
        super().__init__(env, index, lambda k: self.branches[k].seed, len(self.branches), [], cap=cap,
                         faults=EnvFaults())
        self.branch: Branch | None = None
        self.forced: Decision | None = None
        self.lost = 0
        """Branches not played: the env left the rollout."""

    def start(self, first: tuple[str, dict[str, Any]] | None = None, *, again: Episode | None = None) -> None:
        if again is None:
            self.branch = self.branches[self.started] if self.started < len(self.branches) else None
        super().start(first, again=again)  # the reset with the branch's seed (current: None when done)
        if self.current is None or self.gone:
            return
        branch = self.branch
        try:
            for step, text in enumerate(branch.prefix):
                obs, _, terminated, truncated, info = self.env.step(text)
                if terminated or truncated:
                    raise ReplayError(f"{env_name(self.env)} ended its episode of seed {branch.seed} at step "
                                      f"{step} of a replay of {len(branch.prefix)}: tree rollouts (branch_turns) "
                                      "need an env that replays exactly from its seed")
                self.observation, self.info = self._observation(obs, info, branch.seed, step), info
                if "system_prompt" in info:
                    self.system_prompt = info["system_prompt"]
        except SubEnvError as exc:
            self._leave(branch.seed, exc)
            return
        valid = turn_valid_actions(self.env, self.info)
        if self.observation != branch.observation or len(valid) != len(branch.decision.candidates):
            raise ReplayError(f"a replay of {env_name(self.env)}'s episode of seed {branch.seed} reached another "
                              f"state after {len(branch.prefix)} steps than the episode did: tree rollouts "
                              "(branch_turns) need an env that replays exactly from its seed")
        self.forced = branch.decision.choosing(branch.index, valid[branch.index])

    def request(self):
        while self.forced is not None:  # the branch's own action, played without the policy
            forced, self.forced = self.forced, None
            self.answer(forced)  # may end the episode and start the next branch (a new forced action)
        return super().request()

    def _finish(self, episode: Episode) -> None:
        for step in episode.steps[1:]:  # the play after the branch's action: its return is all that is kept
            step.decision.trunk = None
        self.branch.episode = episode
        super()._finish(episode)

    def _leave(self, seed: int | None, exc: Exception) -> None:
        self.lost += len(self.branches) - self.started + (self.branch is not None)
        self.started = len(self.branches)
        self.current, self.gone, self.forced = None, True, None


@dataclass
class Tree:
    """What the update trains on after a tree rollout: every action of each branched state."""

    decisions: list[Decision]
    """Per branched state, one decision per valid action, in candidate order (the episode's own
    one included, also as :meth:`~textgym.policy.Decision.choosing`)."""
    returns: torch.Tensor
    """``Tensor[len(decisions)]``: each one's discounted return from its state on."""
    stats: dict[str, float] = field(default_factory=dict)
    """``branched_states``, ``branches``, ``branch_decisions`` (the policy's, after the branches'
    own actions), ``branch_seconds``, and ``lost_branches`` when an env left."""


def branch_turns(length: int, turns: int, rng: random.Random) -> list[int]:
    """The turns of an episode of ``length`` decisions that branch: all of them, or ``turns`` of
    them drawn without replacement, in order.

    Example:
        >>> branch_turns(3, 5, random.Random(0)), len(branch_turns(10, 4, random.Random(0)))
        ([0, 1, 2], 4)
    """
    return list(range(length)) if length <= turns else sorted(rng.sample(range(length), turns))


def grow(policy: Any, envs: Envs, episodes: Sequence[Episode], turns: int, gamma: float,
         rng: random.Random, max_episode_steps: int | None = None) -> Tree:
    """Branch ``episodes`` (sampled by ``policy`` on ``envs``, reset with their seeds) at up to
    ``turns`` turns each (:func:`branch_turns`), play every branch on the sub-envs of ``envs``
    (:class:`BranchSlot`, the policy sampling, each episode capped at ``max_episode_steps``),
    and return every action of the branched states with its return (:class:`Tree`).

    Raises:
        ValueError: an episode without a seed, or a decision that is not score mode's.
        ReplayError: a replay reached another state than its episode.
    """
    sub_envs = _sub_envs(envs)
    if any(conversation_window(policy, env) is not None for env in sub_envs):
        raise ValueError("tree rollouts (branch_turns) replay single observations: a policy reading whole "
                         "conversations (history) is not supported")
    states: list[tuple[Episode, int]] = []
    branches: list[Branch] = []
    for episode in episodes:
        if episode.seed is None:
            raise ValueError("tree rollouts (branch_turns) replay an episode from its seed: an episode has none")
        for t in branch_turns(len(episode.steps), turns, rng):
            step = episode.steps[t]
            decision = step.decision
            if decision.candidates is None or decision.candidate_logprobs is None:
                raise ValueError("tree rollouts (branch_turns) need score-mode decisions: every valid action of "
                                 "a state is played")
            states.append((episode, t))
            prefix = [s.decision.text for s in episode.steps[:t]]
            branches += [Branch(episode.seed, prefix, step.observation, decision, k)
                         for k in range(len(decision.candidates)) if k != decision.action_index]
    cap = StepCap.of(max_episode_steps)
    slots = [BranchSlot(env, i, branches[i::len(sub_envs)], cap) for i, env in enumerate(sub_envs)]
    for slot in slots:
        slot.start()
    played = play(policy, slots)
    lost = sum(slot.lost for slot in slots)

    to_go = {id(ep): returns_to_go(torch.tensor([s.reward for s in ep.steps], dtype=torch.float32), gamma)
             for ep in episodes}
    # per branched state (the episode's decision there), each action played: its decision and return
    by_state: dict[int, dict[int, tuple[Decision, float]]] = {}
    for branch in branches:
        if branch.episode is not None:
            value = float(returns_to_go(torch.tensor([s.reward for s in branch.episode.steps]), gamma)[0])
            by_state.setdefault(id(branch.decision), {})[branch.index] = (branch.episode.steps[0].decision, value)
    decisions: list[Decision] = []
    returns: list[float] = []
    for episode, t in states:
        own = episode.steps[t].decision
        actions = by_state.get(id(own), {})
        actions[own.action_index] = (own.choosing(own.action_index, own.text), float(to_go[id(episode)][t]))
        for k in sorted(actions):
            decisions.append(actions[k][0])
            returns.append(actions[k][1])
    stats = {"branched_states": len(states), "branches": len(branches),
             "branch_decisions": played["decisions"], "branch_seconds": played["seconds"]}
    if lost:
        stats["lost_branches"] = lost
    return Tree(decisions, torch.tensor(returns, dtype=torch.float32), stats)
