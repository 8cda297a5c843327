"""What an env recommends for training on it, declared once: :class:`TrainingDefaults`.

Each setting here is also a setting of a run (``textgym train``'s ``RunConfig`` declares its
budget and early-stop fields ``like`` these, and :class:`~textgym.trainers.TrainConfig` its
``num_envs`` and ``lr``): one range and one doc per setting, whichever way a value comes in (an
env's registration, a config file, a flag). Envs register their defaults with
:func:`textgym.register` (``textgym.registry`` re-exports this class). This module sits below
the registry and the trainers and imports neither; it is torch- and gymnasium-free, so
``textgym --help`` reads it at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from textgym.settings import check, setting

__all__ = ["MAX_ENVS", "TrainingDefaults"]

#: The most envs one process steps together (far beyond what fits a model's batch on one device).
MAX_ENVS = 4096


@dataclass(frozen=True)
class TrainingDefaults:
    """What an env recommends for training: ``textgym train ENV`` starts from these (below the
    config file and the flags), and Python users and ``bench/`` scripts read them with
    :func:`textgym.registry.training_defaults`. ``None`` means "not set".

    Budgets are in updates (or episodes), so a default run does the same work on any machine;
    ``minutes`` is an optional cap. ``until`` is the env's solved threshold: the default of
    ``textgym train --until`` (training stops once a greedy check reaches it) and what the
    collapse alarms (:mod:`textgym.trainers.reporting.alarms`) compare the return with.

    Example:
        >>> d = TrainingDefaults(updates=16, num_envs=16, lr=3e-4, trainer={"episodes_per_update": 32},
        ...                      modes={"generate": {"lr": 1e-4, "trainer": {"gamma": 1.0}}})
        >>> g = d.for_mode("generate")
        >>> g.lr, g.trainer
        (0.0001, {'episodes_per_update': 32, 'gamma': 1.0})
        >>> d.for_mode("score") == TrainingDefaults(updates=16, num_envs=16, lr=3e-4,
        ...                                          trainer={"episodes_per_update": 32})
        True
        >>> t = TrainingDefaults(trainer={"gamma": 1.0}, algorithms={"reinforce": {"baseline": "state"}})
        >>> t.for_algorithm("reinforce").trainer, t.for_algorithm("grpo").trainer
        ({'gamma': 1.0, 'baseline': 'state'}, {'gamma': 1.0})
        >>> TrainingDefaults(updates=-1)
        Traceback (most recent call last):
        ...
        ValueError: updates must be an integer >= 0, got -1

    Raises:
        ValueError: a setting out of its range, or a mode overrides a setting that does not exist.
    """

    updates: int | None = setting(None, at_least=0)
    """Training updates in total (with episodes: whichever comes first).
    Each of the trainer's ``episodes_per_update`` episodes. When a run gives neither ``updates``
    nor ``episodes`` (flags or file), the env's recommended budget applies, and a budget that is
    given replaces it. 0: no RL update, the warm start (``sft``, ``sft_player``) alone."""
    episodes: int | None = setting(None, at_least=1)
    """Training episodes in total, rounded up to whole updates (with updates: whichever first).
    An update plays all of the trainer's ``episodes_per_update`` episodes, so ``--episodes 16``
    with 32 episodes per update plays one update of 32; the plan line and ``summary.json``'s
    ``episodes_planned`` say what is played."""
    minutes: float | None = setting(None, above=0)
    """Cap on the wall time of this session's RL updates; --resume replays the update cut.
    The clock starts at the first update: loading the model and the warm start are not counted.
    At the cap the update in progress is dropped (its rollout stops at once) and the checkpoint
    stays at the last complete update."""
    until: float | None = setting(None)
    """Stop once the mean greedy return on held-out episodes reaches RETURN.
    The env's solved threshold (``None``: it has none, and runs do not stop early); a run's
    ``None`` takes the env's."""
    check_every: int | None = setting(None, at_least=0)
    """Greedy check every K updates (0: no early stop).
    ``None``: the env's default, else ``textgym.trainers.EarlyStop``'s."""
    check_episodes: int | None = setting(None, at_least=1, at_most=MAX_ENVS)
    """Held-out greedy episodes per check, played together.
    ``None``: the env's or ``EarlyStop``'s default."""
    check_max_steps: int | None = setting(None, at_least=1)
    """Cap on the length of a check's episodes (None: the env's default cap, else its own limit).
    Keep it where a capped return still says "solved" (CartPole: 200 steps for 195)."""
    num_envs: int | None = setting(None, at_least=1, at_most=MAX_ENVS)
    """Envs stepped together, one policy call per vector step.
    With several data-parallel processes, in each process. (Declared here, below the trainers:
    :class:`~textgym.trainers.TrainConfig` and the run's config declare theirs like this one.)"""
    lr: float | None = setting(None, above=0)
    """Peak learning rate of AdamW.
    For the trained weights: the LoRA adapter, or the whole model. (Declared here, below the
    trainers, like ``num_envs``.)"""
    sft_player: str | None = setting(None)
    """Imitate this reference player before RL (scripted; none: off).
    One of ``textgym eval --baseline``'s players: its play of ``sft_episodes`` training episodes
    becomes a supervised warm-up's demonstrations (after the ``sft`` file's, if both are given),
    ``sft_epochs`` passes at the trainer's ``sft_lr``. The observations are the newest ones
    alone (an env with its own History window: the conversation a rollout reads), so it does not
    combine with the ``history`` setting."""
    sft_episodes: int | None = setting(None, at_least=1)
    """Episodes the sft_player plays for the warm-up."""
    sft_epochs: int | None = setting(None, at_least=1, at_most=1000)
    """Passes over the warm-up's demonstrations.
    (``SFTConfig.epochs``.)"""
    trainer: Mapping[str, Any] = field(default_factory=dict)
    """Fields of the algorithm's config dataclass (:mod:`textgym.trainers.algorithms`), e.g.
    ``episodes_per_update``, ``gamma``."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments for :func:`textgym.make` (e.g. CartPole's ``shaping``)."""
    policy: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments for :class:`textgym.Policy` (e.g. ``temperature``); the CLI does not pass
    them yet."""
    algorithms: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per RL algorithm (``"reinforce"``, ``"grpo"``, ...), fields of that algorithm's config only,
    merged into ``trainer`` when a run uses it (:meth:`for_algorithm`), so that settings that one
    algorithm has (REINFORCE's ``branch_turns``) do not stop a run of another: ``{"reinforce":
    {"baseline": "state"}}``."""
    modes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per policy mode (``"score"``, ``"generate"``), settings that replace the ones above in that
    mode: ``{"generate": {"lr": 1e-4, "trainer": {...}}}``; a table (``trainer``, ``env_kwargs``,
    ``policy``) is merged key by key."""

    _TABLES = ("trainer", "env_kwargs", "policy", "algorithms")

    def __post_init__(self) -> None:
        for name in (*self._TABLES, "modes"):  # private copies: the defaults never change under us
            object.__setattr__(self, name, dict(getattr(self, name)))
        check(self)
        settings = {f.name for f in dataclasses.fields(self)} - {"modes"}
        for mode, overrides in self.modes.items():
            unknown = sorted(set(overrides) - settings)
            if unknown:
                raise ValueError(f"training defaults for mode {mode!r} set unknown settings {unknown}; "
                                 f"the settings are {sorted(settings)}")

    def for_mode(self, mode: str | None) -> TrainingDefaults:
        """The defaults in policy mode ``mode`` (its overrides applied; ``modes`` emptied)."""
        overrides = dict(self.modes.get(mode, {})) if mode is not None else {}
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "modes"}
        for name, value in overrides.items():
            values[name] = {**values[name], **value} if name in self._TABLES else value
        return TrainingDefaults(**values)

    def for_algorithm(self, algorithm: str) -> TrainingDefaults:
        """The defaults of a run of ``algorithm``: its ``algorithms`` entry merged into ``trainer``
        (``algorithms`` emptied)."""
        return dataclasses.replace(self, trainer={**self.trainer, **self.algorithms.get(algorithm, {})},
                                   algorithms={})

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain values (tables as dicts), ``None`` meaning "not set"."""
        return {f.name: (dict(v) if isinstance(v := getattr(self, f.name), Mapping) else v)
                for f in dataclasses.fields(self)}
