"""What ``textgym train --resume`` keeps, what it may change, and the record of what it changed.

A resumed run is the same run: its env, model, algorithm and mode, and every setting of the
algorithm and of the policy, come from its checkpoint. ``config.toml`` is a description of the
run, so a resume first checks that it still says what the checkpoint was trained with: an edited
``env`` (or ``lr``, ``temperature``...) would otherwise train a Bandit checkpoint on CartPole, or
be silently ignored while the file misdescribes the run. What a session may change (the budget,
the early stop, reporting, device and precision: :data:`CHANGEABLE_ON_RESUME`) is appended to
``resumes.jsonl`` in the run folder, one line per session that changed something.

Example:
    >>> from pathlib import Path
    >>> from textgym.cli.resuming import changed_settings
    >>> changed_settings({"episodes": 16, "lr": 0.1}, {"episodes": 40, "lr": 0.1})
    {'episodes': [16, 40]}
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from textgym.cli.errors import CLIError

#: What a resumed run may change: its budget and when it stops, how it reports, and where and in
#: which precision the model runs. Everything else (env, model, quantization, algorithm and its
#: settings, the policy's settings) comes from the run's checkpoint.
CHANGEABLE_ON_RESUME = ("updates", "episodes", "minutes", "until", "check_every", "check_episodes",
                        "check_max_steps", "plot_every", "sample_every", "eval_episodes", "device", "dtype")

#: What identifies a run: a checkpoint of one never continues as another.
KEPT_ON_RESUME = ("env", "model", "algo", "mode")

RESUMES_FILE = "resumes.jsonl"

_UNSET = object()


def _plain(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples become lists), for comparing with a checkpoint."""
    return json.loads(json.dumps(value))


def check_identity(run_dir: Path, cfg: Any, state: dict[str, Any]) -> None:
    """Refuse (CLIError, one line) a resume whose ``config.toml`` (``cfg``, resolved with the
    flags) names another env, model, algorithm or mode than the checkpoint's ``state``."""
    policy = state.get("policy") or {}
    recorded = {"env": state.get("env_id"), "model": policy.get("name"), "algo": state.get("algorithm"),
                "mode": policy.get("mode")}
    for name in KEPT_ON_RESUME:
        was, now = recorded[name], getattr(cfg, name)
        if was is not None and was != now:
            raise CLIError(
                f"cannot resume {run_dir}: its config.toml names {name} {now!r} but the checkpoint was "
                f"trained with {was!r}; a resumed run keeps its {', '.join(KEPT_ON_RESUME)} (start a new "
                f"run with --out for another one)")


def check_env_kwargs(run_dir: Path, env_kwargs: dict[str, Any], state: dict[str, Any]) -> None:
    """Refuse (CLIError, one line) a resume whose ``config.toml`` ``[env_kwargs]`` table
    (``env_kwargs``, resolved with the config file) differs from the env settings the checkpoint's
    ``state`` makes its envs with: the edit would be silently ignored (the envs are the
    checkpoint's) while the file misdescribes the run."""
    if "env_kwargs" not in state:  # a checkpoint that does not record them: nothing to compare
        return
    # config.toml cannot hold None: a setting left at None is the same as one not given
    trained, given = ({k: v for k, v in _plain(table or {}).items() if v is not None}
                      for table in (state.get("env_kwargs"), env_kwargs))
    for key in sorted(set(trained) | set(given), key=str):
        if trained.get(key, _UNSET) != given.get(key, _UNSET):
            now = f"{key}={given[key]!r}" if key in given else f"no {key}"
            was = f"{key}={trained[key]!r}" if key in trained else f"no {key}"
            raise CLIError(
                f"cannot resume {run_dir}: its config.toml sets [env_kwargs] {now} but the checkpoint "
                f"was trained with {was} (a resumed run keeps its env settings); restore config.toml "
                f"or start a new run")


def check_settings(run_dir: Path, state: dict[str, Any], trainer_settings: dict[str, Any],
                   policy_settings: dict[str, Any]) -> None:
    """Refuse (CLIError, one line) a resume whose ``config.toml`` gives another value to a setting
    the checkpoint's ``state`` records (``trainer_settings``: the algorithm's resolved config;
    ``policy_settings``: the policy's)."""
    trained = {"trainer": state.get("config") or {}, "policy": state.get("policy") or {}}
    for table, settings in (("trainer", trainer_settings), ("policy", policy_settings)):
        for key, value in settings.items():
            if key in ("algorithm", "name", "mode") or key not in trained[table]:
                continue
            was = trained[table][key]
            if _plain(value) != _plain(was):
                raise CLIError(
                    f"cannot resume {run_dir}: its config.toml sets {key}={value!r} but the checkpoint "
                    f"was trained with {was!r} (a resumed run may only change "
                    f"{', '.join(CHANGEABLE_ON_RESUME)}); restore config.toml or start a new run")


def changed_settings(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """The :data:`CHANGEABLE_ON_RESUME` settings whose value differs, as ``{name: [before, after]}``."""
    return {name: [before.get(name), after.get(name)] for name in CHANGEABLE_ON_RESUME
            if before.get(name) != after.get(name)}


def record_changes(run_dir: Path, before: dict[str, Any], after: dict[str, Any], update: int) -> dict[str, list[Any]]:
    """Append the session's changes (:func:`changed_settings`) to ``resumes.jsonl``, with the
    update it resumed from; returns them (nothing written when there are none)."""
    changes = changed_settings(before, after)
    if changes:
        line = {"resumed_at_update": update, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "changed": changes}
        with open(Path(run_dir) / RESUMES_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    return changes
