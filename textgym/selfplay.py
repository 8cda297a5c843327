"""Self-play on two-player PettingZoo board games: one policy plays every seat.

Each update plays ``games_per_update`` games of tic-tac-toe (or connect four) in which the same
:class:`textgym.Policy` answers for both seats, ``num_games`` games at a time with one
``policy.act`` call per turn across them. Every seat's decisions become one episode; the reward
of a decision is what its seat received until its next turn (the game's +1/-1/0, plus the
invalid-answer penalty). The first player wins more often whatever it does, so returns are
centred by a **baseline per role** (first or second player) before the trainer's own update
(any :func:`textgym.trainers.make_trainer` algorithm). After each update the policy plays
greedily against a random and a scripted opponent from both seats, and the win/draw/loss
rates are logged with the trainer's metrics.

Example:
    >>> import textgym
    >>> from textgym.selfplay import SelfPlay, SelfPlayConfig
    >>> policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
    >>> run = SelfPlay(policy, "reinforce", SelfPlayConfig(num_games=4, games_per_update=4, eval_games=4),
    ...                trainer_config={"lr": 1e-3})
    >>> metrics = run.train(updates=1)[-1]
    >>> sorted(k for k in metrics if k.startswith("first/"))
    ['first/baseline', 'first/draw_rate', 'first/loss_rate', 'first/return_mean', 'first/win_rate']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from textgym import seeds
from textgym.policy import Decision
from textgym.rollout import Episode, Request, Step, SupportsAct, collect, play
from textgym.settings import check, like, setting
from textgym.step_cap import StepCap
from textgym.trainers.engine.train_config import TrainConfig
from textgym.wrappers.invalid_answer import INVALID_POLICIES

if TYPE_CHECKING:
    from pettingzoo import AECEnv

    from textgym.envs.games import Opponent
    from textgym.trainers import Trainer

__all__ = ["GameRecord", "GameSlot", "SelfPlay", "SelfPlayConfig", "evaluate_vs", "play_selfplay_games"]

ROLES = ("first", "second")
_GAME_IDS = {"tictactoe": "textgym/TicTacToe-v0", "connect_four": "textgym/ConnectFour-v3"}


@dataclass
class SelfPlayConfig:
    """Settings of a self-play run (the learning algorithm's own settings go in its trainer config)."""

    game: str = setting("tictactoe", choices=tuple(_GAME_IDS))
    """``"tictactoe"`` or ``"connect_four"``."""
    num_games: int = setting(8, at_least=1)
    """Games played at once (one ``policy.act`` call per turn across them)."""
    games_per_update: int = setting(16, at_least=1)
    """Games per update; each gives one episode per seat, so twice as many episodes."""
    role_baseline: str = setting("mean", choices=("mean", "ema", "none"))
    """Per-role baseline subtracted from each seat's return: ``"mean"`` (this batch's mean return of
    that role), ``"ema"`` (an exponential moving average per role) or ``"none"``."""
    ema_decay: float = setting(0.9, at_least=0, at_most=1)
    """Decay of the per-role EMA baseline."""
    eval_games: int = setting(20, at_least=0)
    """Greedy games per opponent in each evaluation, half from each seat (0: no evaluation)."""
    eval_every: int = setting(1, at_least=1)
    """Evaluate every this many updates (and after the last one)."""
    eval_opponents: tuple[str, ...] = ("random", "scripted")
    """Opponents of the evaluation."""
    invalid: str = setting("penalty", choices=INVALID_POLICIES)
    """Invalid-answer policy of the games (see :func:`textgym.wrap_pettingzoo`)."""
    penalty: float = setting(-1.0)
    """Reward added to an invalid answer."""
    seed: int = like(TrainConfig, "seed", 0)
    """Seed of the self-play games (update ``u`` plays :func:`textgym.seeds.rollout_seed` ``+ i``)."""
    eval_seed: int = like(TrainConfig, "eval_seed")
    """First seed of the evaluation games (the same every evaluation, so they compare)."""

    def __post_init__(self) -> None:
        check(self)  # every field's range, as declared above
        self.eval_opponents = tuple(self.eval_opponents)


@dataclass
class GameRecord:
    """One finished self-play game: an episode per seat and each seat's outcome."""

    episodes: dict[str, Episode] = field(default_factory=dict)
    """Role (``"first"``, ``"second"``) -> that seat's episode."""
    outcomes: dict[str, str] = field(default_factory=dict)
    """Role -> ``"win"``, ``"draw"`` or ``"loss"``."""
    seed: int | None = None


class GameSlot:
    """A board of :func:`textgym.rollout.play`: plays games one after another, the policy answering
    for whichever seat is to move (an adapter from PettingZoo's AEC turns to the rollout loop).

    Every seat's decisions become one episode; the reward of a decision is what its seat
    received until its next turn (read from the env's public per-step ``rewards``). Finished
    games go to ``records``.

    Args:
        env: a text AEC env (:func:`textgym.wrap_pettingzoo`).
        index: the board's index (recorded in every :class:`Step`).
        next_seed: called to start each game: the game's seed, or raises ``StopIteration`` when
            no game is left to play.
        records: where finished games go, in order of completion.
        cap: a game the env does not end is cut after this many moves, its seats' last steps
            marked truncated (default: :data:`textgym.step_cap.DEFAULT_MAX_EPISODE_STEPS`).
    """

    def __init__(self, env: AECEnv, index: int, next_seed: Callable[[], int | None], records: list[GameRecord],
                 cap: StepCap | None = None):
        self.env, self.index, self.next_seed, self.records = env, index, next_seed, records
        self.cap = cap if cap is not None else StepCap.of()
        self.playing = False
        self.start()

    def start(self) -> None:
        try:
            self.seed = self.next_seed()
        except StopIteration:
            self.playing = False
            return
        env = self.env
        env.reset(seed=self.seed)
        self.playing = True
        self.moves, self.cut = 0, False
        self.episodes = {a: Episode(seed=self.seed, system_prompt=env.system_prompt(a)) for a in env.possible_agents}
        self.since_move = dict.fromkeys(env.possible_agents, 0.0)  # reward since each seat's last move
        self.observation = ""

    def _ended(self) -> bool:
        return any(self.env.terminations.values()) or any(self.env.truncations.values())

    def _over(self) -> bool:
        return self.cut or self._ended()

    def finish(self) -> None:
        env = self.env
        record = GameRecord(seed=self.seed)
        for role, agent in zip(ROLES, env.possible_agents):
            episode = self.episodes[agent]
            if episode.steps:
                last = episode.steps[-1]
                # everything the seat received since its last move, that move's own reward included
                last.reward = float(self.since_move[agent])
                last.terminated = bool(env.terminations.get(agent, True))
                last.truncated = (self.cut or bool(env.truncations.get(agent, False))) and not last.terminated
            episode.info = {"outcome": env.outcome(agent), "role": role}
            record.episodes[role] = episode
            record.outcomes[role] = env.outcome(agent)
        self.records.append(record)

    def request(self) -> Request | None:
        if self.playing and self._over():
            self.finish()
            self.start()  # the next game on this board, if any is left
        if not self.playing:
            return None
        env = self.env
        agent = env.agent_selection
        self.observation = env.observe(agent)["text"]
        return Request(self.observation, env.system_prompt(agent), env.infos[agent]["valid_actions"])

    def answer(self, decision: Decision) -> None:
        env = self.env
        agent = env.agent_selection
        episode = self.episodes[agent]
        if episode.steps:  # the seat's previous move earned what it received since
            episode.steps[-1].reward = float(self.since_move[agent])
        self.since_move[agent] = 0.0
        env.step(decision.text)
        self.moves += 1
        self.cut = self.cap.cuts(self.moves, self._ended())
        for other, reward in env.rewards.items():
            self.since_move[other] = self.since_move.get(other, 0.0) + reward
        episode.steps.append(Step(decision=decision, reward=0.0, terminated=False, truncated=False,
                                  parse=env.infos.get(agent, {}).get("parse"), observation=self.observation,
                                  env_index=self.index))


def play_selfplay_games(policy: SupportsAct, game: str, games: int, num_games: int = 8,
                        seed: int | None = None, greedy: bool = False, invalid: str = "penalty",
                        penalty: float = -1.0, max_moves: int | None = None,
                        ) -> tuple[list[GameRecord], dict[str, float]]:
    """Play ``games`` games in which ``policy`` answers for every seat, ``num_games`` boards at a
    time through the rollout loop (:func:`textgym.rollout.play`).

    Returns the games (an episode per seat, in :class:`textgym.rollout.Episode` form, ready for
    ``trainer.update``) and rollout stats (decisions, seconds, tokens). A game the board does not
    end is cut after ``max_moves`` moves (``None``:
    :data:`textgym.step_cap.DEFAULT_MAX_EPISODE_STEPS`), counted in ``cut_episodes`` (two per game).
    """
    from textgym.envs.games import make_pettingzoo_game
    from textgym.envs.pettingzoo import wrap_pettingzoo

    seeds = iter(range(games))

    def next_seed() -> int | None:
        game_index = next(seeds)  # StopIteration: every game is under way
        return None if seed is None else int(seed) + game_index

    records: list[GameRecord] = []
    cap = StepCap.of(max_moves)
    boards = [GameSlot(wrap_pettingzoo(make_pettingzoo_game(game), invalid_policy=invalid,
                                       invalid_penalty=penalty), i,
                       next_seed, records, cap) for i in range(min(num_games, games))]
    stats = play(policy, boards, greedy=greedy, seed=seed)
    stats = {"decisions": stats.pop("decisions"), "episodes": 2 * len(records), **stats}
    if cap.cut:
        stats["cut_episodes"] = 2 * cap.cut
        cap.warn(f"self-play {game}")
    return records, stats


def evaluate_vs(policy: SupportsAct, game: str = "tictactoe", opponent: Opponent = "random", games: int = 20,
                seed: int = seeds.EVAL_BASE, num_envs: int = 8, invalid: str = "penalty") -> dict[str, float]:
    """Greedy games of ``policy`` against ``opponent``, half from each seat.

    Returns ``win_rate``, ``draw_rate``, ``loss_rate`` overall and per seat (``first/win_rate``...).
    """
    from textgym.envs.games import TwoPlayerGameEnv

    result: dict[str, float] = {}
    totals = {"win": 0, "draw": 0, "loss": 0}
    for role in ROLES:
        n = games // 2 if role == "first" else games - games // 2
        if n == 0:
            continue
        envs = [TwoPlayerGameEnv(game, opponent=opponent, seat=role, invalid_policy=invalid)
                for _ in range(min(num_envs, n))]
        rollout = collect(policy, envs, episodes=n, seed=seed + (0 if role == "first" else 100_000),
                          greedy=True)
        counts = {"win": 0, "draw": 0, "loss": 0}
        for ep in rollout.episodes:
            counts[ep.info.get("outcome", "loss")] += 1
        for k, v in counts.items():
            result[f"{role}/{k}_rate"] = v / n
            totals[k] += v
    played = sum(totals.values())
    for k, v in totals.items():
        result[f"{k}_rate"] = v / max(1, played)
    return result


class SelfPlay:
    """Self-play training: the same policy in every seat, a baseline per role, evaluation vs fixed opponents.

    Args:
        policy: a :class:`textgym.Policy` (any object with its ``act`` when ``trainer`` is given).
        algorithm: the trainer's algorithm (``"reinforce"``, ``"ppo"``, ``"grpo"``), used when
            ``trainer`` is not given.
        config: :class:`SelfPlayConfig` (or a dict of its fields).
        trainer_config: the trainer's config (or a dict of its fields).
        out_dir: where ``metrics.jsonl`` (trainer metrics + self-play metrics per update) goes.
        trainer: an existing trainer (from :func:`textgym.trainers.make_trainer`) to drive.
    """

    def __init__(self, policy: SupportsAct, algorithm: str = "reinforce", config: SelfPlayConfig | dict | None = None,
                 trainer_config: TrainConfig | dict | None = None, out_dir: str | Path | None = None,
                 trainer: Trainer | None = None):
        from textgym.trainers import make_trainer
        from textgym.trainers.reporting.metrics import MetricsWriter

        if isinstance(config, dict):
            config = SelfPlayConfig(**config)
        self.config = config or SelfPlayConfig()
        self.policy = policy
        if trainer is None:
            # The trainer's own env is only used by trainer.evaluate(); self-play collects itself.
            trainer = make_trainer(algorithm, policy, env=_GAME_IDS[self.config.game], config=trainer_config,
                                   env_kwargs={"opponent": "random"})
        self.trainer = trainer
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.writer = MetricsWriter(self.out_dir, tensorboard=False)
        self.updates = 0
        self.games_played = 0
        self._ema: dict[str, float | None] = {role: None for role in ROLES}

    # -- one update ----------------------------------------------------------------------------
    def collect(self) -> tuple[list[GameRecord], dict[str, float]]:
        cfg = self.config
        seed = seeds.rollout_seed(cfg.seed, self.updates)
        return play_selfplay_games(self.policy, cfg.game, cfg.games_per_update, cfg.num_games, seed=seed,
                                   invalid=cfg.invalid, penalty=cfg.penalty)

    def _baselines(self, returns: dict[str, list[float]]) -> dict[str, float]:
        cfg = self.config
        out = {}
        for role in ROLES:
            values = returns[role]
            mean = float(np.mean(values)) if values else 0.0
            if cfg.role_baseline == "none":
                out[role] = 0.0
            elif cfg.role_baseline == "mean":
                out[role] = mean
            else:
                previous = self._ema[role]
                out[role] = mean if previous is None else previous
                self._ema[role] = mean if previous is None else cfg.ema_decay * previous + (1 - cfg.ema_decay) * mean
        return out

    def update(self) -> dict[str, Any]:
        """Play a batch of self-play games, update the policy once, evaluate; returns the metrics."""
        records, stats = self.collect()
        returns = {role: [r.episodes[role].return_ for r in records if role in r.episodes] for role in ROLES}
        baselines = self._baselines(returns)
        episodes = []
        for role in ROLES:  # grouped by role, so GRPO's groups never mix seats
            for record in records:
                episode = record.episodes.get(role)
                if episode is None or not episode.steps:
                    continue
                centred = dataclasses.replace(episode, steps=[dataclasses.replace(s) for s in episode.steps])
                # all rewards come at the end of a game, so shifting the last one shifts every
                # decision's return-to-go by the role's baseline
                centred.steps[-1].reward -= baselines[role]
                episodes.append(centred)
        metrics = self.trainer.update(episodes, stats)
        metrics.pop("samples", None)
        self.updates += 1
        self.games_played += len(records)
        metrics["selfplay_games"] = self.games_played
        for role in ROLES:
            outcomes = [r.outcomes[role] for r in records]
            metrics[f"{role}/return_mean"] = float(np.mean(returns[role])) if returns[role] else 0.0
            metrics[f"{role}/baseline"] = baselines[role]
            for k in ("win", "draw", "loss"):
                metrics[f"{role}/{k}_rate"] = outcomes.count(k) / max(1, len(outcomes))
        return metrics

    def evaluate(self) -> dict[str, float]:
        """Greedy win/draw/loss rates against each evaluation opponent, keys ``vs_<opponent>/...``."""
        cfg = self.config
        out: dict[str, float] = {}
        for opponent in cfg.eval_opponents:
            result = evaluate_vs(self.policy, cfg.game, opponent, cfg.eval_games, seed=cfg.eval_seed,
                                 num_envs=cfg.num_games, invalid=cfg.invalid)
            out.update({f"vs_{opponent}/{k}": v for k, v in result.items()})
        return out

    def train(self, updates: int, callback: Callable[[dict[str, Any]], Any] | None = None) -> list[dict[str, Any]]:
        """Run ``updates`` updates; evaluates every ``eval_every`` updates and after the last one."""
        history = []
        for u in range(updates):
            metrics = self.update()
            last = u == updates - 1
            if self.config.eval_games and (last or (self.config.eval_every and self.updates % self.config.eval_every == 0)):
                metrics.update(self.evaluate())
            self.writer.write(metrics)
            history.append(metrics)
            if callback is not None and callback(metrics) is False:
                break
        return history


def _summary(metrics: dict[str, Any], keys: Sequence[str] = ("vs_random/win_rate", "vs_scripted/win_rate",
                                                              "first/win_rate", "second/win_rate")) -> str:
    return " ".join(f"{k}={metrics[k]:.2f}" for k in keys if k in metrics)
