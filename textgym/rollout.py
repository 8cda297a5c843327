"""Play text envs with a policy, one batched ``policy.act`` call per step of the batch.

:func:`play` is the one rollout loop: it gathers the pending decision of every :class:`Slot`
(a sub-env playing its episodes, or a board game whose seats take turns,
:mod:`textgym.selfplay`), calls ``policy.act`` once for all of them, and hands each slot its
answer. :func:`collect` plays episodes of a vector env (or a list of envs) through it.

Example:
    >>> import textgym
    >>> from textgym.policy import Policy
    >>> from textgym.rollout import collect
    >>> policy = Policy(*textgym.models.load("tiny"), mode="score")
    >>> venv = textgym.make_vec("textgym/Bandit-v0", num_envs=4)
    >>> rollout = collect(policy, venv, episodes=8, seed=0)
    >>> len(rollout.episodes), rollout.stats["decisions"]
    (8, 8)
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

import gymnasium as gym

from textgym.policy import Decision
from textgym.policy.conversation import Conversation, ConversationWindow
from textgym.step_cap import DEFAULT_MAX_EPISODE_STEPS, StepCap
from textgym.vector import SubEnvError
from textgym.wrap import MAX_TEXT_LENGTH
from textgym.wrappers.episode_stats import EPISODE_STATS_KEY, episode_stats

logger = logging.getLogger("textgym.rollout")


#: The longest observation (in characters) a rollout hands the policy; longer ones are cut, with
#: a warning. An env made with :func:`textgym.wrap` cuts its texts at its ``max_length`` (the
#: same limit by default); this guards the policy against a text env that does not (a plugin's
#: 1 MB observation would be a prompt of a quarter of a million tokens).
MAX_OBSERVATION_CHARS = MAX_TEXT_LENGTH

@dataclass(frozen=True)
class RolloutProgress:
    """Where a :func:`collect` call is, for a progress display (:func:`watch`)."""

    greedy: bool
    """An evaluation or greedy check (``True``) or a training rollout."""
    episodes: int
    """Episodes finished so far."""
    planned: int | None
    """Episodes planned (``None``: a ``steps=`` budget)."""
    decisions: int
    """Decisions played so far."""
    seconds: float
    """Since the rollout started."""
    finished: bool = False
    """The rollout is over (a training rollout: its update's optimisation comes next)."""
    decisions_left: int | None = None
    """At most this many decisions remain: every running and unstarted episode played to its step
    limit (the env's own, or the rollout's ``max_episode_steps`` when given), or what is left of a
    ``steps=`` budget. ``None``: no limit is known."""


_watchers: list[Callable[[RolloutProgress], None]] = []


@contextlib.contextmanager
def watch(observer: Callable[[RolloutProgress], None]) -> Iterator[None]:
    """Within the block, every :func:`collect` call reports its progress to ``observer`` before
    each vector step and once at its end (the CLI's live display and ``eval``'s progress line).

    Example:
        >>> import textgym
        >>> from textgym.policy import Policy
        >>> seen = []
        >>> with watch(seen.append):
        ...     _ = collect(Policy(*textgym.models.load("tiny"), mode="score"),
        ...                 textgym.make_vec("textgym/Bandit-v0", num_envs=2), episodes=2, seed=0)
        >>> seen[0].episodes, seen[-1].episodes, seen[-1].finished
        (0, 2, True)
    """
    _watchers.append(observer)
    try:
        yield
    finally:
        _watchers.remove(observer)


__all__ = [
    "DEFAULT_MAX_EPISODE_STEPS",
    "MAX_OBSERVATION_CHARS",
    "EnvError",
    "EnvFaults",
    "Envs",
    "Episode",
    "Request",
    "Rollout",
    "RolloutProgress",
    "Slot",
    "Step",
    "SupportsAct",
    "collect",
    "conversation_runs",
    "decisions_of",
    "play",
    "watch",
]


class EnvError(RuntimeError):
    """An env raised in ``reset`` or ``step`` during a rollout (the original error is its
    ``__cause__``): the message names the env id, the sub-env, the episode's seed and the step,
    so the failure can be replayed with ``env.reset(seed=...)``.

    Attributes:
        env_id: the env's registered id (its class name when it has no spec).
        seed: the seed its episode was reset with (``None``: the env's generator continued).
        step: how many steps of the episode were played before it raised (``None``: at reset).
    """

    def __init__(self, env_id: str, index: int, seed: int | None, step: int | None, error: BaseException):
        self.env_id, self.index, self.seed, self.step = env_id, index, seed, step
        where = "at reset" if step is None else f"at step {step + 1}"
        super().__init__(f"env {env_id} raised {type(error).__name__}: {error} ({where} of the episode "
                         f"with seed {seed}, sub-env {index})")


def env_name(env: gym.Env) -> str:
    """The id an env was made with (its class name when it has no spec)."""
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None else type(getattr(env, "unwrapped", env)).__name__


@runtime_checkable
class SupportsAct(Protocol):
    """Anything that acts like a :class:`textgym.Policy` for a batch of envs (a scripted player
    in a test, a wrapper that counts calls...). ``seed(int)`` and ``counters`` are used when present.
    A policy with a ``conversation_window`` attribute (:class:`textgym.Policy`) also takes
    ``act(..., conversations=)``: conversation mode (see :func:`conversation_window`)."""

    def act(self, observations: Sequence[str], system_prompts: Sequence[str],
            valid_actions: Sequence[Sequence[str]] | None = None, greedy: bool = False) -> list[Decision]: ...


Envs: TypeAlias = "gym.vector.VectorEnv | Sequence[gym.Env] | gym.Env"
"""What :func:`collect` plays: a vector env with ``.envs`` (a :class:`textgym.vector.TextVectorEnv`
or Gymnasium's ``SyncVectorEnv``), a list of text envs, or one text env."""


@dataclass
class Step:
    """One decision and what the env answered."""

    decision: Decision
    reward: float
    terminated: bool
    truncated: bool
    parse: dict[str, Any] | None
    """The env's ``info["parse"]`` record (``None`` if the env has no ParseAction wrapper)."""
    observation: str
    """The observation the decision was made on."""
    env_index: int
    """Which sub-env played it."""
    reward_terms: dict[str, float] | None = None
    """The env's ``info["reward_terms"]`` (``ShapeReward``'s weighted terms; ``None`` without it)."""


@dataclass
class Episode:
    """A finished episode (or, in ``Rollout.unfinished``, one cut off by a step budget)."""

    steps: list[Step] = field(default_factory=list)
    seed: int | None = None
    """The seed its env was reset with (``None``: the env's generator continued)."""
    system_prompt: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    """The last step's info (with ``info["episode"]`` from ``EpisodeStats``, unshaped return)."""
    bootstrap: Decision | None = None
    """A truncated episode's decision at the state after its last step, when the rollout was asked
    for one (``collect(bootstrap=True)``): never played, it is what a value-based trainer (PPO)
    bootstraps the unseen rest of the episode from. ``None`` for a terminated episode."""

    @property
    def return_(self) -> float:
        """Sum of the rewards the agent received (shaped, if the env shapes rewards)."""
        return float(sum(s.reward for s in self.steps))

    @property
    def env_return(self) -> float:
        """The env's own return (``EpisodeStats``' ``info["episode"]["return"]``: before
        reward shaping), or :attr:`return_` when the env does not record it."""
        record = episode_stats(self.info)
        return float(record["return"]) if record and "return" in record else self.return_

    @property
    def length(self) -> int:
        return len(self.steps)

    @property
    def truncated(self) -> bool:
        """Whether it ended by a step limit (the env's, or the rollout's ``max_episode_steps``)
        rather than by reaching a terminal state."""
        return bool(self.steps) and self.steps[-1].truncated and not self.steps[-1].terminated

    @property
    def invalid_count(self) -> int:
        """Answers that named no legal action."""
        return sum(1 for s in self.steps if s.parse is not None and not s.parse.get("valid", True))

    @property
    def decisions(self) -> list[Decision]:
        """The decisions of its steps, in order."""
        return [s.decision for s in self.steps]


def decisions_of(episodes: Sequence[Episode]) -> list[Decision]:
    """All decisions of ``episodes``, episode by episode, in order (what an update trains on)."""
    return [decision for episode in episodes for decision in episode.decisions]


def conversation_runs(episodes: Sequence[Episode]) -> list[list[int]] | None:
    """Conversation mode: indices into :func:`decisions_of` of the runs of consecutive turns whose
    contexts extend each other (a window rebuild starts a new run), so that a trainer re-scores a
    run in one pass; ``None`` when no decision continues another (single-observation mode)."""
    runs: list[list[int]] = []
    at = 0
    for episode in episodes:
        previous = None
        for step in episode.steps:
            if previous is not None and step.decision.continues(previous):
                runs[-1].append(at)
            else:
                runs.append([at])
            previous = step.decision
            at += 1
    return runs if any(len(run) > 1 for run in runs) else None


@dataclass
class Rollout:
    """What :func:`collect` returns."""

    episodes: list[Episode]
    """Completed episodes, in order of completion."""
    stats: dict[str, float]
    """``decisions``, ``episodes``, ``prompt_tokens`` (new prompt tokens run through the model: the
    cached prefix is not counted again), ``prompt_tokens_total`` (full prompt lengths),
    ``answer_tokens``, ``model_tokens`` (all real tokens run through the model), ``seconds``,
    ``act_seconds`` (inside ``policy.act``), ``env_seconds`` (inside the envs), ``decisions_per_s``,
    and ``bootstrap_decisions`` (the decisions asked at truncated episodes' final states, not
    played and not in ``decisions``) when there were any; ``dropped_episodes`` and
    ``failed_envs`` (:class:`EnvFaults`) when a sub-env failed."""
    unfinished: list[Episode] = field(default_factory=list)
    """Episodes still running when a ``steps=`` budget was spent or ``stop=`` ended the rollout."""

    @property
    def steps(self) -> list[Step]:
        return [s for ep in self.episodes for s in ep.steps]


# --- the one rollout loop ---------------------------------------------------------------------------


@dataclass
class Request:
    """A decision a slot is waiting for: what the policy reads."""

    observation: str
    system_prompt: str
    valid_actions: list[str]
    conversation: Conversation | None = None
    """Conversation mode: the slot's episode so far (the observation becomes its next user turn)."""
    bootstrap: bool = False
    """The decision will not be played: it is asked for a truncated episode's final state, for
    its value (:attr:`Episode.bootstrap`). Not counted in the rollout's ``decisions``."""


class Slot(Protocol):
    """One place in the batch that asks the policy for decisions: a sub-env playing its episodes
    (:class:`EnvSlot`), or a board game whose seats take turns (:class:`textgym.selfplay.GameSlot`)."""

    def request(self) -> Request | None:
        """The pending decision, or ``None`` when the slot has nothing more to play."""
        ...

    def answer(self, decision: Decision) -> None:
        """Play ``decision`` (the answer to the latest :meth:`request`)."""
        ...


_MAX_DROPS_IN_A_ROW = 3  # an env that fails this many episodes in a row leaves the rollout
_COUNTED = ("prompt_tokens", "prompt_tokens_total", "answer_tokens", "model_tokens", "act_seconds")


@contextlib.contextmanager
def _young_collections_only() -> Iterator[None]:
    """Within the block, Python's cyclic garbage collector runs only when asked (``play`` asks for
    the young generation after each step). A rollout keeps every decision it makes (lists of token
    ids, records), and the collector's automatic passes over the older generations walk all of
    them again and again: measured at 16% of a 64-env step on a CPU (bench/host_profile.py), more
    as the rollout grows. Reference counting frees everything else as before."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def play(policy: SupportsAct, slots: Sequence[Slot], *, greedy: bool = False,
         max_decisions: int | None = None, seed: int | None = None,
         stop: Callable[[], bool] | None = None) -> dict[str, float]:
    """Until no slot requests a decision: one ``policy.act`` call for every pending request, and
    each answer handed back to its slot. Returns the stats of the run (see :attr:`Rollout.stats`,
    without ``episodes``).

    Args:
        policy: a :class:`textgym.Policy` or anything with its ``act``.
        slots: the slots, asked in order (the first ones win when ``max_decisions`` cuts a step).
        greedy: act greedily (evaluation).
        max_decisions: stop after exactly this many played decisions (bootstrap requests,
            :attr:`Request.bootstrap`, are answered but not counted).
        seed: reseed the policy's sampling first (when it has ``seed()``).
        stop: asked before each step; once it returns ``True``, play stops there, leaving the
            slots' episodes unfinished (a trainer's time cap).
    """
    if seed is not None and hasattr(policy, "seed"):
        policy.seed(int(seed))
    counters = getattr(policy, "counters", {})
    start_counters = dict(counters)
    started = time.perf_counter()
    decisions_made = bootstraps = 0
    env_seconds = 0.0
    with _young_collections_only():
        while True:
            pending = [(slot, request) for slot in slots if (request := slot.request()) is not None]
            if max_decisions is not None:
                pending = _within_budget(pending, max_decisions - decisions_made)
            if not pending or (stop is not None and stop()):
                break
            conversations = [r.conversation for _, r in pending]
            in_conversation = {"conversations": conversations} if any(c is not None for c in conversations) else {}
            decisions = policy.act([r.observation for _, r in pending], [r.system_prompt for _, r in pending],
                                   [r.valid_actions for _, r in pending], greedy=greedy, **in_conversation)
            asked = sum(r.bootstrap for _, r in pending)
            decisions_made += len(pending) - asked
            bootstraps += asked
            env_started = time.perf_counter()
            for (slot, _), decision in zip(pending, decisions):
                slot.answer(decision)
            env_seconds += time.perf_counter() - env_started
            gc.collect(0)  # this step's garbage cycles, if any: the young objects alone are looked at
    seconds = time.perf_counter() - started
    stats: dict[str, float] = {"decisions": decisions_made}
    if bootstraps:
        stats["bootstrap_decisions"] = bootstraps
    for key in _COUNTED:
        if key in counters:
            stats[key] = counters[key] - start_counters.get(key, 0)
    stats.update(seconds=seconds, env_seconds=env_seconds,
                 decisions_per_s=decisions_made / seconds if seconds > 0 else 0.0)
    return stats


def _within_budget(pending: list[tuple[Slot, Request]], room: int) -> list[tuple[Slot, Request]]:
    """The first ``room`` played requests of ``pending`` (the first slots win), with every
    bootstrap request: those are not played, so they spend no budget."""
    kept = []
    for slot, request in pending:
        if not request.bootstrap:
            if room <= 0:
                continue
            room -= 1
        kept.append((slot, request))
    return kept


# --- sub-envs playing episodes ----------------------------------------------------------------------


def turn_system_prompt(env: gym.Env, info: dict[str, Any]) -> str:
    """The system prompt a policy reads with ``env``'s episode: ``info["system_prompt"]``, else the
    env's ``system_prompt`` attribute (``""``: none)."""
    return info.get("system_prompt", _wrapper_attr(env, "system_prompt", ""))


def turn_valid_actions(env: gym.Env, info: dict[str, Any]) -> list[str]:
    """What a policy chooses among at this turn: ``info["valid_actions"]``, else the env's action
    names (``[]``: free text)."""
    return info.get("valid_actions") or list(_wrapper_attr(env, "action_names", None) or [])


def _wrapper_attr(env: gym.Env, name: str, default: Any) -> Any:
    try:
        return env.get_wrapper_attr(name)
    except (AttributeError, Exception):  # noqa: BLE001 - any env without the attribute
        return default


def _step_limit(env: gym.Env, cap: int | None) -> int | None:
    """The most steps an episode of ``env`` can take: its own time limit, or ``cap`` if tighter."""
    own = _wrapper_attr(env, "_max_episode_steps", None)
    limits = [n for n in (own, cap) if isinstance(n, int) and n > 0]
    return min(limits) if limits else None


def conversation_window(policy: SupportsAct, env: gym.Env) -> ConversationWindow | None:
    """How ``policy`` reads ``env``'s episodes: the window of the env's
    :class:`~textgym.wrappers.History` wrapper if it has one, else the policy's ``history``
    setting (``None``: single-observation mode, also for a policy without conversation mode)."""
    if not hasattr(policy, "conversation_window"):
        return None
    turns = _wrapper_attr(env, "history_window", None)
    if turns is not None:
        return ConversationWindow(int(turns), policy.history_tokens)
    return policy.conversation_window


@dataclass
class EnvFaults:
    """Sub-envs that failed during a rollout (a :class:`textgym.vector.SubEnvError`: a remote env's
    server died, timed out, answered garbage or was full). The failed episode is dropped and
    replayed from its seed after a new ``reset()`` (a remote env reconnects there); an env whose
    reset fails too leaves the rollout, and the episodes it had left to play go to the others."""

    dropped_episodes: int = 0
    """Episodes lost mid-way (their steps discarded)."""
    failed_envs: int = 0
    """Sub-envs that could not even reset: out of this rollout."""
    orphans: list[int | None] = field(default_factory=list)
    """Seeds of planned episodes left by failed envs, for the others to play."""

    def counts(self) -> dict[str, int]:
        return {k: v for k, v in (("dropped_episodes", self.dropped_episodes),
                                  ("failed_envs", self.failed_envs)) if v}


class EnvSlot:
    """A text env playing a planned sequence of episodes (:func:`collect`'s slots).

    Args:
        env: the text env.
        index: its index among the sub-envs (recorded in every :class:`Step`).
        seeds: the reset seed of its ``k``-th episode (``None``: the env's generator continues).
        episodes: how many episodes it plays (``None``: until the caller stops asking).
        finished: where completed episodes go, in order of completion.
        window: conversation mode: the policy reads each episode as a conversation with this
            window (``None``: each observation alone).
        cap: cut an episode at this cap, marking the last step truncated (``None``: the env's
            own limit only); the cap counts the episodes it cut.
        bootstrap: after a truncated episode's last step, ask for one more decision at the state it
            reached (:attr:`Request.bootstrap`), kept as :attr:`Episode.bootstrap`.
        faults: where a :class:`~textgym.vector.SubEnvError` of the env is counted (``None``: it
            propagates).
    """

    def __init__(self, env: gym.Env, index: int, seeds: Callable[[int], int | None], episodes: int | None,
                 finished: list[Episode], window: ConversationWindow | None = None, *,
                 cap: StepCap | None = None, bootstrap: bool = False, faults: EnvFaults | None = None):
        self.faults, self.drops, self.gone = faults, 0, False
        self.env, self.index, self.seeds, self.episodes, self.finished = env, index, seeds, episodes, finished
        self.conversation = Conversation(window) if window is not None else None
        self.cap, self.bootstrap = cap, bootstrap
        self.started = 0
        self.current: Episode | None = None
        self.awaiting_bootstrap = False
        self.observation = ""
        self.system_prompt = ""
        self.info: dict[str, Any] = {}

    def start(self, first: tuple[str, dict[str, Any]] | None = None, *, again: Episode | None = None) -> None:
        """Begin the next planned episode (from an observation and info already reset, if given;
        ``again``: replay that failed episode from its seed)."""
        if again is not None:
            seed = again.seed
        elif self.episodes is None or self.started < self.episodes:
            seed = self.seeds(self.started)
            self.started += 1
        elif self.faults is not None and self.faults.orphans:  # a failed env's episode
            seed = self.faults.orphans.pop(0)
        else:
            self.current = None
            return
        try:
            obs, self.info = first if first is not None else self.env.reset(seed=seed)
        except SubEnvError as exc:  # a remote env's fault (textgym.remote): counted, or raised as it is
            if self.faults is None:
                raise
            self._leave(seed, exc)
            return
        except Exception as exc:  # a misbehaving env (or one whose reset returns no (obs, info))
            raise EnvError(env_name(self.env), self.index, seed, None, exc) from exc
        if not isinstance(self.info, dict):
            raise EnvError(env_name(self.env), self.index, seed, None,
                           TypeError(f"reset must return (observation, info dict), got info {type(self.info).__name__}"))
        self.observation = self._observation(obs, self.info, seed, None)
        self.system_prompt = turn_system_prompt(self.env, self.info)
        self.current = Episode(seed=seed, system_prompt=self.system_prompt)
        if self.conversation is not None:
            self.conversation.restart()

    def _observation(self, obs: str, info: dict[str, Any], seed: int | None, step: int | None) -> str:
        # In a conversation the earlier turns are chat turns: the newest observation alone
        # (History's rendered text is for reading by hand).
        text = info.get("newest_observation", obs) if self.conversation is not None else obs
        if not isinstance(text, str):
            raise EnvError(env_name(self.env), self.index, seed, step, TypeError(f"a text env's observation must be a str, got {type(text).__name__}"))
        if len(text) > MAX_OBSERVATION_CHARS:
            logger.warning("an observation of %s has %d characters: cut to %d (textgym.rollout."
                           "MAX_OBSERVATION_CHARS)", env_name(self.env), len(text), MAX_OBSERVATION_CHARS)
            text = text[:MAX_OBSERVATION_CHARS]
        return text

    def request(self) -> Request | None:
        if self.current is None and not self.gone and self.faults is not None and self.faults.orphans:
            self.start()  # done with its own episodes: it plays a failed env's
        if self.current is None:
            return None
        return Request(self.observation, self.system_prompt, turn_valid_actions(self.env, self.info),
                       self.conversation, bootstrap=self.awaiting_bootstrap)

    def answer(self, decision: Decision) -> None:
        episode = self.current
        if self.awaiting_bootstrap:
            self.awaiting_bootstrap = False
            episode.bootstrap = decision
            self._finish(episode)
            return
        try:
            obs, reward, terminated, truncated, info = self.env.step(decision.text)
        except SubEnvError as exc:
            if self.faults is None:
                raise
            self.faults.dropped_episodes += 1
            self.drops += 1
            logger.warning("sub-env %d dropped an episode: %s", self.index, exc)
            if self.drops > _MAX_DROPS_IN_A_ROW:  # it resets but cannot play: out, like a dead one
                self._leave(episode.seed, exc)
            else:
                self.start(again=episode)
            return
        except Exception as exc:
            raise EnvError(env_name(self.env), self.index, episode.seed, len(episode.steps), exc) from exc
        if self.cap is not None and self.cap.cuts(len(episode.steps) + 1, terminated or truncated):
            truncated = True  # the episode ends here for the rollout; the next start() resets the env
            info = _with_episode_stats(self.env, info)
        episode.steps.append(Step(decision=decision, reward=float(reward), terminated=bool(terminated),
                                  truncated=bool(truncated), parse=info.get("parse"),
                                  observation=self.observation, env_index=self.index,
                                  reward_terms=info.get("reward_terms")))
        self.observation, self.info = self._observation(obs, info, episode.seed, len(episode.steps) - 1), info
        if "system_prompt" in info:  # an env may change its instructions mid-episode
            self.system_prompt = info["system_prompt"]
        if terminated or truncated:
            episode.info = info
            if self.bootstrap and episode.truncated:
                self.awaiting_bootstrap = True  # the next request is at the state reached
            else:
                self._finish(episode)

    def _finish(self, episode: Episode) -> None:
        self.finished.append(episode)
        self.drops = 0
        self.start()

    def _leave(self, seed: int | None, exc: Exception) -> None:
        """The env failed for good in this rollout: its planned episodes go to the others."""
        if self.episodes is not None:
            self.faults.orphans.extend([seed, *(self.seeds(k) for k in range(self.started, self.episodes))])
            self.started = self.episodes
        self.faults.failed_envs += 1
        logger.warning("sub-env %d left the rollout: %s", self.index, exc)
        self.current, self.gone = None, True


def _with_episode_stats(env: gym.Env, info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with the ``EpisodeStats`` summary of the episode so far, for an episode the rollout
    cuts before the env ends it (unchanged when the env has no ``EpisodeStats`` wrapper)."""
    summary = _wrapper_attr(env, "episode_summary", None)
    return {**info, EPISODE_STATS_KEY: summary()} if callable(summary) else info


def _sub_envs(envs: Envs) -> list[gym.Env]:
    if hasattr(envs, "envs"):
        return list(envs.envs)
    if isinstance(envs, (list, tuple)):
        return list(envs)
    return [envs]  # a single text env


def collect(policy: SupportsAct, venv: Envs, episodes: int | None = None, steps: int | None = None,
            seed: int | Sequence[int | None] | None = None, greedy: bool = False,
            schedule: Sequence[Sequence[int | None]] | None = None,
            stop: Callable[[], bool] | None = None, max_episode_steps: int | None = None,
            bootstrap: bool = False) -> Rollout:
    """Play episodes with ``policy`` on the sub-envs of ``venv``; one ``policy.act`` call per vector step.

    ``episodes=N``: episode ``j`` is played by sub-env ``j % num_envs``, so every sub-env plays its
    share from start to end and a sub-env whose share is done drops out of the batch: long episodes
    are not under-represented (as they would be if the first N to finish were kept), and episodes
    of different lengths finish independently. ``steps=N``: exactly N decisions; episodes still
    running at the end go to ``Rollout.unfinished``. ``schedule``: sub-env ``i`` plays exactly the
    episodes ``schedule[i]`` lists, reset with those seeds in order (GRPO's groups).

    Conversation mode (:func:`conversation_window`: the env's ``History`` wrapper, or the policy's
    ``history`` setting): each sub-env's episode is one conversation, whose KV cache the policy
    keeps across turns; ``Step.observation`` is the newest observation.

    Args:
        policy: a :class:`textgym.Policy` (anything with ``act(observations, system_prompts,
            valid_actions, greedy)`` and, optionally, ``seed()`` and ``counters``).
        venv: a :class:`textgym.vector.TextVectorEnv` (or Gymnasium vector env with ``.envs``), a
            list of text envs or one text env. The sub-envs are stepped directly.
        episodes: how many complete episodes to play.
        steps: how many decisions to make (instead of ``episodes``).
        seed: int: episode ``j`` resets its env with ``seed + j`` (sub-env ``i``'s first episode:
            ``seed + i``, as in ``make_vec``) and the policy's sampling is seeded with ``seed``, so the
            same call replays the same episodes. A list: the first episode of sub-env ``i`` uses
            ``seed[i]`` and later ones continue that env's generator. ``None``: the envs' own
            generators continue (a ``TextVectorEnv``'s constructor seed applies on its first reset).
        greedy: act greedily (evaluation).
        schedule: per sub-env, the seeds of the episodes it plays (instead of ``episodes``,
            ``steps`` and ``seed``); the policy's sampling is seeded with the first seed given.
        stop: asked before each vector step; once it returns ``True`` the rollout ends there, with
            fewer episodes than planned (the ones still running go to ``Rollout.unfinished``).
        max_episode_steps: cut each episode after this many steps: its last step is marked
            truncated (with the ``EpisodeStats`` summary so far in its info) and the env is reset
            for the next one. ``None``: :data:`DEFAULT_MAX_EPISODE_STEPS` (with a warning when
            it cuts an episode: the env has no limit of its own). Cut episodes are counted in
            ``stats["cut_episodes"]``.
        bootstrap: for every truncated episode, one more decision at the state it reached, not
            played (:attr:`Episode.bootstrap`: what PPO bootstraps its value from).
    """
    envs = _sub_envs(venv)
    n = len(envs)
    cap = StepCap.of(max_episode_steps)
    if schedule is not None:
        if episodes is not None or steps is not None or seed is not None:
            raise ValueError("schedule= replaces episodes=, steps= and seed=")
        if len(schedule) != n:
            raise ValueError(f"got a schedule for {len(schedule)} sub-envs, the vector env has {n}")
        plans = [list(s) for s in schedule]
        counts: list[int | None] = [len(p) for p in plans]
        seed_of = [plans[i].__getitem__ for i in range(n)]
        policy_seed = next((s for p in plans for s in p if s is not None), None)
    else:
        if (episodes is None) == (steps is None):
            raise ValueError("give exactly one of episodes= or steps=")
        budget = int(episodes if episodes is not None else steps)
        if budget < 1:
            raise ValueError(f"episodes/steps must be >= 1, got {budget}")
        seeds = list(seed) if seed is not None and not isinstance(seed, int) else None
        if seeds is not None and len(seeds) != n:
            raise ValueError(f"got {len(seeds)} seeds for {n} sub-envs")
        # Episode j goes to sub-env j % n: sub-env i's k-th episode is episode i + k * n.
        counts = [len(range(i, budget, n)) if steps is None else None for i in range(n)]
        if seeds is not None:
            seed_of = [lambda k, i=i: seeds[i] if k == 0 else None for i in range(n)]
            policy_seed = next((s for s in seeds if s is not None), 0)
        elif seed is not None:
            seed_of = [lambda k, i=i: int(seed) + i + k * n for i in range(n)]
            policy_seed = int(seed)
        else:
            seed_of = [lambda k: None] * n
            policy_seed = None
    finished: list[Episode] = []
    faults = EnvFaults()
    windows = [conversation_window(policy, env) for env in envs]
    if any(w is not None for w in windows):  # conversation mode; an env without a window: no earlier turns
        windows = [w if w is not None else ConversationWindow(turns=0) for w in windows]
    slots = [EnvSlot(env, i, seed_of[i], counts[i], finished, windows[i], cap=cap,
                     bootstrap=bootstrap, faults=faults) for i, env in enumerate(envs)]
    # A TextVectorEnv is reset through its own reset() so that its constructor seed applies.
    from textgym.vector import TextVectorEnv

    if isinstance(venv, TextVectorEnv) and schedule is None and seed is None:
        try:
            first_obs, first_infos = venv.reset()
        except Exception as exc:
            raise EnvError(env_name(envs[0]), 0, getattr(venv, "initial_seed", None), None, exc) from exc
        for slot, obs, info in zip(slots, first_obs, first_infos):
            slot.start((obs, info))
    else:
        for slot in slots:
            slot.start()
    planned = sum(counts) if all(c is not None for c in counts) else None
    started = time.perf_counter()

    limits = [_step_limit(env, None if cap.default else cap.limit) for env in envs]

    def report(finished_rollout: bool = False) -> None:
        decisions = sum(ep.length for ep in finished) + sum(
            slot.current.length for slot in slots if slot.current is not None)
        left = steps - decisions if steps is not None else None
        if planned is not None and None not in limits:
            left = sum((limit - slot.current.length if slot.current is not None else 0)
                       + (slot.episodes - slot.started) * limit for slot, limit in zip(slots, limits))
        progress = RolloutProgress(greedy, len(finished), planned, decisions, time.perf_counter() - started,
                                   finished_rollout, left)
        for observer in _watchers:
            observer(progress)

    if _watchers:  # asked before each vector step: report there too
        asked = stop
        stop = lambda: report() or (asked is not None and asked())
    stats = play(policy, slots, greedy=greedy, max_decisions=steps, seed=policy_seed, stop=stop)
    if _watchers:
        report(finished_rollout=True)
    for slot in slots:  # stopped before a bootstrap decision: the episode itself is complete
        if slot.awaiting_bootstrap:
            finished.append(slot.current)
            slot.current = None
    stats = {"decisions": stats.pop("decisions"), "episodes": len(finished), **stats, **faults.counts()}
    if cap.cut:
        stats["cut_episodes"] = cap.cut
        cap.warn(env_name(envs[0]))
    unfinished = [slot.current for slot in slots if slot.current is not None and slot.current.steps]
    return Rollout(episodes=finished, stats=stats, unfinished=unfinished)
