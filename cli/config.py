"""Run configuration for ``textgym train``: defaults < TOML file (``--config``) < flags.

The resolved configuration is written to ``<run>/config.toml``; ``--resume <run>`` and
``--config <run>/config.toml`` read it back.

Example config file::

    env = "cartpole"
    algo = "grpo"
    updates = 12
    until = 195.0
    num_envs = 8
    lr = 1e-4

    [trainer]          # fields of the algorithm's config dataclass (textgym.trainers)
    group_size = 4

    [env_kwargs]       # keyword arguments for textgym.make
    max_episode_steps = 100

    [policy]           # settings of textgym.policy.PolicyConfig
    temperature = 0.7
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textgym.cli.errors import CLIError

from textgym.policy.config import MODES, PolicyConfig
from textgym.settings import check_value, like, passed_on, setting, setting_of
from textgym.trainers import ALGORITHMS, TrainConfig
from textgym.trainers.engine.train_config import RUN_FOLDER_PANEL
from textgym.training_defaults import TrainingDefaults

if TYPE_CHECKING:
    from textgym.trainers.engine.early_stop import EarlyStop

#: The ``--help`` panels of ``textgym train``, in the order they are shown.
WHAT = "What to train"
BUDGET = "Budget and early stop"
TRAINING = "Training"
HARDWARE = "Hardware"
RUN = RUN_FOLDER_PANEL


@dataclass
class RunConfig:
    """Everything ``textgym train`` needs to start, or restart, a run.

    Each field is a key of the config file (``config.toml``); a field declared with ``flag`` is
    also an option of ``textgym train`` (cli/options.py derives them: the first sentence of the
    field's docstring is its help). Ranges are checked by :func:`validate`.
    """

    env: str = ""
    """Env id or short name (``cartpole`` -> ``textgym/CartPole-v1``)."""
    algo: str = setting("reinforce", choices=ALGORITHMS, flag=True, panel=WHAT)
    """The RL algorithm."""
    model: str = setting("smollm2-135m", flag=True, panel=WHAT)  # models.DEFAULT_MODEL (a test checks)
    """Model registry name, Hugging Face id or local folder."""
    mode: str = setting("score", choices=MODES, flag=True, panel=WHAT)
    """score: pick the likeliest valid action; generate: sample free text.
    ``score`` ranks the env's valid action names; the env parses a ``generate`` answer."""
    history: str | None = setting(None, flag=True, panel=WHAT, metavar="full|N",
                                  default_text="the newest observation")
    """What the model reads of an episode: 'full' or the last N turns.
    ``None``: the newest observation alone; ``"full"``: the whole episode as a chat, its KV cache
    kept across turns; ``"N"``: at least the last N turns (a TOML integer works too). The
    policy's ``history`` setting (conversation mode), recorded in its checkpoints."""
    # The budget and the early stop: declared (range, doc) with what an env recommends for them.
    updates: int | None = like(TrainingDefaults, "updates", flag=True, panel=BUDGET, default_text="per env")
    think: bool = setting(False, flag="--think", panel=WHAT)
    """Generate mode: reason in free text, then answer in <answer></answer> tags.
    Implies ``--mode generate``: the env asks for the ``think`` answer format
    (``<answer>...</answer>`` after the reasoning) and the policy gets that format's stop string
    and token budget."""
    episodes: int | None = like(TrainingDefaults, "episodes", flag=True, panel=BUDGET, default_text="per env")
    minutes: float | None = like(TrainingDefaults, "minutes", flag=True, panel=BUDGET, default_text="none")
    until: float | None = like(TrainingDefaults, "until", flag=True, panel=BUDGET, metavar="RETURN",
                               default_text="the env's solved return")
    check_every: int | None = like(TrainingDefaults, "check_every", flag=True, panel=BUDGET, metavar="K",
                                   default_text="per env")
    check_episodes: int | None = like(TrainingDefaults, "check_episodes", flag=True, panel=BUDGET, metavar="M",
                                      default_text="per env")
    check_max_steps: int | None = like(TrainingDefaults, "check_max_steps")
    num_envs: int | None = like(TrainConfig, "num_envs", None, flag=True, panel=TRAINING,
                                default_text="per env")
    lr: float | None = like(TrainConfig, "lr", None, flag=True, panel=TRAINING,
                            default_text="the algorithm's")
    seed: int = like(TrainConfig, "seed", 0, flag=True, panel=TRAINING)
    lora: bool = like(TrainConfig, "use_lora", True, flag="--lora/--full", panel=WHAT)
    device: str = setting("auto", flag=True, panel=HARDWARE)
    """auto (CUDA if available, else CPU), cpu, cuda, cuda:N or mps.
    Where the model runs; a resumed run may change it."""
    dtype: str = setting("auto", flag=True, panel=HARDWARE)
    """auto (bfloat16 on a GPU that supports it, else float32), float32, bfloat16 or float16.
    The precision of the weights; a resumed run may change it."""
    quantize: str | None = setting(None, flag=True, panel=HARDWARE, metavar="4bit|8bit",
                                   default_text="none")
    """Load the model quantized by bitsandbytes (QLoRA; extra textgym[quantize]).
    4bit or 8bit, or not (None)."""
    sft: str | None = setting(None, flag=True, panel=TRAINING, metavar="FILE")
    """JSONL of {"prompt", "answer"} pairs: a supervised warm-up before RL."""
    sft_player: str | None = like(TrainingDefaults, "sft_player", flag=True, panel=TRAINING, metavar="NAME",
                                  default_text="per env")
    sft_episodes: int = like(TrainingDefaults, "sft_episodes", 200, flag=True, panel=TRAINING, metavar="N")
    sft_epochs: int = like(TrainingDefaults, "sft_epochs", 3, flag=True, panel=TRAINING, metavar="N")
    checkpoint_every: int = like(TrainConfig, "checkpoint_every", 10, at_least=1)
    plot_every: int = setting(1, at_least=1)
    """Redraw curve.png every this many updates (at most every 10 s; always at the end)."""
    sample_every: int = setting(2, at_least=1)
    """Show a sample answer in the live display every this many updates."""
    eval_episodes: int = setting(0, at_least=0, at_most=1_000_000)
    """Greedy evaluation episodes at the end of training, written to summary.json (0: none)."""
    trainer: dict[str, Any] = field(default_factory=dict)
    """Extra fields of the algorithm's config dataclass."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for the env."""
    policy: dict[str, Any] = field(default_factory=dict)
    """Settings of the policy (``textgym.policy.PolicyConfig``: temperature, top_p,
    max_new_tokens, normalization, chat_template, prefill, stop, ...) on top of the model registry's defaults;
    ``config.toml`` holds all of them, resolved (``mode``, ``seed`` and ``history`` are the keys
    above). A resumed run may not change them."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class EnvSettings:
    """``train`` flags that set a keyword argument of the env (the run's ``env_kwargs`` table, where
    a config file sets them): declared here for their options (cli/options.py), checked by
    :func:`env_flags`."""

    max_episode_steps: int | None = setting(None, at_least=1, flag=True, panel=BUDGET, metavar="N")
    """Cut episodes at N steps (truncated; an env with no limit: 1000).
    The env's own step limit (``textgym.make(..., max_episode_steps=N)``); without one the rollout
    cuts an episode at ``textgym.step_cap.DEFAULT_MAX_EPISODE_STEPS`` (a test checks the 1000)."""
    step_timeout: float | None = setting(None, at_least=0.001, flag=True, panel=HARDWARE, metavar="SECONDS",
                                         default_text="30")  # textgym.remote.DEFAULT_STEP_TIMEOUT (a test checks)
    """openenv:URL envs: a server's longest reset or step.
    Passed to ``textgym.remote.OpenEnvTextEnv``; other envs do not take it."""


#: ``train`` flags that set an env keyword argument (the :class:`EnvSettings` fields).
ENV_FLAGS = tuple(f.name for f in dataclasses.fields(EnvSettings))


def env_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` with the :data:`ENV_FLAGS` given moved into an ``env_kwargs`` table."""
    settings = {name: flags[name] for name in ENV_FLAGS if flags.get(name) is not None}
    rest = {k: v for k, v in flags.items() if k not in ENV_FLAGS}
    return {**rest, "env_kwargs": {**(flags.get("env_kwargs") or {}), **settings}} if settings else rest


FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
_TABLES = ("trainer", "env_kwargs", "policy")


#: ``train`` flags that set a policy setting (the ``PolicyConfig`` fields declared with ``flag``):
#: the values go to the ``policy`` table and PolicyConfig checks them. ``chat_template`` is a file
#: name on the command line; its content is the setting (a run never needs the file again).
POLICY_FLAGS = tuple(f.name for f in dataclasses.fields(PolicyConfig) if setting_of(f).flag)


def policy_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` with the :data:`POLICY_FLAGS` given moved into a ``policy`` table, the chat
    template file read and checked for Jinja syntax (CLIError: missing file, not UTF-8 text,
    a syntax error)."""
    settings = {name: flags[name] for name in POLICY_FLAGS if flags.get(name) is not None}
    if "chat_template" in settings:
        settings["chat_template"] = read_chat_template(settings["chat_template"])
    rest = {k: v for k, v in flags.items() if k not in POLICY_FLAGS}
    return {**rest, "policy": {**(flags.get("policy") or {}), **settings}} if settings else rest


#: ``train`` flags that set a field of the algorithm's config (the ``TrainConfig`` fields declared
#: with ``flag``): the values go to the ``trainer`` table (where the config dataclass checks them).
TRAINER_FLAGS = tuple(f.name for f in dataclasses.fields(TrainConfig) if setting_of(f).flag)

#: The run settings that are the trainer's, declared ``like`` its config's fields: ``{run config
#: field: TrainConfig field}`` (``lora`` -> ``use_lora``). They are top-level keys of a run config
#: and go to the algorithm's config as these fields.
TRAINER_SETTINGS = passed_on(RunConfig, TrainConfig)


def trainer_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` with the :data:`TRAINER_FLAGS` given moved into a ``trainer`` table."""
    settings = {name: flags[name] for name in TRAINER_FLAGS if flags.get(name) is not None}
    rest = {k: v for k, v in flags.items() if k not in TRAINER_FLAGS}
    return {**rest, "trainer": {**(flags.get("trainer") or {}), **settings}} if settings else rest


def read_chat_template(path: str | Path) -> str:
    """The text of a Jinja chat template file, checked for syntax errors (CLIError)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CLIError(f"chat template file {path} does not exist") from None
    except UnicodeDecodeError:
        raise CLIError(f"chat template file {path} is not UTF-8 text") from None
    except OSError as exc:
        raise CLIError(f"cannot read chat template file {path}: {exc.strerror or exc}") from None
    if not text.strip():
        raise CLIError(f"chat template file {path} is empty")
    import jinja2  # what transformers renders chat templates with

    try:
        jinja2.Environment().parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise CLIError(f"chat template {path}, line {exc.lineno}: {exc.message}") from None
    from textgym.policy.prompts import check_chat_template

    try:
        check_chat_template(text)
    except ValueError as exc:
        raise CLIError(f"chat template {path}: {exc}") from None
    return text


def _check_type(name: str, value: Any, where: str) -> Any:
    """Validate one value against RunConfig's field (its type and range); returns the (coerced)
    value (CLIError)."""
    if name in _TABLES:
        if not isinstance(value, dict):
            raise CLIError(f"{where}: '{name}' must be a table, got {value!r}")
        return dict(value)
    if name == "history" and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # history = 4 in a config file
    try:
        return check_value(FIELDS[name], value)
    except ValueError as exc:
        raise CLIError(f"{where}: {exc}") from None


def validate(config: RunConfig, where: str = "config") -> RunConfig:
    """Check every value against its field (type and range, as declared in :class:`RunConfig`)
    and what no one field says (a budget, think needs generate mode, ...). Raises CLIError."""
    for name in FIELDS:
        if name not in _TABLES:
            setattr(config, name, _check_type(name, getattr(config, name), where))
    if config.think and config.mode != "generate":
        raise CLIError(f"{where}: think needs generate mode (the model writes its reasoning), "
                       f"got mode {config.mode!r}")
    if config.updates is None and config.episodes is None:
        raise CLIError(f"{where}: no budget: give updates or episodes")
    from textgym.models import ModelError, check_option_names  # torch-free

    try:
        check_option_names(config.device, config.dtype, config.quantize)
    except ModelError as exc:
        raise CLIError(f"{where}: {exc}") from None
    if config.quantize is not None and not config.lora:
        raise CLIError(f"{where}: a {config.quantize} model trains through a LoRA adapter only: "
                       "drop --full (or --quantize)")
    if config.sft is not None and not Path(config.sft).is_file():
        raise CLIError(f"{where}: SFT file {config.sft} does not exist")
    if config.sft_player == "none":  # turns off an env's registered warm start
        config.sft_player = None
    if config.sft_player is not None and config.history is not None:
        raise CLIError(f"{where}: sft_player records the newest observation alone; drop history "
                       "(or give demonstrations of whole conversations with sft)")
    if config.updates == 0 and config.sft is None and config.sft_player is None:
        raise CLIError(f"{where}: updates 0 trains nothing without a warm start: give sft_player "
                       "or sft (imitation alone), or updates >= 1")
    setting = history_setting(config.history, where)
    config.history = None if setting is None else str(setting)  # one spelling in config.toml
    return config


def history_setting(history: str | None, where: str = "config") -> int | str | None:
    """The policy's ``history`` setting of a run config's ``history`` (CLIError when malformed)."""
    if history is None or history.strip().lower() == "none":
        return None
    if history.strip().lower() == "full":
        return "full"
    if history.strip().isdigit() and int(history) >= 1:
        return int(history)
    raise CLIError(f"{where}: history must be 'full', 'none' or a number of turns >= 1, got {history!r}")


#: The fields that make a run's budget: given together, from the flags and the config file, they
#: replace the env's recommended budget (or, on resume, the run's) as a whole.
BUDGET_FIELDS = ("updates", "episodes")


def gives_budget(layer: dict[str, Any]) -> bool:
    """Whether a layer of settings (flags, a config file) sets a budget."""
    return any(layer.get(name) is not None for name in BUDGET_FIELDS)


def without_budget(layer: dict[str, Any]) -> dict[str, Any]:
    """``layer`` without its budget (replaced by a budget given above it)."""
    return {k: v for k, v in layer.items() if k not in BUDGET_FIELDS}


def early_stop(config: RunConfig) -> EarlyStop | None:
    """The ``textgym.trainers.EarlyStop`` of a run config, or ``None`` (no ``until``, or
    ``check_every`` 0)."""
    if config.until is None or config.check_every == 0:
        return None
    from textgym.trainers.engine.early_stop import EarlyStop

    given = {"every": config.check_every, "episodes": config.check_episodes, "max_steps": config.check_max_steps}
    return EarlyStop(until=config.until, **{k: v for k, v in given.items() if v is not None})


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a run config file; unknown keys and wrong types are errors (CLIError)."""
    path = Path(path)
    if not path.is_file():
        if path.is_dir():
            raise CLIError(f"config file {path} is a folder, not a TOML file")
        if path.exists():  # /dev/zero, a pipe: reading it could never end
            raise CLIError(f"config file {path} is not a regular file")
        raise CLIError(f"config file {path} does not exist")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise CLIError(f"malformed config file {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise CLIError(f"config file {path} is not UTF-8 text: {exc}") from exc
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in FIELDS:
            known = ", ".join(sorted(FIELDS))
            raise CLIError(f"{path}: unknown key '{key}' (known keys: {known})")
        values[name] = _check_type(name, value, str(path))
    return values


def resolve(*layers: dict[str, Any]) -> RunConfig:
    """Merge layers (later wins; None values in a layer mean "not given") into a RunConfig."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for name, value in layer.items():
            if value is None:
                continue
            if name in _TABLES:
                merged[name] = {**merged.get(name, {}), **value}
            else:
                merged[name] = value
    return RunConfig(**merged)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON string escapes are valid TOML
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")


def dumps(config: RunConfig) -> str:
    """TOML text of a RunConfig (None values are left out: they mean "the default")."""
    data = config.to_dict()
    lines = ["# textgym run config (resolved: defaults < --config file < flags)"]
    for name, value in data.items():
        if value is None or name in _TABLES:
            continue
        lines.append(f"{name} = {_toml_value(value)}")
    for name in _TABLES:
        if data[name]:
            lines.append(f"\n[{name}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in data[name].items() if v is not None)
    return "\n".join(lines) + "\n"
