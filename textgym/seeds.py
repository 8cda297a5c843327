"""The seed layout: which env seeds each kind of episode plays (the one place it is declared).

Episodes of different purposes never share a start, so a held-out result is held out:

==========================  =========================================================================
greedy checks (early stop)  ``CHECK_BASE + j`` (500,000 and up): the same starts at every check
held-out evaluation         ``EVAL_BASE + j`` (1,000,000 and up): ``textgym eval``, ``Trainer.evaluate``,
                            ``summary.json``'s final evaluation (``TrainConfig.eval_seed``)
training rollouts           ``TRAIN_BASE + run_seed * PER_RUN_SEED + update * PER_UPDATE + j``
                            (10,000,000 and up): episode ``j`` of update ``update`` of a run seeded
                            ``run_seed``, so a resumed run replays the same starts
warm-start demonstrations   ``rollout_seed(run_seed, DEMONSTRATION_UPDATE) + j``: a reference player's
                            episode ``j`` (``--sft-player``), in the run's own training seeds, where
                            its rollouts would be at update 50,000 (no run gets there)
==========================  =========================================================================

Per process (data parallelism, :func:`textgym.distributed.episode_shard`): a process plays the
episodes ``shard`` of an update, episode ``j`` from the update's seed ``+ j`` whatever the number
of processes, so one process and several play the same starts.

Example:
    >>> rollout_seed(run_seed=0, update=2)
    10020000
    >>> check_seeds(8), eval_seeds(3)
    (range(500000, 500008), range(1000000, 1000003))
"""

from __future__ import annotations

__all__ = ["CHECK_BASE", "DEMONSTRATION_UPDATE", "EVAL_BASE", "PER_RUN_SEED", "PER_UPDATE", "TRAIN_BASE",
           "check_seeds", "demonstration_seed", "eval_seeds", "overlaps_training", "rollout_seed"]

#: The first seed of the greedy checks' episodes (below the evaluation seeds).
CHECK_BASE = 500_000
#: The first seed of the held-out evaluation episodes (``textgym eval --seed``'s default).
EVAL_BASE = 1_000_000
#: The first training seed: far above the evaluation and check seeds.
TRAIN_BASE = 10_000_000
#: Seeds an update may use (its episodes, GRPO's groups): update k starts ``k * PER_UPDATE`` on.
PER_UPDATE = 10_000
#: How far apart runs with consecutive ``seed`` settings train.
PER_RUN_SEED = 1_000_000_000


def rollout_seed(run_seed: int, update: int) -> int:
    """The seed of episode 0 of training update ``update`` (0-based: the updates done before it)
    of a run seeded ``run_seed``; episode ``j`` plays ``rollout_seed(...) + j``."""
    return TRAIN_BASE + run_seed * PER_RUN_SEED + update * PER_UPDATE


#: The update whose seeds a run's warm-start demonstrations play instead (half of a run seed's span).
DEMONSTRATION_UPDATE = PER_RUN_SEED // PER_UPDATE // 2


def demonstration_seed(run_seed: int) -> int:
    """The seed of a reference player's first demonstrated episode in a run seeded ``run_seed``
    (training seeds that the run's own rollouts never reach).

    Example:
        >>> demonstration_seed(0), demonstration_seed(1)
        (510000000, 1510000000)
    """
    return rollout_seed(run_seed, DEMONSTRATION_UPDATE)


def check_seeds(episodes: int, first: int = CHECK_BASE) -> range:
    """The seeds of a greedy check's episodes."""
    return range(first, first + episodes)


def eval_seeds(episodes: int, first: int = EVAL_BASE) -> range:
    """The seeds of a held-out evaluation's episodes."""
    return range(first, first + episodes)


def overlaps_training(seeds: range) -> bool:
    """Whether held-out seeds reach the training seeds."""
    return seeds.stop > TRAIN_BASE
