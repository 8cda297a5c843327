"""Collapse alarms: flags raised from a run's per-update statistics, each with a one-line hint.

Users of LLM-RL toolkits report collapses more than anything else, and most find out from a flat
curve long after the fact. This module looks at the history of a run's updates and names the
usual failures as they start:

* ``entropy_collapse``: the policy's entropy fell under a fraction of its scale (``log K`` over
  ``K`` candidates in score mode, else its value at the run's first update) while the return is
  still short of the env's reference;
* ``kl_blowup``: one update moved the policy far from the one that collected its episodes
  (``kl`` above 10x ``target_kl``, or above an absolute bound without a target);
* ``one_answer``: nearly every decision of the update gave the same answer, although the env
  offers several, while the return is still short of the reference;
* ``invalid_rising``: the invalid-answer rate (generate mode) rose over several updates in a row.

It is pure: :func:`detect` and :func:`raised` read a sequence of :class:`UpdateStats` (built from
``metrics.jsonl`` lines with :meth:`UpdateStats.from_metrics`) and a :class:`Reference`, and
return typed :class:`Alarm` values. The trainer records the alarms each update raises in its
metrics line (``alarms``); ``textgym train`` shows them once and lists them in ``summary.json``.
An alarm is a flag, never a stop.

Example:
    >>> history = [UpdateStats(update=1, return_mean=20.0, entropy=0.69, answer_choices=2),
    ...            UpdateStats(update=2, return_mean=22.0, entropy=0.01, answer_choices=2)]
    >>> [alarm.code for alarm in raised(history, Reference(solved=195.0))]
    ['entropy_collapse']
    >>> raised(history, Reference(solved=20.0))   # the return reached the reference: no alarm
    []
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Alarm", "AlarmThresholds", "Reference", "UpdateStats", "answer_statistics", "detect", "raised", "record"]

#: The hints, one line each, by alarm code.
HINTS = {
    "entropy_collapse": "the policy stopped exploring before it solved the task: raise entropy_coef or lower lr",
    "kl_blowup": "one update moved the policy too far: lower lr, or set (or lower) target_kl",
    "one_answer": "the policy gives one answer whatever the state: raise entropy_coef, lower lr or "
                  "try state_centering",
    "invalid_rising": "more and more answers name no action: lower lr, add kl_coef, or check the "
                      "answer format in the prompt",
}


@dataclass(frozen=True)
class UpdateStats:
    """What the alarms read of one update (a subset of its metrics line).

    Args:
        update: the update's number.
        return_mean: the windowed mean env return (``metrics["return_mean"]``).
        entropy: the mean entropy of the acting distribution over the update's decisions.
        kl: the approximate KL between the rollout policy and the updated one.
        invalid_rate: the windowed invalid-answer rate.
        top_answer_share: the share of the update's decisions that gave its most common answer.
        top_answer: that answer.
        answer_choices: how many answers the env offered (the most over the update's decisions).
    """

    update: int
    return_mean: float | None = None
    entropy: float | None = None
    kl: float | None = None
    invalid_rate: float | None = None
    top_answer_share: float | None = None
    top_answer: str | None = None
    answer_choices: int | None = None

    @classmethod
    def from_metrics(cls, metrics: dict[str, Any]) -> UpdateStats:
        """The statistics of one metrics line (keys it lacks, or non-finite values, are ``None``)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            value = metrics.get(f.name)
            if f.name == "top_answer":
                values[f.name] = value if isinstance(value, str) else None
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                values[f.name] = None
            else:
                values[f.name] = value
        values["update"] = int(values["update"] or 0)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Reference:
    """What the env and the run's settings say a healthy run looks like.

    Args:
        solved: the return at which the env counts as solved (its registered ``until``,
            :class:`textgym.registry.TrainingDefaults`; ``None``: the env has none, and "short of
            the reference" means "no better than at the first update").
        target_kl: the run's ``target_kl`` (``None``: none; :attr:`AlarmThresholds.kl_bound` applies).
        warm_started: RL starts from a warm start (``Trainer.warm_start``): a confident policy is
            the imitation, not a collapse, so the entropy's scale is its first update's.
    """

    solved: float | None = None
    target_kl: float | None = None
    warm_started: bool = False


@dataclass(frozen=True)
class AlarmThresholds:
    """When each alarm fires (the defaults are what ``textgym train`` uses)."""

    entropy_fraction: float = 0.1
    """``entropy_collapse``: the entropy is under this fraction of its scale (``log K`` over the
    ``K`` candidates of score mode, else, or after a warm start, the entropy of the run's first
    update)."""
    progress: float = 0.9
    """``entropy_collapse`` and ``one_answer`` fire only while the return has covered less than
    this fraction of the way from its first value to the reference (without a reference: while
    it is no higher than its first value)."""
    kl_factor: float = 10.0
    """``kl_blowup``: the KL is above this many times ``target_kl``."""
    kl_bound: float = 1.0
    """``kl_blowup`` without a ``target_kl``: the KL is above this many nats per decision (10x a
    loose target of 0.1; healthy textgym runs stay under ~0.7)."""
    top_answer_share: float = 0.95
    """``one_answer``: at least this share of the update's decisions gave the same answer."""
    invalid_updates: int = 3
    """``invalid_rising``: the invalid rate rose at each of this many updates in a row..."""
    invalid_rate: float = 0.1
    """... and is now at least this high..."""
    invalid_rise: float = 0.05
    """... and this much higher than before the rise."""


@dataclass(frozen=True)
class Alarm:
    """A flag raised at one update.

    Args:
        code: what kind (``entropy_collapse``, ``kl_blowup``, ``one_answer``, ``invalid_rising``).
        update: the update that raised it.
        message: what was seen, with the figures.
        hint: what to try (one line).
    """

    code: str
    update: int
    message: str
    hint: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def line(self) -> str:
        """``update 6 alarm: <message>: <hint>``: how the live display shows it."""
        return f"update {self.update} alarm: {self.message}: {self.hint}"


def _short_of_reference(history: Sequence[UpdateStats], reference: Reference,
                        thresholds: AlarmThresholds) -> tuple[bool, str]:
    """Whether the latest return is still short of the reference, and how to say it."""
    latest = history[-1].return_mean
    first = next((s.return_mean for s in history if s.return_mean is not None), None)
    if latest is None or first is None:
        return False, ""
    if reference.solved is None:
        return latest <= first, f"return {latest:.3g}, no higher than at the start"
    if first >= reference.solved:
        return False, ""
    progress = (latest - first) / (reference.solved - first)
    return progress < thresholds.progress, f"return {latest:.3g} < {reference.solved:g}"


def _entropy_collapse(history: Sequence[UpdateStats], reference: Reference,
                      thresholds: AlarmThresholds) -> Alarm | None:
    latest = history[-1]
    if latest.entropy is None:
        return None
    if latest.answer_choices is not None and latest.answer_choices > 1 and not reference.warm_started:
        scale, of = math.log(latest.answer_choices), f"log {latest.answer_choices}"
    else:
        scale = next((s.entropy for s in history if s.entropy is not None), None)
        of = "its start"
    if not scale or latest.entropy >= thresholds.entropy_fraction * scale:
        return None
    short, how = _short_of_reference(history, reference, thresholds)
    if not short:
        return None
    return Alarm("entropy_collapse", latest.update,
                 f"entropy {latest.entropy:.3g} ({latest.entropy / scale:.0%} of {of}), {how}",
                 HINTS["entropy_collapse"])


def _kl_blowup(history: Sequence[UpdateStats], reference: Reference, thresholds: AlarmThresholds) -> Alarm | None:
    latest = history[-1]
    if latest.kl is None:
        return None
    if reference.target_kl is not None:
        bound, what = thresholds.kl_factor * reference.target_kl, f"{thresholds.kl_factor:g}x target_kl"
    else:
        bound, what = thresholds.kl_bound, "the bound without target_kl"
    if latest.kl <= bound:
        return None
    return Alarm("kl_blowup", latest.update, f"kl {latest.kl:.3g} > {bound:.3g} ({what})", HINTS["kl_blowup"])


def _one_answer(history: Sequence[UpdateStats], reference: Reference, thresholds: AlarmThresholds) -> Alarm | None:
    latest = history[-1]
    if (latest.top_answer_share is None or not latest.answer_choices or latest.answer_choices < 2
            or latest.top_answer_share < thresholds.top_answer_share):
        return None
    short, how = _short_of_reference(history, reference, thresholds)
    if not short:
        return None
    answer = f" {latest.top_answer!r}" if latest.top_answer is not None else ""
    return Alarm("one_answer", latest.update,
                 f"{latest.top_answer_share:.0%} of answers were{answer} (of {latest.answer_choices} "
                 f"offered), {how}", HINTS["one_answer"])


def _invalid_rising(history: Sequence[UpdateStats], reference: Reference,
                    thresholds: AlarmThresholds) -> Alarm | None:
    n = thresholds.invalid_updates
    rates = [s.invalid_rate for s in history[-(n + 1):]]
    if len(rates) < n + 1 or any(r is None for r in rates):
        return None
    rising = all(later > earlier for earlier, later in itertools.pairwise(rates))
    if not (rising and rates[-1] >= thresholds.invalid_rate and rates[-1] - rates[0] >= thresholds.invalid_rise):
        return None
    return Alarm("invalid_rising", history[-1].update,
                 f"invalid rate {rates[0]:.0%} -> {rates[-1]:.0%} over {n} updates", HINTS["invalid_rising"])


_DETECTORS = (_entropy_collapse, _kl_blowup, _one_answer, _invalid_rising)


def detect(history: Sequence[UpdateStats], reference: Reference = Reference(),
           thresholds: AlarmThresholds = AlarmThresholds()) -> list[Alarm]:
    """The alarms the latest update of ``history`` is in (oldest update first)."""
    if not history:
        return []
    return [alarm for rule in _DETECTORS if (alarm := rule(history, reference, thresholds)) is not None]


#: How many of the latest updates :func:`bounded` keeps: far more than any rule looks back
#: (``invalid_updates``), so that a long run's history (kept in memory and in every checkpoint's
#: trainer_state.json) stays a few kilobytes.
HISTORY_KEPT = 32


def bounded(history: Sequence[UpdateStats], keep: int = HISTORY_KEPT) -> list[UpdateStats]:
    """What the rules need of ``history``: its latest ``keep`` updates, and before them the first
    update with a return and the first with an entropy (the run's starting point and entropy
    scale). :func:`raised` on the result finds what it finds on the whole history.

    Example:
        >>> history = [UpdateStats(update=u, return_mean=float(u), entropy=None) for u in range(1, 101)]
        >>> [s.update for s in bounded(history, keep=3)]
        [1, 98, 99, 100]
    """
    history = list(history)
    if len(history) <= keep + 2:
        return history
    head = history[:-keep]
    firsts = {id(s): s for s in (next((s for s in head if s.return_mean is not None), None),
                                 next((s for s in head if s.entropy is not None), None)) if s is not None}
    return sorted(firsts.values(), key=head.index) + history[-keep:]


def raised(history: Sequence[UpdateStats], reference: Reference = Reference(),
           thresholds: AlarmThresholds = AlarmThresholds()) -> list[Alarm]:
    """The alarms the latest update raises: those it is in and the update before was not (a
    condition that lasts is flagged once, again only after it cleared)."""
    before = {alarm.code for alarm in detect(history[:-1], reference, thresholds)}
    return [alarm for alarm in detect(history, reference, thresholds) if alarm.code not in before]


def record(history: Sequence[UpdateStats], update: UpdateStats,
           reference: Reference = Reference()) -> tuple[list[UpdateStats], list[Alarm]]:
    """``history`` with the latest ``update`` recorded (and :func:`bounded`), and the alarms that
    update raised (:func:`raised`): what a trainer does after each update."""
    history = [*history, update]
    return bounded(history), raised(history, reference)


def answer_statistics(answers: Iterable[str]) -> tuple[str | None, float | None]:
    """The most common of an update's ``answers`` and its share (``None, None`` for none).

    Example:
        >>> answer_statistics(["LEFT", "LEFT", "RIGHT", "LEFT"])
        ('LEFT', 0.75)
    """
    counts = Counter(answers)
    total = sum(counts.values())
    if not total:
        return None, None
    answer, count = counts.most_common(1)[0]
    return answer, count / total
