"""The configuration every trainer shares (TRL style: every knob documented where it is declared).

:class:`TrainConfig` holds the fields every algorithm has, with the same name in each, so
swapping the algorithm is one argument; each algorithm's config subclasses it beside its trainer
(``textgym/trainers/algorithms/<algo>_config.py``). :class:`SFTConfig` is the supervised warm
start's.

    >>> from textgym.trainers import GRPOConfig, PPOConfig
    >>> GRPOConfig(lr=2e-4, epochs=2).lr == PPOConfig(lr=2e-4).lr
    True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from textgym import distributed, seeds
from textgym.lora import LoraSettings
from textgym.settings import check, like, setting
from textgym.training_defaults import MAX_ENVS, TrainingDefaults

#: The ``textgym train --help`` panel of the trainer's own flags (the fields declared ``flag=True``).
RUN_FOLDER_PANEL = "Run folder"
#: The largest seed (NumPy's legacy seeding limit, 2**32 - 1).
MAX_SEED = 2**32 - 1


@dataclass
class TrainConfig:
    """Knobs common to every trainer."""

    # --- optimisation -------------------------------------------------------------------
    lr: float = like(TrainingDefaults, "lr", 1e-4)  # range, help: TrainingDefaults.lr
    lr_schedule: str = setting("constant", choices=("constant", "linear", "cosine"))
    """Learning-rate schedule over updates: ``"constant"``, ``"linear"`` (decay to 0 at
    ``total_updates``) or ``"cosine"`` (to 0 at ``total_updates``)."""
    warmup_updates: int = setting(0, at_least=0)
    """Updates of linear warm-up from 0 to ``lr`` before the schedule starts."""
    total_updates: int | None = setting(None, at_least=1)
    """Length of the ``linear``/``cosine`` schedule in updates. ``None``: taken from the budget of
    ``train(updates=...)``, else the schedule stays constant after warm-up."""
    lr_decay_from: float = setting(0.0, at_least=0, below=1)
    """The fraction of the ``linear``/``cosine`` schedule's updates held at the peak ``lr`` before it
    decays (0: from the first update after warm-up)."""
    lr_final: float = setting(0.0, at_least=0, at_most=1)
    """The multiplier of ``lr`` the ``linear``/``cosine`` schedule ends at, and keeps after it (0: to
    nothing)."""
    weight_decay: float = setting(0.0, at_least=0)
    """AdamW weight decay."""
    max_grad_norm: float | None = setting(1.0, above=0)
    """Clip the global gradient norm to this value before each optimizer step (``None``: no clipping)."""
    epochs: int = setting(1, at_least=1, at_most=1000)
    """Passes over each batch of decisions per update."""
    minibatch_size: int = setting(64, at_least=1)
    """Decisions per optimizer step when ``minibatches`` is ``None`` (and per no-grad batch of the
    update's once-per-update scoring). A batch of decisions is shuffled and cut into minibatches."""
    minibatches: int | None = setting(8, at_least=1)
    """Optimizer steps per epoch: each epoch's shuffled batch is cut into this many minibatches,
    whatever its number of decisions, so an update does not grow with episode length (an env whose
    episodes lengthen as it learns would otherwise take ever more steps per update). Long
    minibatches are still split into chunks for memory (``max_chunk_tokens``). ``None``:
    minibatches of ``minibatch_size`` decisions."""
    minibatch_by_state: bool = True
    """Lay out the decisions taken in one state (:meth:`Decision.rescoring_key`: the same prompt
    and valid actions) in one minibatch, the states shuffled, so each state is re-scored by one
    row, not once per decision: an update's cost then follows the states met, not the decisions
    (Blackjack's 280 states, a GRPO group's shared first turn). The number of minibatches is the
    same. Off with ``state_centering`` (which compares each minibatch's states with each other) and
    in conversation mode (a conversation's turns stay together instead). ``False``: shuffled one by one."""
    gradient_accumulation_steps: int = setting(1, at_least=1)
    """Forward/backward chunks per minibatch (gradients accumulate over them): trades speed for memory."""
    max_chunk_answer_tokens: int | None = setting(2048, at_least=1)
    """At most this many answer tokens (decisions x the longest answer among them) are re-scored
    in one forward/backward pass; a minibatch with more is split into more chunks (on top of
    ``gradient_accumulation_steps``), so long generated answers (``--think``) do not hold
    minibatch x length x vocabulary logits in memory at once. ``None``: no limit."""
    max_chunk_tokens: int | None = setting(4096, at_least=1)
    """At most this many tokens (decisions x the longest prompt plus answer among them, a
    sequence of L tokens counting as L x (1 + L/1024): attention's scores grow with the square
    of the length) go through one forward/backward pass; a minibatch with more is split into more
    chunks, so long prompts (TextArena games, histories) do not hold every token's activations of
    every layer at once (about 1.8 MB a token for the 135M model with an adapter on all its layers).
    ``None``: no limit."""

    # --- data collection ----------------------------------------------------------------
    num_envs: int = like(TrainingDefaults, "num_envs", 8)  # range, help: TrainingDefaults.num_envs
    episodes_per_update: int = setting(32, at_least=1, at_most=1_000_000)
    """Completed episodes collected before each update (the batch size, in episodes); with several
    data-parallel processes, of all of them together (each plays its share)."""
    gamma: float = setting(1.0, at_least=0, at_most=1)
    """Discount factor of returns (and of GAE for PPO)."""
    max_train_episode_steps: int | None = setting(None, at_least=1)
    """Cut training episodes after this many steps (the last one is marked truncated), so that an
    update of a policy that already plays long episodes does not wait for the longest ones.
    Evaluation and greedy checks still play the env's own limit. PPO bootstraps a cut episode
    from its value at the state it reached; REINFORCE and GRPO score it by the rewards it got,
    which matters little when ``gamma`` is well below 1. ``None``: the env's own limit."""

    # --- exploration --------------------------------------------------------------------
    explore_floor: float = setting(0.0, at_least=0, at_most=1)
    """Score mode: the rollout samples from ``(1 - explore_floor) * policy + explore_floor *
    uniform`` over each env's valid actions, so every action keeps at least ``explore_floor / K``
    of the draws and a state's actions can be compared (``state_credit``). Each draw's probability
    is recorded and the update weighs the sampled action by the truncated importance ratio
    ``min(pi / mu, importance_cap)``, so the gradient stays that of the policy being trained.
    Greedy play (evaluation, checks) is unaffected. 0: sample the policy itself."""
    importance_cap: float = setting(1.0, above=0)
    """Truncation of the importance ratio ``pi / mu`` of units drawn from another distribution than
    the policy's (``explore_floor``; generate mode's ``top_p`` cut): it bounds the variance of
    the off-policy correction (1: V-trace's and IMPALA's choice)."""
    importance_floor: float = setting(0.0, at_least=0, at_most=1)
    """The least weight of such a unit: ``max(min(pi / mu, importance_cap), importance_floor)``.
    0 keeps the gradient the policy's own, which is ~0 for an action the policy gives ~0: a floor
    draw of it then counts ``pi / mu`` (BabyAI's ``forward``, P 0.002 drawn at 0.07: 0.03) and
    cannot teach it. A positive floor lets such a draw move the policy, biased toward what the
    exploration sampled. At most ``importance_cap``."""

    # --- per-state credit -----------------------------------------------------------------
    state_credit: float = setting(0.0, at_least=0)
    """Weight of the step-level advantage of GiGPO (Feng et al., 2025, arXiv 2505.10978): the
    decisions of a batch taken in the identical state (same prompt, same valid actions) form a group
    (GRPO: within each group of episodes from one seed, whose equal states also share what the env
    will draw next), and each one's return-to-go (normalised over the batch) minus its group's mean
    is added, times this weight, to its episode-level advantage. A state visited once adds 0: the
    episode-level advantage alone (REINFORCE: the batch-normalised returns-to-go, GEM's ReBN; GRPO:
    the group's). Helps where states recur (Blackjack's 280 hands, grid worlds); ignored by PPO,
    whose value head compares with the state's value already. 0: off."""

    # --- regularisation -----------------------------------------------------------------
    kl_coef: float = setting(0.0, at_least=0)
    """Weight of the KL penalty to the reference policy (the model with the adapter disabled).
    0 skips the reference forward pass entirely."""
    reference_memo: int = setting(65536, at_least=0)
    """With ``kl_coef``: keep the reference policy's log-probs of up to this many decisions (by
    context and answer) across updates, so an update runs the reference only on what earlier ones
    did not meet. The reference does not change during a run (a warm start rebases it, which
    empties the memo); where states recur (Blackjack's 280 hands, a GRPO group's shared first
    turns) most of that pass goes. About 150 bytes a decision plus its log-probs. 0: run it on
    every decision of every update."""
    target_kl: float | None = setting(None, above=0)
    """Stop an update early once the policy has moved this far from the rollout policy
    (approximate KL): no more epochs once an epoch's mean KL exceeds it, and no more optimizer
    steps once a minibatch's KL exceeds 1.5 times it (``None``: never stop early)."""
    clip_eps_high: float | None = setting(None, above=0)
    """The upper clip of the importance ratio, where the algorithm clips it (``clip_eps``):
    ``clip(ratio, 1 - clip_eps, 1 + clip_eps_high)``, DAPO's clip-higher (Yu et al., 2025, arXiv
    2503.14476; TRL's ``epsilon_high``). The symmetric clip lets an action's probability grow by
    at most ``1 + clip_eps`` an update (every epoch's ratio is to the rollout's log-probs), so an
    action the policy gives 0.01 needs ~20 updates to lead however much better it is; a larger
    upper clip lets a rare better action grow faster while the lower one still bounds how fast a
    likely action falls. ``None``: ``clip_eps``."""
    entropy_coef: float = setting(0.0, at_least=0)
    """Weight of the entropy bonus (subtracted from the loss)."""
    state_centering: float = setting(0.0, at_least=0, at_most=1)
    """Score mode: how much of the update's *shared shift* to remove, in [0, 1]. The gradient
    reaching each state's candidate scores is centred over the minibatch's decisions that share the
    same candidates (values unchanged), so the part of the gradient that moves every state's answer
    the same way is scaled by ``1 - state_centering``, and a policy sure of its answers gets no push
    from it. With a small model whose prompts differ in a few tokens, that shared shift dominates a
    noisy policy gradient and the policy collapses to one action before it learns to read the state
    (``bench/probes/centering.py`` measures it). 0: the plain gradient. Ignored in generate mode.
    Set, it keeps minibatches shuffled one by one (``minibatch_by_state`` off): a minibatch of a few
    states would remove most of each one's own gradient."""
    act_correction: bool = True
    """When the policy acts in another precision than it trains in (``PolicyConfig.act_dtype``),
    re-score the rollout in the training precision once per update, measure the mismatch
    (metrics ``act_mismatch_abs``: mean |log-prob difference|, ``act_mismatch_kl``: KL(acting ||
    training)) and weight each unit's policy-gradient term by its truncated importance ratio
    ``min(pi_train / pi_act, act_correction_cap)`` (as verl and prime-rl do for vLLM rollouts);
    PPO/GRPO's clip ratio then compares with the training-precision log-probs. ``False``: measure
    only, the gradient is the uncorrected one. Acting in float32 needs neither."""
    act_correction_cap: float = setting(2.0, above=0)
    """The cap of the truncated importance ratio of ``act_correction`` (> 0)."""

    # --- model ----------------------------------------------------------------------------
    use_lora: bool = setting(True)
    """Train a LoRA adapter (peft) or all weights.
    ``False`` fine-tunes every weight of the model."""
    lora_r: int = like(LoraSettings, "r")
    """LoRA rank."""
    lora_alpha: int = like(LoraSettings, "alpha")
    """LoRA scaling numerator (the update is scaled by ``lora_alpha / lora_r``)."""
    lora_dropout: float = like(LoraSettings, "dropout")
    """Dropout on the LoRA branch."""
    lora_target_modules: list[str] | None = None
    """Module names LoRA wraps. ``None``: the model registry's defaults for the loaded model,
    else every attention and MLP projection (``"all-linear"``)."""
    lora_layers: int | None = like(LoraSettings, "layers")
    """Adapt only the top this many transformer layers (``None``: all). The backward pass then
    stops below them, so an update costs much less (SmolLM2-135M, top 8 of 30 layers: about
    1.5x the decisions/s of a full-depth adapter on CartPole)."""

    # --- warm start -------------------------------------------------------------------------
    sft_every: int = setting(0, at_least=0)
    """Online SFT: every this many updates, fine-tune on the best episodes of the replay buffer
    (0 disables it)."""
    sft_top_fraction: float = setting(0.25, above=0, at_most=1)
    """Online SFT: fraction of the replay buffer's episodes (best returns first) to imitate."""
    replay_size: int = setting(256, at_least=1)
    """Online SFT: episodes kept in the replay buffer."""
    sft_lr: float = setting(1e-4, above=0)
    """Learning rate of the SFT steps (warm start and online SFT)."""

    # --- bookkeeping ----------------------------------------------------------------------
    seed: int = setting(0, at_least=0, at_most=MAX_SEED)
    """Seed of torch, NumPy, random and the training envs.
    Update k's envs use seeds derived from it (:mod:`textgym.seeds`)."""
    eval_seed: int = setting(seeds.EVAL_BASE, at_least=0, at_most=seeds.TRAIN_BASE - 1)
    """First seed of the held-out evaluation episodes (below the training seeds).
    The seed layout is :mod:`textgym.seeds`."""
    metrics_window: int = setting(100, at_least=1)
    """Episodes in the sliding window of ``return_mean``, ``length_mean`` and ``invalid_rate``."""
    log_samples: int = setting(3, at_least=0)
    """(prompt, answer, reward) samples written with each update's metrics."""
    checkpoint_every: int = setting(0, at_least=0)
    """Write ``<out_dir>/checkpoint`` every this many updates (0: only when asked)."""
    transcripts: int = setting(4, at_least=0, at_most=10_000, flag=True, panel=RUN_FOLDER_PANEL)
    """Episodes per update to transcripts.
    The episodes of each update, greedy check and evaluation written whole to
    ``<out_dir>/transcripts.jsonl`` (:mod:`~textgym.transcripts`; 0: none)."""
    transcripts_max_mb: float = setting(50.0, above=0)
    """Size cap of ``transcripts.jsonl`` in MB: nothing more is written once it is reached."""
    report_to: str = setting("tensorboard", metavar="LIST", flag=True, panel=RUN_FOLDER_PANEL)
    """tensorboard, trackio, wandb or none.
    The trackers besides ``metrics.jsonl``, comma-separated: ``tensorboard`` (written when
    installed), ``trackio``, ``wandb`` (:mod:`~textgym.trainers.reporting.trackers`), or ``none``."""

    #: What a resumed run keeps (:meth:`with_changes` refuses to change them): the seeds that make
    #: its episodes and its held-out ones, and the adapter's shape, which its checkpoint's weights
    #: and optimizer moments have. Every other field may change between updates (a new ``gamma``,
    #: ``lr`` or ``explore_floor`` from the next update on).
    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "seed", "eval_seed", "use_lora", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
        "lora_layers")

    algorithm = "base"  # not a field: the name make_trainer knows this config by
    trainer = ""  # not a field: "module:Class" of the algorithm's trainer (imported on first use)

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, **dataclasses.asdict(self)}

    def lora_settings(self) -> LoraSettings:
        """The ``lora_*`` fields as the adapter settings :func:`textgym.lora.add_lora` builds from."""
        return LoraSettings(r=self.lora_r, alpha=self.lora_alpha, dropout=self.lora_dropout,
                            target_modules=self.lora_target_modules, layers=self.lora_layers)

    @property
    def episodes_per_group(self) -> int:
        """Episodes that one process must play together (GRPO: a group sharing its start)."""
        return 1

    def episode_shard(self, world_size: int = 1, rank: int = 0) -> range:
        """The global indices of an update's episodes that process ``rank`` of ``world_size``
        plays (:func:`textgym.distributed.episode_shard`: consecutive whole groups).

        Raises:
            ValueError: ``episodes_per_update`` cannot give every process at least one episode
                (or group).
        """
        return distributed.episode_shard(self.episodes_per_update, world_size, rank, self.episodes_per_group)

    def with_changes(self, changes: dict[str, Any]) -> TrainConfig:
        """This config with ``changes`` (``{field: value}``) applied, checked as a new config is:
        how a resumed run continues with other settings.

        Raises:
            ValueError: a field not of this config, one of :attr:`fixed_on_resume`, or a value out
                of its range.

        Example:
            >>> from textgym.trainers import GRPOConfig
            >>> GRPOConfig(gamma=0.3).with_changes({"gamma": 0.95}).gamma
            0.95
            >>> GRPOConfig().with_changes({"lora_layers": 4})
            Traceback (most recent call last):
            ...
            ValueError: a resumed run keeps its lora_layers (None): the seeds and the adapter's shape are the run's
        """
        for name in self.fixed_on_resume:
            if name in changes and changes[name] != getattr(self, name):
                raise ValueError(f"a resumed run keeps its {name} ({getattr(self, name)!r}): the seeds and "
                                 f"the adapter's shape are the run's")
        return type(self).from_dict({**self.to_dict(), **changes})  # unknown fields refused there

    @classmethod
    def coerce(cls, config: TrainConfig | dict | None = None) -> TrainConfig:
        """This class's config from a config object, a dict of fields, or ``None`` (defaults); a
        config of another algorithm (or the base) keeps the fields they share."""
        if config is None:
            return cls()
        if isinstance(config, dict):
            return cls.from_dict(config)
        if isinstance(config, cls):
            return config
        if isinstance(config, TrainConfig):
            shared = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in dataclasses.asdict(config).items() if k in shared})
        raise TypeError(f"config must be a TrainConfig or a dict, not {type(config).__name__}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names - {"algorithm"}
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def __post_init__(self) -> None:
        check(self)  # every field's range, as declared above
        if self.importance_floor > self.importance_cap:
            raise ValueError(f"importance_floor ({self.importance_floor}) must be at most importance_cap "
                             f"({self.importance_cap})")
        self.lora_settings()  # validates the lora_* fields together
        from textgym.trainers.reporting.trackers import check_report_to

        check_report_to(self.report_to)


@dataclass
class SFTConfig:
    """Supervised fine-tuning on demonstrations (warm start before RL)."""

    lr: float = like(TrainConfig, "sft_lr")
    """Learning rate of AdamW."""
    epochs: int = like(TrainConfig, "epochs", 3)
    """Passes over the demonstrations."""
    batch_size: int = setting(16, at_least=1)
    """Examples per optimizer step."""
    max_grad_norm: float | None = like(TrainConfig, "max_grad_norm")
    """Gradient-norm clip (``None``: none)."""
    seed: int = like(TrainConfig, "seed")
    """Shuffling seed."""

    def __post_init__(self) -> None:
        check(self)


__all__ = ["MAX_ENVS", "MAX_SEED", "SFTConfig", "TrainConfig"]
