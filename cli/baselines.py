"""Reference policies for ``textgym eval --baseline``: ``random`` and ``scripted``.

Both act through the text env itself (they answer with a valid action name, which goes through
the same parser as a model's answer), so their numbers are comparable with a model's.

* ``random``: a uniformly random valid action name at every step.
* ``scripted``: a hand-written or planned policy that reads the underlying Gymnasium state
  (``env.unwrapped``): a PD controller for CartPole, a simple basic strategy for Blackjack,
  value iteration on the transition table ``P`` for FrozenLake, Taxi and CliffWalking, swinging
  with the velocity for MountainCar and Acrobot, the right animal for the bandit, and textgym's
  scripted opponent strategy for tic-tac-toe and connect four. :func:`scripted_policy` returns
  None for envs without one.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import numpy as np

from textgym.cli.runs import mean_and_stderr
from textgym.outcomes import outcome_rates

#: A scripted policy maps the wrapped env (to read its ``unwrapped`` state) to an action index.
ScriptedPolicy = Callable[[Any], int]


def _cartpole(env: Any) -> int:
    """PD controller on the pole angle and cart position: push toward where the pole falls."""
    x, x_dot, theta, theta_dot = (float(v) for v in env.unwrapped.state)
    return int(theta + 0.3 * theta_dot + 0.01 * x + 0.1 * x_dot > 0)


def _blackjack(env: Any) -> int:
    """Basic strategy without doubling or splitting: 0 = stick, 1 = hit."""
    from gymnasium.envs.toy_text.blackjack import sum_hand, usable_ace

    base = env.unwrapped
    total, dealer = sum_hand(base.player), int(base.dealer[0])
    if usable_ace(base.player):
        return int(total <= 17 or (total == 18 and dealer in (9, 10, 1)))
    if total <= 11:
        return 1
    if total == 12:
        return int(dealer not in (4, 5, 6))
    if total <= 16:
        return int(dealer not in (2, 3, 4, 5, 6))
    return 0


def _value_iteration(transitions: dict, gamma: float = 0.99, tol: float = 1e-8) -> np.ndarray:
    """Greedy policy (action per state) of the MDP ``P[s][a] = [(prob, s2, reward, done), ...]``."""
    n_states = len(transitions)
    n_actions = len(transitions[0])
    values = np.zeros(n_states)
    for _ in range(10_000):
        q = np.array([[sum(p * (r + (0.0 if done else gamma * values[s2]))
                           for p, s2, r, done in transitions[s][a])
                       for a in range(n_actions)] for s in range(n_states)])
        new = q.max(axis=1)
        if np.max(np.abs(new - values)) < tol:
            break
        values = new
    return q.argmax(axis=1)


def _tabular(env: Any) -> ScriptedPolicy:
    plan = _value_iteration(env.unwrapped.P)
    return lambda e: int(plan[int(e.unwrapped.s)])


def _mountain_car(env: Any) -> int:
    """Push in the direction of motion: builds momentum until the car climbs out (~120 steps)."""
    _, velocity = env.unwrapped.state
    return 2 if velocity >= 0 else 0


def _acrobot(env: Any) -> int:
    """Torque along the second joint's angular velocity: pumps energy into the swing."""
    return 2 if env.unwrapped.state[3] > 0 else 0


def _bandit(env: Any) -> int:
    """The right arm of the current cue (the oracle: reward 1 every episode)."""
    base = env.unwrapped
    return int(base.mapping[base._cue])


def _board_game(env: Any) -> ScriptedPolicy:
    """textgym's scripted opponent strategy (win, block, then position) in the learner's seat."""
    from textgym.envs.games import SCRIPTED

    strategy = SCRIPTED[env.unwrapped.game_name]
    rng = np.random.default_rng(0)

    def act(e: Any) -> int:
        view = e.unwrapped
        return int(strategy(view.aec.env.observe(view._learner), rng))

    return act


def scripted_policy(env: Any) -> ScriptedPolicy | None:
    """The scripted policy of ``env`` (a text env), or None if textgym has none for it."""
    base = env.unwrapped
    kind = type(base).__name__
    if kind == "CartPoleEnv":
        return _cartpole
    if kind == "BlackjackEnv":
        return _blackjack
    if kind == "MountainCarEnv":
        return _mountain_car
    if kind == "AcrobotEnv":
        return _acrobot
    if kind == "CueBanditEnv":
        return _bandit
    if kind == "TwoPlayerGameEnv":
        from textgym.envs.games import SCRIPTED

        return _board_game(env) if getattr(base, "game_name", None) in SCRIPTED else None
    if isinstance(getattr(base, "P", None), dict):  # toy-text MDP; the state is base.s
        return _tabular(env)
    return None


def run_episodes(env: Any, choose: Callable[[Any, list[str]], str], episodes: int,
                 seed: int) -> dict[str, Any]:
    """Play ``episodes`` episodes (seeds ``seed``, ``seed + 1``, ...) answering ``choose(env,
    valid_actions)`` at every step; returns the same statistics as a model's evaluation."""
    returns, lengths, outcomes = [], [], []
    invalid = decisions = 0
    for episode in range(episodes):
        _, info = env.reset(seed=seed + episode)
        total, length, done = 0.0, 0, False
        while not done:
            _, reward, terminated, truncated, info = env.step(choose(env, info["valid_actions"]))
            total += float(reward)
            length += 1
            decisions += 1
            invalid += not info.get("parse", {}).get("valid", True)
            done = terminated or truncated
        stats = info.get("episode")
        returns.append(float(stats["return"]) if stats else total)
        lengths.append(int(stats["length"]) if stats else length)
        outcomes.append(info.get("outcome"))
    return {**summarize(returns, lengths, invalid, decisions), **outcome_rates(outcomes)}


def summarize(returns: list[float], lengths: list[int], invalid: int,
              decisions: int) -> dict[str, Any]:
    mean, stderr = mean_and_stderr(returns)
    return {
        "episodes": len(returns),
        "return_mean": mean,
        "return_stderr": stderr,
        "length_mean": sum(lengths) / len(lengths) if lengths else float("nan"),
        "invalid_rate": invalid / decisions if decisions else 0.0,
        "decisions": decisions,
    }


def evaluate_baseline(env: Any, kind: str, episodes: int, seed: int) -> dict[str, Any] | None:
    """Statistics of the ``random`` or ``scripted`` baseline on ``env`` (None: no scripted one)."""
    if kind == "random":
        rng = np.random.default_rng(seed)
        return run_episodes(env, lambda e, valid: str(rng.choice(valid)), episodes, seed)
    if kind == "scripted":
        policy = scripted_policy(env)
        if policy is None:
            return None
        names = list(env.get_wrapper_attr("action_names"))
        return run_episodes(env, lambda e, valid: names[policy(e)], episodes, seed)
    raise ValueError(f"unknown baseline {kind!r}")
