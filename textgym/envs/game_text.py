"""How PettingZoo games read as text: :class:`TextGame` renderers and the built-in ones.

A renderer gives, for one PettingZoo game, the name of every action index, each seat's system
prompt and the short per-turn text (board, whose turn, legal moves). :func:`textgym.wrap_pettingzoo`
looks the built-in ones up in :data:`TEXT_GAMES` by the env's ``metadata["name"]``
(``tictactoe_v3``, ``connect_four_v3``, ``rps_v2``) and uses :func:`generic_text_game` for any
other env. Nothing here imports PettingZoo.

Example:
    >>> sorted(TEXT_GAMES)
    ['connect_four_v3', 'rps_v2', 'tictactoe_v3']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CONNECT_FOUR_ACTION_NAMES", "TEXT_GAMES", "TICTACTOE_ACTION_NAMES", "TextGame",
           "game_for", "generic_text_game"]


@dataclass(frozen=True)
class TextGame:
    """How one PettingZoo game reads as text.

    Args:
        name: the PettingZoo env name (``env.metadata["name"]``) this renderer is for.
        action_names: ``action_names(env) -> list[str]``: the name of every action index.
        system_prompt: ``system_prompt(env, agent) -> str``: the task for one seat, and the answer
            format unless ``answer`` is given; constant for the whole game so a policy caches it
            once (best the same for every seat).
        render: ``render(env, agent, observation) -> str``: the short per-turn text (board, whose
            turn, legal moves) from the agent's raw PettingZoo observation.
        answer: what an answer names (``"the number of one empty square"``): then :meth:`prompt`
            ends the system prompt with the sentence of ``answer_format`` that asks for it.
            ``None``: ``system_prompt`` states the answer format itself (``"word"`` only).
        answer_format: the answer format (:mod:`textgym.wrappers.answer_format`): ``"word"``,
            ``"json"`` or ``"think"``.
    """

    name: str
    action_names: Callable[[Any], list[str]]
    system_prompt: Callable[[Any, str], str]
    render: Callable[[Any, str, Any], str]
    answer: str | None = None
    answer_format: str = "word"

    def __post_init__(self) -> None:
        from textgym.wrappers.answer_format import answer_format

        answer_format(self.answer_format)  # an unknown name fails here
        if self.answer is None and self.answer_format != "word":
            raise ValueError(f"the {self.name} renderer states its own answer format in its system "
                             f"prompt; give it an `answer` description to use {self.answer_format!r}")

    def prompt(self, env: Any, agent: str) -> str:
        """The seat's system prompt: the task, then the answer format's sentence."""
        from textgym.wrappers.answer_format import answer_format

        task = self.system_prompt(env, agent)
        if self.answer is None:
            return task
        return f"{task} {answer_format(self.answer_format).instructions(self.action_names(env), self.answer)}"


def _mark(env: Any, agent: str) -> str:
    """'X' for the first seat, 'O' for the second."""
    return "XO"[env.possible_agents.index(agent)]


def _legal_names(names: list[str], mask: np.ndarray | None) -> list[str]:
    if mask is None:
        return list(names)
    return [n for n, ok in zip(names, mask) if ok]


def _turn_line(env: Any, agent: str, legal: list[str], what: str) -> str:
    """'You are X. Your move. Empty squares: 1, 5.' / '... Game over.' / '... O to move.'"""
    me = _mark(env, agent)
    if any(getattr(env, "terminations", {}).values()) or any(getattr(env, "truncations", {}).values()):
        return f"You are {me}. Game over."
    if not legal:
        return f"You are {me}. {'O' if me == 'X' else 'X'} to move."
    return f"You are {me}. Your move. {what}: {', '.join(legal)}."


# Tic-tac-toe. PettingZoo numbers cells column by column (0 | 3 | 6 on the top row); people read
# row by row, so the action names are 1..9 in reading order and the board shows empty cells by
# their name.
#: Tic-tac-toe's action names in reading order (the legal moves are listed in this order).
TICTACTOE_ACTION_NAMES = [str(n) for n in range(1, 10)]
# pettingzoo action index -> name: index = col * 3 + row, name = row * 3 + col + 1
_TTT_INDEX_TO_NAME = [str((i % 3) * 3 + i // 3 + 1) for i in range(9)]


def _ttt_action_names(env: Any) -> list[str]:
    return list(_TTT_INDEX_TO_NAME)


def _ttt_system_prompt(env: Any, agent: str) -> str:
    # The same text for both seats (the observation says which mark is yours): a policy then
    # caches one shared prefix for every game, whichever seat it plays.
    return ("You play tic-tac-toe as X or O. Get three of your marks in a row, column or diagonal. "
            "Squares are numbered 1-9, left to right, top to bottom.")


def _ttt_grid(env: Any, agent: str, observation: Any) -> list[list[str]]:
    """3x3 grid of 'X', 'O' or the square's number, rows top to bottom."""
    planes = np.asarray(observation["observation"])
    me, other = _mark(env, agent), "XO"[1 - "XO".index(_mark(env, agent))]
    grid = []
    for row in range(3):
        line = []
        for col in range(3):
            # observation[i, j] holds cell i * 3 + j in PettingZoo's column-major numbering
            if planes[col, row, 0]:
                line.append(me)
            elif planes[col, row, 1]:
                line.append(other)
            else:
                line.append(str(row * 3 + col + 1))
        grid.append(line)
    return grid


def _ttt_render(env: Any, agent: str, observation: Any) -> str:
    grid = _ttt_grid(env, agent, observation)
    board = "\n---+---+---\n".join(" " + " | ".join(line) for line in grid)
    legal = _legal_names(_TTT_INDEX_TO_NAME, observation.get("action_mask"))
    legal.sort(key=int)
    return f"{board}\n{_turn_line(env, agent, legal, 'Empty squares')}"


# Connect four: columns 1..7; row 0 of the observation is the top row.
#: Connect four's action names: the columns, left to right.
CONNECT_FOUR_ACTION_NAMES = [str(c) for c in range(1, 8)]


def _c4_action_names(env: Any) -> list[str]:
    return list(CONNECT_FOUR_ACTION_NAMES)


def _c4_system_prompt(env: Any, agent: str) -> str:
    # The same text for both seats, as for tic-tac-toe.
    return ("You play connect four as X or O. Drop pieces into columns 1-7; a piece falls to the "
            "lowest free row. Get four of your pieces in a row, column or diagonal.")


def _c4_render(env: Any, agent: str, observation: Any) -> str:
    planes = np.asarray(observation["observation"])
    me = _mark(env, agent)
    other = "O" if me == "X" else "X"
    rows = [" ".join(me if planes[r, c, 0] else other if planes[r, c, 1] else "."
                     for c in range(planes.shape[1])) for r in range(planes.shape[0])]
    legal = _legal_names(_c4_action_names(env), observation.get("action_mask"))
    header = " ".join(str(c) for c in range(1, planes.shape[1] + 1))
    return f"{header}\n" + "\n".join(rows) + f"\n{_turn_line(env, agent, legal, 'Open columns')}"


# Rock paper scissors: the observation is the opponent's previous move (n_actions = none yet).
_RPS_MOVES = ["ROCK", "PAPER", "SCISSORS", "LIZARD", "SPOCK"]


def _rps_action_names(env: Any) -> list[str]:
    n = int(env.action_space(env.possible_agents[0]).n)
    return [_RPS_MOVES[i] if i < len(_RPS_MOVES) else f"ACTION_{i + 1}" for i in range(n)]


def _rps_system_prompt(env: Any, agent: str) -> str:
    names = _rps_action_names(env)
    rule = ("Rock beats scissors, scissors beats paper, paper beats rock."
            if len(names) == 3 else "Each move beats half of the others, as in the usual rules.")
    return (f"You play {', '.join(n.lower() for n in names)} against one opponent, many rounds. "
            f"{rule} Win a round: +1, lose: -1. Answer with one of: {', '.join(names)}.")


def _rps_render(env: Any, agent: str, observation: Any) -> str:
    names = _rps_action_names(env)
    last = int(np.asarray(observation))
    base = env.unwrapped
    round_no = int(getattr(base, "num_moves", 0)) + 1
    seen = f" Your opponent last played {names[last]}." if last < len(names) else ""
    return f"Round {round_no}.{seen} Your move: {', '.join(names)}."


TEXT_GAMES: dict[str, TextGame] = {
    "tictactoe_v3": TextGame("tictactoe_v3", _ttt_action_names, _ttt_system_prompt, _ttt_render,
                             answer="the number of one empty square"),
    "connect_four_v3": TextGame("connect_four_v3", _c4_action_names, _c4_system_prompt, _c4_render,
                                answer="the number of one column that is not full"),
    "rps_v2": TextGame("rps_v2", _rps_action_names, _rps_system_prompt, _rps_render),
}


def generic_text_game(name: str = "game") -> TextGame:
    """A plain renderer for any PettingZoo env without a dedicated one.

    Action names are ``"0".."n-1"``; the observation is printed as numbers (a dict observation's
    ``"observation"`` entry, flattened when small).
    """

    def action_names(env: Any) -> list[str]:
        space = env.action_space(env.possible_agents[0])
        if not hasattr(space, "n"):
            raise TypeError(f"wrap_pettingzoo needs Discrete action spaces, {name} has {space}")
        return [str(i) for i in range(int(space.n))]

    def system_prompt(env: Any, agent: str) -> str:
        return (f"You are {agent} in the multi-agent game {name}. Each turn you see your "
                "observation and the legal actions. Answer with one legal action.")

    def render(env: Any, agent: str, observation: Any) -> str:
        value = observation.get("observation") if isinstance(observation, dict) else observation
        array = np.asarray(value)
        text = np.array2string(array.reshape(-1) if array.size <= 64 else array,
                               separator=",", max_line_width=120, threshold=256)
        return f"Observation: {text}"

    return TextGame(name, action_names, system_prompt, render)


def game_for(env: Any, game: TextGame | None = None, answer_format: str | None = None) -> TextGame:
    """``game`` if given, else the built-in renderer for ``env.metadata["name"]``, else the generic
    one; with ``answer_format``, asking for answers in that format."""
    if game is None:
        name = str(getattr(env, "metadata", {}).get("name", ""))
        game = TEXT_GAMES.get(name) or generic_text_game(name or type(env).__name__)
    if answer_format is not None and answer_format != game.answer_format:
        game = dataclasses.replace(game, answer_format=answer_format)
    return game
