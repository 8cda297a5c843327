"""History: the episode's earlier turns for the model: a conversation in rollouts, text by hand."""

from __future__ import annotations

from collections import deque

import gymnasium as gym

from textgym.spaces import TextSpace

__all__ = ["History"]


class History(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Shows the model the last ``window`` turns of the episode.

    In a rollout (:func:`textgym.rollout.collect`: the trainers, ``textgym train``, ``textgym
    eval``) a :class:`textgym.Policy` reads the episode as a *conversation*: each observation a
    user turn, each of its answers an assistant turn, with at least the last ``window`` earlier
    turns (conversation mode, :mod:`textgym.policy.conversation`: each env's KV cache is kept
    across turns, so a decision costs only its new tokens). The rollout finds the window in this
    wrapper's ``history_window`` attribute and the newest observation in
    ``info["newest_observation"]``.

    The observation this wrapper returns renders the same turns as text, for stepping the env by
    hand (``textgym play``, ``render_mode="ansi"``) and for policies without conversation mode: the
    last ``window`` (observation, answer) pairs, then the newest observation. The answer shown is
    the parsed action name from ``info["parse"]`` when the answer was valid, else the raw answer
    cut to ``max_answer_chars``. The history is cleared at reset, so the first observation of an
    episode is the plain observation. Put it outermost (below ``RenderText``).

    Example:
        >>> import gymnasium as gym
        >>> from textgym.wrappers import TextObservation, ParseAction
        >>> env = gym.make("CartPole-v1")
        >>> env = ParseAction(TextObservation(env, formatter="pole {2:+.3f}"), ["LEFT", "RIGHT"])
        >>> env = History(env, window=2)
        >>> obs, _ = env.reset(seed=0)
        >>> obs, *_ = env.step("I pick LEFT")
        >>> print(obs)
        Earlier: pole -0.046
        Your action: LEFT
        Now: pole -0.047

    Args:
        env: a text env (its observations are ``str``).
        window: how many past turns to show (k >= 1; a conversation holds at least k and at most
            2k earlier turns before it is rebuilt, see :class:`textgym.policy.conversation.ConversationWindow`).
        max_answer_chars: an invalid raw answer is cut to this many characters.
    """

    def __init__(self, env: gym.Env, window: int = 4, max_answer_chars: int = 60):
        gym.utils.RecordConstructorArgs.__init__(self, window=window, max_answer_chars=max_answer_chars)
        gym.Wrapper.__init__(self, env)
        if int(window) < 1:
            raise ValueError(f"History needs window >= 1, got {window}")
        if not isinstance(env.observation_space, TextSpace):
            raise ValueError(
                f"History needs a text env (observation space TextSpace), got {env.observation_space}; "
                f"wrap the env with TextObservation first (or use textgym.wrap(env, history=k)).")
        self.window = int(window)
        self.max_answer_chars = int(max_answer_chars)
        inner = env.observation_space.max_length
        per_turn = inner + self.max_answer_chars + 40
        self.observation_space = TextSpace(max_length=inner + 20 + self.window * per_turn)
        self._turns: deque[tuple[str, str]] = deque(maxlen=self.window)
        self._last_obs = ""

    @property
    def history_window(self) -> int:
        """The window a rollout's conversation keeps (at least this many earlier turns)."""
        return self.window

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._turns.clear()
        self._last_obs = obs
        info["newest_observation"] = obs
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._turns.append((self._last_obs, self._answer(action, info)))
        self._last_obs = obs
        info["newest_observation"] = obs
        return self._render(obs), reward, terminated, truncated, info

    def _answer(self, action, info) -> str:
        parse = info.get("parse") if isinstance(info, dict) else None
        if isinstance(parse, dict) and parse.get("valid") and parse.get("action_name"):
            return str(parse["action_name"])
        raw = action if isinstance(action, str) else str(action)
        raw = " ".join(raw.split())  # one line
        shown = repr(raw[: self.max_answer_chars])
        if len(raw) > self.max_answer_chars or len(shown) > self.max_answer_chars + 2:
            shown = shown[: self.max_answer_chars] + "..."
        return f"{shown} (invalid)"

    def _render(self, obs: str) -> str:
        if not self._turns:
            return obs
        lines = []
        for past_obs, answer in self._turns:
            lines.append(f"Earlier: {past_obs}")
            lines.append(f"Your action: {answer}")
        lines.append(f"Now: {obs}")
        return "\n".join(lines)
