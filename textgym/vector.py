"""TextVectorEnv: N text envs stepped together, with same-step autoreset."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

__all__ = ["SubEnvError", "TextVectorEnv"]


class SubEnvError(RuntimeError):
    """A sub-env could not reset or step for a reason outside the episode (its server died, timed
    out, answered garbage or is full): the episode is lost, not the run. A rollout drops that
    episode, counts it and resets the env again (an env reconnects there); the other sub-envs
    go on (:func:`textgym.rollout.collect`)."""


class TextVectorEnv(VectorEnv):
    """Several text envs stepped in one call: a list of strings in, a list of strings out.

    Sub-envs are stepped one after another in this process: an env step costs microseconds,
    the LLM decision for the whole batch costs seconds, so processes would only add overhead.

    Autoreset is *same-step*: when sub-env ``i`` ends, ``obs[i]`` and ``infos[i]`` already
    belong to its next episode, and ``infos[i]["final_observation"]`` /
    ``infos[i]["final_info"]`` hold the last step's. Infos are a list of dicts, one per
    sub-env (text infos are ragged; Gymnasium's dict of arrays does not fit them).

    Example:
        >>> import textgym
        >>> from textgym.vector import TextVectorEnv
        >>> venv = TextVectorEnv([lambda: textgym.make("textgym/Bandit-v0")] * 3, seed=0)
        >>> obs, infos = venv.reset()                     # sub-env i seeded 0 + i
        >>> obs, rewards, terminated, truncated, infos = venv.step(["cat", "dog", "cat"])
        >>> bool(terminated.all()), "final_info" in infos[0]     # one-step episodes, reset at once
        (True, True)

    Args:
        env_fns: one callable per sub-env that returns a text env (or the envs themselves).
        seed: sub-env ``i`` is reset with ``seed + i`` at the first ``reset()`` that gives no
            seed; later resets continue each sub-env's own random generator.
    """

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env] | gym.Env], seed: int | None = None):
        if len(env_fns) == 0:
            raise ValueError("TextVectorEnv needs at least one env function")
        self.envs: list[gym.Env] = [fn if isinstance(fn, gym.Env) else fn() for fn in env_fns]
        self.num_envs = len(self.envs)
        first = self.envs[0]
        for i, env in enumerate(self.envs[1:], start=1):
            if (env.observation_space != first.observation_space
                    or env.action_space != first.action_space):
                raise ValueError(
                    f"sub-env {i} has spaces {env.observation_space}/{env.action_space}, "
                    f"sub-env 0 has {first.observation_space}/{first.action_space}: "
                    "all sub-envs must share their spaces")
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = gym.spaces.Tuple([first.observation_space] * self.num_envs)
        self.action_space = gym.spaces.Tuple([first.action_space] * self.num_envs)
        self.metadata = {**first.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}
        self.render_mode = first.render_mode
        self.spec = first.spec
        self.initial_seed = seed
        self._needs_reset = True
        self._seeded = False

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Reset every sub-env.

        Args:
            seed: ``None`` (the constructor's seed on the first reset, then each sub-env's RNG
                continues), an int (sub-env ``i`` gets ``seed + i``) or one seed per sub-env.
            options: passed to every sub-env's ``reset``.

        Returns:
            ``(observations, infos)``: a list of str and a list of dicts, one per sub-env.
        """
        if seed is None and not self._seeded:
            seed = self.initial_seed
        if seed is None or isinstance(seed, (int, np.integer)):
            seeds = [None if seed is None else int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"got {len(seeds)} seeds for {self.num_envs} sub-envs")
        self._seeded = self._seeded or any(s is not None for s in seeds)
        observations, infos = [], []
        for env, env_seed in zip(self.envs, seeds):
            obs, info = env.reset(seed=env_seed, options=options)
            observations.append(obs)
            infos.append(info)
        self._needs_reset = False
        return observations, infos

    def step(
        self, actions: Sequence[str]
    ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Step sub-env ``i`` with ``actions[i]`` (the model's raw answer text).

        Returns:
            ``(observations, rewards, terminated, truncated, infos)``: observations and infos
            are lists; rewards (float64), terminated and truncated (bool) are arrays of
            length ``num_envs``. Sub-envs that ended are already reset (see the class doc).
        """
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        if isinstance(actions, str) or len(actions) != self.num_envs:
            got = "a single str" if isinstance(actions, str) else f"{len(actions)} actions"
            raise ValueError(f"step() needs one action per sub-env ({self.num_envs}), got {got}")
        observations: list[str] = []
        infos: list[dict[str, Any]] = []
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            obs, reward, term, trunc, info = env.step(action)
            rewards[i], terminated[i], truncated[i] = reward, term, trunc
            if term or trunc:
                final_obs, final_info = obs, info
                obs, info = env.reset()
                info = {**info, "final_observation": final_obs, "final_info": final_info}
            observations.append(obs)
            infos.append(info)
        return observations, rewards, terminated, truncated, infos

    def render(self) -> tuple[Any, ...] | None:
        """Each sub-env's ``render()``."""
        return tuple(env.render() for env in self.envs)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` (or read attribute ``name``) of every sub-env, through its wrappers."""
        results = []
        for env in self.envs:
            attr = env.get_wrapper_attr(name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        return tuple(results)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of every sub-env (found through its wrappers)."""
        return tuple(env.get_wrapper_attr(name) for env in self.envs)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set attribute ``name`` on every sub-env: one value each, or the same value for all."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"got {len(values)} values for {self.num_envs} sub-envs")
        for env, value in zip(self.envs, values):
            env.set_wrapper_attr(name, value)

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()

    def __repr__(self) -> str:
        env_id = self.spec.id if self.spec is not None else type(self.envs[0].unwrapped).__name__
        return f"TextVectorEnv({env_id}, num_envs={self.num_envs})"
