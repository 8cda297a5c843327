"""REINFORCE's config: :class:`TrainConfig`'s fields and how returns become advantages."""

from __future__ import annotations

from dataclasses import dataclass

from textgym.settings import like, setting
from textgym.trainers.engine.train_config import TrainConfig


@dataclass
class ReinforceConfig(TrainConfig):
    """REINFORCE with a baseline (Williams, 1992)."""

    lr: float = like(TrainConfig, "lr", 1e-4)
    """Peak learning rate (see :class:`TrainConfig`)."""
    baseline: str = setting("batch", choices=("batch", "state", "ema", "none"))
    """How returns become advantages: ``"batch"`` (subtract the batch mean and divide by its std:
    GEM's ReBN), ``"state"`` (the same normalised returns minus the mean of the decisions taken in
    the same state, GiGPO's anchor states; a state visited once in the batch keeps ``"batch"``'s
    advantage), ``"ema"`` (subtract an exponential moving average of past returns), or ``"none"``.
    ``"state"`` compares an action only with the other actions of its state, so a state that wins
    whatever is done (Blackjack's 20) does not credit its action everywhere."""
    ema_decay: float = setting(0.9, at_least=0, at_most=1)
    """Decay of the EMA baseline (``baseline="ema"``): new = decay * old + (1 - decay) * batch mean."""
    clip_eps: float | None = setting(0.2, above=0)
    """Trust region: PPO's clipped ratio against the rollout's log-probs (the first minibatch's
    gradient is REINFORCE's; later ones stop pushing a decision whose probability already moved
    by more than this factor). ``None``: the plain ``-A log pi`` loss."""

    branch_turns: int = setting(0, at_least=0)
    """Score mode: tree rollouts (:mod:`textgym.trainers.engine.branching`). At up to this many
    turns of each training episode, every other valid action is played too, from a replay of the
    episode (the env reset with its seed, its answers replayed), and the policy plays each branch
    on to the end; the update then trains on every action of those states, each compared with
    the state's other actions (needs ``baseline="state"``), instead of on the sampled actions.
    Other turns are not trained on. Costs about one episode's rest per other action and turn;
    needs an env that replays exactly from its seed. 0: off."""
    branch_value: str = setting("uniform", choices=("uniform", "policy"))
    """With ``branch_turns``: what each action of a branched state is compared with. ``"uniform"``:
    the mean return of the state's actions. ``"policy"``: their mean weighted by the policy's
    probability of each (the state's value under the policy), so an action as good as what the
    policy already does there gets no push: a state with several winning moves does not spread
    the policy over them (its entropy stays), and only a better action than the policy's is raised."""

    algorithm = "reinforce"
    trainer = "textgym.trainers.algorithms.reinforce:ReinforceTrainer"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.branch_turns and self.baseline != "state":
            raise ValueError(f"branch_turns compares each action with its state's other actions: it needs "
                             f"baseline='state' (got {self.baseline!r})")
        if self.branch_value != "uniform" and not self.branch_turns:
            raise ValueError(f"branch_value={self.branch_value!r} weighs the actions of branched states: it needs "
                             "branch_turns > 0")
        if self.clip_eps is None and self.clip_eps_high is not None:
            raise ValueError("clip_eps_high is the upper clip of the ratio: it needs clip_eps "
                             f"(got clip_eps=None, clip_eps_high={self.clip_eps_high})")


__all__ = ["ReinforceConfig"]
