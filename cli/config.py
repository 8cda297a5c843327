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

if TYPE_CHECKING:
    from textgym.trainers.early_stop import EarlyStop

ALGOS = ("reinforce", "grpo", "ppo")
MODES = ("score", "generate")


@dataclass
class RunConfig:
    """Everything ``textgym train`` needs to start, or restart, a run."""

    env: str = ""
    """Env id or short name (``cartpole`` -> ``textgym/CartPole-v1``)."""
    algo: str = "reinforce"
    """Training algorithm: reinforce, grpo or ppo."""
    model: str = "smollm2-135m"
    """Model registry name, Hugging Face id or local folder."""
    mode: str = "score"
    """``score``: pick the most likely valid action name; ``generate``: sample free text."""
    history: str | None = None
    """What the model reads of an episode: ``None`` (the newest observation alone), ``"full"``
    (the whole episode as a chat) or ``"N"`` (at least the last N turns); a TOML integer works too.
    The policy's ``history`` setting (conversation mode), recorded in its checkpoints."""
    updates: int | None = None
    """Total training updates of the run. The budget is ``updates`` and ``episodes`` (whichever
    comes first); when neither is given (flags or file), the env's recommended budget applies
    (``textgym.registry.training_defaults``), and a budget that is given replaces it."""
    think: bool = False
    """Generate mode: let the model reason in free text before its answer (the env asks for the
    ``think`` answer format, ``<answer>...</answer>`` after the reasoning; the policy gets that
    format's stop string and token budget)."""
    episodes: int | None = None
    """Total training episodes of the run (see ``updates``)."""
    minutes: float | None = None
    """A cap on the wall time of one training session in minutes (None: none). At the cap the
    update in progress is dropped (its rollout stops at once), the checkpoint stays at the last
    complete update, and ``--resume`` replays the dropped one."""
    until: float | None = None
    """Stop once the mean greedy return of a check on held-out episodes reaches this (None: the
    env's solved threshold, registered with its training defaults; no early stop without one)."""
    check_every: int | None = None
    """Run the greedy check every this many updates (0: never, i.e. no early stop; None: the env's
    default, else ``textgym.trainers.EarlyStop``'s)."""
    check_episodes: int | None = None
    """Held-out greedy episodes per check, played together (None: the env's or ``EarlyStop``'s default)."""
    check_max_steps: int | None = None
    """Cap on the length of a check's episodes (None: the env's default cap, else its own limit)."""
    num_envs: int | None = None
    """Envs stepped together (one forward pass per vector step)."""
    lr: float | None = None
    """Learning rate (None: the algorithm's default)."""
    seed: int = 0
    """Seed of the training envs and of torch."""
    lora: bool = True
    """Train a LoRA adapter (True) or all weights (False)."""
    device: str = "auto"
    """Where the model runs: auto (CUDA if available, else CPU), cpu, cuda, cuda:N or mps. A
    resumed run may change it."""
    dtype: str = "auto"
    """Precision of the weights: auto (bfloat16 on a CUDA GPU that supports it, else float32),
    float32, bfloat16 or float16. A resumed run may change it."""
    quantize: str | None = None
    """Load the base model quantized by bitsandbytes, 4bit or 8bit (QLoRA), or not (None)."""
    sft: str | None = None
    """JSONL file of {"prompt", "answer"} pairs for a supervised warm-up before RL."""
    checkpoint_every: int = 10
    """Save a checkpoint every this many updates (and always at the end or on Ctrl-C)."""
    plot_every: int = 1
    """Redraw curve.png every this many updates (at most every 10 s; always at the end)."""
    sample_every: int = 2
    """Show a sample answer in the live display every this many updates."""
    eval_episodes: int = 0
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


FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
_TABLES = ("trainer", "env_kwargs", "policy")


#: ``train`` and ``eval`` flags that set a policy setting, by ``PolicyConfig`` field name: the
#: values go to the ``policy`` table and PolicyConfig checks them. ``chat_template`` is a file
#: name on the command line; its content is the setting (a run never needs the file again).
POLICY_FLAGS = ("temperature", "top_p", "max_new_tokens", "normalization", "chat_template", "act_dtype")


def policy_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` with the :data:`POLICY_FLAGS` given moved into a ``policy`` table, the chat
    template file read and checked for Jinja syntax (CLIError: missing file, not UTF-8 text,
    a syntax error)."""
    settings = {name: flags[name] for name in POLICY_FLAGS if flags.get(name) is not None}
    if "chat_template" in settings:
        settings["chat_template"] = read_chat_template(settings["chat_template"])
    rest = {k: v for k, v in flags.items() if k not in POLICY_FLAGS}
    return {**rest, "policy": {**(flags.get("policy") or {}), **settings}} if settings else rest


#: ``train`` flags that set a field of the algorithm's config: the values go to the ``trainer``
#: table (where the config dataclass checks them).
TRAINER_FLAGS = ("transcripts", "report_to")


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
    """Validate one value against RunConfig's field type; returns the (coerced) value."""
    kind = FIELDS[name].type
    if name in _TABLES:
        if not isinstance(value, dict):
            raise CLIError(f"{where}: '{name}' must be a table, got {value!r}")
        return dict(value)
    if value is None:
        if "None" in kind:
            return None
        raise CLIError(f"{where}: '{name}' must not be empty")
    if name == "history" and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # history = 4 in a config file
    if kind.startswith("int") and (isinstance(value, bool) or not isinstance(value, int)):
        raise CLIError(f"{where}: '{name}' must be an integer, got {value!r}")
    if kind.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CLIError(f"{where}: '{name}' must be a number, got {value!r}")
        value = float(value)
    if kind == "bool" and not isinstance(value, bool):
        raise CLIError(f"{where}: '{name}' must be true or false, got {value!r}")
    if kind.startswith("str") and not isinstance(value, str):
        raise CLIError(f"{where}: '{name}' must be a string, got {value!r}")
    return value


def validate(config: RunConfig, where: str = "config") -> RunConfig:
    """Check values that a type alone does not (ranges, choices). Raises CLIError."""
    if config.algo not in ALGOS:
        raise CLIError(f"{where}: algo must be one of {', '.join(ALGOS)}, got {config.algo!r}")
    if config.mode not in MODES:
        raise CLIError(f"{where}: mode must be one of {', '.join(MODES)}, got {config.mode!r}")
    if config.think and config.mode != "generate":
        raise CLIError(f"{where}: think needs generate mode (the model writes its reasoning), "
                       f"got mode {config.mode!r}")
    for name in ("updates", "episodes", "num_envs", "checkpoint_every", "plot_every", "sample_every",
                 "check_episodes", "check_max_steps"):
        value = getattr(config, name)
        if value is not None and value < 1:
            raise CLIError(f"{where}: {name.replace('_', '-')} must be at least 1, got {value}")
    if config.updates is None and config.episodes is None:
        raise CLIError(f"{where}: no budget: give updates or episodes")
    if config.eval_episodes < 0:
        raise CLIError(f"{where}: eval-episodes must be >= 0, got {config.eval_episodes}")
    if config.check_every is not None and config.check_every < 0:
        raise CLIError(f"{where}: check-every must be >= 0 (0: no early stop), got {config.check_every}")
    if config.until is not None and not math.isfinite(config.until):
        raise CLIError(f"{where}: until must be a finite number, got {config.until}")
    if config.minutes is not None and not (config.minutes > 0 and math.isfinite(config.minutes)):
        raise CLIError(f"{where}: minutes must be a positive number, got {config.minutes}")
    if config.lr is not None and not (config.lr > 0 and math.isfinite(config.lr)):
        raise CLIError(f"{where}: lr must be a positive number, got {config.lr}")
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
    from textgym.trainers.early_stop import EarlyStop

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
