"""``textgym train``: resolve the config, prepare the run folder, train with a live display.

A run folder holds ``config.toml`` (the resolved config), ``metrics.jsonl``, ``checkpoint/``,
``curve.png`` (redrawn every ``plot_every`` updates) and ``summary.json`` (at the end, or when
stopped). Ctrl-C stops after the current update and saves a checkpoint; a second Ctrl-C stops
at once (the last periodic checkpoint stays). ``--resume DIR`` continues the same run: the
update and episode counters carry on and ``metrics.jsonl`` grows.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import typer

from textgym.cli import config as run_config
from textgym.cli import runs
from textgym.cli.display import LiveDisplay
from textgym.cli.envtools import resolve_env
from textgym.cli.errors import EXIT_INTERRUPTED, CLIError
from textgym.cli.runs import with_stderr

#: Per-env defaults of ``textgym train`` (below the config file and flags). The default model
#: (smollm2-135m, score mode, LoRA) makes about 3 decisions per second on a quiet 2-core CPU,
#: acting and training included (measured on CartPole; about 5/s with an adapter on the top 8
#: layers only, ``lora_layers``), so the budgets are small: a time budget (``minutes``) makes the
#: default run finish by itself, and small frequent updates (8 episodes each) show a trend
#: within it.
ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    "textgym/CartPole-v1": {
        "episodes": 400, "minutes": 10, "num_envs": 8, "lr": 2e-4,
        # Measured on the 2-core CPU (2026-11-23, bench/results/probes/README.md): the untrained
        # model already prefers, weakly, to push the way the pole turns (the renderer's one
        # direction word); plain REINFORCE sharpens that. Pole-spin shaping 1.0 with gamma 0.3
        # credits each push for slowing the pole (the advantage then correlates ~0.8 with the
        # right push); 2 warm-up updates keep Adam's first steps small. Sampled return 25 -> 194
        # by update 7, greedy 201.5 on held-out seeds. Once the policy is good, an update of 16
        # ~200-step episodes takes ~8-9 minutes, so the run ends up to ~10 minutes past its budget.
        "trainer": {"episodes_per_update": 16, "minibatch_size": 32, "gamma": 0.3,
                    "warmup_updates": 2, "metrics_window": 16, "lora_layers": 8},
        "env_kwargs": {"shaping": 1.0},
    },
    "textgym/Bandit-v0": {
        "episodes": 512, "minutes": 15, "num_envs": 16, "lr": 3e-4,
        "trainer": {"episodes_per_update": 32, "metrics_window": 64},
    },
    "textgym/Blackjack-v1": {
        "episodes": 1024, "minutes": 15, "num_envs": 16, "lr": 2e-4,
        "trainer": {"episodes_per_update": 64, "metrics_window": 128},
    },
    "textgym/TicTacToe-v0": {
        # Against the random opponent, from a random seat. Rewards +1/-1/0 at the end of the game
        # (gamma 1); 64 games per update (~230 decisions), win rate over the last 128 games.
        # Measured (2026-11-23): lr 2e-4 moved the policy ~0.001 KL per update (training win rate
        # 42% -> 53%, greedy unchanged); lr 1e-3 took it 42% -> 71% by update 4 and greedy play
        # from 61.5% to 67.5% over 200 held-out games.
        "episodes": 1024, "minutes": 10, "num_envs": 16, "lr": 1e-3,
        "trainer": {"episodes_per_update": 64, "minibatch_size": 32, "gamma": 1.0,
                    "metrics_window": 128, "lora_layers": 8},
    },
    "textgym/FrozenLake-v1": {
        "episodes": 256, "minutes": 15, "num_envs": 8, "lr": 2e-4,
        "trainer": {"episodes_per_update": 16, "gamma": 0.99, "metrics_window": 32},
    },
}
GENERIC_DEFAULTS: dict[str, Any] = {"episodes": 256, "num_envs": 8}

# What a resumed run may change: its budget and how it reports. Everything else (env, model,
# algorithm and its settings) comes from the run's checkpoint.
_CHANGEABLE_ON_RESUME = ("episodes", "minutes", "plot_every", "sample_every", "eval_episodes")

#: curve.png is redrawn at most this often (drawing takes about a second).
MIN_PLOT_SECONDS = 10.0

CONFIG_FILE = "config.toml"
CHECKPOINT = "checkpoint"


class _Interrupts:
    """First Ctrl-C: ask the run to stop after the current update. Second: stop at once."""

    def __init__(self, display: LiveDisplay):
        self.requested = False
        self.display = display
        self._previous: Any = None

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def request(self) -> None:
        if not self.requested:
            self.requested = True
            self.display.log("[yellow]Stopping after this update to save a checkpoint "
                             "(Ctrl-C again to quit without saving).[/]")

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.request()


# --- configuration ---------------------------------------------------------------------------


def _new_config(file_layer: dict[str, Any], flags: dict[str, Any]) -> run_config.RunConfig:
    merged = run_config.resolve(file_layer, flags)
    if not merged.env:
        raise CLIError(
            "missing ENV: name an env (e.g. `textgym train cartpole`) or give --resume DIR")
    env_id = resolve_env(merged.env)
    defaults = {**GENERIC_DEFAULTS, **ENV_DEFAULTS.get(env_id, {})}
    cfg = run_config.resolve(defaults, file_layer, flags)
    cfg.env = env_id
    return run_config.validate(cfg)


def _resume_config(run_dir: Path, file_layer: dict[str, Any], flags: dict[str, Any],
                   out: Path | None) -> run_config.RunConfig:
    if out is not None and Path(out).resolve() != run_dir.resolve():
        raise CLIError("give either --resume DIR or --out DIR, not both")
    if not run_dir.is_dir():
        raise CLIError(f"cannot resume: run folder {run_dir} does not exist")
    if not (run_dir / CONFIG_FILE).is_file():
        raise CLIError(f"cannot resume: {run_dir} is not a textgym run folder (no {CONFIG_FILE})")
    saved = run_config.load_toml(run_dir / CONFIG_FILE)
    given = {**file_layer, **{k: v for k, v in flags.items() if v is not None}}
    if given.get("env") is not None:
        given["env"] = resolve_env(given["env"])
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
    cfg.env = saved["env"]
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


def build_policy(model_name: str, mode: str, seed: int | None = None, **settings: Any) -> Any:
    """Check the model name, load it and wrap it in a ``textgym.Policy`` with the model
    registry's defaults and ``settings`` on top (errors -> CLIError)."""
    from textgym.cli.modelcheck import check_model

    check_model(model_name)
    from textgym.policy import Policy, PolicyConfig

    try:  # seed: reproducible sampling
        config = PolicyConfig.for_model(model_name, mode=mode, seed=seed, **settings)
    except (TypeError, ValueError) as exc:
        raise CLIError(f"invalid policy settings: {exc}") from exc
    try:  # the name is recorded in checkpoints
        return Policy.from_pretrained(model_name, config=config)
    except Exception as exc:  # noqa: BLE001 - the loader's message says what it looked for
        raise CLIError(f"cannot load model {model_name!r}: {exc}") from exc


def _trim_metrics(run_dir: Path, updates_done: int) -> int:
    """Drop metrics lines of updates after the checkpoint (a hard kill between checkpoints):
    they are redone after resuming, so each update appears once. Returns lines dropped."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        if isinstance(record.get("update"), int) and record["update"] > updates_done:
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
        tmp.replace(path)
    return dropped


def run(flags: dict[str, Any], config_file: Path | None = None, out: Path | None = None,
        resume: Path | None = None, force: bool = False, quiet: bool = False,
        stop_after: int | None = None) -> None:
    """The ``train`` command (see the module docstring)."""
    file_layer = run_config.load_toml(config_file) if config_file is not None else {}
    if resume is not None:
        run_dir = Path(resume)
        cfg = _resume_config(run_dir, file_layer, flags, out)
        checkpoint = run_dir / CHECKPOINT
        from textgym.trainers.checkpoint import checkpoint_dir

        try:
            checkpoint_dir(checkpoint)
        except FileNotFoundError:
            raise CLIError(f"cannot resume: {run_dir} has no checkpoint yet") from None
    else:
        cfg = _new_config(file_layer, flags)
        run_dir = Path(out) if out is not None else runs.default_out(cfg.env, cfg.algo)
        runs.check_new(run_dir, force)  # before the slow model load; nothing touched yet
    trainer_config = _trainer_config(cfg)
    _fill_from_trainer(cfg, trainer_config)
    if cfg.sft and resume is None:
        _check_demonstrations(cfg.sft)

    if not quiet:
        print(f"textgym: {'resuming' if resume else 'training'} {cfg.model} ({cfg.mode} mode, "
              f"{'LoRA' if cfg.lora else 'full'}) on {cfg.env} with {cfg.algo}; "
              f"run folder {run_dir}", flush=True)
    loading = time.monotonic()
    policy = build_policy(cfg.model, cfg.mode, seed=cfg.seed)
    if not quiet:
        print(f"textgym: {cfg.model} loaded in {time.monotonic() - loading:.1f} s", flush=True)

    from textgym.trainers import make_trainer

    if resume is not None:
        trainer = _resume_trainer(run_dir / CHECKPOINT, policy, run_dir)
        resolved = run_config.dumps(cfg)  # a new budget (episodes, minutes) is saved
        if resolved != (run_dir / CONFIG_FILE).read_text(encoding="utf-8"):
            (run_dir / CONFIG_FILE).write_text(resolved, encoding="utf-8")
        dropped = _trim_metrics(run_dir, trainer.update_count)
        if dropped and not quiet:
            print(f"textgym: {dropped} metrics lines after the checkpoint will be redone")
    else:
        runs.prepare_new(run_dir, force=force)
        (run_dir / CONFIG_FILE).write_text(run_config.dumps(cfg), encoding="utf-8")
        trainer = make_trainer(cfg.algo, policy, env=cfg.env, config=trainer_config,
                               out_dir=run_dir, **_env_kwargs_arg(cfg))
        if cfg.sft:
            _warm_start(trainer, cfg, quiet)
    _train(trainer, cfg, run_dir, quiet=quiet, stop_after=stop_after)


def _env_kwargs_arg(cfg: run_config.RunConfig) -> dict[str, Any]:
    return {"env_kwargs": dict(cfg.env_kwargs)} if cfg.env_kwargs else {}


def _resume_trainer(checkpoint: Path, policy: Any, run_dir: Path) -> Any:
    from textgym.trainers import Trainer

    try:
        return Trainer.resume(checkpoint, policy=policy, out_dir=run_dir)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise CLIError(f"cannot resume from {checkpoint}: {exc}") from exc


def _check_demonstrations(path: str) -> None:
    from textgym.trainers.sft import load_demonstrations

    try:
        load_demonstrations(path)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"bad SFT file: {exc}") from exc


def _warm_start(trainer: Any, cfg: run_config.RunConfig, quiet: bool) -> None:
    if not quiet:
        print(f"textgym: supervised warm-up on {cfg.sft}", flush=True)
    try:
        losses = trainer.warm_start(cfg.sft)
    except (ValueError, KeyError, TypeError) as exc:
        raise CLIError(f"bad SFT file {cfg.sft}: {exc}") from exc
    if not quiet and losses:
        print(f"textgym: warm-up loss {losses[0]:.3g} -> {losses[-1]:.3g}", flush=True)


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
    with display, _Interrupts(display) as interrupts:
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
                interrupts.request()
            # Stop when the next update would likely end past the time budget.
            out_of_time = seconds is not None and now - started + update_seconds > seconds
            return not (interrupts.requested or out_of_time)

        if remaining > 0:
            try:
                trainer.train(episodes=remaining, seconds=seconds, callback=callback)
            except Exception as exc:
                # The last periodic checkpoint stays; say so in the summary, then fail.
                _write_summary(run_dir, cfg, f"failed: {type(exc).__name__}: {exc}", started)
                raise
            if interrupts.requested:
                status = "interrupted"
            elif trainer.episodes_seen < total:  # the time budget ran out first
                status = "time_limit"
        else:
            display.log(f"the run already has {done} of {total} episodes")
        trainer.save_checkpoint(run_dir / CHECKPOINT)
        redraw()

    summary = _write_summary(run_dir, cfg, status, started, trainer=trainer, display=display)
    if status in ("interrupted", "time_limit"):
        if not quiet:
            why = ("stopped" if status == "interrupted"
                   else f"time budget of {cfg.minutes:g} min reached")
            print(f"textgym: {why} after update {summary.get('updates')} "
                  f"({summary.get('episodes')} of {total} episodes); checkpoint saved. "
                  f"Continue with: textgym train --resume {run_dir}", flush=True)
        if status == "interrupted":
            raise typer.Exit(EXIT_INTERRUPTED)
        return
    if not quiet:
        first, last = summary.get("first_return_mean"), summary.get("last_return_mean")
        trend = f"; mean return {first:.3g} -> {last:.3g}" if first is not None else ""
        updates = summary.get("updates")
        print(f"textgym: done: {updates} update{'' if updates == 1 else 's'}, "
              f"{summary.get('episodes')} episodes{trend}. Run folder: {run_dir}", flush=True)


def _write_summary(run_dir: Path, cfg: run_config.RunConfig, status: str, started: float,
                   trainer: Any = None, display: LiveDisplay | None = None) -> dict[str, Any]:
    """Write ``summary.json``: the run's outcome, from metrics.jsonl (and a final greedy
    evaluation when ``eval_episodes`` is set and the run is complete)."""
    from textgym.cli.plotting import read_metrics

    records = read_metrics(run_dir) if (run_dir / "metrics.jsonl").is_file() else []
    summary = {
        "status": status,
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
