"""TextArena's games as text envs: ``textarena/<TextArena id>``.

A single-player game (``GuessTheNumber-v0``, ``Wordle-v0``...) is a Gymnasium text env: the
observation is the game's own prompt and messages (TextArena's observation wrapper, as the id
says), the answer goes to the game as it is, and the reward is the game's own at the end
(``info["outcome"]`` says win, draw or loss: evaluations report the rates). A
two-player game (``TicTacToe-v0``, ``Nim-v0``...) is played from one seat against a fixed
opponent, like :class:`textgym.envs.games.TwoPlayerGameEnv`: ``"random"`` (one of the moves the
game lists in the opponent's observation, e.g. ``'[4]'``), a function ``f(text, valid_actions)
-> answer``, a policy with ``.act`` (a frozen copy of the learner), or ``"self"`` (self-play:
``textgym train`` plays the learner's own policy in that seat). Games for more
than two players are refused. ``"scripted"`` is a hand-written player where textgym has one
for the game (:data:`SCRIPTED`: TicTacToe plays win, block, centre, corner, as the
PettingZoo tic-tac-toe's scripted opponent of :mod:`textgym.envs.games`); TextArena itself ships
only LLM-backed agents.

``info["valid_actions"]`` holds the moves the game lists in the observation (``[4]``...) where
it lists them (:func:`listed_moves`), or the game's finite set of moves where textgym knows it
(:data:`MOVES`: ``GuessTheNumber``'s numbers), so score mode works there; otherwise it is empty
(free text, generate mode). An
answer is counted invalid when the game answers it with its "invalid move" message.

**The return.** Every step but the last is rewarded 0; the last is the game's own final reward
for the learner's seat, unchanged, so the episode's return is that reward. Two-player games give
+1 for a win, -1 for a loss (an invalid move past the game's allowance forfeits) and 0 for a
draw. Single-player games give 1 for a win and often partial credit otherwise: GuessTheNumber
gives a game lost at the turn limit, or by an invalid move, the closeness of the last guess to
the target (``1 - |guess - target| / range``: a lost game can return 0.47 or 0.95), Wordle-like
games the share of the word found. ``info["outcome"]`` says ``win``, ``draw`` or ``loss`` (a
single-player win is the full reward of 1), and evaluations count it (win rates);
``info["end_reason"]`` is the game's reason, and the last observation ends with ``[GAME] The
game is over: you lost (reward 0.474). <the reason>``.

A game that needs data downloaded at run time (NLTK's ``words`` and its part-of-speech tagger
for ``Wordle-v0``, ``Hangman-v0``, ``SpellingBee-v0``... : :func:`nltk_downloads`) cannot be
played offline without that data: ``textgym envs --family textarena`` marks it ``unavailable
offline`` with the reason, and making it raises :class:`textgym.registry.EnvUnavailableError`
at once, naming the resources (no package on the registry ships NLTK's tagger model). ``textarena`` is imported when an env is made
(``pip install 'textgym[textarena]'``).

Example:
    >>> import textgym
    >>> env = textgym.make("textarena/GuessTheNumber-v0")
    >>> obs, info = env.reset(seed=0)
    >>> info["valid_actions"][:3]
    ['[1]', '[2]', '[3]']
    >>> obs, reward, terminated, truncated, info = env.step("[10]")
    >>> obs.splitlines()[-1], reward, terminated
    ('[GAME] The target number is higher.', 0.0, False)
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from textgym.registry import TrainingDefaults
from textgym.spaces import TextSpace
from textgym.wrappers.invalid_answer import ParseRecord, as_answer_text

__all__ = ["MOVES", "SCRIPTED", "TextArenaEnv", "list_ids", "listed_moves", "make", "nltk_downloads",
           "training_defaults", "unavailable"]

SYSTEM_PROMPT = "You are playing a text game. Follow the game's instructions and answer with your move."

_MOVE = re.compile(r"\[[^\[\]\n]{1,40}\]")
_QUOTED_MOVE = re.compile(r"'(\[[^\[\]\n]{1,40}\])'")
# "Available Moves: [0], [1]", "Valid moves: '[2, 3]', '[3, 2]'", "Your possible actions: '[check]'"
_MOVES_LINE = re.compile(r"\b(?:available|valid|legal|possible)\s+(?:moves|actions)[^:\n]{0,30}:(?P<moves>[^\n]*)",
                         re.IGNORECASE)


def listed_moves(text: str) -> list[str]:
    """The moves the game lists in its text.

    The newest line that announces moves (``Available Moves:``, ``Valid moves:``, ``Your
    possible actions:``...) gives every bracketed move on it, quoted or not (a game that lists
    its moves once, in its rules, keeps them). Without such a line, the quoted moves of the newest
    message, when there are at least two (a single quoted ``'[X]'`` or ``'[2 1 4 5]'`` is a format
    example, not a list of moves).

    Example:
        >>> listed_moves("Board...\\nAvailable Moves: '[0]', '[4]'")
        ['[0]', '[4]']
        >>> listed_moves("Available Actions: [up], [down], [left], [right]")
        ['[up]', '[down]', '[left]', '[right]']
        >>> listed_moves("Answer in the format '[2 1 4 5]'.")
        []
    """
    for found in reversed(list(_MOVES_LINE.finditer(text))):
        moves = _MOVE.findall(found.group("moves"))
        if moves:
            return list(dict.fromkeys(moves))
    last = text.rfind("[GAME]")
    quoted = list(dict.fromkeys(_QUOTED_MOVE.findall(text[last:] if last >= 0 else text[-4000:])))
    return quoted if len(quoted) >= 2 else []


def _base_game(game: Any) -> Any:
    """The TextArena env inside its wrappers (they keep it in ``.env``)."""
    while hasattr(game, "env"):
        game = game.env
    return game


def scripted_tictactoe(game: Any, rng: np.random.Generator) -> str:
    """TextArena TicTacToe's move for the player to move: win, block, centre, corner, side
    (:func:`textgym.envs.games.scripted_tictactoe` on the game's board)."""
    from textgym.envs.games import scripted_tictactoe as on_planes

    state = _base_game(game).state
    mine = "X" if state.current_player_id == 1 else "O"     # as TextArena's TicTacToe marks them
    cells = [cell for row in state.game_state["board"] for cell in row]
    planes = np.stack([np.array([c == mine for c in cells]), np.array([c not in ("", mine) for c in cells])],
                      axis=-1).reshape(3, 3, 2)
    return f"[{on_planes({'observation': planes, 'action_mask': np.array([c == '' for c in cells])}, rng)}]"


#: Hand-written players by TextArena game name (the id without its version): ``opponent="scripted"``.
SCRIPTED: dict[str, Any] = {"TicTacToe": scripted_tictactoe}


def _game_name(game: str) -> str:
    return game.split("-v", 1)[0]


def _guess_the_number_moves(game: Any) -> list[str]:
    """The numbers of the game's range not guessed yet (a repeated guess is an invalid move)."""
    base = _base_game(game)
    return [f"[{n}]" for n in range(base.min_number, base.max_number + 1) if n not in base.guessed_numbers]


def _three_card_monte_moves(game: Any) -> list[str]:
    return [f"[{cup}]" for cup in range(_base_game(game).num_cups)]


#: The moves of games that have a finite set of them but do not list it in their text, by game
#: name, read off the game's state: ``info["valid_actions"]``, so score mode works on them too.
MOVES: dict[str, Any] = {"GuessTheNumber": _guess_the_number_moves, "ThreeCardMonte": _three_card_monte_moves}


class TextArenaEnv(gym.Env):
    """A TextArena game, one seat of it played by the learner (see the module docstring).

    Args:
        game: the TextArena id, e.g. ``"TicTacToe-v0"``.
        opponent: for two-player games: ``"random"``, ``"scripted"`` (games in :data:`SCRIPTED`),
            ``"self"`` (self-play: a trainer plays the learner's policy here,
            :data:`textgym.registry.SELF_PLAY`),
            ``f(text, valid_actions) -> answer`` or
            an object with ``act(observations, system_prompts, valid_actions)`` (a :class:`textgym.Policy`).
        seat: ``"first"``, ``"second"`` or ``"random"`` (drawn at each reset).
        max_length: observation and answer length limit (longer observations keep their end).
        **game_kwargs: the TextArena env's own keyword arguments.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(self, game: str, opponent: Any = "random", seat: str = "random", max_length: int = 16384,
                 render_mode: str | None = None, **game_kwargs: Any):
        import textarena as ta

        if seat not in ("first", "second", "random"):
            raise ValueError(f"seat={seat!r}: choose 'first', 'second' or 'random'")
        from textgym.envs.games import check_opponent

        check_opponent(opponent, ("scripted",), where=f"textarena/{game}")
        if opponent == "scripted" and _game_name(game) not in SCRIPTED:
            raise ValueError(f"textarena/{game} has no scripted player; games with one: "
                             f"{', '.join(sorted(SCRIPTED))} (use opponent='random' or a policy)")
        self.game, self.opponent, self.seat = game, opponent, seat
        # a fresh game per episode: TextArena's observation wrappers keep their history across resets
        self._new_game = lambda: ta.make(game, **game_kwargs)
        self.env = self._guard(self._new_game, silence_files=True)
        self.num_players = self._players()
        self.render_mode = render_mode
        self.max_length = int(max_length)
        self.observation_space = TextSpace(self.max_length)
        self.action_space = TextSpace(self.max_length)
        self.system_prompt = SYSTEM_PROMPT
        self._learner, self._obs, self._done = 0, "", True
        self._opponent_rng = np.random.default_rng(0)
        self._invalid = 0

    def _players(self) -> int:
        """1 or 2: the numbers of players the game accepts (found by trying, as TextArena asserts)."""
        for players in (1, 2):
            try:
                self._reset_game(players, 0)
                return players
            except (AssertionError, ValueError, TypeError):
                continue
        raise ValueError(f"textarena/{self.game} is a game for more than two players; textgym "
                         "plays games for one or two")

    def _reset_game(self, players: int, seed: int) -> None:
        self._guard(lambda: self.env.reset(num_players=players, seed=seed))

    def _guard(self, call: Any, silence_files: bool = False) -> Any:
        """``call()``, its data downloads' chatter silenced and a missing resource one clear error.

        ``silence_files``: also silence file descriptors 1 and 2 (nltk's downloader, run when a
        game's module is imported, prints to the ``sys.stderr`` it saw at its own import)."""
        quiet = io.StringIO()
        saved: list[int] = []
        try:
            if silence_files:
                sys.stdout.flush()
                sys.stderr.flush()
                null = os.open(os.devnull, os.O_WRONLY)
                saved = [os.dup(1), os.dup(2)]
                os.dup2(null, 1)
                os.dup2(null, 2)
                os.close(null)
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                return call()
        except LookupError as error:    # nltk's "Resource 'words' not found" and the like
            found = re.search(r"Resource '?([\w/.-]+)'? not found", str(error))
            resource = found.group(1) if found else str(error).strip().splitlines()[0]
            raise RuntimeError(
                f"textarena/{self.game} needs the NLTK resource {resource!r}, which TextArena "
                f"downloads at run time (no network here?): run `python -m nltk.downloader "
                f"{resource}` once") from None
        finally:
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)

    def _text(self, obs: Any) -> str:
        text = obs if isinstance(obs, str) else "\n".join(str(m[1]) for m in obs or [])
        return text[-self.max_length:]

    def _moves(self, text: str) -> list[str]:
        """The moves of the player to move: the game's own set (:data:`MOVES`) or those its text lists."""
        moves = MOVES.get(_game_name(self.game))
        return moves(self.env) if moves is not None else listed_moves(text)

    def _opponent_answer(self, text: str) -> str:
        moves = self._moves(text)
        if self.opponent == "random":
            return str(self._opponent_rng.choice(moves)) if moves else ""
        if self.opponent == "scripted":
            return SCRIPTED[_game_name(self.game)](self.env, self._opponent_rng)
        from textgym.envs.games import learner_missing
        from textgym.registry import SELF_PLAY

        if self.opponent == SELF_PLAY:
            raise learner_missing(f"textarena/{self.game}")
        if hasattr(self.opponent, "act"):
            decision = self.opponent.act([text], [self.system_prompt], [moves])[0]
            return str(getattr(decision, "text", decision))
        return str(self.opponent(text, moves))

    def _advance(self) -> None:
        """Let the opponent play until the learner's turn or the end; keep the learner's text."""
        while not self._done:
            player, obs = self.env.get_observation()
            if player == self._learner:
                self._obs = self._text(obs)
                return
            self._done, _ = self.env.step(self._opponent_answer(self._text(obs)))

    def _info(self) -> dict[str, Any]:
        return {"valid_actions": [] if self._done else self._moves(self._obs),
                "seat": "first" if self._learner == 0 else "second"}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        game_seed = int(self.np_random.integers(2**31 - 1))
        self._opponent_rng = np.random.default_rng(int(self.np_random.integers(2**31 - 1)))
        seat = self.seat if self.seat != "random" else ("first", "second")[int(self.np_random.integers(2))]
        self._learner = 0 if self.num_players == 1 or seat == "first" else 1
        self.env = self._new_game()
        self._reset_game(self.num_players, game_seed)
        self._done, self._invalid = False, 0
        self._advance()
        info = self._info()
        info["system_prompt"] = self.system_prompt
        return self._obs, info

    def step(self, action: Any):
        if self._done:
            raise RuntimeError("the game is over: call reset() before step()")
        raw = as_answer_text(action)
        before = self._obs
        self._done, _ = self.env.step(raw)
        self._advance()
        reward, ended_invalid, outcome, reason = 0.0, False, None, None
        if self._done:
            rewards, game_info = self.env.close()
            reward = float((rewards or {}).get(self._learner, 0.0))
            outcome = _outcome(reward, [float(r) for p, r in (rewards or {}).items() if p != self._learner])
            mine = (game_info or {}).get(self._learner) or {}
            # a game ended by the learner's invalid move shows no new message: its info says so
            ended_invalid = bool(mine.get("invalid_move"))
            reason = str(mine.get("reason") or "").strip() or None
        new = self._obs.removeprefix(before)
        valid = "invalid move" not in new.lower() and not ended_invalid
        self._invalid += not valid
        info = self._info()
        info["parse"] = ParseRecord(raw=raw, action=raw, action_name=raw.strip() if valid else None,
                                    parser="text", valid=valid, invalid_count=self._invalid,
                                    policy=None if valid else "game").to_dict()
        if outcome is not None:  # the game is over: the last observation says so, and why
            info["outcome"], info["end_reason"] = outcome, reason
            self._obs = self._text(self._obs + "\n" + game_over_line(outcome, reward, reason))
        return self._obs, reward, self._done, False, info

    def render(self) -> str | None:
        return self._obs if self.render_mode == "ansi" else None


def game_over_line(outcome: str, reward: float, reason: str | None) -> str:
    """The line a finished game's last observation ends with: the outcome, the game's reward
    (the episode's return) and the game's own reason.

    Example:
        >>> game_over_line("loss", 0.47, "The turn limit has been reached. Guess: 10, Target: 19")
        '[GAME] The game is over: you lost (reward 0.47). The turn limit has been reached. Guess: 10, Target: 19'
    """
    said = {"win": "you won", "loss": "you lost", "draw": "a draw"}[outcome]
    return f"[GAME] The game is over: {said} (reward {reward:.3g})." + (f" {reason}" if reason else "")


def _outcome(reward: float, others: list[float]) -> str:
    """``"win"``, ``"draw"`` or ``"loss"``: against the other player's reward in a two-player
    game; in a single-player game, a win is TextArena's full reward of 1 (a partial reward, such as
    GuessTheNumber's closeness at the turn limit, is a loss)."""
    if not others:
        return "win" if reward >= 1.0 else "loss"
    best_other = max(others)
    return "win" if reward > best_other else "loss" if reward < best_other else "draw"


#: Where ``nltk.data.find`` looks for a resource a game downloads by name (``"words"`` is
#: ``corpora/words``, ``"averaged_perceptron_tagger_eng"`` is ``taggers/...``).
_NLTK_FOLDERS = ("corpora", "taggers", "tokenizers", "chunkers", "models", "grammars", "misc", "sentiment",
                 "stemmers", "help")
_NLTK_DOWNLOAD = re.compile(r"nltk\.download\(\s*(\[[^\]]*\]|[^,)]*)")


def nltk_downloads(name: str) -> list[str]:
    """The NLTK data TextArena game ``name`` downloads at run time (``["words"]`` for Hangman,
    ``["averaged_perceptron_tagger_eng", "words"]`` for Wordle), read from the source of the
    game's folder: importing it would start the downloads. ``[]``: it needs none."""
    import textarena

    spec = textarena.envs.registration.ENV_REGISTRY.get(name)
    entry = getattr(spec, "entry_point", None)
    if not isinstance(entry, str):
        return []
    root = Path(textarena.__file__).parent
    folder = root.joinpath(*entry.split(":")[0].split(".")[1:]).parent
    needed: set[str] = set()
    for file in sorted(folder.rglob("*.py")) if folder != root and folder.is_dir() else []:
        source = file.read_text(encoding="utf-8", errors="replace")
        for call in _NLTK_DOWNLOAD.finditer(source):
            needed.update(re.findall(r"['\"]([\w.-]+)['\"]", call.group(1)))
        if "EnglishDictionary" in source or "corpus import words" in source:  # TextArena's word lists
            needed.add("words")
    return sorted(needed)


def _nltk_has(resource: str) -> bool:
    import nltk

    for folder in _NLTK_FOLDERS:
        try:
            nltk.data.find(f"{folder}/{resource}")
            return True
        except LookupError:
            continue
    return False


def unavailable(name: str) -> str | None:
    """Why TextArena game ``name`` cannot be played on this machine, or ``None``: the NLTK data
    it downloads at run time and that is not here (TextArena's download needs the network).
    ``textgym envs --family textarena`` shows it beside the id, and making it raises
    :class:`textgym.registry.EnvUnavailableError` with it at once."""
    missing = [resource for resource in nltk_downloads(name) if not _nltk_has(resource)]
    if not missing:
        return None
    return (f"unavailable offline: needs the NLTK data {', '.join(missing)}, which TextArena downloads "
            f"at run time (on a machine with the network: python -m nltk.downloader {' '.join(missing)})")


def list_ids() -> list[str]:
    """Every TextArena id (imports ``textarena``)."""
    import textarena

    return sorted(textarena.envs.registration.ENV_REGISTRY)


def make(name: str, max_episode_steps: int | None = None, **kwargs: Any) -> gym.Env:
    """The text env of TextArena id ``name`` (a step limit inside, then ``EpisodeStats``)."""
    from textgym.wrappers.episode_stats import EpisodeStats
    from textgym.wrappers.inner_time_limit import InnerTimeLimit

    env: gym.Env = TextArenaEnv(name, **kwargs)
    if max_episode_steps is not None and max_episode_steps > 0:
        env = InnerTimeLimit(env, max_episode_steps)
    return EpisodeStats(env)


def training_defaults(name: str) -> TrainingDefaults:
    """Rewards come at the end of a game (gamma 1); answers are short moves like ``[4]``."""
    return TrainingDefaults(updates=8, num_envs=8, trainer={"episodes_per_update": 16, "gamma": 1.0},
                            modes={"generate": {"policy": {"max_new_tokens": 16}}})


