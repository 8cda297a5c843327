"""The benchmark suites of ``textgym benchmark``: fixed lists of (env, settings, budget) runs.

A suite (:class:`Suite`) is a list of rows (:class:`BenchmarkRow`). Each row is trained once per
seed from the untrained model, with the env's registered training settings
(:func:`textgym.registry.training_defaults`) and the row's ``settings`` on top, exactly as
``textgym train ENV`` with those settings as flags; then the trained policy plays
``eval_episodes`` greedy episodes on the held-out evaluation seeds (:mod:`textgym.seeds`), and so
do the references: the untrained model and the env's registered reference policies (``random``,
``scripted``: a PD controller, basic strategy, value iteration...; :mod:`textgym.baselines`).

======  ======================================================  =========================================
suite   what                                                    cost
======  ======================================================  =========================================
smoke   the tiny random model, tiny budgets on 3 classic envs   about a minute on 2 cores (a test)
quick   the default model, full's envs, short budgets           fits 30 minutes on 2 cores, 1 seed
full    the default model, six envs' targets, 3 seeds           at most 30 minutes per run
        (and the rl suite's rows)
rl      RL on its own (issue 44): start_eval vs eval, 3 seeds   at most 60 minutes per run
======  ======================================================  =========================================

The runner (``textgym.cli.benchmarking``) writes ``results.json`` and ``results.md`` (the table
of :func:`markdown_table`) to its ``--out`` folder, one run folder per (row, seed).

Example:
    >>> suite = SUITES["smoke"]
    >>> suite.model, [row.name for row in suite.rows]
    ('tiny', ['bandit', 'cartpole-numbers', 'blackjack'])
    >>> print(markdown_table(suite, {"rows": {}}).splitlines()[2])
    | bandit | bandit | 1 update of 8 episodes | not run | not run | - | not run | not run | not run | not run | return >= 1 (the scripted player's) | - |
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from textgym.outcomes import mean_and_stderr
from textgym.settings import check, setting

__all__ = ["SUITES", "BenchmarkConfig", "BenchmarkRow", "Suite", "Target", "gain_cell", "gain_summary",
           "markdown_table", "number", "result_cell", "rl_gain", "seed_summary"]


def number(value: float) -> str:
    """The table's one format for a return (results, spreads and targets alike): 3 significant
    digits.

    Example:
        >>> [number(v) for v in (9.5, 17.25, 20.0, -0.0536, 195.0)]
        ['9.5', '17.2', '20', '-0.0536', '195']
    """
    return f"{float(value):.3g}"


def _percent(rate: float) -> str:
    return f"{100 * float(rate):.0f}%"


@dataclass(frozen=True)
class Target:
    """What a row should reach on its own evaluation: the trained policy's greedy result (the mean
    over seeds, on the row's held-out episodes and step cap), shown in the table's ``target``
    column and checked for its ``met`` column (:meth:`met`).

    Example:
        >>> target = Target(return_at_least=19.5, note="20-step cap")
        >>> str(target), target.met({"return_mean": 20.0}), target.met({"return_mean": 9.0})
        ('return >= 19.5 (20-step cap)', True, False)
        >>> str(Target(win_rate_at_least=0.9, loss_rate_at_most=0.02))
        'wins >= 90%, losses <= 2%'

    Args:
        return_at_least: the mean greedy return must reach this.
        win_rate_at_least: a game's win rate must reach this.
        loss_rate_at_most: a game's loss rate must stay at or under this.
        above_untrained: the return must beat the untrained model's on the same episodes.
        exact_return_at_least: the greedy play's exact expected return (``exact_return``, where
            the env has one: Blackjack) must reach this.
        note: what the numbers stand for, shown in parentheses.
    """

    return_at_least: float | None = None
    win_rate_at_least: float | None = None
    loss_rate_at_most: float | None = None
    above_untrained: bool = False
    exact_return_at_least: float | None = None
    note: str = ""

    def __str__(self) -> str:
        parts = []
        if self.return_at_least is not None:
            parts.append(f"return >= {number(self.return_at_least)}")
        if self.win_rate_at_least is not None:
            parts.append(f"wins >= {_percent(self.win_rate_at_least)}")
        if self.loss_rate_at_most is not None:
            parts.append(f"losses <= {_percent(self.loss_rate_at_most)}")
        if self.above_untrained:
            parts.append("return above the untrained model's")
        if self.exact_return_at_least is not None:
            parts.append(f"exact return >= {number(self.exact_return_at_least)}")
        return ", ".join(parts) + (f" ({self.note})" if self.note else "")

    def __bool__(self) -> bool:
        return bool(str(self))

    def met(self, trained: Mapping[str, Any] | None,
            untrained: Mapping[str, Any] | None = None) -> bool | None:
        """Whether ``trained`` (an evaluation or a :func:`seed_summary`) reaches the target;
        ``None`` when it is not run yet (or the untrained model's return it must beat is
        missing)."""
        if not trained or "return_mean" not in trained:
            return None
        value = float(trained["return_mean"])
        checks = []
        if self.return_at_least is not None:
            checks.append(value >= self.return_at_least)
        if self.win_rate_at_least is not None:
            checks.append(float(trained.get("win_rate", 0.0)) >= self.win_rate_at_least)
        if self.loss_rate_at_most is not None:
            checks.append(float(trained.get("loss_rate", 1.0)) <= self.loss_rate_at_most)
        if self.above_untrained:
            if not untrained or "return_mean" not in untrained:
                return None
            checks.append(value > float(untrained["return_mean"]))
        if self.exact_return_at_least is not None:
            if "exact_return" not in trained:
                return None
            checks.append(float(trained["exact_return"]) >= self.exact_return_at_least)
        return all(checks)


def _cartpole_target(cap: int) -> Target:
    """CartPole-v0's "195 over 200 steps", scaled to the evaluation's step cap."""
    return Target(return_at_least=0.975 * cap, note=f"{cap}-step cap; CartPole-v0's 195 of 200")


@dataclass(frozen=True)
class BenchmarkRow:
    """One row of a suite: an env trained with fixed settings and budget, once per seed.

    Args:
        name: the row's id (its run folders are ``runs/<name>-seed<k>`` in the output folder).
        env: the env's id or short name.
        settings: ``textgym train`` settings over the env's registered ones, as keys of a run
            config file (``updates``, ``lr``, ``check_every``, ``[trainer]``, ``[env_kwargs]``,
            ``[policy]``...: ``textgym.cli.config.RunConfig``); a budget given here replaces the
            env's as a whole, as a flag does.
        eval_episodes: greedy held-out episodes per trained run and per reference.
        eval_env_kwargs: env settings of the evaluation over the run's (e.g. a step cap, or
            TextWorld's held-out pool of games).
        target: what the row should reach on this evaluation (its step cap, its episodes),
            shown in the table and checked for its "met" column.
        budget: how the budget was chosen.
    """

    name: str
    env: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    eval_episodes: int = 100
    eval_env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    target: Target = field(default_factory=Target)
    budget: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.target, Target):  # a target the table could not check
            raise TypeError(f"row {self.name!r}: target must be a textgym.benchmark.Target "
                            f"(e.g. Target(return_at_least=0.9)), got {self.target!r}")


@dataclass(frozen=True)
class Suite:
    """A fixed list of benchmark rows, with the model they train and how many seeds by default.

    Args:
        name: ``smoke``, ``quick`` or ``full``.
        description: one line.
        model: the model every row trains (``textgym benchmark --model`` replaces it).
        seeds: training seeds per row (``--seeds`` replaces it): seeds ``0 .. seeds - 1``.
        rows: the runs.
    """

    name: str
    description: str
    model: str
    seeds: int
    rows: tuple[BenchmarkRow, ...]


# ---------------------------------------------------------------------------------------------
# The suites. Budgets are chosen from the per-update costs measured on a quiet machine for the
# default model (smollm2-135m, score mode, LoRA on the top 8 layers, 2 CPU cores; docs/results.md):
# TicTacToe ~73 s per update of 64 games, TextWorld one-command quests ~33 s per update of 16
# games, Blackjack ~15 s per update of 64 hands, CartPole ~5 decisions/s while training; plus the
# evaluations (references and trained runs), a few minutes per row. The quick suite took 20 min 16 s
# as a whole on 2 quiet cores (commit 27dd364, docs/results.md "The quick suite").

#: CartPole with the numbers only: the centring shaping (the env's default for the numbers only:
#: heading and cart) still credits each push (the reward may say what the prompt does not), the
#: check and step cap as CartPole-v0's "195 over 200 steps".
_CARTPOLE_NUMBERS = {"env_kwargs": {"word": "none", "shaping": 1.0}}
_CARTPOLE_EVAL = {"max_episode_steps": 200}
_CARTPOLE_TARGET = _cartpole_target(_CARTPOLE_EVAL["max_episode_steps"])
_SMOKE_CARTPOLE_EVAL = {"max_episode_steps": 20}
#: The same, warm-started on the scripted PD controller's play (2,000 decisions, 4 epochs at lr
#: 1e-3) and no RL update: 199.6 greedy on the 50 held-out episodes at seed 0 (docs/results.md,
#: "The numbers only"). REINFORCE at CartPole's registered settings after it undid it in one update
#: (greedy 31.9, then 9.75: 93 optimizer steps on batch-normalised advantages of near-equal returns).
_CARTPOLE_NUMBERS_WARM = {
    "env_kwargs": {**_CARTPOLE_NUMBERS["env_kwargs"], "max_episode_steps": 200},
    "sft_player": "scripted", "sft_episodes": 10, "sft_epochs": 4, "trainer": {"sft_lr": 1e-3},
    "updates": 0}

#: TextWorld one-command quests (examples/textworld_train.py's setting, docs/results.md): one
#: room, 3 objects, quests of one command, 3 commands per game, a pool of 32 training games
#: (game seeds 0-31); score mode over the admissible commands, mean log-prob per token.
_TEXTWORLD = {
    "lr": 1e-3, "num_envs": 8,
    "trainer": {"episodes_per_update": 16, "gamma": 0.9, "lora_layers": 8},
    "env_kwargs": {"world_size": 1, "nb_objects": 3, "quest_length": 1, "max_episode_steps": 3,
                   "list_commands": False, "games": 32, "first_game": 0, "progress_reward": 0.5},
    "policy": {"normalization": "token", "temperature": 1.0},
}


#: The same, warm-started on the walkthroughs of a pool of 128 training games (256 one-command
#: demonstrations, 4 epochs at lr 1e-3) and no RL update: 95% of the 100 held-out games at seed 0
#: (32 games' walkthroughs: 82%; 12 REINFORCE updates from the untrained model: 66%;
#: docs/results.md, "TextWorld").
_TEXTWORLD_WARM = {
    **_TEXTWORLD, "sft_player": "scripted", "sft_episodes": 256, "sft_epochs": 4, "updates": 0,
    "trainer": {**_TEXTWORLD["trainer"], "sft_lr": 1e-3},
    "env_kwargs": {**_TEXTWORLD["env_kwargs"], "games": 128},
}


def _textworld_eval(games: int) -> dict[str, Any]:
    """Held-out games (game seeds 1000 on, never trained on); the return is the game's own score,
    so its mean is the win rate (a one-command quest scores 1 when won)."""
    return {"games": games, "first_game": 1000, "progress_reward": 0.0}


_TEXTWORLD_TARGET = Target(return_at_least=0.85, note="the share of held-out games won")
#: TicTacToe: a warm start on the optimal player's 800 games (6 epochs at lr 1e-3), no RL update.
#: The optimal player (the best response to the random opponent, deterministic: one answer per
#: position) wins 95.75% of the 400 held-out games and loses none; imitating the scripted one
#: (win, block, centre, corner, ties at random: 93% / 0.8% losses) reached 83.3% / 5.8% losses
#: after 1,200 games, 87.8% / 4.3% with 24 REINFORCE updates after it (docs/results.md). The
#: registered default now imitates the safe player (fewer losses: 1.75 / 1.5 / 3.5% at seeds 0-2,
#: bench/results/tictactoe_safe_warm_start.json); these rows keep the optimal one they measured.
_TICTACTOE_WARM = {"sft_player": "optimal", "sft_episodes": 800, "sft_epochs": 6, "updates": 0,
                   "trainer": {"sft_lr": 1e-3}}
_TICTACTOE_TARGET = Target(win_rate_at_least=0.9, loss_rate_at_most=0.02)
#: reasoning-gym's family_relationships in score mode over its 16 relations: the untrained model
#: starts between 5% and 60%, where RL has room (8.0% on 200 held-out items; random 5.5%). These
#: rows measure plain REINFORCE (one sampled answer per item, the batch baseline: REINFORCE's own
#: defaults for the fields the family's score-mode tree sets) with the family's earlier budget; the
#: family's default, the tree, is the ``rl`` suite's row.
_PLAIN_REINFORCE = {"baseline": "batch", "branch_turns": 0, "importance_floor": 0.0, "clip_eps_high": None,
                    "epochs": 1}
_FAMILY_RELATIONSHIPS = {"mode": "score", "algo": "reinforce", "updates": 16, "num_envs": 8,
                         "trainer": {"episodes_per_update": 32, "lora_layers": None, "metrics_window": 100,
                                     **_PLAIN_REINFORCE}}
_FAMILY_RELATIONSHIPS_TARGET = Target(above_untrained=True, note="the share of held-out items answered right")
_BLACKJACK_TARGET = Target(return_at_least=-0.055, note="basic strategy's exact -0.0466")
#: Blackjack: a warm start on basic strategy's 1,000 hands (6 epochs at lr 1e-3), no RL update:
#: -0.0675 on the 2,000 held-out hands at seed 0, where basic strategy itself scores -0.0585; its
#: exact expected return -0.0536 (8 of 280 states unlike basic strategy's -0.0466), the registered
#: REINFORCE runs' -0.071, -0.092, -0.116 at seeds 0-2 (bench/blackjack_exact.py; docs/results.md).
_BLACKJACK_WARM = {"sft_player": "scripted", "sft_episodes": 1000, "sft_epochs": 6, "updates": 0,
                   "trainer": {"sft_lr": 1e-3}}
#: BabyAI GoToRedBallNoDists: REINFORCE alone never samples ``forward`` (0 of
#: 100 before and after 12 updates, docs/results.md); a warm start on minigrid's BabyAI bot (100
#: missions, ~540 decisions, 6 epochs at lr 1e-3) reaches 0.915 (the bot 0.934, random 0.110).
_BABYAI = {"mode": "score", "sft_player": "scripted", "sft_episodes": 100, "sft_epochs": 6,
           "trainer": {"sft_lr": 1e-3, "lora_layers": 8}}
_BABYAI_TARGET = Target(return_at_least=0.84, note="90% of the BabyAI bot's 0.93")

# --- RL on its own (issue 44): rows whose gain is RL's, each run's start_eval beside its eval ---
#: RL's own mechanisms, for an env whose states recur: an exploration floor (every answer sampled
#: in every state, the update importance-weighted back to the policy), GiGPO's same-state advantage
#: (a hand's HIT compared with its STICK in the same state), no KL penalty (it pulled toward the
#: untrained model) and no entropy bonus (the floor explores).
_RL_CREDIT = {"explore_floor": 0.2, "state_credit": 1.0, "kl_coef": 0.0, "entropy_coef": 0.0}
#: Blackjack from the untrained model, no warm start: GRPO on groups of 8 hands dealt from one seed
#: with common cards (the dealer draws from a stream of its own, so a state's HIT and STICK meet the
#: same deck, the dealer's hand included), each state's answers compared within their group
#: (GiGPO's anchor states), a small entropy bonus, and a KL 0.03 to the untrained model, which HITs
#: nearly everywhere: it keeps HIT sampled where the importance-weighted floor cannot bring it back
#: (without it every seed tried stopped at stick at 12+, -0.1058). 4,096 hands an update: each of
#: the ~280 states is run through the model once per rollout (``score_memo_bytes``) and re-scored
#: once per minibatch by the top layers alone, so the hands cost little; the update in bf16; the
#: step held for 38 updates, then down to a tenth at update 64, 16 more at that. ``bench/rl_ablation.py``'s
#: ``grpo-anchors-kl-4096-common-6e-4-64``: -0.0479, -0.0469, -0.0487 exactly after 79-80 updates in
#: 60 minutes (two runs at a time at 1 thread each; target -0.060, optimum -0.0466); with the decay
#: at update 45 (3 seeds at once, 44-46 updates): -0.0624, -0.0577, -0.0649; at lr 3e-4 with the whole
#: model re-scored (37-39 updates): -0.0647, -0.0674, -0.0704; on 256 hands an update without common
#: cards: -0.080, -0.070, -0.072.
_BLACKJACK_RL = {"algo": "grpo", "sft_player": "none", "updates": 80, "minutes": 60, "num_envs": 32, "lr": 6e-4,
                 "env_kwargs": {"common_cards": True},
                 "policy": {"act_dtype": "bfloat16", "update_dtype": "bfloat16", "score_memo_bytes": 128 * 2**20},
                 "trainer": {**_RL_CREDIT, "group_size": 8, "episodes_per_update": 4096, "entropy_coef": 0.02,
                             "state_centering": 0.0, "kl_coef": 0.03, "gamma": 1.0, "lora_layers": 8,
                             "metrics_window": 256, "lr_schedule": "linear", "total_updates": 64,
                             "lr_decay_from": 0.6, "lr_final": 0.1}}
#: CartPole with the numbers only, RL alone (the centring shaping credits each push): GRPO on groups
#: of 8 episodes from one seed, so their first states are the same state exactly (a deterministic
#: env), each push compared with the other push taken in that state (per-state credit within the
#: group, turn credit elsewhere), every push sampled (the floor). REINFORCE at CartPole's
#: registered settings stayed at the untrained 9.32 after 12 updates. Training episodes end at
#: 200 steps, the evaluation's cap: longer ones only cost time once a policy balances. With the
#: heading shaping the same settings stopped at 187-191 (the cart drifting off the track); with the
#: centring shaping 198.4, 200 and 191.1 after 6 updates, 34-39 minutes
#: (bench/results/rl_cartpole_numbers_centring.json). The update in bf16 (``update_dtype``, 2.1x
#: faster on a bf16 CPU) and a stricter stop, all 32 check episodes at 200 (8 averaging 195, and all
#: 16 at 200, passed policies that drop 7 carts of 50): 200, 200 and 200 after 9, 6 and 6 updates,
#: 33-44 minutes (bench/results/rl_cartpole_numbers_bf16_update.json).
_CARTPOLE_NUMBERS_RL = {"env_kwargs": {**_CARTPOLE_NUMBERS["env_kwargs"], **_CARTPOLE_EVAL},
                        "algo": "grpo", "updates": 30, "minutes": 60, "num_envs": 16, "lr": 5e-4,
                        "check_episodes": 32, "until": 200, "checkpoint_every": 1,
                        "policy": {"act_dtype": "bfloat16", "update_dtype": "bfloat16"},
                        "trainer": {"group_size": 8, "episodes_per_update": 32, "credit": "turn",
                                    "explore_floor": 0.2, "state_credit": 1.0, "entropy_coef": 0.01,
                                    "minibatches": 8}}
#: TicTacToe vs random: RL after the warm start on the optimal player: GRPO on groups of 8 games
#: from one seed (the opponent draws alike until the moves differ), each position's moves compared
#: within the group, a small floor; the clipped ratio and the fixed number of minibatches keep RL
#: from undoing the warm start. Measured at 3 seeds: +0.018, +0.020 and +0.043 over start_eval
#: (+0.027 +- 0.018; losses 3-5%), importance_floor 1.0 no better at seed 2
#: (bench/results/rl_tictactoe_after_warm_start.json).
_TICTACTOE_RL = {**_TICTACTOE_WARM, "algo": "grpo", "updates": 16, "lr": 1e-4,
                 "trainer": {"sft_lr": 1e-3, "kl_coef": 0.0, "group_size": 8, "episodes_per_update": 128,
                             "explore_floor": 0.1, "state_credit": 1.0, "minibatches": 8}}
#: BabyAI GoToRedBallNoDists, RL alone: GRPO on groups of 8 missions from one seed, each state's
#: actions compared within the group; the floor 0.5 samples ``forward`` (the untrained model gives it
#: ~0.002), every floor draw weighed at least 1 (``importance_floor``: pi/mu would leave it ~0.03 of
#: its gradient), the ratio's upper clip at 5 (clip-higher: a rare better action may grow 5-fold an
#: update, not 1.2-fold), 2 epochs. Measured: 0.930, 0.930, 0.931 on the 100 held-out missions (the
#: bot 0.934) after 16 updates, 5-6 minutes of training a seed; with either change alone, or neither,
#: 0 of 100 after as many updates (bench/results/rl_babyai.json). ``shaping`` toward the ball
#: is not needed: with it, 40 updates, 0.930, 0.931, 0.930 (bench/results/rl_babyai_shaping.json).
_BABYAI_RL = {"algo": "grpo", "mode": "score", "sft_player": "none", "updates": 16, "minutes": 60, "num_envs": 16,
              "lr": 5e-4,
              "policy": {"act_dtype": "bfloat16", "update_dtype": "bfloat16", "score_memo_bytes": 128 * 2**20},
              "trainer": {"lora_layers": 8, "group_size": 8, "episodes_per_update": 32, "gamma": 0.9,
                          "credit": "turn", "explore_floor": 0.5, "importance_floor": 1.0, "clip_eps_high": 4.0,
                          "state_credit": 1.0, "entropy_coef": 0.01, "minibatches": 8, "epochs": 2}}

#: The issue's stretch rows, RL alone, reported either way. family_relationships: the family's
#: score-mode default (textgym/envs/reasoning.py's ``SCORE_TREE_REINFORCE``: REINFORCE on tree
#: rollouts, every one of an item's 16 relations played and pushed by its reward minus the item's
#: mean, 20 updates of 64 items), acting and the update in bf16. GRPO on 8 sampled answers per item
#: reached 20.0% after 27 updates (55 minutes, 1 seed).
#: GuessTheNumber: groups of 8 games for one secret number, each guess compared with the others
#: made after the same hints (state_credit).
_FAMILY_RELATIONSHIPS_RL = {"mode": "score", "algo": "reinforce", "minutes": 60,  # the family's score-mode default
                            "policy": {"act_dtype": "bfloat16", "update_dtype": "bfloat16",
                                       "score_memo_bytes": 128 * 2**20}}
_GUESS_THE_NUMBER_RL = {"mode": "score", "algo": "grpo", "updates": 60, "minutes": 60, "num_envs": 32,
                        "lr": 1e-4,
                        "policy": {"act_dtype": "bfloat16"},
                        "trainer": {"group_size": 8, "episodes_per_update": 64, "explore_floor": 0.1,
                                    "state_credit": 1.0, "lora_layers": 8, "metrics_window": 64}}

RL_ROWS = (
    BenchmarkRow("blackjack-rl", "blackjack", _BLACKJACK_RL, eval_episodes=2000,
                 target=Target(exact_return_at_least=-0.060, note="basic strategy's exact -0.0466"),
                 budget="GRPO from the untrained model, no warm start, up to 80 updates of 512 groups of 8 "
                        "hands with common cards or 60 minutes, with the exploration floor, per-state credit "
                        "within each group and a KL 0.03 to the untrained model"),
    BenchmarkRow("cartpole-numbers-rl", "cartpole", _CARTPOLE_NUMBERS_RL, eval_episodes=50,
                 eval_env_kwargs=_CARTPOLE_EVAL, target=_CARTPOLE_TARGET,
                 budget="GRPO alone on the numbers (word none), up to 30 updates of 4 groups of 8 "
                        "episodes or 60 minutes, the update in bf16; stops once all 32 check episodes "
                        "hold 200 steps"),
    BenchmarkRow("tictactoe-rl", "tictactoe", _TICTACTOE_RL, eval_episodes=400,
                 target=Target(win_rate_at_least=0.94, loss_rate_at_most=0.01,
                               note="and above start_eval by 2 standard errors"),
                 budget="the warm start on the optimal player's 800 games, then 16 GRPO updates of 16 "
                        "groups of 8 games with the floor and per-state credit"),
    BenchmarkRow("babyai-gotoredball-rl", "minigrid/BabyAI-GoToRedBallNoDists-v0", _BABYAI_RL,
                 eval_episodes=100, target=Target(return_at_least=0.80, note="the bot 0.934, random 0.110"),
                 budget="GRPO from the untrained model, 16 updates of 4 groups of 8 missions, the exploration "
                        "floor's draws weighed at least 1, clip-higher, per-state credit"),
    BenchmarkRow("family-relationships-rl", "reasoning_gym/family_relationships", _FAMILY_RELATIONSHIPS_RL,
                 eval_episodes=200,
                 target=Target(return_at_least=0.27, note="stretch: 10 points above always answering "
                                                          "\"son\", the best constant answer (17.0%)"),
                 budget="stretch: REINFORCE on tree rollouts from the untrained model, 20 updates of 64 "
                        "items, every answer of each played"),
    BenchmarkRow("guess-the-number-rl", "textarena/GuessTheNumber-v0", _GUESS_THE_NUMBER_RL, eval_episodes=100,
                 target=Target(win_rate_at_least=0.9, note="stretch; the untrained model 55%, random 56%"),
                 budget="stretch: GRPO from the untrained model, up to 60 updates of 8 groups of 8 "
                        "games, or 60 minutes"),
)

SMOKE = Suite(
    "smoke", "The tiny random model, one small update per row: checks the machinery, not learning.",
    model="tiny", seeds=1,
    rows=(
        BenchmarkRow("bandit", "bandit", {"updates": 1, "num_envs": 8, "check_every": 0,
                                          "trainer": {"episodes_per_update": 8}},
                     eval_episodes=16, target=Target(return_at_least=1.0, note="the scripted player's"),
                     budget="the smallest update; the table's shape, not a result"),
        BenchmarkRow("cartpole-numbers", "cartpole",
                     {**_CARTPOLE_NUMBERS, "updates": 1, "num_envs": 4, "check_every": 0,
                      "trainer": {"episodes_per_update": 4}},
                     eval_episodes=4, eval_env_kwargs=_SMOKE_CARTPOLE_EVAL,
                     target=_cartpole_target(_SMOKE_CARTPOLE_EVAL["max_episode_steps"]),
                     budget="the smallest update; evaluation capped at 20 steps"),
        BenchmarkRow("blackjack", "blackjack", {"sft_player": "none", "updates": 1, "num_envs": 8,
                                                "trainer": {"episodes_per_update": 8}},
                     eval_episodes=16, target=_BLACKJACK_TARGET, budget="the smallest update"),
    ),
)

QUICK = Suite(
    "quick", "The default model on the full suite's envs with short budgets: a trend in 30 minutes, "
    "not the targets.",
    model="smollm2-135m", seeds=1,
    rows=(
        BenchmarkRow("tictactoe", "tictactoe", {"sft_player": "none", "updates": 4, "lr": 1e-3,
                                                "trainer": {"kl_coef": 0.0}}, eval_episodes=100,
                     target=_TICTACTOE_TARGET,
                     budget="4 REINFORCE updates of 64 games at lr 1e-3 from the untrained model, no "
                            "warm start: ~5 min"),
        BenchmarkRow("textworld-one-command", "textworld", {**_TEXTWORLD, "updates": 6},
                     eval_episodes=32, eval_env_kwargs=_textworld_eval(32), target=_TEXTWORLD_TARGET,
                     budget="half of the example's 12 updates: ~3.5 min, and ~2 min to generate "
                            "the 64 games once (cached)"),
        BenchmarkRow("cartpole-numbers", "cartpole", {**_CARTPOLE_NUMBERS, "updates": 4},
                     eval_episodes=20, eval_env_kwargs=_CARTPOLE_EVAL, target=_CARTPOLE_TARGET,
                     budget="4 updates of 16 episodes (~500 decisions each at first): ~6 min; "
                            "stops early once a check passes"),
        BenchmarkRow("blackjack", "blackjack", {"sft_player": "none", "updates": 16}, eval_episodes=500,
                     target=_BLACKJACK_TARGET,
                     budget="16 REINFORCE updates of 64 hands (with the KL penalty), no warm start: ~4 min"),
        BenchmarkRow("family-relationships", "reasoning_gym/family_relationships",
                     {**_FAMILY_RELATIONSHIPS, "updates": 8}, eval_episodes=200,
                     target=_FAMILY_RELATIONSHIPS_TARGET,
                     budget="8 updates of plain REINFORCE on 32 items each: ~2.5 min"),
        BenchmarkRow("babyai-gotoredball", "minigrid/BabyAI-GoToRedBallNoDists-v0",
                     {**_BABYAI, "sft_episodes": 50, "sft_epochs": 4, "updates": 1}, eval_episodes=50,
                     target=_BABYAI_TARGET,
                     budget="a warm start on 50 of the bot's missions, 4 epochs, then 1 update: ~4 min"),
    ),
)

FULL = Suite(
    "full", "Six envs' targets with the default model, 3 seeds per row, at most 30 minutes per run.",
    model="smollm2-135m", seeds=3,
    rows=(
        BenchmarkRow("tictactoe", "tictactoe", _TICTACTOE_WARM, eval_episodes=400,
                     target=_TICTACTOE_TARGET,
                     budget="over 30 minutes: a warm start on the optimal player's 800 games (6 epochs, "
                            "~2,700 decisions: ~30 min at 1 thread), no RL update"),
        BenchmarkRow("textworld-one-command", "textworld", _TEXTWORLD_WARM,
                     eval_episodes=100, eval_env_kwargs=_textworld_eval(100),
                     target=_TEXTWORLD_TARGET,
                     budget="a warm start on the walkthroughs of 128 training games (4 epochs), no RL "
                            "update: ~13 min at 1 thread (the 228 games generated once, ~2 min)"),
        BenchmarkRow("cartpole-numbers", "cartpole", _CARTPOLE_NUMBERS_WARM,
                     eval_episodes=50, eval_env_kwargs=_CARTPOLE_EVAL, target=_CARTPOLE_TARGET,
                     budget="a warm start on the PD controller's 10 episodes of 200 steps (4 epochs), "
                            "no RL update: ~10 min at 1 thread"),
        BenchmarkRow("blackjack", "blackjack", _BLACKJACK_WARM, eval_episodes=2000, target=_BLACKJACK_TARGET,
                     budget="a warm start on basic strategy's 1,000 hands (6 epochs, ~1,600 decisions: "
                            "~30 min at 1 thread), no RL update"),
        BenchmarkRow("family-relationships", "reasoning_gym/family_relationships", _FAMILY_RELATIONSHIPS,
                     eval_episodes=200, target=_FAMILY_RELATIONSHIPS_TARGET,
                     budget="16 updates of plain REINFORCE on 32 items each: ~5 min (8.0% -> 17.5% at seed 0)"),
        BenchmarkRow("babyai-gotoredball", "minigrid/BabyAI-GoToRedBallNoDists-v0",
                     {**_BABYAI, "updates": 8}, eval_episodes=100, target=_BABYAI_TARGET,
                     budget="a warm start on 100 of the bot's missions (6 epochs: ~8.5 min at 1 thread), "
                            "then 8 updates of 16 episodes"),
        *RL_ROWS,
    ),
)

RL = Suite(
    "rl", "Reinforcement learning on its own: each run's greedy result beside its starting point's "
    "on the same held-out episodes (start_eval), 3 seeds per row.",
    model="smollm2-135m", seeds=3, rows=RL_ROWS)

#: Every suite by name (``textgym benchmark --suite``).
SUITES: dict[str, Suite] = {suite.name: suite for suite in (SMOKE, QUICK, FULL, RL)}


@dataclass(frozen=True)
class BenchmarkConfig:
    """What ``textgym benchmark`` runs: its options are these fields (``textgym.cli.options``).

    Example:
        >>> BenchmarkConfig("smoke").resolved()
        BenchmarkConfig(suite='smoke', seeds=1, model='tiny', rows=None)
        >>> BenchmarkConfig("smoke", rows="bandit, blackjack").row_names()
        ['bandit', 'blackjack']
        >>> BenchmarkConfig("huge")
        Traceback (most recent call last):
        ...
        ValueError: suite must be one of smoke, quick, full, rl, got 'huge'
    """

    suite: str = setting(choices=tuple(SUITES), flag=True)
    """The suite: smoke (tiny model, a test), quick (30 minutes), full (the targets) or rl (RL on its own)."""
    seeds: int | None = setting(None, at_least=1, flag=True, metavar="N",
                                default_text="the suite's: smoke 1, quick 1, full 3")
    """Training seeds per row (seeds 0 to N-1)."""
    model: str | None = setting(None, flag=True, default_text="the suite's: tiny for smoke, else smollm2-135m")
    """The model every row trains from (registry name, Hugging Face id or folder)."""
    rows: str | None = setting(None, flag=True, metavar="NAME,...", default_text="all")
    """Run only these rows of the suite (comma-separated names).
    The table and JSON still show what earlier runs in the same --out recorded for the others:
    a long suite can be run a few rows at a time."""

    def __post_init__(self) -> None:
        check(self)
        if self.rows is not None:
            names = [row.name for row in SUITES[self.suite].rows]
            unknown = [name for name in self.row_names() if name not in names]
            if unknown or not self.row_names():
                raise ValueError(f"rows must be names of the {self.suite} suite's rows ({', '.join(names)}), "
                                 f"got {self.rows!r}")

    def row_names(self) -> list[str]:
        """The rows to run (all of the suite's when ``rows`` is not given)."""
        if self.rows is None:
            return [row.name for row in SUITES[self.suite].rows]
        return [name.strip() for name in self.rows.split(",") if name.strip()]

    def resolved(self) -> BenchmarkConfig:
        """The suite's seeds and model where none is given."""
        suite = SUITES[self.suite]
        return BenchmarkConfig(self.suite, self.seeds or suite.seeds, self.model or suite.model, self.rows)


# ---------------------------------------------------------------------------------------------
# The table


def seed_summary(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The mean over seeds of each run's greedy statistics (``return_mean``, and the win/draw/loss
    rates of games), with ``return_seed_std``, the spread of the runs' returns (``ddof=0``).

    Example:
        >>> seed_summary([{"return_mean": 1.0, "win_rate": 0.5}, {"return_mean": 0.0, "win_rate": 0.25}])
        {'return_mean': 0.5, 'return_seed_std': 0.5, 'win_rate': 0.375, 'seeds': 2}
        >>> seed_summary([{"return_mean": 0.95}] * 3)["return_seed_std"]
        0.0
    """
    if not results:
        return {}
    returns = [float(r["return_mean"]) for r in results]
    summary: dict[str, Any] = {
        "return_mean": statistics.fmean(returns),
        # exact arithmetic: equal returns spread by 0, not by float rounding (1e-16)
        "return_seed_std": statistics.pstdev(returns),
    }
    for rate in ("win_rate", "draw_rate", "loss_rate", "exact_return"):
        if all(rate in r for r in results):
            summary[rate] = sum(float(r[rate]) for r in results) / len(results)
    summary["seeds"] = len(results)
    return summary


def rl_gain(result: Mapping[str, Any], start: Mapping[str, Any]) -> dict[str, Any]:
    """What RL changed: a run's greedy ``result`` minus its starting point's ``start`` on the same
    held-out episodes (``return``; ``exact_return`` too where both have one), with the standard
    error of the return's difference.

    Where both evaluations list their ``episode_returns`` from the same seeds, the error is the
    paired one: that of the mean of the episode-by-episode differences (``"paired": True``). The
    same episodes make the two means positively correlated (an episode the policy still plays
    alike differs by 0), so the paired error is the right one for this design, and smaller. Else
    (older records) it is ``sqrt(se1^2 + se2^2)``, as if the two means were independent: an upper
    bound.

    Example:
        >>> rl_gain({"return_mean": 0.9, "return_stderr": 0.03}, {"return_mean": 0.5, "return_stderr": 0.04})
        {'return': 0.4, 'return_stderr': 0.05, 'paired': False}
        >>> after = {"return_mean": 0.75, "seed": 7, "episode_returns": [1.0, 1.0, 1.0, 0.0]}
        >>> before = {"return_mean": 0.5, "seed": 7, "episode_returns": [1.0, 0.0, 1.0, 0.0]}
        >>> rl_gain(after, before)  # differences 0, 1, 0, 0: mean 0.25, stderr 0.5 / sqrt(4)
        {'return': 0.25, 'return_stderr': 0.25, 'paired': True}
    """
    after, before = result.get("episode_returns"), start.get("episode_returns")
    paired = (bool(after) and bool(before) and len(after) == len(before)
              and result.get("seed") == start.get("seed"))
    if paired:
        _, stderr = mean_and_stderr([float(a) - float(b) for a, b in zip(after, before)])
    else:
        stderr = (float(result.get("return_stderr") or 0.0) ** 2 + float(start.get("return_stderr") or 0.0) ** 2) ** 0.5
    gain: dict[str, Any] = {"return": round(float(result["return_mean"]) - float(start["return_mean"]), 12),
                            "return_stderr": round(stderr, 12), "paired": paired}
    if "exact_return" in result and "exact_return" in start:
        gain["exact_return"] = float(result["exact_return"]) - float(start["exact_return"])
    return gain


def gain_summary(gains: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The mean RL gain over a row's runs (each a :func:`rl_gain`) and its standard error
    (``sqrt(sum of se^2) / n``: the runs are independent), ``paired`` when every run's error is;
    empty when a run has none.

    Example:
        >>> gain_summary([{"return": 0.4, "return_stderr": 0.03}, {"return": 0.2, "return_stderr": 0.04}])
        {'return': 0.3, 'return_stderr': 0.025, 'paired': False, 'seeds': 2}
    """
    if not gains or any(g is None for g in gains):
        return {}
    n = len(gains)
    summary: dict[str, Any] = {
        "return": round(sum(float(g["return"]) for g in gains) / n, 12),
        "return_stderr": round(sum(float(g["return_stderr"]) ** 2 for g in gains) ** 0.5 / n, 12),
        "paired": all(bool(g.get("paired")) for g in gains)}
    if all("exact_return" in g for g in gains):
        summary["exact_return"] = sum(float(g["exact_return"]) for g in gains) / n
    summary["seeds"] = n
    return summary


def gain_cell(gain: Mapping[str, Any] | None) -> str:
    """A table cell for :func:`gain_summary`: the RL gain of the greedy return ± its standard error.

    Example:
        >>> gain_cell({"return": 0.3, "return_stderr": 0.025, "seeds": 2})
        '+0.3 ± 0.025'
        >>> gain_cell({})
        '-'
    """
    if not gain:
        return "-"
    text = f"{'+' if float(gain['return']) >= 0 else ''}{number(gain['return'])} ± {number(gain['return_stderr'])}"
    if "exact_return" in gain:
        text += f" (exact {'+' if float(gain['exact_return']) >= 0 else ''}{number(gain['exact_return'])})"
    return text


def result_cell(result: Mapping[str, Any] | None) -> str:
    """A table cell for one evaluation (or a :func:`seed_summary`): the mean greedy return, its
    spread over seeds when there are several, and win/draw/loss for games.

    Example:
        >>> result_cell({"return_mean": 0.3, "win_rate": 0.615, "draw_rate": 0.07, "loss_rate": 0.315})
        '0.3 (W/D/L 62/7/32%)'
        >>> result_cell({"return_mean": 187.25, "return_seed_std": 9.5, "seeds": 3})
        '187 ± 9.5 (3 seeds)'
        >>> result_cell(None)
        'not run'
    """
    if result is None:
        return "not run"
    text = number(result["return_mean"])
    if result.get("seeds", 1) > 1:
        text += f" ± {number(result['return_seed_std'])} ({result['seeds']} seeds)"
    if "win_rate" in result:
        rates = "/".join(f"{100 * float(result[k]):.0f}" for k in ("win_rate", "draw_rate", "loss_rate"))
        text += f" (W/D/L {rates}%)"
    if "exact_return" in result:
        text += f" (exact {number(result['exact_return'])})"
    return text


def _budget(row: Mapping[str, Any] | None, declared: BenchmarkRow) -> str:
    """The budget a run used (its resolved config), else the declared one, and the mean training
    time of the runs (wall time: on a shared machine it says little)."""
    budget = (row or {}).get("budget") or {}
    seconds = [r["train_seconds"] for r in (row or {}).get("runs") or [] if r.get("train_seconds")]
    took = f" ({sum(seconds) / len(seconds) / 60:.1f} min)" if seconds else ""
    updates = budget.get("updates", declared.settings.get("updates"))
    per_update = budget.get("episodes_per_update", (declared.settings.get("trainer") or {}).get("episodes_per_update"))
    if updates is None:
        text = "the env's registered budget"
    elif updates == 0:
        text = "no RL update"
    else:
        text = f"{updates} update{'' if updates == 1 else 's'}" + (f" of {per_update} episodes" if per_update else "")
    warm = budget.get("warm_start")
    if warm:  # the warm start comes first (textgym train --sft-player)
        text = (f"a warm start on the {warm['player']} player's {warm['episodes']} episodes "
                f"({warm['epochs']} epochs), {'' if updates == 0 else 'then '}{text}")
    return text + took


def _met(met: bool | None) -> str:
    return "-" if met is None else "yes" if met else "no"


def markdown_table(suite: Suite, results: Mapping[str, Any]) -> str:
    """The Markdown table of a suite's results (``results.json``'s content): one line per row,
    the trained policy's greedy return (mean over seeds) beside its starting point's on the same
    episodes (``start_eval``: the warm start, else the untrained model) and the RL gain between
    them, the untrained model's and the references', with the row's target and whether the trained policy met it (``-``: not run).
    A row not run yet says so. Every return has one format (:func:`number`)."""
    names = ["random", "scripted", "optimal"]  # "optimal": the best policy, where one is known
    lines = [
        ("| run | env | budget per seed | trained (greedy) | start (greedy) | RL gain | untrained | random "
         "| scripted | optimal | target | met |"),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    rows = results.get("rows") or {}
    for declared in suite.rows:
        row = rows.get(declared.name)
        references = (row or {}).get("references") or {}
        trained = (row or {}).get("trained") or None
        env = (row or {}).get("env") or declared.env
        runs = (row or {}).get("runs") or []
        starts = [r["start_eval"] for r in runs if r.get("start_eval")]
        start = seed_summary(starts) if runs and len(starts) == len(runs) else None
        cells = [declared.name, env.split("/")[-1], _budget(row, declared), result_cell(trained),
                 result_cell(start), gain_cell((row or {}).get("gain")),
                 result_cell(references.get("untrained")),
                 *(result_cell(references.get(name)) if (not references or name in references)
                   else "none" for name in names),  # "none": the env has no such reference
                 str(declared.target) or "-", _met(declared.target.met(trained, references.get("untrained")))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
