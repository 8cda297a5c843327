"""``textgym train``: resolve the config, prepare the run folder, train with a live display.

A run folder holds ``config.toml`` (the resolved config), ``metrics.jsonl``, ``checkpoint/``,
``curve.png`` (redrawn every ``plot_every`` updates) and ``summary.json`` (at the end, or when
stopped). Ctrl-C or SIGTERM stops after the current update and saves a checkpoint; a second
one stops at once (the last periodic checkpoint stays; see cli/stopping.py). ``--resume DIR``
continues the same run: the update and episode counters carry on and ``metrics.jsonl`` grows.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from textgym.cli import config as run_config
from textgym.cli import runs, stopping
from textgym.cli.display import LiveDisplay
from textgym.cli.envtools import (
    check_env_kwargs,
    recorded_env_id,
    refuse_env_import,
    resolve_env,
)
from textgym.cli.errors import CLIError
from textgym.cli.messages import say
from textgym.cli.modelcheck import check_model
from textgym.cli.runs import with_stderr
from textgym.cli.stopping import StopSignals

# What a resumed run may change: its budget and how it reports. Everything else (env, model,
# algorithm and its settings) comes from the run's checkpoint.
_CHANGEABLE_ON_RESUME = ("episodes", "minutes", "plot_every", "sample_every", "eval_episodes")

#: curve.png is redrawn at most this often (drawing takes about a second).
MIN_PLOT_SECONDS = 10.0

CONFIG_FILE = "config.toml"
CHECKPOINT = "checkpoint"


# --- configuration ---------------------------------------------------------------------------


def _new_config(file_layer: dict[str, Any], flags: dict[str, Any],
                config_file: Path | None) -> run_config.RunConfig:
    merged = run_config.resolve(file_layer, flags)
    if not merged.env:
        raise CLIError(
            "missing ENV: name an env (e.g. `textgym train cartpole`) or give --resume DIR")
    if flags.get("env") is None:  # the env comes from the config file
        refuse_env_import(merged.env, f"config file {config_file}",
                          f"textgym train {merged.env} --config {config_file}")
    if merged.think and flags.get("mode") is None and file_layer.get("mode") is None:
        flags = {**flags, "mode": "generate"}  # reasoning is written: --think means generate mode
        merged.mode = "generate"
    env_id = resolve_env(merged.env)
    think = _think_defaults() if merged.think else {}
    cfg = run_config.resolve(_env_defaults(env_id, merged.mode), think, file_layer, flags)
    cfg.env = recorded_env_id(merged.env, env_id)
    return run_config.validate(cfg)


def _env_defaults(env_id: str, mode: str) -> dict[str, Any]:
    """The env's recommended training settings in ``mode`` (registered with the env, see
    ``textgym.registry.training_defaults``), as the lowest config layer."""
    from textgym.registry import training_defaults

    defaults = training_defaults(env_id, mode).to_dict()
    return {k: v for k, v in defaults.items() if k in run_config.FIELDS}


def _think_defaults() -> dict[str, Any]:
    """``--think``: the env asks for the ``think`` answer format and the policy answers it (no
    prefill, stopped at the closing answer tag, that format's token budget); on top of the env's
    generate-mode defaults, below the config file and the flags."""
    from textgym.wrappers.answer_format import ANSWER_FORMATS

    think = ANSWER_FORMATS["think"]
    return {"env_kwargs": {"answer_format": think.name}, "policy": think.policy_settings()}


def _resume_config(run_dir: Path, file_layer: dict[str, Any], flags: dict[str, Any],
                   out: Path | None) -> run_config.RunConfig:
    if out is not None and Path(out).resolve() != run_dir.resolve():
        raise CLIError("give either --resume DIR or --out DIR, not both")
    if not run_dir.is_dir():
        raise CLIError(f"cannot resume: run folder {run_dir} does not exist")
    runs.check_not_in_use(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise CLIError(f"cannot resume: {run_dir} is not a textgym run folder (no {CONFIG_FILE})")
    saved = run_config.load_toml(run_dir / CONFIG_FILE)
    if not saved.get("env"):
        raise CLIError(f"cannot resume: {run_dir / CONFIG_FILE} names no env")
    if flags.get("env") is None:  # a run folder (or a config file) never chooses code to import
        refuse_env_import(saved["env"], f"the run in {run_dir}",
                          f"textgym train {saved['env']} --resume {run_dir}")
        if file_layer.get("env") is not None:
            refuse_env_import(file_layer["env"], "the config file",
                              f"textgym train {file_layer['env']} --resume {run_dir}")
    given = {**file_layer, **{k: v for k, v in flags.items() if v is not None}}
    if given.get("env") is not None:
        given["env"] = recorded_env_id(given["env"], resolve_env(given["env"]))
    defaults = run_config.RunConfig().to_dict()
    for name, value in given.items():
        if name in _CHANGEABLE_ON_RESUME:
            continue
        was = saved.get(name, defaults[name])
        if isinstance(value, dict):  # a table: only the keys given must match
            changes = [(f"{name}.{k}", v, (was or {}).get(k)) for k, v in value.items()
                       if (was or {}).get(k) != v]
        else:
            changes = [(name, value, was)] if value != was else []
        for key, new_value, old_value in changes:
            raise CLIError(
                f"cannot resume {run_dir} with {key.replace('_', '-')}={new_value!r}: the run "
                f"was started with {old_value!r} (a resumed run may only change "
                f"{', '.join(_CHANGEABLE_ON_RESUME)})"
            )
    cfg = run_config.resolve(saved, file_layer, flags)
    cfg.env = given.get("env") or recorded_env_id(saved["env"], resolve_env(saved["env"]))
    return run_config.validate(cfg)


def _trainer_config(cfg: run_config.RunConfig) -> Any:
    """The algorithm's config dataclass from the run config (bad values -> CLIError)."""
    from textgym.trainers import config as trainer_configs

    fields = {
        **cfg.trainer,
        "num_envs": cfg.num_envs,
        "seed": cfg.seed,
        "use_lora": cfg.lora,
        "checkpoint_every": cfg.checkpoint_every,
        **({"lr": cfg.lr} if cfg.lr is not None else {}),
    }
    try:
        return trainer_configs.config_for(cfg.algo, fields)
    except (TypeError, ValueError) as exc:
        raise CLIError(f"invalid {cfg.algo} settings: {exc}") from exc


def _fill_from_trainer(cfg: run_config.RunConfig, trainer_config: Any) -> None:
    """Write the algorithm's resolved settings into the run config (saved as config.toml)."""
    cfg.lr = trainer_config.lr
    top_level = {"num_envs", "seed", "use_lora", "checkpoint_every", "lr", "algorithm"}
    cfg.trainer = {k: v for k, v in trainer_config.to_dict().items()
                   if k not in top_level and v is not None}


# --- the heavy part ----------------------------------------------------------------------------


def policy_config(model_name: str, mode: str, seed: int | None, settings: dict[str, Any]) -> Any:
    """The ``PolicyConfig`` of a policy on ``model_name``: the model registry's defaults with
    ``settings`` (a run's ``[policy]`` table) on top (bad settings -> CLIError, before any model
    is loaded)."""
    from textgym.policy.config import PolicyConfig

    for name in ("mode", "seed"):
        if name in settings:
            raise CLIError(f"invalid policy settings: set {name} with --{name}, not in [policy]")
    try:  # seed: reproducible sampling
        return PolicyConfig.for_model(model_name, mode=mode, seed=seed, **settings)
    except (TypeError, ValueError) as exc:
        raise CLIError(f"invalid policy settings: {exc}") from exc


def build_policy(model_name: str, mode: str, seed: int | None = None, **settings: Any) -> Any:
    """Check the model name, load it and wrap it in a ``textgym.Policy`` with the model
    registry's defaults and ``settings`` on top (errors -> CLIError)."""
    from textgym.cli.modelcheck import check_model

    check_model(model_name)
    config = policy_config(model_name, mode, seed, settings)
    from textgym.policy import Policy

    try:  # the name is recorded in checkpoints
        return Policy.from_pretrained(model_name, config=config)
    except Exception as exc:  # noqa: BLE001 - the loader's message says what it looked for
        raise CLIError(f"cannot load model {model_name!r}: {exc}") from exc


def run(flags: dict[str, Any], config_file: Path | None = None, out: Path | None = None,
        resume: Path | None = None, force: bool = False, quiet: bool = False,
        stop_after: int | None = None) -> None:
    """The ``train`` command (see the module docstring).

    Every check (config, run folder, env settings, SFT file) comes before the model loads and
    before anything is written; then the run folder is created (a new run) and locked for the
    session."""
    file_layer = run_config.load_toml(config_file) if config_file is not None else {}
    if resume is not None:
        run_dir = Path(resume)
        cfg = _resume_config(run_dir, file_layer, flags, out)
        env_kwargs = _checkpoint_env_kwargs(run_dir)
    else:
        cfg = _new_config(file_layer, flags, config_file)
        run_dir = Path(out) if out is not None else runs.default_out(cfg.env, cfg.algo)
        runs.check_new(run_dir, force)
        env_kwargs = cfg.env_kwargs
    check_env_kwargs(cfg.env, env_kwargs)
    policy_config(cfg.model, cfg.mode, cfg.seed, cfg.policy)  # bad [policy] settings fail here
    trainer_config = _trainer_config(cfg)
    _fill_from_trainer(cfg, trainer_config)
    if cfg.sft and resume is None:
        _check_demonstrations(cfg.sft)
    check_model(cfg.model)

    with stopping.sigterm_unwinds(), runs.claim(run_dir, new=resume is None):
        if not quiet:
            say(f"textgym: {'resuming' if resume else 'training'} {cfg.model} ({cfg.mode} mode, "
                f"{'LoRA' if cfg.lora else 'full'}) on {cfg.env} with {cfg.algo}; "
                f"run folder {run_dir}")
        loading = time.monotonic()
        policy = build_policy(cfg.model, cfg.mode, seed=cfg.seed, **cfg.policy)
        if not quiet:
            say(f"textgym: {cfg.model} loaded in {time.monotonic() - loading:.1f} s")
        if resume is not None:
            trainer = _resume_trainer(cfg, policy, run_dir, quiet)
        else:
            trainer = _new_trainer(cfg, trainer_config, policy, run_dir, force, quiet)
        _train(trainer, cfg, run_dir, quiet=quiet, stop_after=stop_after)


def _checkpoint_env_kwargs(run_dir: Path) -> dict[str, Any]:
    """The env settings a resumed run's checkpoint makes its envs with (CLIError: none yet)."""
    from textgym.trainers.checkpoint import read_state

    try:
        state = read_state(run_dir / CHECKPOINT)
    except FileNotFoundError:
        raise CLIError(f"cannot resume: {run_dir} has no checkpoint yet") from None
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot resume: unreadable checkpoint in {run_dir}: {exc}") from exc
    env_kwargs = state.get("env_kwargs") or {}
    if not isinstance(env_kwargs, dict):
        raise CLIError(f"cannot resume: the checkpoint in {run_dir} has malformed env_kwargs")
    return env_kwargs


def _new_trainer(cfg: run_config.RunConfig, trainer_config: Any, policy: Any, run_dir: Path,
                 force: bool, quiet: bool) -> Any:
    """A trainer for a new run in the locked folder ``run_dir``; writes config.toml."""
    from textgym.trainers import make_trainer

    if force:
        runs.empty_for_new_run(run_dir)
    trainer = make_trainer(cfg.algo, policy, env=cfg.env, config=trainer_config,
                           out_dir=run_dir, **_env_kwargs_arg(cfg))
    (run_dir / CONFIG_FILE).write_text(run_config.dumps(cfg), encoding="utf-8")
    if cfg.sft:
        _warm_start(trainer, cfg, quiet)
    return trainer


def _env_kwargs_arg(cfg: run_config.RunConfig) -> dict[str, Any]:
    return {"env_kwargs": dict(cfg.env_kwargs)} if cfg.env_kwargs else {}


def _resume_trainer(cfg: run_config.RunConfig, policy: Any, run_dir: Path, quiet: bool) -> Any:
    """The trainer of the run in the locked folder ``run_dir``, from its checkpoint."""
    from textgym.trainers import Trainer

    checkpoint = run_dir / CHECKPOINT
    try:
        # env: the id checked by _resume_config, never the one trainer_state.json names.
        trainer = Trainer.resume(checkpoint, policy=policy, env=cfg.env, out_dir=run_dir)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise CLIError(f"cannot resume from {checkpoint}: {exc}") from exc
    resolved = run_config.dumps(cfg)  # a new budget (episodes, minutes) is saved
    if resolved != (run_dir / CONFIG_FILE).read_text(encoding="utf-8"):
        (run_dir / CONFIG_FILE).write_text(resolved, encoding="utf-8")
    repair = trainer.writer.repair  # metrics.jsonl now has one line per update up to the checkpoint
    if repair is not None and not quiet:
        if repair.past_checkpoint:
            say(f"textgym: {repair.past_checkpoint} metrics lines after the checkpoint will be "
                f"redone")
        if repair.malformed or repair.restored:
            say(f"textgym: metrics.jsonl repaired: {repair.malformed} torn lines dropped, "
                f"{repair.restored} lines restored from the checkpoint")
    return trainer


def _check_demonstrations(path: str) -> None:
    from textgym.trainers.sft import load_demonstrations

    try:
        load_demonstrations(path)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"bad SFT file: {exc}") from exc


def _warm_start(trainer: Any, cfg: run_config.RunConfig, quiet: bool) -> None:
    if not quiet:
        say(f"textgym: supervised warm-up on {cfg.sft}")
    try:
        losses = trainer.warm_start(cfg.sft)
    except (ValueError, KeyError, TypeError) as exc:
        raise CLIError(f"bad SFT file {cfg.sft}: {exc}") from exc
    if not quiet and losses:
        say(f"textgym: warm-up loss {losses[0]:.3g} -> {losses[-1]:.3g}")


def _train(trainer: Any, cfg: run_config.RunConfig, run_dir: Path, quiet: bool,
           stop_after: int | None) -> None:
    from textgym.cli.plotting import plot_runs

    total = int(cfg.episodes or 0)
    done = trainer.episodes_seen
    updates_this_session = 0
    started = time.monotonic()
    status = "complete"

    display = LiveDisplay(total=total, done=done, quiet=quiet, sample_every=cfg.sample_every,
                          description=cfg.env.split("/")[-1])

    last_plot = time.monotonic()

    def redraw() -> None:
        nonlocal last_plot
        last_plot = time.monotonic()
        if (run_dir / "metrics.jsonl").is_file():
            plot_runs([run_dir], run_dir / "curve.png", title=f"{run_dir.name}: {cfg.env}, "
                      f"{cfg.model}, {cfg.algo}")

    remaining = total - done
    seconds = cfg.minutes * 60 if cfg.minutes else None
    with display, StopSignals(display.log) as stop:
        last_update_end = time.monotonic()

        def callback(metrics: dict[str, Any]) -> bool:
            # Called after each update (its metrics written); returning False stops the run.
            nonlocal updates_this_session, last_update_end
            updates_this_session += 1
            now = time.monotonic()
            update_seconds, last_update_end = now - last_update_end, now
            display.update(metrics)
            if (updates_this_session % cfg.plot_every == 0
                    and time.monotonic() - last_plot >= MIN_PLOT_SECONDS):
                redraw()
            if stop_after is not None and updates_this_session >= stop_after:
                stop.request("Ctrl-C")
            # Stop when the next update would likely end past the time budget.
            out_of_time = seconds is not None and now - started + update_seconds > seconds
            return not (stop.requested or out_of_time)

        if remaining > 0:
            try:
                trainer.train(episodes=remaining, seconds=seconds, callback=callback)
            except Exception as exc:
                # The last periodic checkpoint stays; say so in the summary, then fail.
                _write_summary(run_dir, cfg, f"failed: {type(exc).__name__}: {exc}", started)
                raise
            if stop.requested:
                status = "interrupted"
            elif trainer.episodes_seen < total:  # the time budget ran out first
                status = "time_limit"
        else:
            display.log(f"the run already has {done} of {total} episodes")
        trainer.save_checkpoint(run_dir / CHECKPOINT)
        redraw()

    summary = _write_summary(run_dir, cfg, status, started, trainer=trainer, display=display,
                             stopped_by=stop.reason)
    where = (f"after update {summary.get('updates')} ({summary.get('episodes')} of {total} "
             f"episodes); checkpoint saved. Continue with: textgym train --resume {run_dir}")
    if status == "interrupted":
        # A non-zero exit: said on stderr, even with --quiet, so a job log tells why it ended.
        say(f"textgym: stopped by {stop.reason} {where}", err=True)
        raise typer.Exit(stopping.exit_code(stop.reason))
    if status == "time_limit":
        if not quiet:
            say(f"textgym: time budget of {cfg.minutes:g} min reached {where}")
        return
    if not quiet:
        first, last = summary.get("first_return_mean"), summary.get("last_return_mean")
        trend = f"; mean return {first:.3g} -> {last:.3g}" if first is not None else ""
        updates = summary.get("updates")
        say(f"textgym: done: {updates} update{'' if updates == 1 else 's'}, "
            f"{summary.get('episodes')} episodes{trend}. Run folder: {run_dir}")


def _write_summary(run_dir: Path, cfg: run_config.RunConfig, status: str, started: float,
                   trainer: Any = None, display: LiveDisplay | None = None,
                   stopped_by: str | None = None) -> dict[str, Any]:
    """Write ``summary.json``: the run's outcome, from metrics.jsonl (and a final greedy
    evaluation when ``eval_episodes`` is set and the run is complete). ``stopped_by``: the
    Ctrl-C or SIGTERM that stopped an interrupted run."""
    from textgym.cli.plotting import read_metrics

    records = read_metrics(run_dir) if (run_dir / "metrics.jsonl").is_file() else []
    summary = {
        "status": status,
        **({"stopped_by": stopped_by} if stopped_by else {}),
        "env": cfg.env,
        "algo": cfg.algo,
        "model": cfg.model,
        "mode": cfg.mode,
        "lora": cfg.lora,
        "episodes_planned": cfg.episodes,
        **runs.summarize_metrics(records),
        "session_seconds": round(time.monotonic() - started, 3),
        "checkpoint": str(run_dir / CHECKPOINT),
    }
    if status == "complete" and cfg.eval_episodes and trainer is not None:
        if display is not None:
            display.log(f"evaluating greedily on {cfg.eval_episodes} held-out episodes...")
        summary["eval"] = with_stderr(trainer.evaluate(episodes=cfg.eval_episodes))
    runs.write_json(run_dir / "summary.json", summary)
    return summary
