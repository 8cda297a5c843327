"""TextWorld text adventures as text envs: ``textgym/TextWorld-v0``.

Each ``reset(seed=...)`` plays a game made offline by TextWorld's own generator
(``textworld.GameOptions`` + ``textworld.make``, the functions behind ``tw-make custom``).
Games are cached on disk by their generation parameters and seed under
``$TEXTGYM_HOME/textworld`` (default ``~/.cache/textgym/textworld``), so the same seed gives the
same game and a game is generated once per machine. The cache keeps at most ``cache_games``
games per folder (default :data:`CACHED_GAMES`, about 400 KB each), the least recently played
removed first, so fresh seeds (a long run with ``games=None``, a server's clients) cannot fill the
disk. ``game_files=`` plays existing
``.z1``-``.z8`` games instead (a folder or a list of files).

TextWorld's own 4-tuple API is adapted to the text-env contract (docs/design.md §1):

* reward: the change in score (plus ``invalid_penalty`` for an invalid answer);
* ``terminated``: the game is won or lost; ``truncated``: ``max_episode_steps`` commands were sent;
* ``info["valid_actions"]``: the game's admissible commands, so ``score`` mode works;
* the observation: the game's reply with the ASCII-art banner, the status line and the
  "RESTART, RESTORE ... or QUIT" boilerplate removed; at reset it holds the task and the first
  room.

Answers are parsed against the admissible commands with textgym's parsers (JSON, regex,
keyword: ``{"action": "open box"}``, ``Action: go north``, ``... so I will take the key``).
An answer that names no admissible command is *free text*, handled by the
:class:`~textgym.wrappers.InvalidAnswerRule` made of ``invalid_policy``, ``invalid_penalty``,
``max_retries``, ``retry_fallback`` and ``feedback`` (the keyword arguments every text env takes):

* ``"penalty"`` (default) and ``"default"``: the answer itself is sent to the game as a command
  (its first line; letters, digits and ``,'-`` only; at most 80 characters), as a human player's
  typing would be; the game answers it (usually "That's not a verb I recognise."), and
  ``"penalty"`` adds ``invalid_penalty`` to the reward. This is how free text works in
  ``generate`` mode: a command the game understands but that is missing from the admissible list
  still does its work. A command whose any clause (the game's parser runs clauses split by
  "then", commas and full stops) starts with a game-control verb (``quit``, ``restart``, ``save``,
  ``restore``, ``undo``, ``script``, ...) is never sent: the game is left as it was and the
  observation says so.
* ``"retry"``: nothing is sent; the observation repeats with a feedback line; after
  ``max_retries`` retries in a row ``retry_fallback`` applies.
* ``"terminate"``: nothing is sent; the episode ends with reward ``invalid_penalty``.

A non-text answer (``None``, bytes, an object whose ``str()`` fails...) is read as
:func:`~textgym.wrappers.as_answer_text` reads it, like every other text env: it never raises.

``info["parse"]["action"]`` is the command sent to the game (a ``str``) or ``None``.

Games not made by TextWorld (no ``.json`` next to the ``.z8``) have no admissible-command list:
``valid_actions`` is empty and any typed command is a valid answer (parser ``"text"``).

Example:
    >>> import textgym
    >>> env = textgym.make("textgym/TextWorld-v0", world_size=2, nb_objects=3, quest_length=2)
    >>> obs, info = env.reset(seed=0)         # generates (or loads) the game for seed 0
    >>> obs, reward, terminated, truncated, info = env.step(info["valid_actions"][0])

textworld is imported when the env is built, not when this module is imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from textgym.registry import ReferencePlayer, TrainingDefaults
from textgym.spaces import TextSpace
from textgym.wrappers.answer_format import generate_mode_defaults
from textgym.wrappers.invalid_answer import (
    INVALID_POLICIES,
    AnswerCounter,
    InvalidAnswerRule,
    as_answer_text,
)
from textgym.wrappers.parsers import answer_text

__all__ = [
    "CACHED_GAMES",
    "FEEDBACK",
    "INVALID_POLICIES",
    "TRAINING_DEFAULTS",
    "TextWorldEnv",
    "clean_feedback",
    "clean_objective",
    "control_verb",
    "generate_game",
    "make_textworld",
    "register_envs",
    "textgym_home",
    "walkthrough_player",
]

#: Generated games kept per cache folder (each about 400 KB): the least recently played go first.
CACHED_GAMES = 1000

#: The retry feedback line (``{valid_actions}``, ``{answer}``, ``{retries_left}`` filled in).
FEEDBACK = "Not a command here. Reply with one of: {valid_actions}."

SYSTEM_PROMPT = ("You play a text adventure. Each turn you read what you see and answer with one "
                 "command, like 'go north', 'open box' or 'take key'. Finish the task to win.")
# In another answer format than "word": the task, then the format's sentence asking for a command.
_TASK = "You play a text adventure. Each turn you read what you see. Finish the task to win."
_COMMAND = "one command, like 'go north', 'open box' or 'take key'"

# Verbs that control the interpreter rather than the story: never sent. Some write files into the
# working directory (save, script, transcript), some leave the game waiting for a yes/no (quit,
# restart), the others change the game's wording or repeat/undo a move.
_META_VERBS = frozenset({
    "quit", "q", "die", "restart", "restore", "save", "undo", "oops", "o", "script", "unscript",
    "transcript", "noscript", "verbose", "brief", "superbrief", "short", "long", "normal",
    "notify", "version", "verify", "pronouns", "nouns", "again", "g", "y", "yes", "n", "no",
})
# The game's parser runs one command after another when they are joined by "then", a comma or a
# full stop (checked with textworld 1.7's interpreter; "and" and ";" do not split commands).
_CLAUSE_SEPARATOR = re.compile(r"[,.]|\bthen\b", re.IGNORECASE)
_MAX_COMMAND_CHARS = 80


def textgym_home() -> Path:
    """``$TEXTGYM_HOME``, default ``~/.cache/textgym``: where generated games are cached."""
    return Path(os.environ.get("TEXTGYM_HOME") or Path.home() / ".cache" / "textgym")


# --------------------------------------------------------------------------------------------
# Generation and the on-disk cache
# --------------------------------------------------------------------------------------------


def _cache_dir(world_size: int, nb_objects: int, quest_length: int, theme: str) -> Path:
    import textworld

    params = {"world_size": world_size, "nb_objects": nb_objects, "quest_length": quest_length,
              "theme": theme, "textworld": textworld.__version__}
    tag = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    name = f"r{world_size}-o{nb_objects}-q{quest_length}-{theme}-{tag}"
    return textgym_home() / "textworld" / name


def generate_game(seed: int, world_size: int = 2, nb_objects: int = 3, quest_length: int = 2,
                  theme: str = "house", cache_dir: str | os.PathLike | None = None,
                  keep: int | None = CACHED_GAMES) -> Path:
    """The ``.z8`` file of the TextWorld game for these parameters and ``seed``, made once.

    Equivalent to ``tw-make custom --world-size W --nb-objects O --quest-length Q --seed S``.
    The game and its ``.json`` (with the walkthrough) are written to a temporary folder and
    moved into the cache, so concurrent processes never see half-written files.

    Args:
        seed: the generation seed.
        world_size: number of rooms.
        nb_objects: minimum number of objects in the world.
        quest_length: number of commands the quest needs.
        theme: TextWorld's text grammar theme.
        cache_dir: folder for the game files; default ``$TEXTGYM_HOME/textworld/<parameters>``.
        keep: games kept in that folder (the least recently used removed after a new one is
            made; a cached game counts as used when returned); ``None``: all.

    Raises:
        RuntimeError: TextWorld cannot make a quest of this length in such a world.
    """
    import textworld
    from textworld.generator import QuestGenerationError

    if world_size < 1 or nb_objects < 0 or quest_length < 1:
        raise ValueError(f"need world_size >= 1, nb_objects >= 0, quest_length >= 1; got "
                         f"{world_size}, {nb_objects}, {quest_length}")
    folder = Path(cache_dir) if cache_dir is not None else _cache_dir(world_size, nb_objects, quest_length, theme)
    target = folder / f"game_{int(seed)}.z8"
    if target.is_file() and target.with_suffix(".json").is_file():
        with contextlib.suppress(OSError):  # least recently used goes first: this one was just used
            os.utime(target)
        return target
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder))
    try:
        options = textworld.GameOptions()
        options.seeds = int(seed)
        options.nb_rooms = int(world_size)
        options.nb_objects = int(nb_objects)
        options.quest_length = int(quest_length)
        options.grammar.theme = theme
        options.path = str(tmp / target.name)
        options.file_ext = ".z8"
        try:
            game_file, _ = textworld.make(options)
        except QuestGenerationError as error:
            raise RuntimeError(
                f"TextWorld could not make a quest of length {quest_length} in a world of "
                f"{world_size} room(s) with {nb_objects} object(s) (seed {seed}): {error}. "
                "Use a shorter quest or a bigger world.") from error
        os.replace(tmp / target.with_suffix(".json").name, target.with_suffix(".json"))
        os.replace(game_file, target)  # the .z8 last: its presence means the pair is complete
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if keep is not None:
        _evict(folder, keep, spare=target)
    return target


def _evict(folder: Path, keep: int, spare: Path) -> None:
    """Remove the least recently used generated games (``game_<seed>.z8`` and its ``.json``) of
    ``folder`` beyond ``keep``, never ``spare`` (the game just made). Other files are left alone."""
    games = []
    for path in folder.glob("game_*.z8"):
        if re.fullmatch(r"game_-?\d+\.z8", path.name) and path != spare:
            with contextlib.suppress(OSError):  # another process may have removed it meanwhile
                games.append((path.stat().st_mtime, path))
    games.sort()
    for _, path in games[:max(0, len(games) + 1 - max(keep, 1))]:
        for file in (path, path.with_suffix(".json")):
            file.unlink(missing_ok=True)


def walkthrough(game_file: str | os.PathLike) -> list[str] | None:
    """The winning command sequence stored with a generated game (its ``.json``), if any."""
    meta = Path(game_file).with_suffix(".json")
    if not meta.is_file():
        return None
    data = json.loads(meta.read_text())
    commands = data.get("metadata", {}).get("walkthrough")
    return list(commands) if commands else None


# --------------------------------------------------------------------------------------------
# Observation cleaning
# --------------------------------------------------------------------------------------------

_STATUS_PROMPT = re.compile(r"\n>[^\n]*$")          # "\n>   -= Room =-0/2": prompt + status line
_BOILERPLATE = re.compile(
    r"Would you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command\?"
    r"|Please give one of the answers above\.")


def clean_feedback(text: str) -> str:
    """A game's reply without the banner art, the prompt/status line and end-of-game boilerplate.

    Example:
        >>> clean_feedback("\\n ________  ________\\n | $$$$$$ | $$$$$$$$\\n\\nYou close the box.\\n\\n\\n>  -= Studio =-0/2")
        'You close the box.'
    """
    text = _STATUS_PROMPT.sub("", text.replace("\r", ""))
    text = _BOILERPLATE.sub("", text)
    lines = []
    for line in text.split("\n"):
        stripped = line.strip()
        # ASCII art: a long run of symbols without a single letter
        if len(stripped) >= 8 and not any(ch.isalpha() for ch in stripped):
            continue
        lines.append(stripped)
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    text = re.sub(r"^>\s*", "", text)
    return text


_GREETING = re.compile(r"TextWorld|^Here is (your task for today|how to play)\s*[.!]$", re.IGNORECASE)


def clean_objective(text: str) -> str:
    """A generated game's objective without its greeting sentences (those naming TextWorld,
    "Here is how to play!"): the instructions are kept word for word, the prompt gets shorter.

    Example:
        >>> clean_objective("Welcome to TextWorld! Here is how to play! First, go south. That's it!")
        "First, go south. That's it!"
    """
    sentences = re.split(r"(?<=[.!?])\s+", text.strip())
    kept = [s for s in sentences if not _GREETING.search(s)]
    return " ".join(kept) if kept else text.strip()


_NOT_TYPED = re.compile(r"[^a-z0-9 ,'-]+")   # the interpreter reads "\x" as its own escape commands


def control_verb(command: str) -> str | None:
    """The first game-control verb (``save``, ``quit``, ``script``...) that the game's parser would
    run in any clause of ``command``, else ``None``.

    Example:
        >>> control_verb("wait then save"), control_verb("take key, q"), control_verb("open safe")
        ('save', 'q', None)
    """
    for clause in _CLAUSE_SEPARATOR.split(command):
        words = clause.lower().split()
        if words and words[0] in _META_VERBS:
            return words[0]
    return None


def _free_command(answer: str) -> str:
    """An unparsed answer as a typed command: first non-empty line, letters, digits and
    ``,'-`` only (no backslash escapes for the interpreter), at most 80 characters."""
    for line in answer[:4096].splitlines():
        line = re.sub(r"\s+", " ", _NOT_TYPED.sub(" ", line.lower())).strip(" ,'-")
        if line:
            return line[:_MAX_COMMAND_CHARS].strip()
    return ""


# --------------------------------------------------------------------------------------------
# The env
# --------------------------------------------------------------------------------------------


class TextWorldEnv(gym.Env):
    """A TextWorld game per episode, as a text env (see the module docstring).

    Args:
        world_size: rooms in a generated game.
        nb_objects: minimum objects in a generated game.
        quest_length: commands the generated quest needs.
        theme: TextWorld's grammar theme.
        games: size of the pool of generated games: game seeds ``first_game .. first_game + games - 1``.
            ``reset(seed=s)`` plays game ``first_game + s % games`` (seeds ``0 .. games - 1`` play
            each game once); ``reset()`` picks one with the env's RNG.
            ``None``: every reset plays a fresh game whose seed is drawn from the env's RNG.
        first_game: the first game seed of the pool (use disjoint pools for train and test games).
        game_files: play these existing games instead of generating: a folder (its ``*.z1``-``*.z8``
            files, sorted) or a list of files, picked as the ``games`` pool is.
        max_episode_steps: commands per episode before ``truncated``.
        invalid_policy: ``"penalty"``, ``"default"``, ``"retry"`` or ``"terminate"`` (module docstring).
        invalid_penalty: reward added for an answer that names no admissible command.
        max_retries: consecutive retries before ``"retry"`` falls back to ``retry_fallback``.
        retry_fallback: the policy after ``max_retries``: ``"penalty"``, ``"default"`` or ``"terminate"``.
        feedback: the retry feedback line (``{valid_actions}``, ``{answer}``, ``{retries_left}``).
        parser: the answer parser(s) (see :mod:`textgym.wrappers.parsers`); default JSON -> regex -> keyword.
        list_commands: end each observation with the admissible commands (generate mode needs them;
            score mode gets them as candidates anyway).
        task_in_system_prompt: put the game's objective into the system prompt (it changes per
            game, not per step), else only into the first observation.
        cache_dir: folder for generated games (default ``$TEXTGYM_HOME/textworld/<parameters>``).
        cache_games: generated games kept in that folder, the least recently played removed first
            (default :data:`CACHED_GAMES`; ``None``: all).
        max_length: observation and answer length limit.
        answer_format: the answer format the system prompt asks for: ``"word"`` (default: a bare
            command), ``"json"`` (``{"action": "open box"}``) or ``"think"`` (reasoning, then
            ``<answer>open box</answer>``); an answer that names no admissible command is typed into
            the game as the command it gives in that format.
        progress_reward: weight of TextWorld's progress signal (``info["progress"]``: +1 for a command
            that brings the game closer to a win, -1 for one that undoes progress, else 0) added to
            the reward. 0 (default): the reward is the score alone (1 point at the end of a quest).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, world_size: int = 2, nb_objects: int = 3, quest_length: int = 2,
                 theme: str = "house", games: int | None = None, first_game: int = 0,
                 game_files: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
                 max_episode_steps: int | None = 30, invalid_policy: str = "penalty",
                 invalid_penalty: float = -0.1, max_retries: int = 2,
                 retry_fallback: str = "penalty", feedback: str = FEEDBACK, parser: Any = None,
                 list_commands: bool = True, task_in_system_prompt: bool = True,
                 cache_dir: str | os.PathLike | None = None, cache_games: int | None = CACHED_GAMES,
                 max_length: int = 4096,
                 render_mode: str | None = None, progress_reward: float = 0.0,
                 answer_format: str = "word"):
        import textworld  # noqa: F401 - fail here, with the install hint, not at the first reset

        from textgym.wrappers.answer_format import answer_format as format_named
        from textgym.wrappers.parsers import as_parser

        self.rule = InvalidAnswerRule(policy=invalid_policy, penalty=invalid_penalty,
                                      max_retries=max_retries, retry_fallback=retry_fallback,
                                      feedback=feedback)
        self.answers = AnswerCounter(self.rule)  # this episode's invalid answers and retries
        if games is not None and games < 1:
            raise ValueError(f"games must be a positive int or None, got {games!r}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1 or None, got {max_episode_steps!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}: only 'ansi' is supported")
        self.generation = dict(world_size=int(world_size), nb_objects=int(nb_objects),
                               quest_length=int(quest_length), theme=theme)
        self.games, self.first_game = games, int(first_game)
        if cache_games is not None and cache_games < 1:
            raise ValueError(f"cache_games must be a positive int or None, got {cache_games!r}")
        self.cache_dir, self.cache_games = cache_dir, cache_games
        self.game_files = self._find_games(game_files) if game_files is not None else None
        self.max_episode_steps = max_episode_steps
        self.parser = as_parser(parser)
        self.list_commands, self.task_in_system_prompt = list_commands, task_in_system_prompt
        self.progress_reward = float(progress_reward)
        self.answer_format = format_named(answer_format).name
        self._prompt = SYSTEM_PROMPT if self.answer_format == "word" else \
            f"{_TASK} {format_named(answer_format).instructions(['go north'], _COMMAND)}"
        self.render_mode = render_mode
        self.observation_space = TextSpace(max_length)
        self.action_space = TextSpace(max_length)
        self._max_length = max_length
        self._open: OrderedDict[str, Any] = OrderedDict()   # game file -> started textworld env
        self._game = None
        self.game_file: str | None = None
        self.objective = ""
        self._state = None
        self._obs = self._shown = ""

    # -- games ------------------------------------------------------------------------------
    @staticmethod
    def _find_games(game_files) -> list[str]:
        if isinstance(game_files, (str, os.PathLike)):
            path = Path(game_files)
            if path.is_dir():
                files = sorted(str(p) for p in path.iterdir() if re.search(r"\.(z[1-8]|ulx)$", p.name))
            else:
                files = [str(path)]
        else:
            files = [str(p) for p in game_files]
        if not files:
            raise ValueError(f"no .z1-.z8 game files found in {game_files!r}")
        for f in files:
            if not Path(f).is_file():
                raise FileNotFoundError(f"game file not found: {f}")
            if f.endswith(".ulx"):
                raise ValueError(f"{f}: Glulx (.ulx) games are not supported by textworld >= 1.7; "
                                 "use .z8 games (tw-make ... --format z8)")
        return files

    def _pick_game(self, seed: int | None) -> str:
        # A seeded reset plays game ``seed % pool`` so that seeds 0..pool-1 play every game once
        # (an evaluation covers the pool exactly); an unseeded one draws from the env's RNG.
        pool = len(self.game_files) if self.game_files is not None else self.games
        if pool is not None:
            index = int(seed) % pool if seed is not None else int(self.np_random.integers(pool))
            if self.game_files is not None:
                return self.game_files[index]
            game_seed = self.first_game + index
        else:
            game_seed = int(self.np_random.integers(2**31 - 1))
        return str(generate_game(game_seed, cache_dir=self.cache_dir, keep=self.cache_games,
                                 **self.generation))

    def _start(self, game_file: str):
        """A started textworld env for ``game_file`` (kept open: a few games are reused)."""
        import textworld

        env = self._open.pop(game_file, None)
        if env is None:
            # progress tracking needs the game's TextWorld metadata (the .json next to it)
            made_by_textworld = Path(game_file).with_suffix(".json").is_file()
            infos = textworld.EnvInfos(admissible_commands=True, won=True, lost=True, score=True,
                                       max_score=True, objective=True, moves=True,
                                       intermediate_reward=made_by_textworld)
            with warnings.catch_warnings():
                # Jericho warns that it cannot track score in TextWorld games; TextWorld tracks it.
                warnings.filterwarnings("ignore", message=".*is not fully supported.*")
                env = textworld.start(game_file, infos)
            if len(self._open) >= 8:
                _, oldest = self._open.popitem(last=False)
                oldest.close()
        self._open[game_file] = env
        return env

    @property
    def walkthrough(self) -> list[str] | None:
        """The winning commands of the current game (generated games; ``None`` if unknown)."""
        return walkthrough(self.game_file) if self.game_file else None

    @property
    def system_prompt(self) -> str:
        if self.task_in_system_prompt and self.objective:
            return f"{self._prompt}\nTask: {self.objective}"
        return self._prompt

    # -- text -------------------------------------------------------------------------------
    def _valid(self) -> list[str]:
        commands = self._state.get("admissible_commands") or []
        return [c for c in commands if control_verb(c) is None]

    def _observation(self, text: str) -> str:
        if self.list_commands and not self._done() and self._valid():
            text = f"{text}\nCommands: {', '.join(self._valid())}."
        return text[: self._max_length]

    def _done(self) -> bool:
        return bool(self._state.get("won") or self._state.get("lost"))

    def _info(self) -> dict[str, Any]:
        return {"system_prompt": self.system_prompt,
                "valid_actions": [] if self._done() else self._valid(),
                "score": int(self._state.get("score") or 0),
                "max_score": int(self._state.get("max_score") or 0),
                "won": bool(self._state.get("won")), "lost": bool(self._state.get("lost")),
                "game_file": self.game_file}

    # -- Gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.game_file = self._pick_game(seed)
        self._game = self._start(self.game_file)
        self._state = self._game.reset()
        raw_objective = (self._state.get("objective") or "").strip()
        self.objective = clean_objective(raw_objective)
        self._steps = 0
        self.answers.reset()
        self._score = int(self._state.get("score") or 0)
        text = clean_feedback(self._state.get("feedback") or "")
        if raw_objective:  # the game opens with its objective: take it out, put the cleaned one back
            text = text.replace(raw_objective, "").strip()
            if not self.task_in_system_prompt:
                text = f"{self.objective}\n\n{text}"
        self._obs = self._shown = self._observation(text)
        return self._obs, self._info()

    def _parse(self, answer: str) -> tuple[str | None, str | None]:
        self._parse_error = None
        valid = self._valid()
        if not valid:
            return None, None
        try:
            found = self.parser(answer, valid)
        except Exception as error:  # noqa: BLE001 - a user parser's bug counts as an unreadable answer
            self._parse_error, found = repr(error), None
        if found is None or found.action_index is None or not 0 <= found.action_index < len(valid):
            return None, None
        return valid[found.action_index], found.parser

    def step(self, action: Any):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        if self._done():
            raise RuntimeError("the game is over: call reset() before step()")
        answer = as_answer_text(action)
        command, parser = self._parse(answer)
        typed = _free_command(answer_text(answer) or answer)  # a JSON value or answer tag: its command
        if command is None and not self._valid() and typed and control_verb(typed) is None:
            # a game without TextWorld metadata lists no admissible commands: typed text is the action
            command, parser = typed, "text"
        penalty = 0.0
        if command is not None:
            record = self.answers.accept(answer, command, command, parser, error=self._parse_error)
        else:
            verdict, record = self.answers.refuse(answer, parser, error=self._parse_error)
            if verdict.asks_again:
                feedback = self.rule.feedback_line(self._valid(), verdict.retries, answer)
                obs = self._shown = f"{self._obs}\n{feedback}"[: self._max_length]
                info = self._info()
                info["parse"] = record.to_dict()
                info["feedback"] = feedback
                return obs, 0.0, False, self._truncate(count=True), info
            if verdict.ends_episode:
                info = self._info()
                info["valid_actions"] = []
                info["parse"] = record.to_dict()
                self._shown = "You gave up: that is not a command here."
                return self._shown, verdict.reward, True, False, info
            # "penalty" / "default": the answer is typed into the game as it is
            command, penalty = typed, verdict.reward

        blocked = control_verb(command) if command else None
        if blocked is not None:
            command = None
            text = f"'{blocked}' controls the game, not the story: nothing happens."
        elif command:
            self._state, _, _ = self._game.step(command)
            text = clean_feedback(self._state.get("feedback") or "")
        else:
            command = None
            text = "You say nothing."
        record = dataclasses.replace(record, action=command)  # the command sent to the game
        score = int(self._state.get("score") or 0)
        # TextWorld's progress signal: +1 a step closer to winning, -1 a step away, else 0
        progress = int(self._state.get("intermediate_reward") or 0) if record.action else 0
        reward = float(score - self._score) + penalty + self.progress_reward * progress
        self._score = score
        terminated = self._done()
        self._obs = self._shown = self._observation(text)
        info = self._info()
        info["parse"] = record.to_dict()
        info["progress"] = progress
        return self._obs, reward, terminated, self._truncate(count=True) and not terminated, info

    def _truncate(self, count: bool) -> bool:
        if count:
            self._steps += 1
        return self.max_episode_steps is not None and self._steps >= self.max_episode_steps

    def render(self) -> str | None:
        """``render_mode="ansi"``: the last observation returned (what the model read)."""
        return self._shown if self.render_mode == "ansi" else None

    def close(self) -> None:
        for env in self._open.values():
            env.close()
        self._open.clear()


def make_textworld(**kwargs: Any) -> gym.Env:
    """Entry point of ``textgym/TextWorld-v0``: :class:`TextWorldEnv` then ``EpisodeStats``."""
    from textgym.wrappers.episode_stats import EpisodeStats

    return EpisodeStats(TextWorldEnv(**kwargs))


def walkthrough_player(env: gym.Env, seed: int | None = None) -> ReferencePlayer:
    """Plays each game's walkthrough (the winning commands TextWorld stored with it): the
    ``"scripted"`` reference policy of ``textgym/TextWorld-v0``. Once the walkthrough is done (or
    for a game without one) it answers ``look``."""
    commands: list[str] = []

    def player(info: dict[str, Any]) -> str:
        if "parse" not in info:              # a reset info: a new game
            commands[:] = reversed(env.unwrapped.walkthrough or [])
        return commands.pop() if commands else "look"

    return player


def register_envs() -> None:
    """Register ``textgym/TextWorld-v0`` (needs ``textgym[textworld]`` to make)."""
    from textgym.registry import register

    register("textgym/TextWorld-v0", "textgym.envs.textworld:make_textworld",
             description="TextWorld adventures generated offline per seed (world size, objects, quest length)",
             source="textgym", kwargs={"max_episode_steps": 30}, training_defaults=TRAINING_DEFAULTS,
             reference_policies={"scripted": "textgym.envs.textworld:walkthrough_player"})


#: Generate mode answers in JSON; commands are several words ("take the key from the box"), so
#: the answer may run to 16 tokens.
TRAINING_DEFAULTS = TrainingDefaults(
    modes={"generate": generate_mode_defaults("json", temperature=0.7, max_new_tokens=16)})
