"""Misbehaving plugin envs for the fault tests (tests/test_hardening.py, tests/test_fuzz.py).

Importing this module registers them, as a plugin's module does; the CLI names them as
``faultenvs:fault/Raise-v0`` (it imports the module first). Each is a one-word text env
(answer ``GOOD`` or ``BAD``; episodes of two steps) that misbehaves in one way:

* ``fault/Raise-v0``: ``step`` raises ``RuntimeError`` at the ``raise_at``-th step of its life;
* ``fault/Endless-v0``: never terminates nor truncates;
* ``fault/WrongReset-v0``: ``reset`` returns the observation alone, not ``(obs, info)``;
* ``fault/NaN-v0``: every reward is NaN (``reward="inf"``: +inf);
* ``fault/Huge-v0``: every observation is ``size`` characters long (default 1,000,000);
* ``fault/Slow-v0``: each step sleeps ``delay`` seconds.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import gymnasium as gym

import textgym
from textgym.spaces import TextSpace

ACTIONS = ["GOOD", "BAD"]


class FaultyTextEnv(gym.Env):
    """A two-step text env with one fault (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    system_prompt = "Answer with one word: GOOD or BAD."

    def __init__(self, fault: str = "none", raise_at: int = 3, reward: str = "nan", size: int = 1_000_000,
                 delay: float = 0.05, length: int = 2):
        self.fault, self.raise_at, self.size, self.delay, self.length = fault, raise_at, size, delay, length
        self.bad_reward = float(reward)
        self.observation_space = TextSpace(max(size, 256) + 64)
        self.action_space = TextSpace(256)
        self.calls = 0
        self.t = 0

    def _obs(self) -> str:
        text = f"Step {self.t}. Say GOOD."
        return text + " " + "x" * (self.size - len(text) - 1) if self.fault == "huge" else text

    def _info(self, **more: Any) -> dict[str, Any]:
        return {"system_prompt": self.system_prompt, "valid_actions": list(ACTIONS), **more}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        if self.fault == "wrong_reset":
            return self._obs()
        return self._obs(), self._info()

    def step(self, action: str):
        self.calls += 1
        self.t += 1
        if self.fault == "raise" and self.calls >= self.raise_at:
            raise RuntimeError("the simulator crashed")
        if self.fault == "slow":
            time.sleep(self.delay)
        name = str(action).strip().upper()
        valid = name in ACTIONS
        reward = self.bad_reward if self.fault == "nan" else 1.0 if name == "GOOD" else 0.0
        terminated = self.fault != "endless" and self.t >= self.length
        parse = {"raw": action, "action": name if valid else None, "action_name": name if valid else None,
                 "parser": "keyword" if valid else None, "valid": valid, "invalid_count": 0,
                 "policy": None if valid else "penalty"}
        return self._obs(), reward, terminated, False, self._info(parse=parse)


def make(fault: str, **kwargs: Any) -> gym.Env:
    return FaultyTextEnv(fault, **kwargs)


FAULTS = {"Raise": "raise", "Endless": "endless", "WrongReset": "wrong_reset", "NaN": "nan", "Huge": "huge",
          "Slow": "slow"}

for _name, _fault in FAULTS.items():
    if f"fault/{_name}-v0" not in gym.registry:
        textgym.register(f"fault/{_name}-v0", make, description=f"misbehaves: {_fault}", action_names=ACTIONS,
                         fault=_fault)
