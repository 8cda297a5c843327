"""Configuration dataclasses of the trainers (TRL style: every knob documented where it is declared).

Fields shared by the algorithms have the same name in every config, so swapping the algorithm
is one argument:

    >>> from textgym.trainers.config import GRPOConfig, PPOConfig
    >>> GRPOConfig(lr=2e-4, epochs=2).lr == PPOConfig(lr=2e-4).lr
    True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from textgym import distributed
from textgym.lora import LoraSettings


@dataclass
class TrainConfig:
    """Knobs common to every trainer."""

    # --- optimisation -------------------------------------------------------------------
    lr: float = 1e-4
    """Peak learning rate of AdamW for the trained weights (the LoRA adapter, or the whole model)."""
    lr_schedule: str = "constant"
    """Learning-rate schedule over updates: ``"constant"``, ``"linear"`` (decay to 0 at
    ``total_updates``) or ``"cosine"`` (to 0 at ``total_updates``)."""
    warmup_updates: int = 0
    """Updates of linear warm-up from 0 to ``lr`` before the schedule starts."""
    total_updates: int | None = None
    """Length of the ``linear``/``cosine`` schedule in updates. ``None``: taken from the budget of
    ``train(updates=...)``, else the schedule stays constant after warm-up."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm to this value before each optimizer step (``None``: no clipping)."""
    epochs: int = 1
    """Passes over each batch of decisions per update."""
    minibatch_size: int = 64
    """Decisions per optimizer step. A batch of decisions is shuffled and cut into minibatches."""
    gradient_accumulation_steps: int = 1
    """Forward/backward chunks per minibatch (gradients accumulate over them): trades speed for memory."""
    max_chunk_answer_tokens: int | None = 2048
    """At most this many answer tokens (decisions x the longest answer among them) are re-scored
    in one forward/backward pass; a minibatch with more is split into more chunks (on top of
    ``gradient_accumulation_steps``), so long generated answers (``--think``) do not hold
    minibatch x length x vocabulary logits in memory at once. ``None``: no limit."""

    # --- data collection ----------------------------------------------------------------
    num_envs: int = 8
    """Environments stepped together in one vector env (one policy call per vector step); with
    several data-parallel processes, in each process."""
    episodes_per_update: int = 32
    """Completed episodes collected before each update (the batch size, in episodes); with several
    data-parallel processes, of all of them together (each plays its share)."""
    gamma: float = 1.0
    """Discount factor of returns (and of GAE for PPO)."""
    max_train_episode_steps: int | None = None
    """Cut training episodes after this many steps (the last one is marked truncated), so that an
    update of a policy that already plays long episodes does not wait for the longest ones.
    Evaluation and greedy checks still play the env's own limit. PPO bootstraps a cut episode
    from its value at the state it reached; REINFORCE and GRPO score it by the rewards it got,
    which matters little when ``gamma`` is well below 1. ``None``: the env's own limit."""

    # --- regularisation -----------------------------------------------------------------
    kl_coef: float = 0.0
    """Weight of the KL penalty to the reference policy (the model with the adapter disabled).
    0 skips the reference forward pass entirely."""
    target_kl: float | None = None
    """Stop an update early once the policy has moved this far from the rollout policy
    (approximate KL): no more epochs once an epoch's mean KL exceeds it, and no more optimizer
    steps once a minibatch's KL exceeds 1.5 times it (``None``: never stop early)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss)."""
    state_centering: float = 0.0
    """Score mode: how much of the update's *shared shift* to remove, in [0, 1]. Before the loss,
    each candidate's log-prob is centred over the minibatch's decisions that share the same
    candidates (its value is unchanged, only its gradient), so the part of the gradient that
    moves every state's answer the same way is scaled by ``1 - state_centering``. With a small
    model whose prompts differ in a few tokens, that shared shift dominates a noisy policy
    gradient and the policy collapses to one action before it learns to read the state
    (``bench/probes/centering.py`` measures it). 0: the plain gradient. Ignored in generate mode."""
    act_correction: bool = True
    """When the policy acts in another precision than it trains in (``PolicyConfig.act_dtype``),
    re-score the rollout in the training precision once per update, measure the mismatch
    (metrics ``act_mismatch_abs``: mean |log-prob difference|, ``act_mismatch_kl``: KL(acting ||
    training)) and weight each unit's policy-gradient term by its truncated importance ratio
    ``min(pi_train / pi_act, act_correction_cap)`` (as verl and prime-rl do for vLLM rollouts);
    PPO/GRPO's clip ratio then compares with the training-precision log-probs. ``False``: measure
    only, the gradient is the uncorrected one. Acting in float32 needs neither."""
    act_correction_cap: float = 2.0
    """The cap of the truncated importance ratio of ``act_correction`` (> 0)."""

    # --- model ----------------------------------------------------------------------------
    use_lora: bool = True
    """Train a LoRA adapter (peft). ``False`` fine-tunes every weight of the model."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by ``lora_alpha / lora_r``)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch."""
    lora_target_modules: list[str] | None = None
    """Module names LoRA wraps. ``None``: the model registry's defaults for the loaded model,
    else every attention and MLP projection (``"all-linear"``)."""
    lora_layers: int | None = None
    """Adapt only the top this many transformer layers (``None``: all). The backward pass then
    stops below them, so an update costs much less (SmolLM2-135M, top 8 of 30 layers: about
    1.5x the decisions/s of a full-depth adapter on CartPole)."""

    # --- warm start -------------------------------------------------------------------------
    sft_every: int = 0
    """Online SFT: every this many updates, fine-tune on the best episodes of the replay buffer
    (0 disables it)."""
    sft_top_fraction: float = 0.25
    """Online SFT: fraction of the replay buffer's episodes (best returns first) to imitate."""
    replay_size: int = 256
    """Online SFT: episodes kept in the replay buffer."""
    sft_lr: float = 1e-4
    """Learning rate of the SFT steps (warm start and online SFT)."""

    # --- bookkeeping ----------------------------------------------------------------------
    seed: int = 0
    """Seed of torch/numpy/random and of the training envs (update k uses seeds derived from it)."""
    eval_seed: int = 1_000_000
    """First seed of the held-out evaluation episodes (far from the training seeds)."""
    metrics_window: int = 100
    """Episodes in the sliding window of ``return_mean``, ``length_mean`` and ``invalid_rate``."""
    log_samples: int = 3
    """(prompt, answer, reward) samples written with each update's metrics."""
    checkpoint_every: int = 0
    """Write ``<out_dir>/checkpoint`` every this many updates (0: only when asked)."""
    transcripts: int = 4
    """Episodes of each update, greedy check and evaluation written whole to
    ``<out_dir>/transcripts.jsonl`` (:mod:`~textgym.transcripts`; 0: none)."""
    transcripts_max_mb: float = 50.0
    """Size cap of ``transcripts.jsonl`` in MB: nothing more is written once it is reached."""
    report_to: str = "tensorboard"
    """Trackers besides ``metrics.jsonl``, comma-separated: ``tensorboard`` (written when
    installed), ``trackio``, ``wandb`` (:mod:`~textgym.trainers.trackers`), or ``none``."""

    algorithm = "base"  # not a field: the name make_trainer knows this config by

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names - {"algorithm"}
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def __post_init__(self) -> None:
        if self.lr_schedule not in ("constant", "linear", "cosine"):
            raise ValueError(
                f"lr_schedule must be 'constant', 'linear' or 'cosine', not {self.lr_schedule!r}"
            )
        for name in ("epochs", "minibatch_size", "gradient_accumulation_steps", "num_envs",
                     "episodes_per_update"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_train_episode_steps is not None and self.max_train_episode_steps < 1:
            raise ValueError(f"max_train_episode_steps must be >= 1 or None, got {self.max_train_episode_steps}")
        if self.max_chunk_answer_tokens is not None and self.max_chunk_answer_tokens < 1:
            raise ValueError(f"max_chunk_answer_tokens must be >= 1 or None, got {self.max_chunk_answer_tokens}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 <= self.state_centering <= 1.0:
            raise ValueError(f"state_centering must be in [0, 1], got {self.state_centering}")
        if not self.act_correction_cap > 0:
            raise ValueError(f"act_correction_cap must be > 0, got {self.act_correction_cap}")
        self.lora_settings()  # validates the lora_* fields
        if self.transcripts < 0 or not self.transcripts_max_mb > 0:
            raise ValueError(f"transcripts must be >= 0 and transcripts_max_mb > 0, got {self.transcripts} "
                             f"and {self.transcripts_max_mb}")
        from textgym.trainers.trackers import check_report_to

        check_report_to(self.report_to)


@dataclass
class ReinforceConfig(TrainConfig):
    """REINFORCE with a baseline (Williams, 1992)."""

    lr: float = 1e-4
    """Peak learning rate (see :class:`TrainConfig`)."""
    baseline: str = "batch"
    """How returns become advantages: ``"batch"`` (subtract the batch mean and divide by its std),
    ``"ema"`` (subtract an exponential moving average of past returns), or ``"none"``."""
    ema_decay: float = 0.9
    """Decay of the EMA baseline (``baseline="ema"``): new = decay * old + (1 - decay) * batch mean."""

    algorithm = "reinforce"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.baseline not in ("batch", "ema", "none"):
            raise ValueError(f"baseline must be 'batch', 'ema' or 'none', not {self.baseline!r}")


@dataclass
class GRPOConfig(TrainConfig):
    """Group Relative Policy Optimization (Shao et al., 2024), for episodes."""

    group_size: int = 4
    """G: episodes per group. Members of a group start from the same env seed; each episode's
    advantage is its return normalised by the group's mean and std."""
    epochs: int = 2
    """Passes over each batch (the clipped ratio keeps later passes close to the rollout policy)."""
    clip_eps: float = 0.2
    """Clip range of the importance ratio against the rollout log-probs."""
    scale_rewards: bool = True
    """Divide group-centred returns by the group's std (``False``: only subtract the mean)."""
    credit: str = "episode"
    """How decisions get their advantage. ``"episode"``: every decision carries its episode's
    group-normalised return (the original GRPO; suits one final reward). ``"turn"``: each decision's
    discounted return-to-go (``gamma``) minus the group's mean return-to-go at the same turn, so a
    push that kept the pole up gets more credit than one that dropped it in the same episode
    (suits per-step rewards, e.g. CartPole)."""

    algorithm = "grpo"

    @property
    def episodes_per_group(self) -> int:
        return self.group_size

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2, got {self.group_size}")
        if self.credit not in ("episode", "turn"):
            raise ValueError(f"credit must be 'episode' or 'turn', got {self.credit!r}")
        if self.episodes_per_update % self.group_size:
            raise ValueError(
                f"episodes_per_update ({self.episodes_per_update}) must be a multiple of "
                f"group_size ({self.group_size})"
            )


@dataclass
class PPOConfig(TrainConfig):
    """Proximal Policy Optimization (Schulman et al., 2017) with a value head and GAE."""

    epochs: int = 4
    """Passes over each batch."""
    gamma: float = 0.99
    """Discount factor of returns and GAE."""
    gae_lambda: float = 0.95
    """GAE lambda (1: Monte-Carlo returns, 0: one-step TD)."""
    clip_eps: float = 0.2
    """Clip range of the policy's importance ratio."""
    value_clip: float | None = 0.2
    """Clip range of the value update around the rollout's values (``None``: plain MSE)."""
    value_coef: float = 0.5
    """Weight of the value loss."""
    value_lr: float = 1e-3
    """Learning rate of the value head (it starts from scratch, so it learns faster than LoRA)."""
    value_hidden: int = 128
    """Width of the value head's hidden layer."""
    value_detach: bool = True
    """Do not back-propagate the value loss into the language model (the value head reads the
    last hidden state as fixed features); keeps the policy's update clean."""
    normalize_advantages: bool = True
    """Normalise advantages over the batch."""

    algorithm = "ppo"


@dataclass
class SFTConfig:
    """Supervised fine-tuning on demonstrations (warm start before RL)."""

    lr: float = 1e-4
    """Learning rate of AdamW."""
    epochs: int = 3
    """Passes over the demonstrations."""
    batch_size: int = 16
    """Examples per optimizer step."""
    max_grad_norm: float | None = 1.0
    """Gradient-norm clip (``None``: none)."""
    seed: int = 0
    """Shuffling seed."""


CONFIGS: dict[str, type[TrainConfig]] = {
    "reinforce": ReinforceConfig,
    "grpo": GRPOConfig,
    "ppo": PPOConfig,
}


def config_for(algorithm: str, config: TrainConfig | dict | None = None) -> TrainConfig:
    """The config of ``algorithm`` from a config object, a dict of fields, or defaults."""
    if algorithm not in CONFIGS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {sorted(CONFIGS)}")
    cls = CONFIGS[algorithm]
    if config is None:
        return cls()
    if isinstance(config, dict):
        return cls.from_dict(config)
    if isinstance(config, cls):
        return config
    if isinstance(config, TrainConfig):
        # A config of another algorithm (or the base): keep the shared fields.
        shared = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dataclasses.asdict(config).items() if k in shared})
    raise TypeError(f"config must be a TrainConfig or a dict, not {type(config).__name__}")


__all__ = [
    "CONFIGS",
    "GRPOConfig",
    "PPOConfig",
    "ReinforceConfig",
    "SFTConfig",
    "TrainConfig",
    "config_for",
]
