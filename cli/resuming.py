"""What ``textgym train --resume`` keeps, what it may change, and the record of what it changed.

A resumed run is the same run: its env, model, algorithm and mode, its seeds, its adapter's
shape and every setting of the policy come from its checkpoint. ``config.toml`` is a description
of the run, so a resume first checks that it still says what the checkpoint was trained with: an
edited ``env`` (or ``temperature``, ``lora_layers``...) would otherwise train a Bandit checkpoint
on CartPole, or be silently ignored while the file misdescribes the run. What a session may change
(:data:`CHANGEABLE_ON_RESUME`: the budget, the early stop, reporting, device and precision (the
acting precision too), and
the algorithm's settings but ``TrainConfig.fixed_on_resume``: a new ``gamma`` or ``lr`` from the
next update on, the optimizer's moments kept) is applied and appended to ``resumes.jsonl`` in the
run folder, one line per session that changed something; ``config.toml`` then says what the next
update trains with.

Example:
    >>> from pathlib import Path
    >>> from textgym.cli.resuming import changed_settings
    >>> changed_settings({"episodes": 16, "check_every": 1}, {"episodes": 40, "check_every": 1})
    {'episodes': [16, 40]}
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from textgym.cli.errors import CLIError

#: What a resumed run may change: its budget and when it stops, how it reports, where and in
#: which precision the model runs, and the algorithm's settings (``lr``, ``num_envs`` and the
#: ``[trainer]`` table, but not ``TrainConfig.fixed_on_resume``: the seeds and the adapter's shape).
#: Everything else (env, model, quantization, algorithm, the policy's settings) comes from the
#: run's checkpoint.
CHANGEABLE_ON_RESUME = ("updates", "episodes", "minutes", "until", "check_every", "check_episodes",
                        "check_max_steps", "plot_every", "sample_every", "eval_episodes", "device", "dtype",
                        "lr", "num_envs", "trainer")

#: The env settings a resumed run may change: the step limit (Gymnasium's ``TimeLimit`` around the
#: env, not its dynamics), e.g. longer training episodes once the policy reaches the old limit.
ENV_KWARGS_CHANGEABLE_ON_RESUME = ("max_episode_steps",)

#: The policy settings a resumed run may change: the precision it acts and evaluates in (like
#: ``dtype``, where and how fast the model runs, not what it is); the update corrects for the
#: acting precision (``TrainConfig.act_correction``).
POLICY_CHANGEABLE_ON_RESUME = ("act_dtype", "eval_act_dtype")

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


def check_env_kwargs(run_dir: Path, env_kwargs: dict[str, Any],
                     state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The env settings a resumed run makes its envs with (the checkpoint's, with the
    :data:`ENV_KWARGS_CHANGEABLE_ON_RESUME` ones of ``env_kwargs``, the ``[env_kwargs]`` table of
    ``config.toml`` resolved with the config file and the flags) and the changes, ``{name:
    [trained, new]}``. Refuses (CLIError, one line) any other difference from the settings the
    checkpoint's ``state`` records: the edit would be silently ignored (the envs are the
    checkpoint's) while the file misdescribes the run."""
    recorded = state.get("env_kwargs") or {}
    if "env_kwargs" not in state:  # a checkpoint that does not record them: nothing to compare
        return recorded, {}
    # config.toml cannot hold None: a setting left at None is the same as one not given
    trained, given = ({k: v for k, v in _plain(table or {}).items() if v is not None}
                      for table in (recorded, env_kwargs))
    changes: dict[str, list[Any]] = {}
    for key in sorted(set(trained) | set(given), key=str):
        if key in ENV_KWARGS_CHANGEABLE_ON_RESUME and trained.get(key) != given.get(key):
            changes[key] = [trained.get(key), given.get(key)]
        elif trained.get(key, _UNSET) != given.get(key, _UNSET):
            now = f"{key}={given[key]!r}" if key in given else f"no {key}"
            was = f"{key}={trained[key]!r}" if key in trained else f"no {key}"
            raise CLIError(
                f"cannot resume {run_dir}: its config.toml sets [env_kwargs] {now} but the checkpoint "
                f"was trained with {was} (a resumed run keeps its env settings but "
                f"{', '.join(ENV_KWARGS_CHANGEABLE_ON_RESUME)}); restore config.toml or start a new run")
    kept = {k: v for k, v in recorded.items() if k not in changes}
    return {**kept, **{k: new for k, (_, new) in changes.items() if new is not None}}, changes


def with_none_settings(trainer_table: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """``trainer_table`` (config.toml's ``[trainer]``) with the checkpoint's settings at ``None``
    that it leaves out: TOML cannot write ``None``, and a missing key would mean the field's
    default (``minibatches = None``, one step per ``minibatch_size`` decisions, would become 8
    minibatches)."""
    nones = {key: None for key, value in (state.get("config") or {}).items()
             if value is None and key not in trainer_table}
    return {**nones, **trainer_table}


def check_settings(run_dir: Path, state: dict[str, Any], trainer_settings: dict[str, Any],
                   policy_settings: dict[str, Any], fixed: tuple[str, ...]) -> dict[str, list[Any]]:
    """The algorithm's and the policy's settings a resume changes, ``{field: [trained, new]}``
    (``trainer_settings``: the algorithm's config resolved from ``config.toml`` and the flags;
    ``policy_settings``: the policy's; against those the checkpoint's ``state`` records).
    Refuses (CLIError, one line) a new value of a ``fixed`` setting (``TrainConfig.fixed_on_resume``)
    or of a policy setting but :data:`POLICY_CHANGEABLE_ON_RESUME`."""
    trained = {"trainer": state.get("config") or {}, "policy": state.get("policy") or {}}
    changes: dict[str, list[Any]] = {}
    for table, settings in (("trainer", trainer_settings), ("policy", policy_settings)):
        for key, value in settings.items():
            if key in ("algorithm", "name", "mode") or key not in trained[table]:
                continue
            was = trained[table][key]
            if _plain(value) == _plain(was):
                continue
            if (table == "trainer" and key not in fixed) or (table == "policy" and key in POLICY_CHANGEABLE_ON_RESUME):
                changes[key] = [was, value]
                continue
            kept = "its seeds and adapter shape" if table == "trainer" else "the policy's settings"
            raise CLIError(
                f"cannot resume {run_dir}: its config.toml sets {key}={value!r} but the checkpoint "
                f"was trained with {was!r} (a resumed run keeps {kept}); restore config.toml or "
                f"start a new run")
    return changes


#: The :data:`CHANGEABLE_ON_RESUME` names that are the algorithm's settings: their changes are
#: the checkpoint's against the new config (:func:`check_settings`), by ``TrainConfig`` field.
_ALGORITHM_SETTINGS = ("lr", "num_envs", "trainer")


def changed_settings(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """The run settings of :data:`CHANGEABLE_ON_RESUME` (the budget, the early stop, reporting,
    device, precision) whose value differs, as ``{name: [before, after]}``."""
    return {name: [before.get(name), after.get(name)] for name in CHANGEABLE_ON_RESUME
            if name not in _ALGORITHM_SETTINGS and before.get(name) != after.get(name)}


def record_changes(run_dir: Path, before: dict[str, Any], after: dict[str, Any], update: int,
                   algorithm: dict[str, list[Any]] | None = None) -> dict[str, list[Any]]:
    """Append the session's changes to ``resumes.jsonl``: the run settings' (:func:`changed_settings`
    of the config before and after) and the ``algorithm`` settings' (:func:`check_settings`), with
    the update it resumed from; returns them (nothing written when there are none)."""
    changes = {**changed_settings(before, after), **(algorithm or {})}
    if changes:
        line = {"resumed_at_update": update, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "changed": changes}
        with open(Path(run_dir) / RESUMES_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    return changes
