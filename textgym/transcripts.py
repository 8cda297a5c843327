"""Episode transcripts of a training run: ``<run>/transcripts.jsonl``, one JSON line per episode.

What the model actually said: a few episodes of every update (``source`` ``"train"``), of every
greedy check (``"check"``) and of every greedy evaluation (``"eval"``), each line the whole
episode step by step: the observation, the raw answer, the parse record, the reward and its
terms, and the log-prob of the answer. The records are the rollout's own
(:class:`textgym.rollout.Episode`: ``Step.parse`` is the env's ``info["parse"]``,
``Step.reward_terms`` ``ShapeReward``'s ``info["reward_terms"]``, ``Decision.logprob``); the
episodes are picked after the rollout, so playing costs nothing more.

The file is bounded: ``per_update`` episodes per update (or check, or evaluation), spread evenly
over the batch (no random draw: training's random streams stay untouched), each text field cut
at :data:`MAX_TEXT` characters, and nothing more once the file reaches ``max_bytes``. Resuming
from a checkpoint at update ``u`` (:meth:`TranscriptWriter.resume`) keeps the well-formed lines
of updates up to ``u`` and drops the rest (torn by a crash, or redone by the resumed run), as
``metrics.jsonl`` does. The format is in docs/design.md ("Transcripts").

Example:
    >>> import tempfile, textgym
    >>> from textgym.rollout import collect
    >>> policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
    >>> episodes = collect(policy, textgym.make_vec("textgym/Bandit-v0", num_envs=4), episodes=8, seed=0).episodes
    >>> d = tempfile.mkdtemp()
    >>> writer = TranscriptWriter(d, per_update=2)
    >>> len(writer.write(episodes, update=1, source="train"))
    2
    >>> line = read_transcripts(d)[0]
    >>> line["source"], line["update"], line["steps"][0]["parse"]["valid"]
    ('train', 1, True)
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from textgym import jsonl
from textgym.outcomes import outcome_of

if TYPE_CHECKING:  # the reading side stays torch-free (textgym view)
    from textgym.rollout import Episode, Step

__all__ = ["MAX_TEXT", "TRANSCRIPTS_FILE", "TranscriptWriter", "episode_record", "pick", "read_transcripts",
           "transcript_lines", "well_formed"]

logger = logging.getLogger("textgym")

TRANSCRIPTS_FILE = "transcripts.jsonl"
MAX_TEXT = 4000
"""Characters kept of one text field (observation, answer, system prompt); longer ones are cut
and end with ``"…[N more characters]"``."""

Source = Literal["train", "check", "eval"]


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else f"{text[:MAX_TEXT]}…[{len(text) - MAX_TEXT} more characters]"


def _number(value: Any) -> Any:
    """A JSON-able number (NaN and infinities as strings, as in ``metrics.jsonl``)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else str(value)


def _action_shown(parse: dict[str, Any]) -> str | None:
    """The parse record's action name; a tool env's call as ``name({arguments})`` (its result is
    the next step's observation) and its final answer as ``final answer``."""
    action = parse.get("action")
    if parse.get("valid") and isinstance(action, dict):
        if isinstance(action.get("name"), str) and isinstance(action.get("arguments"), dict):
            return _cut(f"{action['name']}({json.dumps(action['arguments'], ensure_ascii=False, default=str)})")
        if parse.get("parser") == "final":
            return "final answer"
    return parse.get("action_name")


def step_record(step: Step) -> dict[str, Any]:
    """One step of a transcript line."""
    parse = step.parse or {}
    record: dict[str, Any] = {
        "observation": _cut(step.observation),
        "answer": _cut(step.decision.text),
        "parse": {"parser": parse.get("parser"), "valid": bool(parse.get("valid", True)),
                  "action": _action_shown(parse)} if step.parse is not None else None,
        "reward": _number(step.reward),
        "reward_terms": ({str(k): _number(v) for k, v in step.reward_terms.items()}
                         if step.reward_terms else None),
        "logprob": _number(step.decision.logprob),
    }
    return record


def episode_record(episode: Episode, *, update: int, source: Source, index: int) -> dict[str, Any]:
    """The transcript line of an episode: ``index`` is its place in the batch it was played in."""
    return {
        "source": source,
        "update": update,
        "index": index,
        "seed": episode.seed,
        "return": _number(episode.env_return),
        "shaped_return": _number(episode.return_),
        "length": episode.length,
        "invalid": episode.invalid_count,
        "outcome": outcome_of(episode),
        "truncated": episode.truncated,
        "system_prompt": _cut(episode.system_prompt),
        "steps": [step_record(step) for step in episode.steps],
    }


def pick(count: int, wanted: int) -> list[int]:
    """``wanted`` indices spread evenly over ``range(count)`` (all of them when fewer)."""
    if wanted >= count:
        return list(range(count))
    if wanted <= 0:
        return []
    return sorted({round(i * (count - 1) / max(1, wanted - 1)) for i in range(wanted)}) if wanted > 1 else [0]


def well_formed(line: str) -> dict[str, Any] | None:
    """The object of a transcript line, or ``None`` when it is torn or not a transcript line
    (a bare NaN or infinity, which only another writer would put there, is read as a string)."""
    try:
        record = json.loads(line, parse_constant=str)
    except json.JSONDecodeError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("update"), int):
        return None
    return record


def transcript_lines(path: str | Path) -> list[str]:
    """The non-empty lines of a ``transcripts.jsonl`` (or of the run folder holding it), unparsed."""
    path = Path(path)
    if path.is_dir():
        path = path / TRANSCRIPTS_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return jsonl.lines(text)


def read_transcripts(path: str | Path) -> list[dict[str, Any]]:
    """The well-formed lines of a ``transcripts.jsonl`` (or of the run folder holding it); a line
    still being written (a run in progress) is skipped."""
    return [record for line in transcript_lines(path) if (record := well_formed(line)) is not None]


class TranscriptWriter:
    """Appends a bounded sample of episodes to ``<out_dir>/transcripts.jsonl``.

    Nothing is created before the first line is written.

    Args:
        out_dir: the run's folder. ``None`` writes nothing.
        per_update: episodes written per update, check or evaluation (0: none).
        max_bytes: the file's size cap; once reached, nothing more is written (one log line says so).
    """

    def __init__(self, out_dir: str | Path | None, per_update: int = 4, max_bytes: int = 50_000_000):
        self.path = Path(out_dir) / TRANSCRIPTS_FILE if out_dir is not None else None
        self.per_update = per_update
        self.max_bytes = max_bytes
        self._full = False

    def write(self, episodes: Sequence[Episode], *, update: int, source: Source) -> list[dict[str, Any]]:
        """Write ``per_update`` of ``episodes`` (spread over the batch); returns the lines written."""
        if self.path is None or self.per_update <= 0 or self._full or not episodes:
            return []
        records = [episode_record(episodes[i], update=update, source=source, index=i)
                   for i in pick(len(episodes), self.per_update)]
        size = self.path.stat().st_size if self.path.is_file() else 0
        written = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            for record in records:
                line = json.dumps(record, ensure_ascii=False) + "\n"
                size += len(line.encode("utf-8"))
                if size > self.max_bytes:
                    self._full = True
                    logger.info("%s reached its cap of %d bytes: no more transcripts", self.path, self.max_bytes)
                    break
                f.write(line)
                written.append(record)
        return written

    def resume(self, update: int) -> int:
        """Keep the well-formed lines of updates ``<= update`` (a checkpoint's); returns how many
        lines were dropped (torn, or of updates the resumed run redoes)."""
        if self.path is None or not self.path.is_file():
            return 0
        old = self.path.read_bytes()
        kept, dropped = [], 0
        for line in jsonl.lines(old.decode("utf-8", errors="replace")):
            record = well_formed(line) if line.strip() else None
            if record is not None and record["update"] <= update:
                kept.append(line + "\n")
            elif line.strip():
                dropped += 1
        text = "".join(kept)
        if text.encode("utf-8") != old:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, self.path)
        return dropped
