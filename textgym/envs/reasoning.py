"""reasoning-gym's procedurally generated tasks as text envs: ``reasoning_gym/<dataset>``.

One item per episode: the question is the observation, the answer is scored by the dataset's
own ``score_answer`` (the reward, usually 1.0 for a right answer, partial credit where the
dataset gives it) and the episode ends. ``reset(seed=s)`` always gives the same item: item ``s``
of the dataset (``create_dataset(name, seed=s, size=1)[0]``, which reasoning-gym generates from
``Random(s)``), so the trainer's training seeds (from 10 000 000 up), its greedy checks (500 000)
and the held-out evaluation (1 000 000) draw disjoint items. The dataset's config (its
difficulty: ``min_terms``, ``max_digits``...) is given as env kwargs; its curriculum, where it
has one, is a schedule of levels (``level=`` at make, ``options={"level": n}`` at reset, or
:meth:`ReasoningGymEnv.set_level` between updates). The reference answer is in
``info["answer"]`` when the episode ends (never in the prompt).

Generate mode is the natural mode (the model writes the answer). Score mode picks among
``info["valid_actions"]``: the dataset's finite answer set where it has one (:data:`ANSWER_SETS`:
``family_relationships``' 16 relations, ``syllogism``'s Yes/No...), or the ``candidates=[...]``
given at make.

``reasoning_gym`` is imported when an env is made (``pip install 'textgym[reasoning]'``).

Example:
    >>> import textgym
    >>> env = textgym.make("reasoning_gym/basic_arithmetic", min_terms=2, max_terms=2,
    ...                    min_digits=1, max_digits=1)
    >>> obs, info = env.reset(seed=0)
    >>> obs
    'Calculate -1 / 1.'
    >>> obs, reward, terminated, truncated, info = env.step("<answer>-1</answer>")
    >>> reward, terminated, info["answer"]
    (1.0, True, '-1')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym

from textgym.registry import TrainingDefaults
from textgym.spaces import TextSpace
from textgym.wrappers.invalid_answer import ParseRecord, as_answer_text
from textgym.wrappers.parsers import answer_text

__all__ = ["ANSWER_SETS", "ReasoningGymEnv", "free_text", "list_ids", "make", "training_defaults"]

#: Generate mode answers inside the answer tag that the dataset's prompt asks for: the policy
#: opens it and stops at its end, so a short direct answer costs a few tokens.
GENERATE_POLICY = {"prefill": "<answer>", "stop": ["</answer>"], "max_new_tokens": 16}


def _relationships() -> list[str]:
    from reasoning_gym.graphs.family_relationships import Relationship

    return [relation.value for relation in Relationship]


_TRUE_FALSE = ("True", "False")

#: The datasets whose answers come from a fixed set, and that set (a function where the dataset
#: declares it): their envs offer it as ``info["valid_actions"]`` unless ``candidates`` is given.
ANSWER_SETS: dict[str, Any] = {
    "family_relationships": _relationships,
    "syllogism": ("Yes", "No"),
    "course_schedule": _TRUE_FALSE,
    "game_of_life_halting": _TRUE_FALSE,
    "isomorphic_strings": _TRUE_FALSE,
    "ransom_note": _TRUE_FALSE,
    "circuit_logic": ("0", "1"),
    "acre": ("on", "off", "undetermined"),
    "mahjong_puzzle": ("Peng", "Chi", "Pass"),
}


def answer_set(dataset: str) -> list[str]:
    """The dataset's fixed answer set (:data:`ANSWER_SETS`), or ``[]``: free answers."""
    known = ANSWER_SETS.get(dataset, ())
    return list(known() if callable(known) else known)


def _answer(text: str) -> tuple[str, str, bool]:
    """(the answer, how it was found, whether it was in the asked-for form): the last answer tag
    (closed or not: a generating policy stops at ``</answer>``), a JSON action, else the text."""
    if "<answer>" in text:
        inner = text.rsplit("<answer>", 1)[1].split("</answer>", 1)[0]
        return inner.strip(), "answer-tag", True
    found = answer_text(text)
    if found is not None:
        return found, "json", True
    return text.strip(), "text", False


class ReasoningGymEnv(gym.Env):
    """One reasoning-gym item per episode (see the module docstring).

    Args:
        dataset: the reasoning-gym dataset name, e.g. ``"basic_arithmetic"``.
        level: the curriculum level of every item (``None``: the config as given).
        candidates: a finite answer set, offered as ``info["valid_actions"]`` (score mode);
            ``None``: the dataset's own (:data:`ANSWER_SETS`), if it has one.
        answer_format: ``"direct"`` (default: reasoning-gym's prompt for the answer alone, in an
            answer tag) or ``"think"`` (its step-by-step prompt; ``textgym train --think``).
        max_length: observation and answer length limit.
        **config: fields of the dataset's config (its difficulty); ``seed`` and ``size`` are set
            per item.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(self, dataset: str, level: int | None = None, candidates: list[str] | None = None,
                 max_length: int = 8192, render_mode: str | None = None, answer_format: str | None = None,
                 **config: Any):
        import reasoning_gym
        from reasoning_gym.utils import SYSTEM_PROMPTS

        if dataset not in reasoning_gym.factory.DATASETS:
            raise ValueError(f"reasoning-gym has no dataset {dataset!r}")
        _, config_cls = reasoning_gym.factory.DATASETS[dataset]
        fields = {f.name for f in dataclasses.fields(config_cls)} - {"seed", "size"}
        unknown = sorted(set(config) - fields)
        if unknown:
            raise TypeError(f"reasoning_gym/{dataset} has no config field(s) {unknown}; "
                            f"its fields are {sorted(fields)}")
        self.dataset, self.config, self.level = dataset, dict(config), level
        self.candidates = [str(c) for c in candidates] if candidates is not None else answer_set(dataset)
        self.render_mode = render_mode
        self.observation_space = TextSpace(max_length)
        self.action_space = TextSpace(max_length)
        if answer_format not in (None, "direct", "think"):
            raise ValueError(f"answer_format={answer_format!r}: reasoning-gym answers go in an answer "
                             "tag; choose 'direct' (the default) or 'think' (reason step by step first)")
        # reasoning-gym's own prompts: the answer alone, or step-by-step reasoning first
        self.system_prompt = SYSTEM_PROMPTS["default" if answer_format == "think" else "direct"]
        self._factory = reasoning_gym.factory
        self._curriculum = None
        if level is not None:
            self.set_level(level)
        self._data: Any = None
        self._entry: dict[str, Any] | None = None
        self._question = ""

    def set_level(self, level: int) -> None:
        """Draw the next items at curriculum ``level`` (0 = easiest; levels above the last
        are the last). Raises ``ValueError`` when the dataset has no curriculum."""
        if not self._factory.has_curriculum(self.dataset):
            raise ValueError(f"reasoning_gym/{self.dataset} has no curriculum")
        if self._curriculum is None:
            self._curriculum = self._factory.create_curriculum(self.dataset)
        self._curriculum.set_global_level(int(level))
        self.level = int(level)

    def _item_config(self, seed: int) -> dict[str, Any]:
        if self._curriculum is not None:
            made = self._curriculum.generate_configuration(defaults={**self.config, "seed": seed, "size": 1})
            return {**dataclasses.asdict(made), "seed": seed, "size": 1}
        return {**self.config, "seed": seed, "size": 1}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options and "level" in options:
            self.set_level(options["level"])
        item_seed = int(seed) if seed is not None else int(self.np_random.integers(2**31 - 1))
        self._data = self._factory.create_dataset(self.dataset, **self._item_config(item_seed))
        self._entry = self._data[0]
        self._question = str(self._entry["question"])
        info = {"system_prompt": self.system_prompt, "valid_actions": list(self.candidates),
                "item_seed": item_seed}
        return self._question, info

    def step(self, action: Any):
        if self._entry is None:
            raise RuntimeError("the episode is over: call reset() before step()")
        raw = as_answer_text(action)
        answer, parser, valid = _answer(raw)
        if not valid and answer in self.candidates:   # score mode answers with the candidate itself
            parser, valid = "candidate", True
        try:
            score = float(self._data.score_answer(answer, self._entry))
        except Exception:  # noqa: BLE001 - a scorer that chokes on garbage: the answer is wrong
            score = 0.0
        entry, self._entry = self._entry, None
        parse = ParseRecord(raw=raw, action=answer, action_name=answer if valid else None, parser=parser,
                            valid=valid, invalid_count=int(not valid),
                            policy=None if valid else "penalty").to_dict()
        info = {"valid_actions": [], "parse": parse, "answer": str(entry["answer"]), "score": score}
        return self._question, score, True, False, info

    def render(self) -> str | None:
        return self._question if self.render_mode == "ansi" else None


def list_ids() -> list[str]:
    """Every reasoning-gym dataset name (imports ``reasoning_gym``)."""
    import reasoning_gym

    return sorted(reasoning_gym.factory.DATASETS)


def make(name: str, max_episode_steps: int | None = None, **kwargs: Any) -> gym.Env:
    """The text env of reasoning-gym dataset ``name`` (one step per episode, so
    ``max_episode_steps`` changes nothing), with ``info["episode"]`` at its end."""
    from textgym.wrappers.episode_stats import EpisodeStats

    return EpisodeStats(ReasoningGymEnv(name, **kwargs))


def free_text(name: str) -> Callable[[dict[str, Any]], bool]:
    """Whether ``reasoning_gym/<name>`` made with some env kwargs takes free-text answers (the
    family's declaration, :func:`textgym.registry.takes_free_text`): yes, unless the dataset has a
    fixed answer set (:data:`ANSWER_SETS`) or ``candidates`` are given. reasoning_gym is not
    imported."""
    return lambda env_kwargs: name not in ANSWER_SETS and not env_kwargs.get("candidates")


#: Score mode: REINFORCE on tree rollouts. One sampled answer per item is right about once in 16
#: (family_relationships' relations); REINFORCE on it learns the answer marginal (17%, the share of
#: "son"). Playing every answer of each item (``branch_turns`` 1: one-step episodes, each answer's
#: reward at once) and pushing each by its reward minus the item's mean, every answer weighed alike
#: (``importance_floor`` 1), learns which answer fits which story: 7.5% -> 34.5 / 34.0 / 35.5% on
#: family_relationships' 200 held-out items after 20 updates of 64 items (3 seeds, 25-52 minutes a
#: seed on 2 cores; the ``rl`` benchmark suite's row, docs/results.md). Score mode needs a finite
#: answer set, so the tree costs one decision per answer per item.
SCORE_TREE_REINFORCE = {"baseline": "state", "branch_turns": 1, "importance_floor": 1.0, "clip_eps_high": 4.0,
                        "epochs": 2}


def training_defaults(name: str) -> TrainingDefaults:
    """One answer per episode, rewarded at once (gamma 1); score mode: REINFORCE plays every
    answer of each item (:data:`SCORE_TREE_REINFORCE`); generate mode answers in the tag."""
    return TrainingDefaults(
        updates=16, num_envs=8, trainer={"episodes_per_update": 32, "gamma": 1.0},
        modes={"score": {"updates": 20, "num_envs": 32, "lr": 1e-4,
                         "trainer": {"episodes_per_update": 64, "lora_layers": 8, "metrics_window": 64},
                         "algorithms": {"reinforce": SCORE_TREE_REINFORCE}},
               "generate": {"policy": GENERATE_POLICY}})
