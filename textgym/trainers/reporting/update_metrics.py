"""The pieces of an update's metrics line, each from what it is about (``Trainer.finish_update`` joins them).

* :func:`episode_record` / :func:`window_metrics`: what the metrics window keeps of an episode
  and the means over the window (``return_mean``, ``length_mean``, ``invalid_rate``, outcome rates);
* :func:`throughput_metrics`: where the update's time went and how fast it played, with several
  processes summed over them (time: the slowest one's);
* :func:`answer_metrics`: the most common answer and its share of every process's decisions (what
  the ``one_answer`` alarm reads);
* :func:`rollout_metrics`: the two above, in the order every process calls them;
* :func:`sample_records`: a few prompts and answers for the log.

Data parallelism: :func:`throughput_metrics` and :func:`answer_metrics` are collective (every
process calls them, in this order: :func:`rollout_metrics`), so the line is the same on every process.

Example:
    >>> window = [(1.0, 3, 0, "win"), (0.0, 1, 1, "loss")]     # (return, length, invalid, outcome)
    >>> metrics = window_metrics(window)
    >>> metrics["return_mean"], metrics["invalid_rate"], metrics["win_rate"]
    (0.5, 0.25, 0.5)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from textgym.outcomes import outcome_of, outcome_rates
from textgym.rollout import Envs, Episode, Step
from textgym.trainers.reporting import alarms

if TYPE_CHECKING:
    from textgym.distributed import ProcessContext

__all__ = ["EpisodeRecord", "action_count", "answer_metrics", "answer_of", "episode_record", "rollout_metrics", "sample_records",
           "throughput_metrics", "window_metrics"]

EpisodeRecord = tuple[float, int, int, "str | None"]
"""What the metrics window keeps of an episode: (env return, length, invalid answers, outcome)."""


def episode_record(episode: Episode) -> EpisodeRecord:
    """The window's record of a played episode."""
    return (episode.env_return, episode.length, episode.invalid_count, outcome_of(episode))


def window_metrics(window: Iterable[EpisodeRecord]) -> dict[str, Any]:
    """Mean env return and length, invalid answers per decision and the outcome rates of ``window``."""
    window = list(window)
    lengths = sum(w[1] for w in window)
    return {
        "return_mean": float(np.mean([w[0] for w in window])),
        "length_mean": float(np.mean([w[1] for w in window])),
        "invalid_rate": sum(w[2] for w in window) / max(1, lengths),
        **outcome_rates([w[3] for w in window]),
    }


def _global_stats(stats: dict[str, Any] | None, update_seconds: float,
                  process: ProcessContext) -> dict[str, Any] | None:
    """The rollout's throughput figures, with several processes decisions and tokens summed over
    them and time the slowest one's (rollout plus update)."""
    if not process.is_distributed or stats is None:
        return stats
    counted = ("decisions", "prompt_tokens", "answer_tokens")
    mine = [float(stats.get(key, 0.0)) for key in counted]
    totals = process.reduce_sum(mine)
    slowest = max(process.gather([float(stats.get("seconds", 0.0)) + update_seconds]))
    return {**dict(zip(counted, totals)), "seconds": slowest - update_seconds}


def throughput_metrics(stats: dict[str, Any] | None, update_seconds: float, decisions: int,
                       process: ProcessContext) -> dict[str, Any]:
    """The update's time and speed from the rollout's ``stats`` (``None``: episodes fed to
    ``Trainer.update`` by hand) and the update's own ``update_seconds``; ``decisions``: this
    process's, when the stats do not count them. Also the sub-env failures (a remote env's server)."""
    stats = _global_stats(stats, update_seconds, process)
    metrics: dict[str, Any] = {}
    seconds = update_seconds + float((stats or {}).get("seconds", 0.0))
    if stats and stats.get("cut_episodes"):  # episodes the rollout's step cap ended (this process's)
        metrics["cut_episodes"] = int(stats["cut_episodes"])
    if stats and "seconds" in stats:  # where the update's time went (the greedy check: check.seconds)
        metrics["rollout_seconds"] = round(float(stats["seconds"]), 3)
        metrics["update_seconds"] = round(update_seconds, 3)
    if stats and seconds > 0:
        metrics["decisions_per_s"] = float(stats.get("decisions", decisions)) / seconds
        tokens = float(stats.get("prompt_tokens", 0)) + float(stats.get("answer_tokens", 0))
        if tokens:
            metrics["tokens_per_s"] = tokens / seconds
    if process.is_distributed:
        metrics["world_size"] = process.world_size
    for key in ("dropped_episodes", "failed_envs"):
        if stats and stats.get(key):
            metrics[key] = int(stats[key])
    return metrics


def answer_of(step: Step) -> str:
    """The answer a decision amounts to: the action the env parsed from it, else its text."""
    name = (step.parse or {}).get("action_name")
    return str(name) if name is not None else step.decision.text.strip()


def action_count(envs: Envs | None) -> int:
    """How many action names the env offers (0 when unknown: no env, or none declared)."""
    if envs is None:
        return 0
    try:
        return len(envs.envs[0].get_wrapper_attr("action_names"))
    except (AttributeError, TypeError, IndexError):
        return 0


def answer_metrics(steps: Sequence[Step], process: ProcessContext, offered: int) -> dict[str, Any]:
    """The update's most common answer and its share of every process's decisions, when the env
    offers several answers (score mode: the candidates; generate mode: also ``offered``, the env's
    action names)."""
    scored = [len(step.decision.candidates) for step in steps if step.decision.candidates is not None]
    choices = max(scored, default=0)
    if len(scored) < len(steps):  # generate mode: what the env offers is its action names
        choices = max(choices, offered)
    gathered = process.gather([([answer_of(step) for step in steps], choices)])
    choices = max(k for _, k in gathered)
    if choices < 2:
        return {}
    top, share = alarms.answer_statistics(answer for answers, _ in gathered for answer in answers)
    return {"top_answer": top, "top_answer_share": share, "answer_choices": choices} if top is not None else {}


def rollout_metrics(steps: Sequence[Step], stats: dict[str, Any] | None, update_seconds: float,
                    process: ProcessContext, envs: Envs | None) -> dict[str, Any]:
    """What an update's metrics say of its rollout: the throughput (:func:`throughput_metrics`)
    and the answers (:func:`answer_metrics`, against the actions ``envs`` offers). Collective
    with several processes: every process calls it, in the same place of its update."""
    return {**throughput_metrics(stats, update_seconds, len(steps), process),
            **answer_metrics(steps, process, offered=action_count(envs))}


def sample_records(steps: Sequence[Step], count: int) -> list[dict[str, Any]]:
    """The first ``count`` decisions as prompt, answer and reward (the metrics line's ``samples``)."""
    return [{"prompt": s.observation, "answer": s.decision.text, "reward": float(s.reward)} for s in steps[:count]]
