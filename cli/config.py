"""Run configuration for ``textgym train``: defaults < TOML file (``--config``) < flags.

The resolved configuration is written to ``<run>/config.toml``; ``--resume <run>`` and
``--config <run>/config.toml`` read it back.

Example config file::

    env = "cartpole"
    algo = "grpo"
    episodes = 200
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
from typing import Any

from textgym.cli.errors import CLIError

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
    think: bool = False
    """Generate mode: let the model reason in free text before its answer (the env asks for the
    ``think`` answer format, ``<answer>...</answer>`` after the reasoning; the policy gets that
    format's stop string and token budget)."""
    episodes: int | None = None
    """Total training episodes (None: the env's recommended budget, ``textgym.registry.training_defaults``)."""
    minutes: float | None = None
    """Time budget of one training session in minutes (None: none): the run stops cleanly after
    the last update expected to end within it, and ``--resume`` continues it."""
    num_envs: int | None = None
    """Envs stepped together (one forward pass per vector step)."""
    lr: float | None = None
    """Learning rate (None: the algorithm's default)."""
    seed: int = 0
    """Seed of the training envs and of torch."""
    lora: bool = True
    """Train a LoRA adapter (True) or all weights (False)."""
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
    """Settings of the policy (``textgym.policy.PolicyConfig``: temperature, prefill, stop,
    max_new_tokens...) on top of the model registry's defaults."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
_TABLES = ("trainer", "env_kwargs", "policy")


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
    for name in ("episodes", "num_envs", "checkpoint_every", "plot_every", "sample_every"):
        value = getattr(config, name)
        if value is not None and value < 1:
            raise CLIError(f"{where}: {name.replace('_', '-')} must be at least 1, got {value}")
    if config.eval_episodes < 0:
        raise CLIError(f"{where}: eval-episodes must be >= 0, got {config.eval_episodes}")
    if config.minutes is not None and not (config.minutes > 0 and math.isfinite(config.minutes)):
        raise CLIError(f"{where}: minutes must be a positive number, got {config.minutes}")
    if config.lr is not None and not (config.lr > 0 and math.isfinite(config.lr)):
        raise CLIError(f"{where}: lr must be a positive number, got {config.lr}")
    if config.sft is not None and not Path(config.sft).is_file():
        raise CLIError(f"{where}: SFT file {config.sft} does not exist")
    return config


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a run config file; unknown keys and wrong types are errors (CLIError)."""
    path = Path(path)
    if not path.is_file():
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
