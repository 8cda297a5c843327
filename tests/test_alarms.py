"""The collapse alarms (textgym.trainers.reporting.alarms): each fires on a synthetic history and not on a
healthy one; a lasting condition is raised once."""

from __future__ import annotations

import math

import pytest

from textgym.trainers.reporting.alarms import (
    HINTS,
    Alarm,
    AlarmThresholds,
    Reference,
    UpdateStats,
    answer_statistics,
    detect,
    raised,
)


def healthy_cartpole(updates: int = 8) -> list[UpdateStats]:
    """A run that learns: the entropy falls slowly as the return rises, answers stay mixed."""
    return [UpdateStats(update=u, return_mean=20.0 + 25.0 * u, entropy=0.69 - 0.05 * u, kl=0.02,
                        invalid_rate=0.0, top_answer_share=0.55, top_answer="LEFT", answer_choices=2)
            for u in range(1, updates + 1)]


def codes(alarms: list[Alarm]) -> list[str]:
    return [alarm.code for alarm in alarms]


def test_a_healthy_run_raises_nothing():
    history = healthy_cartpole()
    reference = Reference(solved=195.0)
    for n in range(1, len(history) + 1):
        assert detect(history[:n], reference) == []
    # a policy that became deterministic once it solved the task is not a collapse
    solved = [*history, UpdateStats(update=9, return_mean=200.0, entropy=0.01, kl=0.01, answer_choices=2,
                                    top_answer_share=0.5)]
    assert detect(solved, reference) == []


def test_entropy_collapse_below_the_reference_fires_once_with_its_hint():
    history = [UpdateStats(update=1, return_mean=21.0, entropy=0.69, answer_choices=2),
               UpdateStats(update=2, return_mean=22.0, entropy=0.30, answer_choices=2),
               UpdateStats(update=3, return_mean=23.0, entropy=0.02, answer_choices=2),
               UpdateStats(update=4, return_mean=22.0, entropy=0.01, answer_choices=2)]
    reference = Reference(solved=195.0)
    assert raised(history[:2], reference) == []
    [alarm] = raised(history[:3], reference)
    assert alarm.code == "entropy_collapse" and alarm.update == 3
    assert alarm.hint == ("the policy stopped exploring before it solved the task: raise entropy_coef "
                          "or lower lr")
    assert "entropy 0.02 (3% of log 2)" in alarm.message and "return 23 < 195" in alarm.message
    # still collapsed at update 4: in it, but not raised again
    assert codes(detect(history, reference)) == ["entropy_collapse"] and raised(history, reference) == []


def test_entropy_collapse_without_candidates_compares_with_the_first_update():
    # generate mode: no K, the first update's entropy is the scale
    history = [UpdateStats(update=1, return_mean=0.1, entropy=2.0),
               UpdateStats(update=2, return_mean=0.1, entropy=0.1)]
    [alarm] = detect(history)
    assert alarm.code == "entropy_collapse" and "(5% of its start)" in alarm.message
    # without a solved threshold, a return that rose is progress: no alarm
    rising = [history[0], UpdateStats(update=2, return_mean=0.5, entropy=0.1)]
    assert detect(rising) == []


def test_after_a_warm_start_the_entropy_scale_is_the_first_update_s():
    # BabyAI after imitating its bot (docs/results.md): confident from the first update, near the bot
    imitation = UpdateStats(update=1, return_mean=0.935, entropy=0.0749, answer_choices=7)
    assert codes(detect([imitation])) == ["entropy_collapse"]  # against log 7 it looks collapsed
    assert detect([imitation], Reference(warm_started=True)) == []
    # a collapse from there still fires: a tenth of the first update's entropy, the return no higher
    later = UpdateStats(update=2, return_mean=0.9, entropy=0.005, answer_choices=7)
    [alarm] = detect([imitation, later], Reference(warm_started=True))
    assert alarm.code == "entropy_collapse" and "(7% of its start)" in alarm.message


def test_kl_blowup_against_target_kl_or_the_absolute_bound():
    calm = UpdateStats(update=1, kl=0.05)
    assert detect([calm], Reference(target_kl=0.01)) == []                     # 5x target: fine
    [alarm] = detect([UpdateStats(update=1, kl=0.2)], Reference(target_kl=0.01))
    assert alarm.code == "kl_blowup" and "10x target_kl" in alarm.message
    assert alarm.hint == HINTS["kl_blowup"]
    assert detect([UpdateStats(update=1, kl=0.7)]) == []                        # under the bound
    assert codes(detect([UpdateStats(update=1, kl=2.4e15)])) == ["kl_blowup"]  # CartPole's update 7
    assert detect([UpdateStats(update=1, kl=2.0)], thresholds=AlarmThresholds(kl_bound=3.0)) == []


def test_one_answer_for_every_state():
    history = [UpdateStats(update=1, return_mean=20.0, top_answer_share=0.6, top_answer="LEFT", answer_choices=2),
               UpdateStats(update=2, return_mean=9.5, top_answer_share=1.0, top_answer="LEFT", answer_choices=2)]
    [alarm] = raised(history, Reference(solved=195.0))
    assert alarm.code == "one_answer" and "100% of answers were 'LEFT' (of 2 offered)" in alarm.message
    # one action offered: nothing to flag; a solved env may well have one right answer
    single = [UpdateStats(update=1, return_mean=0.0, top_answer_share=1.0, answer_choices=1)]
    assert detect(single, Reference(solved=1.0)) == []
    assert detect([history[0], UpdateStats(update=2, return_mean=1.0, top_answer_share=1.0, answer_choices=4)],
                  Reference(solved=0.9)) == []


def test_invalid_rate_rising_over_several_updates():
    rates = [0.02, 0.05, 0.09, 0.15]
    history = [UpdateStats(update=u, invalid_rate=r) for u, r in enumerate(rates, start=1)]
    [alarm] = raised(history)
    assert alarm.code == "invalid_rising" and alarm.message == "invalid rate 2% -> 15% over 3 updates"
    assert detect(history[:3]) == []                                             # not yet 3 rises
    noisy = [UpdateStats(update=u, invalid_rate=r) for u, r in enumerate([0.2, 0.15, 0.22, 0.18], start=1)]
    assert detect(noisy) == []                                                   # high, not rising
    low = [UpdateStats(update=u, invalid_rate=r) for u, r in enumerate([0.0, 0.01, 0.02, 0.03], start=1)]
    assert detect(low) == []                                                     # rising, still rare


def test_update_stats_from_a_metrics_line():
    line = {"update": 3, "return_mean": 21.5, "entropy": 0.4, "kl": "nan", "invalid_rate": 0.0,
            "top_answer": "LEFT", "top_answer_share": 0.75, "answer_choices": 2, "samples": []}
    stats = UpdateStats.from_metrics(line)
    assert stats == UpdateStats(update=3, return_mean=21.5, entropy=0.4, kl=None, invalid_rate=0.0,
                                top_answer_share=0.75, top_answer="LEFT", answer_choices=2)
    assert UpdateStats.from_metrics({"update": 1, "kl": math.inf}).kl is None
    assert UpdateStats.from_metrics(stats.to_dict()) == stats


def test_answer_statistics():
    assert answer_statistics(["LEFT", "RIGHT", "LEFT"]) == ("LEFT", pytest.approx(2 / 3))
    assert answer_statistics([]) == (None, None)
