"""``textgym train``: resolve the config, prepare the run folder, train with a live display.

The run folder's files are named in :mod:`textgym.run_folder` and described in cli/README.md
("The run folder"). Ctrl-C or SIGTERM stops after the current update and saves a checkpoint; a second
one stops at once (the last periodic checkpoint stays; see cli/stopping.py). ``--resume DIR``
continues the same run: the update and episode counters carry on and ``metrics.jsonl`` grows.

Data parallelism (:mod:`textgym.distributed`): ``--processes N`` checks everything here, then
starts N copies of the same command (with the run folder resolved) through torch's elastic
launcher; ``torchrun`` or ``accelerate launch ... -m textgym.cli train`` start them the same way.
In every copy, only the main process checks, locks and writes the run folder (the others wait for
its lock), prints, and plots; all of them train, and stop after the same update.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from textgym.cli import config as run_config
from textgym.cli import resuming, runs, stopping
from textgym.cli.display import LiveDisplay, plan_line
from textgym.cli.envtools import (
    check_env_kwargs,
    check_mode,
    recorded_env_id,
    refuse_env_import,
    resolve_env,
)
from textgym.cli.errors import EXIT_ERROR, CLIError
from textgym.cli.messages import say
from textgym.cli.modelcheck import check_model
from textgym.cli.resuming import CHANGEABLE_ON_RESUME as _CHANGEABLE_ON_RESUME
from textgym.cli.runs import with_stderr
from textgym.cli.stopping import StopSignals

from textgym import distributed, run_folder

#: curve.png is redrawn at most this often (drawing takes about a second).
MIN_PLOT_SECONDS = 10.0

CONFIG_FILE = run_folder.CONFIG
CHECKPOINT = run_folder.CHECKPOINT


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
    defaults = _env_defaults(env_id, merged.mode, merged.algo)
    if run_config.gives_budget(file_layer) or run_config.gives_budget(flags):
        defaults = run_config.without_budget(defaults)  # the budget given replaces the env's
    think = _think_defaults() if merged.think else {}
    cfg = run_config.resolve(defaults, think, file_layer, flags)
    cfg.env = recorded_env_id(merged.env, env_id)
    return run_config.validate(cfg)


def _env_defaults(env_id: str, mode: str, algo: str) -> dict[str, Any]:
    """The env's recommended training settings in ``mode`` for a run of ``algo`` (registered with
    the env, see ``textgym.registry.training_defaults``), as the lowest config layer."""
    from textgym.registry import training_defaults

    defaults = training_defaults(env_id, mode).for_algorithm(algo).to_dict()
    return {k: v for k, v in defaults.items() if k in run_config.FIELDS}


def _think_defaults() -> dict[str, Any]:
    """``--think``: the env asks for the ``think`` answer format and the policy answers it (no
    prefill, stopped at the closing answer tag, that format's token budget); on top of the env's
    generate-mode defaults, below the config file and the flags."""
    from textgym.wrappers.answer_format import ANSWER_FORMATS

    think = ANSWER_FORMATS["think"]
    return {"env_kwargs": {"answer_format": think.name}, "policy": think.policy_settings()}


def _resume_config(run_dir: Path, file_layer: dict[str, Any], flags: dict[str, Any],
                   out: Path | None, check_lock: bool = True) -> run_config.RunConfig:
    if out is not None and Path(out).resolve() != run_dir.resolve():
        raise CLIError("give either --resume DIR or --out DIR, not both")
    if not run_dir.is_dir():
        raise CLIError(f"cannot resume: run folder {run_dir} does not exist")
    if check_lock:
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
                       if (was or {}).get(k) != v
                       and not (name == "env_kwargs" and k in resuming.ENV_KWARGS_CHANGEABLE_ON_RESUME)
                       and not (name == "policy" and k in resuming.POLICY_CHANGEABLE_ON_RESUME)]
        else:
            changes = [(name, value, was)] if value != was else []
        for key, new_value, old_value in changes:
            raise CLIError(
                f"cannot resume {run_dir} with {key.replace('_', '-')}={new_value!r}: the run "
                f"was started with {old_value!r} (a resumed run may only change "
                f"{', '.join(_CHANGEABLE_ON_RESUME)} settings)"
            )
    if run_config.gives_budget(given):
        saved = run_config.without_budget(saved)  # a new budget replaces the run's as a whole
    cfg = run_config.resolve(saved, file_layer, flags)
    cfg.env = given.get("env") or recorded_env_id(saved["env"], resolve_env(saved["env"]))
    return run_config.validate(cfg)


def _trainer_config(cfg: run_config.RunConfig) -> Any:
    """The algorithm's config dataclass from the run config (bad values -> CLIError)."""
    from textgym.trainers import config_for

    given = {field: getattr(cfg, name) for name, field in run_config.TRAINER_SETTINGS.items()}
    fields = {**cfg.trainer, **{field: value for field, value in given.items() if value is not None}}
    try:
        return config_for(cfg.algo, fields)
    except (TypeError, ValueError) as exc:
        raise CLIError(f"invalid {cfg.algo} settings: {exc}") from exc


def _fill_from_trainer(cfg: run_config.RunConfig, trainer_config: Any) -> None:
    """Write the algorithm's resolved settings into the run config (saved as config.toml)."""
    for name, field in run_config.TRAINER_SETTINGS.items():  # lr: the algorithm's when not given
        setattr(cfg, name, getattr(trainer_config, field))
    top_level = {*run_config.TRAINER_SETTINGS.values(), "algorithm"}
    cfg.trainer = {k: v for k, v in trainer_config.to_dict().items()
                   if k not in top_level and v is not None}


# --- the heavy part ----------------------------------------------------------------------------


def policy_config(model_name: str | None, mode: str | None, seed: int | None,
                  settings: dict[str, Any]) -> Any:
    """The ``PolicyConfig`` of a policy on ``model_name``: the model registry's defaults with
    ``settings`` (a run's ``[policy]`` table, the policy flags) on top; PolicyConfig checks them
    (bad settings -> CLIError, before any model is loaded)."""
    from textgym.policy.config import PolicyConfig

    try:  # seed: reproducible sampling
        return PolicyConfig.for_model(model_name, **({"mode": mode} if mode else {}), seed=seed,
                                      **settings)
    except (TypeError, ValueError) as exc:
        raise CLIError(f"invalid policy settings: {exc}") from exc


def _check_policy_table(cfg: run_config.RunConfig) -> None:
    """Refuse a ``[policy]`` key that is a run setting of its own (``mode``, ``seed``,
    ``history``): one spelling in config.toml."""
    for name in cfg.policy:
        if name in run_config.FIELDS:
            raise CLIError(f"invalid policy settings: set {name} with --{name}, not in [policy]")


def _fill_from_policy(cfg: run_config.RunConfig, settings: Any) -> None:
    """Write the policy's resolved settings into the run config's ``[policy]`` table (saved as
    config.toml), as the algorithm's are into ``[trainer]``; the settings that are run settings
    of their own (``mode``, ``seed``, ``history``) stay top-level keys."""
    cfg.policy = {k: v for k, v in settings.to_dict().items()
                  if k not in run_config.FIELDS and v is not None}


def build_policy(model_name: str, mode: str, seed: int | None = None, *, device: Any = None,
                 dtype: str | None = None, quantize: str | None = None, **settings: Any) -> Any:
    """Check the model name, device, precision and quantization, load the model (on ``device``;
    default: the loader's) and wrap it in a ``textgym.Policy`` with the model registry's defaults
    and ``settings`` on top (errors -> CLIError)."""
    check_model(model_name, device, dtype, quantize)
    config = policy_config(model_name, mode, seed, settings)
    from textgym.policy import Policy

    try:  # the name is recorded in checkpoints
        return Policy.from_pretrained(model_name, config=config, device=device, dtype=dtype,
                                      quantize=quantize)
    except Exception as exc:
        raise CLIError(f"cannot load model {model_name!r}: {exc}") from exc


def run(flags: dict[str, Any], config_file: Path | None = None, out: Path | None = None,
        resume: Path | None = None, force: bool = False, quiet: bool = False,
        stop_after: int | None = None, processes: int | None = None) -> None:
    """The ``train`` command (see the module docstring).

    Every check (config, run folder, env settings, SFT file, ``--processes``) comes before the
    model loads and before anything is written; then the run folder is created (a new run) and
    locked for the session. With ``processes`` > 1 the checked command is started in that many
    processes instead (:func:`launch`)."""
    # A process started by a launcher joins the others first: only the main one checks the run
    # folder (the others would find it locked by the main one).
    process = _join_processes(processes) if distributed.is_launched() else None
    main = process is None or process.is_main
    file_layer = run_config.load_toml(config_file) if config_file is not None else {}
    # as [policy], [trainer] and [env_kwargs] tables
    layer = run_config.env_flags(run_config.trainer_flags(run_config.policy_flags(flags)))
    if resume is not None:
        run_dir = Path(resume)
        cfg = _resume_config(run_dir, file_layer, layer, out, check_lock=main)
        state = _checkpoint_state(run_dir)
        resuming.check_identity(run_dir, cfg, state)
        cfg.trainer = resuming.with_none_settings(cfg.trainer, state)
        _checkpoint_env_kwargs(run_dir, state)  # well-formed
        env_kwargs, env_changes = resuming.check_env_kwargs(run_dir, cfg.env_kwargs, state)
    else:
        cfg = _new_config(file_layer, layer, config_file)
        run_dir = Path(out) if out is not None else runs.default_out(cfg.env, cfg.algo)
        if main:
            runs.check_new(run_dir, force)
        env_kwargs, env_changes = cfg.env_kwargs, {}
    check_env_kwargs(cfg.env, env_kwargs, cfg.mode)
    check_mode(cfg.env, cfg.mode, env_kwargs)
    _check_policy_table(cfg)
    policy_settings = policy_config(cfg.model, cfg.mode, cfg.seed, cfg.policy)
    _fill_from_policy(cfg, policy_settings)
    trainer_config = _trainer_config(cfg)
    _fill_from_trainer(cfg, trainer_config)
    trainer_changes: dict[str, list[Any]] = {}
    if resume is not None:  # config.toml describes what the checkpoint trained, or what changes
        trainer_changes = resuming.check_settings(
            run_dir, state, trainer_config.to_dict(),
            {**policy_settings.to_dict(), "history": run_config.history_setting(cfg.history)},
            fixed=type(trainer_config).fixed_on_resume)
    if cfg.sft and resume is None:
        _check_demonstrations(cfg.sft)
    if cfg.sft_player and resume is None:
        _check_player(cfg.env, cfg.sft_player)
    check_model(cfg.model, cfg.device, cfg.dtype, cfg.quantize)
    if processes is not None and processes > 1 and process is None:
        _check_shares(trainer_config, processes)
        _check_process_device(cfg.device, processes)
        launch(flags, processes, run_dir=run_dir, config_file=config_file, resume=resume,
               force=force, quiet=quiet, stop_after=stop_after)
        return
    if process is None:
        process = distributed.init()
    else:
        _check_shares(trainer_config, process.world_size)
        run_dir = process.broadcast_object(run_dir)  # the main process's default name, for all
    quiet = quiet or not process.is_main

    with stopping.sigterm_unwinds(), _hold_run_folder(run_dir, resume is None, process):
        if not quiet:
            history = f", history {cfg.history}" if cfg.history else ""
            say(f"textgym: {'resuming' if resume else 'training'} {cfg.model} ({cfg.mode} mode{history}, "
                f"{'LoRA' if cfg.lora else 'full'}) on {cfg.env} with {cfg.algo}; "
                f"run folder {run_dir}" + (f"; {process.world_size} processes" if process.is_distributed else ""))
        loading = time.monotonic()
        policy = build_policy(cfg.model, cfg.mode, seed=cfg.seed, device=_device_of(cfg, process),
                              dtype=cfg.dtype, quantize=cfg.quantize,
                              history=run_config.history_setting(cfg.history), **cfg.policy)
        if not quiet:
            weights = next(policy.model.parameters())
            say(f"textgym: {cfg.model} loaded in {time.monotonic() - loading:.1f} s "
                f"({weights.device}, {str(weights.dtype).removeprefix('torch.')}"
                f"{', ' + cfg.quantize if cfg.quantize else ''})")
        if policy.config.act_dtype != "float32":  # auto measures here (once per machine and model)
            precision = policy.act_precision
            if not quiet:
                say(f"textgym: acting in {policy.precision_choice.describe() if policy.precision_choice else precision}")
        if resume is not None:
            trainer = _resume_trainer(cfg, policy, run_dir, quiet, process, trainer_changes, env_kwargs,
                                      env_changes)
        else:
            trainer = _new_trainer(cfg, trainer_config, policy, run_dir, force, quiet, process)
        _train(trainer, cfg, run_dir, quiet=quiet, stop_after=stop_after)


# --- several processes -------------------------------------------------------------------------


def _join_processes(processes: int | None) -> distributed.ProcessContext:
    """This process's place among those a launcher (torchrun, ``accelerate launch``, ``textgym
    train --processes``) started (errors -> CLIError)."""
    if processes is not None and processes > 1:
        raise CLIError(f"--processes {processes} in a process started by a launcher (torchrun, "
                       "accelerate launch), which already started the processes: drop --processes")
    try:
        return distributed.init()
    except distributed.UnsupportedLaunch as exc:
        raise CLIError(str(exc)) from exc


def _check_process_device(device: str, processes: int) -> None:
    """With several processes each one gets its device from the launcher (``cuda:<local rank>``,
    or the CPU): ``--device`` may only name that kind, not one GPU (CLIError)."""
    if device not in ("auto", "cpu", "cuda"):
        raise CLIError(f"--device {device} with {processes} processes: each process runs on the "
                       "device its launcher gives it (cuda:<local rank> or cpu); use --device "
                       "auto, cuda or cpu")


def _device_of(cfg: run_config.RunConfig, process: distributed.ProcessContext) -> Any:
    """The device this process loads the model on: ``--device``, or with several processes the
    launcher's, which ``--device`` may only confirm (CLIError otherwise)."""
    if not process.is_distributed:
        return cfg.device
    _check_process_device(cfg.device, process.world_size)
    if cfg.device not in ("auto", process.device.type):
        raise CLIError(f"--device {cfg.device}: this process's launcher put it on {process.device} "
                       "(for CPU processes on a GPU machine set ACCELERATE_USE_CPU=1)")
    return process.device


def _check_shares(trainer_config: Any, processes: int) -> None:
    """Refuse a number of processes the update's episodes cannot be shared by (every process
    plays at least one episode, or one GRPO group), and accelerate settings textgym ignores."""
    try:
        distributed.check_launch_config()
        trainer_config.episode_shard(processes, 0)
    except ValueError as exc:  # UnsupportedLaunch too
        raise CLIError(f"cannot train in {processes} processes: {exc}") from exc


def worker_arguments(flags: dict[str, Any], run_dir: Path, config_file: Path | None = None,
                     resume: Path | None = None, force: bool = False, quiet: bool = False,
                     stop_after: int | None = None) -> list[str]:
    """The ``textgym`` arguments of each launched process: the same ``train`` command, with the
    run folder resolved by the launching process (one default name for all)."""
    args = ["train", *([flags["env"]] if flags.get("env") else [])]
    for name, value in flags.items():
        if name == "env" or value is None:
            continue
        if name == "lora":  # the one on/off flag: --lora/--full
            args.append("--lora" if value else "--full")
        else:
            args += [f"--{name.replace('_', '-')}", str(value)]
    if config_file is not None:
        args += ["--config", str(config_file)]
    args += ["--resume", str(run_dir)] if resume is not None else ["--out", str(run_dir)]
    args += ["--force"] * force + ["--quiet"] * quiet
    if stop_after is not None:
        args += ["--stop-after", str(stop_after)]
    return args


def launch(flags: dict[str, Any], processes: int, *, run_dir: Path, config_file: Path | None = None,
           resume: Path | None = None, force: bool = False, quiet: bool = False,
           stop_after: int | None = None) -> None:
    """Start the checked ``train`` command in ``processes`` local processes (torch's elastic
    launcher, :func:`textgym.distributed.launch`) and wait for them; exits with their code.

    A Ctrl-C or SIGTERM here reaches every process once: each stops after the same update and the
    main one saves the checkpoint."""
    command = ["-m", "textgym.cli", *worker_arguments(flags, run_dir, config_file, resume, force, quiet,
                                                       stop_after)]
    if not quiet:
        say(f"textgym: starting {processes} training processes (torch.distributed.run)")
    code = distributed.launch(command, processes=processes)
    if code:
        raise typer.Exit(code)


@contextlib.contextmanager
def _hold_run_folder(run_dir: Path, new: bool, process: distributed.ProcessContext) -> Iterator[None]:
    """:func:`runs.claim` the run folder for the session in the main process; the other processes
    wait for its outcome, and fail with it (quietly: the main process says why)."""
    with contextlib.ExitStack() as stack:
        error = None
        if process.is_main:
            try:
                stack.enter_context(runs.claim(run_dir, new=new))
            except CLIError as exc:
                if not process.is_distributed:
                    raise
                error = exc
        failed = process.broadcast_object(error is not None)
        if error is not None:
            raise error
        if failed:
            raise typer.Exit(EXIT_ERROR)
        yield


def _checkpoint_state(run_dir: Path) -> dict[str, Any]:
    """The JSON state of a resumed run's checkpoint (CLIError: none yet, unreadable)."""
    from textgym.trainers import read_checkpoint

    try:
        return read_checkpoint(run_dir / CHECKPOINT)
    except FileNotFoundError:
        raise CLIError(f"cannot resume: {run_dir} has no checkpoint yet") from None
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot resume: unreadable checkpoint in {run_dir}: {exc}") from exc


def _checkpoint_env_kwargs(run_dir: Path, state: dict[str, Any]) -> dict[str, Any]:
    """The env settings a resumed run's checkpoint makes its envs with."""
    env_kwargs = state.get("env_kwargs") or {}
    if not isinstance(env_kwargs, dict):
        raise CLIError(f"cannot resume: the checkpoint in {run_dir} has malformed env_kwargs")
    return env_kwargs


def _new_trainer(cfg: run_config.RunConfig, trainer_config: Any, policy: Any, run_dir: Path,
                 force: bool, quiet: bool, process: distributed.ProcessContext) -> Any:
    """A trainer for a new run in the locked folder ``run_dir``; writes config.toml (the main
    process)."""
    from textgym.trainers import make_trainer

    if force and process.is_main:
        runs.empty_for_new_run(run_dir)
    trainer = make_trainer(cfg.algo, policy, env=cfg.env, config=trainer_config,
                           out_dir=run_dir, process=process, **_env_kwargs_arg(cfg))
    if process.is_main:
        (run_dir / CONFIG_FILE).write_text(run_config.dumps(cfg), encoding="utf-8")
    if cfg.sft or cfg.sft_player:
        _warm_start(trainer, cfg, quiet)
        if cfg.updates != 0:  # RL follows: keep its starting point (textgym benchmark's start_eval)
            trainer.save_checkpoint(run_dir / run_folder.START)
    return trainer


def _env_kwargs_arg(cfg: run_config.RunConfig) -> dict[str, Any]:
    return {"env_kwargs": dict(cfg.env_kwargs)} if cfg.env_kwargs else {}


def _resume_trainer(cfg: run_config.RunConfig, policy: Any, run_dir: Path, quiet: bool,
                    process: distributed.ProcessContext, changes: dict[str, list[Any]],
                    env_kwargs: dict[str, Any], env_changes: dict[str, list[Any]]) -> Any:
    """The trainer of the run in the locked folder ``run_dir``, from its checkpoint (whatever
    number of processes wrote it), with the algorithm's and policy's settings ``changes``
    (``{field: [trained, new]}``, checked by :func:`resuming.check_settings`; the policy was built
    with its own) and the env settings ``env_kwargs``
    (``env_changes`` from the checkpoint's: :func:`resuming.check_env_kwargs`)."""
    from textgym.trainers import Trainer
    from textgym.trainers.state.checkpoint import remove_stale_temporary

    checkpoint = run_dir / CHECKPOINT
    if process.is_main and remove_stale_temporary(checkpoint) and not quiet:  # a failed or killed save's
        say(f"textgym: removed {CHECKPOINT}.tmp, a half-written checkpoint an earlier session left")
    try:
        # env: the id checked by _resume_config, never the one trainer_state.json names.
        trainer = Trainer.resume(checkpoint, policy=policy, env=cfg.env, out_dir=run_dir, process=process,
                                 changes={name: new for name, (_, new) in changes.items()
                                          if name not in resuming.POLICY_CHANGEABLE_ON_RESUME},
                                 env_kwargs=env_kwargs)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise CLIError(f"cannot resume from {checkpoint}: {exc}") from exc
    resolved = run_config.dumps(cfg)  # a new budget (episodes, minutes) is saved
    changes = {**changes, **env_changes}
    if process.is_main and (changes or resolved != (run_dir / CONFIG_FILE).read_text(encoding="utf-8")):
        before = run_config.load_toml(run_dir / CONFIG_FILE)
        recorded = resuming.record_changes(run_dir, before, cfg.to_dict(), trainer.update_count, changes)
        (run_dir / CONFIG_FILE).write_text(resolved, encoding="utf-8")
        if recorded and not quiet:
            say("textgym: this session changes " + ", ".join(
                f"{name} {old!r} -> {new!r}" for name, (old, new) in recorded.items())
                + f" (recorded in {resuming.RESUMES_FILE})")
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
    from textgym.trainers.engine.sft import load_demonstrations

    try:
        load_demonstrations(path)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"bad SFT file: {exc}") from exc


def _check_player(env: str, player: str) -> None:
    from textgym.baselines import reference_policy_names
    from textgym.registry import resolve_id

    names = reference_policy_names(resolve_id(env))
    if player not in names:
        raise CLIError(f"--sft-player: {env} has no reference player {player!r}; it has: {', '.join(names)}")


def _warm_start(trainer: Any, cfg: run_config.RunConfig, quiet: bool) -> None:
    from textgym.baselines import BaselineNotApplicable
    from textgym.seeds import demonstration_seed
    from textgym.trainers.engine.sft import load_demonstrations, player_demonstrations

    demos = []
    if cfg.sft:
        try:
            demos += load_demonstrations(cfg.sft)
        except (ValueError, OSError) as exc:
            raise CLIError(f"bad SFT file: {exc}") from exc
        if not quiet:
            say(f"textgym: supervised warm-up on {cfg.sft} ({len(demos)} demonstrations)")
    if cfg.sft_player:
        try:
            played, stats = player_demonstrations(cfg.env, cfg.sft_player, cfg.sft_episodes,
                                                  seed=demonstration_seed(cfg.seed), env_kwargs=cfg.env_kwargs)
        except BaselineNotApplicable as exc:
            raise CLIError(f"--sft-player: {exc}") from None
        demos += played
        if not quiet:
            say(f"textgym: supervised warm-up on the {cfg.sft_player} player's {cfg.sft_episodes} "
                f"episodes (mean return {stats['return_mean']:.3g}): {len(played)} decisions")
    started = time.monotonic()

    def progress(epoch: int, epochs: int, loss: float) -> None:
        if not quiet:
            say(f"textgym: warm-up epoch {epoch}/{epochs}: loss {loss:.3g} ({time.monotonic() - started:.0f} s)")

    try:
        losses = trainer.warm_start(demos, epochs=cfg.sft_epochs, on_epoch=progress)
    except (ValueError, KeyError, TypeError) as exc:
        raise CLIError(f"bad SFT demonstrations: {exc}") from exc
    if not quiet and losses:
        say(f"textgym: warm-up loss {losses[0]:.3g} -> {losses[-1]:.3g}")


def planned_updates(cfg: run_config.RunConfig, episodes_per_update: int) -> int:
    """The number of the run's last update: its ``updates``, or the update that completes its
    ``episodes``, whichever comes first."""
    limits = [cfg.updates] if cfg.updates is not None else []
    if cfg.episodes is not None:
        limits.append(-(-cfg.episodes // episodes_per_update))
    return min(limits)


#: summary.json's status for each reason Trainer.train stopped (a callback stop is a signal's).
_STATUS = {"budget": "complete", "solved": "solved", "time_limit": "time_limit", "callback": "interrupted",
           "env_failure": "env_failure"}


def _train(trainer: Any, cfg: run_config.RunConfig, run_dir: Path, quiet: bool,
           stop_after: int | None) -> None:
    from textgym.cli.plotting import plot_runs

    process = trainer.process
    total = planned_updates(cfg, trainer.config.episodes_per_update)
    done = trainer.update_count
    early_stop = run_config.early_stop(cfg)
    updates_this_session = 0
    written = done  # the last update whose metrics are written
    started = time.monotonic()
    status = "complete"
    processes = process.gather([{"host": socket.gethostname(), "pid": os.getpid()}])

    display = LiveDisplay(total=total, done=done, quiet=quiet, sample_every=cfg.sample_every,
                          description=cfg.env.split("/")[-1])

    last_plot = time.monotonic()

    def redraw() -> None:
        nonlocal last_plot
        last_plot = time.monotonic()
        if process.is_main and (run_dir / run_folder.METRICS).is_file():
            plot_runs([run_dir], run_dir / run_folder.CURVE, title=f"{run_dir.name}: {cfg.env}, "
                      f"{cfg.model}, {cfg.algo}")

    from textgym.rollout import watch

    def rollout_progress(progress: Any) -> None:  # inside an update: its episodes, optimisation, check
        display.progress(progress, trainer.update_count + (0 if progress.greedy else 1))

    with display, StopSignals(display.log) as stop, watch(rollout_progress):
        if total:
            display.log(plan_line(total, done, trainer.config.episodes_per_update, cfg.minutes,
                                  early_stop.until if early_stop else None,
                                  early_stop.every if early_stop else None,
                                  early_stop.episodes if early_stop else None,
                                  episodes_asked=cfg.episodes))

        def callback(metrics: dict[str, Any]) -> bool:
            # Called after each update (its metrics written); returning False stops the run.
            nonlocal updates_this_session, written
            updates_this_session += 1
            written = metrics["update"]
            display.update(metrics)
            if (updates_this_session % cfg.plot_every == 0
                    and time.monotonic() - last_plot >= MIN_PLOT_SECONDS):
                redraw()
            if stop_after is not None and updates_this_session >= stop_after:
                stop.request("Ctrl-C")
            return not stop.requested

        if total > done:
            try:
                # The time cap, the greedy check and a stop any process asks for stop all of them
                # after the same update (Trainer.train).
                trainer.train(updates=total - done, seconds=cfg.minutes * 60 if cfg.minutes else None,
                              callback=callback, early_stop=early_stop)
            except Exception as exc:
                # An env that raised in a rollout left the trainer at its last complete update:
                # that is saved; otherwise the last periodic checkpoint stays. The summary says which.
                saved = _save_completed_updates(trainer, exc, written, run_dir)
                if process.is_main:
                    _write_summary(run_dir, cfg, f"failed: {type(exc).__name__}: {exc}", started,
                                   trainer=trainer, planned=total)
                if saved is not None:
                    raise CLIError(f"{exc}; updates 1-{saved} are saved: fix the env, then continue with: "
                                   f"textgym train --resume {run_dir}") from exc
                if type(exc).__name__ == "NonFiniteWeightsError":
                    kept = _checkpoint_summary(run_dir / CHECKPOINT).get("checkpoint_update")
                    raise CLIError(f"training diverged at update {trainer.update_count} (is lr too high?): "
                                   f"{exc}; " + (f"the checkpoint of update {kept} stays" if kept else
                                                 "no checkpoint was saved")) from exc
                raise
            status = _STATUS[trainer.stopped_by]
        elif total == 0:
            display.log("updates 0: the warm start alone, no RL update")
        else:
            display.log(f"the run already has {done} of {total} updates")
        reason = _agreed_stop_reason(stop.reason, process)
        if reason is not None:
            status = "interrupted"
        trainer.save_checkpoint(run_dir / CHECKPOINT)
        redraw()

    summary = _write_summary(run_dir, cfg, status, started, trainer=trainer, display=display,
                             stopped_by=reason, processes=processes, planned=total)
    trainer.writer.close()  # the trackers' runs end (wandb and trackio flush)
    where = (f"after update {summary.get('updates')} of {total} ({summary.get('episodes')} "
             f"episodes); checkpoint saved. Continue with: textgym train --resume {run_dir}")
    if status == "interrupted":
        if not process.is_main:  # exit 0: a launcher kills the others when one process fails
            return
        # A non-zero exit: said on stderr, even with --quiet, so a job log tells why it ended.
        say(f"textgym: stopped by {reason} {where}", err=True)
        raise typer.Exit(stopping.exit_code(reason))
    if status == "env_failure":  # a non-zero exit: the run could not go on
        say(f"textgym: stopped: more than half of the envs failed (their servers?) {where}", err=True)
        raise typer.Exit(1)
    if status == "time_limit":
        if not quiet:
            say(f"textgym: time cap of {cfg.minutes:g} min reached {where}")
        return
    if not quiet:
        first, last = summary.get("first_return_mean"), summary.get("last_return_mean")
        trend = f"; mean return {first:.3g} -> {last:.3g}" if first is not None else ""
        updates = summary.get("updates")
        head = "done"
        if status == "solved":
            check = summary["check"]
            head = (f"solved: greedy return {check['return_mean']:.3g} >= {check['until']:g} on "
                    f"{check['episodes']} held-out episodes")
        say(f"textgym: {head}: {updates} update{'' if updates == 1 else 's'}, "
            f"{summary.get('episodes')} episodes{trend}. Run folder: {run_dir}")


def _save_completed_updates(trainer: Any, exc: Exception, written: int, run_dir: Path) -> int | None:
    """After an env raised during an update's rollout (:class:`textgym.rollout.EnvError`), save a
    checkpoint of the updates completed so far and return its update; ``None`` when nothing is
    saved: another error, one past the rollout (the update's weights may be half-changed), or
    several processes (the others are not here to save with this one)."""
    from textgym.rollout import EnvError

    if (not isinstance(exc, EnvError) or trainer.process.is_distributed or trainer.update_count == 0
            or trainer.update_count != written):
        return None
    trainer.save_checkpoint(run_dir / CHECKPOINT)
    return trainer.update_count


def _agreed_stop_reason(reason: str | None, process: distributed.ProcessContext) -> str | None:
    """What stopped the run, as every process sees it: the first Ctrl-C or SIGTERM any of them got
    (a scheduler may signal only some)."""
    return next((r for r in process.gather([reason]) if r is not None), None)


def _write_summary(run_dir: Path, cfg: run_config.RunConfig, status: str, started: float,
                   trainer: Any = None, display: LiveDisplay | None = None,
                   stopped_by: str | None = None,
                   processes: list[dict[str, Any]] | None = None,
                   planned: int | None = None) -> dict[str, Any]:
    """Write ``summary.json``: the run's outcome, from metrics.jsonl (its last greedy check and
    every alarm raised, too), and a final greedy evaluation when ``eval_episodes`` is set and the
    run is complete or solved. ``stopped_by``: the Ctrl-C or SIGTERM that stopped an
    interrupted run; ``processes``: where each training process ran (host and PID, in rank
    order); ``planned``: the run's last planned update. With a trainer of several processes,
    every one calls this (each plays its share of the evaluation) and the main one writes."""
    from textgym.cli.plotting import read_metrics

    evaluation = None
    if status in ("complete", "solved") and cfg.eval_episodes and trainer is not None:
        if display is not None:
            display.log(f"evaluating greedily on {cfg.eval_episodes} held-out episodes...")
        evaluation = with_stderr(trainer.evaluate(episodes=cfg.eval_episodes))
    if trainer is not None and not trainer.process.is_main:
        return {}
    records = read_metrics(run_dir) if (run_dir / run_folder.METRICS).is_file() else []
    summary = {
        "status": status,
        **({"stopped_by": stopped_by} if stopped_by else {}),
        "env": cfg.env,
        "algo": cfg.algo,
        "model": cfg.model,
        "mode": cfg.mode,
        "lora": cfg.lora,
        "updates_planned": planned,
        # what the planned updates play: --episodes rounded up to whole updates
        "episodes_planned": (planned * trainer.config.episodes_per_update
                             if planned is not None and trainer is not None else cfg.episodes),
        "minutes": cfg.minutes,
        "until": cfg.until if cfg.check_every != 0 else None,
        **runs.summarize_metrics(records),
        "session_seconds": round(time.monotonic() - started, 3),
        **_checkpoint_summary(run_dir / CHECKPOINT),
        **({"processes": processes} if processes is not None else {}),
        **({"act_dtype": trainer.policy.act_precision} if trainer is not None else {}),
    }
    if summary.get("wall_time") is None and trainer is not None:  # no update yet: the warm start's time
        summary["wall_time"] = round(trainer.wall_time(), 3)
    if evaluation is not None:
        summary["eval"] = evaluation
    runs.write_json(run_dir / run_folder.SUMMARY, summary)
    return summary


def _checkpoint_summary(checkpoint: Path) -> dict[str, Any]:
    """summary.json's ``checkpoint`` (``None`` when the run has none yet) and
    ``checkpoint_update``, the update it holds."""
    from textgym.trainers import read_checkpoint

    try:
        return {"checkpoint": str(checkpoint), "checkpoint_update": read_checkpoint(checkpoint)["update_count"]}
    except (OSError, ValueError, KeyError):
        return {"checkpoint": None}
