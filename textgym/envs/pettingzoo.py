"""PettingZoo multi-agent envs as text envs: :func:`wrap_pettingzoo`.

Every seat of an AEC or parallel PettingZoo env reads its observation as text and answers in
text. Each answer is parsed against *that agent's* legal moves (from the action mask), an
illegal or unreadable answer is handled by an invalid-answer policy (never a crash), and
rewards stay per agent.

The wrapped env is a genuine PettingZoo env (``pettingzoo.AECEnv`` or ``ParallelEnv``) and passes
PettingZoo's own ``api_test`` / ``parallel_api_test``. Per agent:

* observation: ``{"text": str, "action_mask": np.ndarray[int8]}``. The text is the newest
  user-message text (board, whose turn, legal moves). It sits in a dict rather than being a
  bare ``str`` because PettingZoo's API test reads ``.dtype`` from every non-dict observation and
  from a dict's ``"observation"`` key; the mask is all ones for envs that have none.
* action: ``str``, the raw answer (``None`` for an agent that is done, as PettingZoo requires).
* ``infos[agent]``: ``system_prompt``, ``valid_actions`` (legal action names now) and, once the
  agent has answered, ``parse``: the parse record of the text-env contract (docs/design.md §1).

Invalid answers follow the :class:`~textgym.wrappers.InvalidAnswerRule` made of
``invalid_policy``, ``invalid_penalty``, ``max_retries``, ``retry_fallback`` and ``feedback``, the
same keyword arguments as :class:`textgym.wrappers.ParseAction` takes:

* ``"penalty"`` (default): a random legal move is played for the agent and ``invalid_penalty`` is
  added to its reward.
* ``"default"``: a random legal move is played, no penalty.
* ``"retry"`` (AEC only): nothing is played; the same agent is asked again with a feedback line
  naming the legal moves; after ``max_retries`` invalid answers in a row ``retry_fallback`` applies.
* ``"terminate"``: the game ends; the offending agent gets ``invalid_penalty``, the others 0
  (PettingZoo's own rule for illegal moves in classic games).

The old names ``invalid=`` and ``penalty=`` still work with a ``DeprecationWarning``.

The random legal move comes from a generator seeded by ``reset(seed=...)``, so a seeded game
replays exactly.

Example:
    >>> from pettingzoo.classic import tictactoe_v3
    >>> import textgym
    >>> env = textgym.wrap_pettingzoo(tictactoe_v3.env())
    >>> env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.last()
    >>> print(obs["text"])
     1 | 2 | 3
    ---+---+---
     4 | 5 | 6
    ---+---+---
     7 | 8 | 9
    You are X. Your move. Empty squares: 1, 2, 3, 4, 5, 6, 7, 8, 9.
    >>> env.step("I take the centre, 5.")
    >>> env.infos["player_1"]["parse"]["action_name"]
    '5'

PettingZoo is imported when a wrapper is built, not when this module is imported.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from textgym.envs.game_text import TextGame, game_for, generic_text_game
from textgym.spaces import TextSpace
from textgym.wrappers.invalid_answer import (
    INVALID_POLICIES,
    AnswerCounter,
    InvalidAnswerRule,
    ParseRecord,
    as_answer_text,
    renamed_invalid_kwargs,
)

__all__ = ["FEEDBACK", "INVALID_POLICIES", "generic_text_game", "wrap_pettingzoo"]

#: The retry feedback line of the multi-agent envs (``{answer}``, ``{valid_actions}`` filled in).
FEEDBACK = "'{answer}' is not a legal move. Legal moves: {valid_actions}."


class _AgentText:
    """Per-agent text machinery shared by the AEC and parallel wrappers: names, masks, parsing."""

    def __init__(self, env: Any, game: TextGame, parser: Any, max_length: int):
        from textgym.wrappers.parsers import as_parser

        self.env = env
        self.game = game
        self.parser = as_parser(parser)
        self.action_names = list(game.action_names(env))
        self.n = len(self.action_names)
        self.max_length = max_length
        self.last_error: str | None = None  # repr of the exception a user parser raised, if any
        # legal moves are listed in reading order (tic-tac-toe's PettingZoo indices are column-major)
        numeric = all(n.isdigit() for n in self.action_names)
        self.display_order = sorted(range(self.n), key=lambda i: int(self.action_names[i])) \
            if numeric else list(range(self.n))

    def mask(self, raw_obs: Any) -> np.ndarray:
        if isinstance(raw_obs, dict) and "action_mask" in raw_obs:
            return np.asarray(raw_obs["action_mask"], dtype=np.int8)
        return np.ones(self.n, dtype=np.int8)

    def legal_indices(self, mask: np.ndarray) -> list[int]:
        return [i for i in self.display_order if mask[i]]

    def legal(self, mask: np.ndarray) -> list[str]:
        return [self.action_names[i] for i in self.legal_indices(mask)]

    def text(self, agent: str, raw_obs: Any, feedback: str = "") -> str:
        text = self.game.render(self.env, agent, raw_obs)
        if feedback:
            text = f"{feedback}\n{text}"
        return text[: self.max_length]

    def parse(self, answer: Any, mask: np.ndarray) -> tuple[int | None, str | None, str | None]:
        """(action index, action name, parser name) of a legal move named in ``answer``."""
        text = as_answer_text(answer)  # as ParseAction reads it: never raises
        legal_idx = self.legal_indices(mask)
        names = [self.action_names[i] for i in legal_idx]
        if not names:
            return None, None, None
        self.last_error = None
        try:
            found = self.parser(text, names)
        except Exception as error:  # noqa: BLE001 - a user parser's bug counts as an unreadable answer
            self.last_error, found = repr(error), None
        if found is None or found.action_index is None or not 0 <= found.action_index < len(names):
            return None, None, None
        return legal_idx[found.action_index], names[found.action_index], found.parser



@functools.lru_cache(maxsize=1)
def _classes() -> tuple[type, type]:
    """Build the wrapper classes on first use, so that importing this module never imports pettingzoo."""
    from gymnasium import spaces
    from pettingzoo import AECEnv, ParallelEnv

    class _TextAgents:
        """What both wrappers share: the text spaces, the per-agent text view, and delegation."""

        def _init_text(self, env: Any, game: TextGame | None, parser: Any, rule: InvalidAnswerRule,
                       max_length: int, answer_format: str | None = None) -> None:
            self.env = env
            self.text = _AgentText(env, game_for(env, game, answer_format), parser, max_length)
            self.rule = rule
            self.metadata = dict(getattr(env, "metadata", {}))
            self.possible_agents = list(env.possible_agents)
            self.render_mode = getattr(env, "render_mode", None)
            self.action_names = self.text.action_names
            obs_space = spaces.Dict({
                "text": TextSpace(max_length),
                "action_mask": spaces.Box(0, 1, (self.text.n,), np.int8),
            })
            self._obs_spaces = {a: obs_space for a in self.possible_agents}
            self._act_spaces = {a: TextSpace(max_length) for a in self.possible_agents}
            self._rng = np.random.default_rng()

        def observation_space(self, agent: str):
            return self._obs_spaces[agent]

        def action_space(self, agent: str):
            return self._act_spaces[agent]

        @property
        def unwrapped(self):
            return self

        def system_prompt(self, agent: str) -> str:
            return self.text.game.prompt(self.env, agent)

        def render(self):
            return self.env.render()

        def close(self):
            self.env.close()

        def state(self):
            return self.env.state()

    class TextAECEnv(_TextAgents, AECEnv):
        """An AEC PettingZoo env whose agents read and answer text (see the module docstring).

        Args:
            env: the PettingZoo AEC env (Discrete action spaces).
            game: the :class:`~textgym.envs.game_text.TextGame` renderer; default: the built-in
                one for ``env.metadata["name"]`` or :func:`generic_text_game`.
            parser: a textgym parser, a function ``f(text, names)`` or a list of them (a chain);
                default JSON -> regex -> keyword.
            invalid_policy: ``"penalty"``, ``"default"``, ``"retry"`` or ``"terminate"``
                (:class:`~textgym.wrappers.InvalidAnswerRule`).
            invalid_penalty: the reward added for an invalid answer (``"penalty"``,
                ``"terminate"``, and ``"retry"`` once it falls back to one of them).
            max_retries: invalid answers in a row that ``"retry"`` allows before ``retry_fallback``.
            retry_fallback: the policy after ``max_retries``: ``"penalty"``, ``"default"`` or ``"terminate"``.
            feedback: the retry feedback line (``{answer}``, ``{valid_actions}``, ``{retries_left}``).
            max_length: observation and answer length limit (characters).
            answer_format: the answer format the system prompt asks for (``"word"``, ``"json"``,
                ``"think"``; default: the renderer's).
        """

        def __init__(self, env: Any, game: TextGame | None = None, *, parser: Any = None,
                     invalid_policy: str = "penalty", invalid_penalty: float = -1.0,
                     max_retries: int = 2, retry_fallback: str = "penalty",
                     feedback: str = FEEDBACK, max_length: int = 2048, answer_format: str | None = None):
            super().__init__()
            rule = InvalidAnswerRule(policy=invalid_policy, penalty=invalid_penalty,
                                     max_retries=max_retries, retry_fallback=retry_fallback,
                                     feedback=feedback)
            self._init_text(env, game, parser, rule, max_length, answer_format)
            self._forced_end = False

        # -- views ------------------------------------------------------------------------
        def observe(self, agent: str) -> dict[str, Any]:
            raw = self.env.observe(agent)
            mask = self.text.mask(raw)
            return {"text": self.text.text(agent, raw, self._feedback.get(agent, "")),
                    "action_mask": mask}

        def __str__(self) -> str:
            return str(self.env)

        # -- bookkeeping ------------------------------------------------------------------
        def _info(self, agent: str, parse: dict[str, Any] | None) -> dict[str, Any]:
            info = dict(self.env.infos.get(agent, {}))
            mask = self.text.mask(self.env.observe(agent))
            info["system_prompt"] = self.system_prompt(agent)
            info["valid_actions"] = self.text.legal(mask) if agent == self.env.agent_selection else []
            if parse is not None:
                info["parse"] = parse
            elif agent in self._last_parse:
                info["parse"] = self._last_parse[agent]
            return info

        def _sync(self, step_rewards: dict[str, float], acting: str | None) -> None:
            """Copy the inner env's state after one of its steps, with our rewards on top."""
            self.agents = list(self.env.agents)
            self.agent_selection = self.env.agent_selection
            self.terminations = {a: bool(self.env.terminations[a]) for a in self.agents}
            self.truncations = {a: bool(self.env.truncations[a]) for a in self.agents}
            self.rewards = {a: float(step_rewards.get(a, 0.0)) for a in self.agents}
            cumulative = {a: self._cumulative_rewards.get(a, 0.0) for a in self.agents}
            for a in self.agents:
                cumulative[a] += self.rewards[a]
            self._cumulative_rewards = cumulative
            self.infos = {a: self._info(a, None) for a in self.agents}

        def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
            self.env.reset(seed=seed, options=options)
            if seed is not None:
                self._rng = np.random.default_rng(seed)
            self._forced_end = False
            self._feedback: dict[str, str] = {}
            self._last_parse: dict[str, dict[str, Any]] = {}
            self._answers = {a: AnswerCounter(self.rule) for a in self.possible_agents}
            self._cumulative_rewards = {}
            self._skip_agent_selection = None
            self.game_returns = {a: 0.0 for a in self.possible_agents}
            self._sync({}, None)

        def cumulative_reward(self, agent: str) -> float:
            """What ``agent`` received since it last acted (its own move's reward included): the
            reward :meth:`last` reports when it is ``agent``'s turn, for any agent."""
            return float(self._cumulative_rewards.get(agent, 0.0))

        def outcome(self, agent: str) -> str:
            """``"win"``, ``"draw"`` or ``"loss"`` for ``agent`` by the game's own rewards so far
            (penalties for invalid answers excluded; a forfeit under ``"terminate"`` is a loss)."""
            mine = self.game_returns[agent]
            others = [r for a, r in self.game_returns.items() if a != agent]
            best_other = max(others) if others else 0.0
            return "win" if mine > best_other else "loss" if mine < best_other else "draw"

        # -- step -------------------------------------------------------------------------
        def step(self, action: Any) -> None:
            agent = self.agent_selection
            if self.terminations[agent] or self.truncations[agent]:
                if action is not None:
                    raise ValueError(f"{agent} is done: the only valid action is None, got {action!r}")
                if self._forced_end:
                    self._was_dead_step(None)
                    return
                self.env.step(None)
                self._cumulative_rewards.pop(agent, None)
                self._sync(dict(self.env.rewards), None)
                return

            mask = self.text.mask(self.env.observe(agent))
            move, name, parser = self.text.parse(action, mask)
            self._cumulative_rewards[agent] = 0.0  # the agent acts: its reward since then restarts
            self._feedback.pop(agent, None)
            if name is not None:
                self._play(agent, move, self._answers[agent].accept(action, move, name, parser), 0.0)
                return

            # one agent's retries run until it answers or its fallback applies
            verdict, record = self._answers[agent].refuse(action, error=self.text.last_error)
            if verdict.asks_again:
                self._feedback[agent] = self.rule.feedback_line(self.text.legal(mask), verdict.retries,
                                                                action)
                self._last_parse[agent] = record.to_dict()
                self.rewards = {a: 0.0 for a in self.agents}
                self.infos = {a: self._info(a, None) for a in self.agents}
                return
            if verdict.ends_episode:
                self._last_parse[agent] = record.to_dict()
                self._forced_end = True
                self.game_returns[agent] -= 1.0  # a forfeit: the offender loses
                self.terminations = {a: True for a in self.agents}
                self.rewards = {a: 0.0 for a in self.agents}
                self.rewards[agent] = verdict.reward
                for a in self.agents:
                    self._cumulative_rewards[a] = self._cumulative_rewards.get(a, 0.0) + self.rewards[a]
                self.infos = {a: self._info(a, None) for a in self.agents}
                for a in self.agents:
                    self.infos[a]["valid_actions"] = []
                self._deads_step_first()
                return
            # "penalty" / "default": a random legal move is played for the agent
            move = int(self._rng.choice(np.flatnonzero(mask)))
            self._play(agent, move, dataclasses.replace(record, action=move), verdict.reward)

        def _play(self, agent: str, move: int, parsed: ParseRecord, extra: float) -> None:
            self._last_parse[agent] = record = parsed.to_dict()
            self.env.step(move)
            rewards = {a: float(r) for a, r in self.env.rewards.items()}
            for a, r in rewards.items():
                self.game_returns[a] = self.game_returns.get(a, 0.0) + r
            if extra and agent in rewards:
                rewards[agent] += extra
            self._sync(rewards, agent)
            if agent in self.infos:
                self.infos[agent]["parse"] = record

    class TextParallelEnv(_TextAgents, ParallelEnv):
        """A parallel PettingZoo env whose agents read and answer text (see the module docstring).

        Args: as :class:`TextAECEnv`, except that ``invalid_policy="retry"`` is not available
        (every agent acts at once, so there is no turn to repeat; hence no retry settings).
        """

        def __init__(self, env: Any, game: TextGame | None = None, *, parser: Any = None,
                     invalid_policy: str = "penalty", invalid_penalty: float = -1.0,
                     max_length: int = 2048, answer_format: str | None = None):
            rule = InvalidAnswerRule(policy=invalid_policy, penalty=invalid_penalty, allow_retry=False)
            self._init_text(env, game, parser, rule, max_length, answer_format)
            self.agents: list[str] = []

        def _convert(self, raw_obs: dict, raw_infos: dict, parses: dict) -> tuple[dict, dict]:
            obs, infos = {}, {}
            for agent, raw in raw_obs.items():
                mask = self.text.mask(raw)
                obs[agent] = {"text": self.text.text(agent, raw), "action_mask": mask}
                self._masks[agent] = mask
            for agent in set(raw_infos) | set(raw_obs):
                info = dict(raw_infos.get(agent, {}))
                info["system_prompt"] = self.system_prompt(agent)
                mask = self._masks.get(agent, np.zeros(self.text.n, np.int8))
                info["valid_actions"] = self.text.legal(mask) if agent in self.env.agents else []
                if agent in parses:
                    info["parse"] = parses[agent]
                infos[agent] = info
            return obs, infos

        def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
            if seed is not None:
                self._rng = np.random.default_rng(seed)
            self._masks: dict[str, np.ndarray] = {}
            self._answers = {a: AnswerCounter(self.rule) for a in self.possible_agents}
            raw_obs, raw_infos = self.env.reset(seed=seed, options=options)
            self.agents = list(self.env.agents)
            return self._convert(raw_obs, raw_infos, {})

        def step(self, actions: dict[str, Any]):
            moves, parses, extra = {}, {}, {}
            offenders = []
            for agent in self.agents:
                answer = actions.get(agent)
                mask = self._masks.get(agent, np.ones(self.text.n, np.int8))
                move, name, parser = self.text.parse(answer, mask)
                if name is not None:
                    moves[agent] = move
                    parses[agent] = self._answers[agent].accept(answer, move, name, parser).to_dict()
                    continue
                # no retries here (every agent acts at once): the rule never asks again
                verdict, record = self._answers[agent].refuse(answer, error=self.text.last_error)
                if verdict.ends_episode:
                    offenders.append(agent)
                    parses[agent] = record.to_dict()
                    continue
                moves[agent] = int(self._rng.choice(np.flatnonzero(mask)))
                parses[agent] = dataclasses.replace(record, action=moves[agent]).to_dict()
                extra[agent] = verdict.reward
            if offenders:
                # the game ends before anyone moves: offenders get the penalty, the others 0
                ended = f"Game over: illegal move by {', '.join(offenders)}."
                obs = {a: {"text": ended, "action_mask": np.zeros(self.text.n, np.int8)}
                       for a in self.agents}
                rewards = {a: (self.rule.penalty if a in offenders else 0.0) for a in self.agents}
                terms = {a: True for a in self.agents}
                truncs = {a: False for a in self.agents}
                infos = {a: {"system_prompt": self.system_prompt(a), "valid_actions": [],
                             "parse": parses[a]} for a in self.agents}
                self.agents = []
                return obs, rewards, terms, truncs, infos
            raw_obs, raw_rewards, raw_terms, raw_truncs, raw_infos = self.env.step(moves)
            self.agents = list(self.env.agents)
            obs, infos = self._convert(raw_obs, raw_infos, parses)
            rewards = {a: float(r) + extra.get(a, 0.0) for a, r in raw_rewards.items()}
            terms = {a: bool(t) for a, t in raw_terms.items()}
            truncs = {a: bool(t) for a, t in raw_truncs.items()}
            return obs, rewards, terms, truncs, infos

    return TextAECEnv, TextParallelEnv


def wrap_pettingzoo(env: Any, game: TextGame | None = None, *, parser: Any = None,
                    invalid_policy: str | None = None, invalid_penalty: float | None = None,
                    max_retries: int = 2, retry_fallback: str = "penalty", feedback: str = FEEDBACK,
                    max_length: int = 2048, answer_format: str | None = None,
                    invalid: str | None = None, penalty: float | None = None):
    """Turn a PettingZoo AEC or parallel env into a multi-agent text env.

    Example:
        >>> from pettingzoo.classic import rps_v2
        >>> import textgym
        >>> env = textgym.wrap_pettingzoo(rps_v2.parallel_env(max_cycles=3))
        >>> obs, infos = env.reset(seed=0)
        >>> obs["player_0"]["text"]
        'Round 1. Your move: ROCK, PAPER, SCISSORS.'
        >>> obs, rewards, terms, truncs, infos = env.step({"player_0": "PAPER", "player_1": "rock"})
        >>> rewards
        {'player_0': 1.0, 'player_1': -1.0}

    Args:
        env: a ``pettingzoo.AECEnv`` or ``pettingzoo.ParallelEnv`` with Discrete action spaces.
        game: the text renderer (:class:`~textgym.envs.game_text.TextGame`); default: the built-in
            one for ``tictactoe_v3``, ``connect_four_v3``, ``rps_v2``, else a generic numeric one.
        parser: parser(s) for the answers; default JSON -> regex -> keyword.
        invalid_policy: ``"penalty"`` (default), ``"default"``, ``"retry"`` (AEC only) or
            ``"terminate"`` (see the module docstring).
        invalid_penalty: reward added to an invalid answer's agent (default -1.0).
        max_retries: (AEC, ``"retry"``) invalid answers in a row before ``retry_fallback`` applies.
        retry_fallback: (AEC, ``"retry"``) ``"penalty"``, ``"default"`` or ``"terminate"``.
        feedback: (AEC, ``"retry"``) the feedback line shown with the repeated observation.
        max_length: observation and answer length limit (characters).
        answer_format: the answer format the system prompt asks for (``"word"``, ``"json"``,
            ``"think"``; :mod:`textgym.wrappers.answer_format`); default: the renderer's (``"word"``).
        invalid: deprecated name of ``invalid_policy``.
        penalty: deprecated name of ``invalid_penalty``.

    Returns:
        A :class:`TextAECEnv` or :class:`TextParallelEnv`.
    """
    import pettingzoo

    invalid_policy, invalid_penalty = renamed_invalid_kwargs(
        "wrap_pettingzoo", invalid, penalty, invalid_policy, invalid_penalty, ("penalty", -1.0))
    aec_cls, parallel_cls = _classes()
    if isinstance(env, pettingzoo.AECEnv):
        return aec_cls(env, game, parser=parser, invalid_policy=invalid_policy,
                       invalid_penalty=invalid_penalty, max_retries=max_retries,
                       retry_fallback=retry_fallback, feedback=feedback, max_length=max_length,
                       answer_format=answer_format)
    if isinstance(env, pettingzoo.ParallelEnv):
        return parallel_cls(env, game, parser=parser, invalid_policy=invalid_policy,
                            invalid_penalty=invalid_penalty, max_length=max_length,
                            answer_format=answer_format)
    raise TypeError(f"wrap_pettingzoo needs a pettingzoo AECEnv or ParallelEnv, got {type(env).__name__}")


def __getattr__(name: str) -> Any:
    # TextAECEnv / TextParallelEnv are built on first access (they subclass pettingzoo's classes).
    if name in ("TextAECEnv", "TextParallelEnv"):
        aec_cls, parallel_cls = _classes()
        return aec_cls if name == "TextAECEnv" else parallel_cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
