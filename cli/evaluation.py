"""``textgym eval``: greedy evaluation of a checkpoint (or a bare model) on held-out seeds, with
the random and scripted baselines beside it.

Reports, per policy: mean return +- its standard error, mean episode length, the
invalid-answer rate (invalid answers per decision) and, on a tool env, the valid tool calls per
decision and the episodes that called a tool.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from textgym.cli import config as run_config
from textgym.cli.envtools import make_env, resolve_env
from textgym.cli.errors import EXIT_USAGE, CLIError
from textgym.cli.messages import say, styled
from textgym.cli.modelcheck import check_option_names
from textgym.cli.runs import with_stderr

from textgym import run_folder


def find_checkpoint(path: Path) -> tuple[Path, Path | None]:
    """``(checkpoint folder, run folder or None)`` for a run folder or a checkpoint folder."""
    from textgym.trainers.state.checkpoint import checkpoint_dir

    if not path.exists():
        raise CLIError(f"checkpoint {path} does not exist")
    checkpoint = path / run_folder.CHECKPOINT
    if checkpoint.exists() or run_folder.previous(checkpoint).exists():
        candidate, run = checkpoint, path  # a run folder
    else:
        candidate, run = path, (path.parent if path.name == run_folder.CHECKPOINT else None)
    try:
        folder = checkpoint_dir(candidate)
    except FileNotFoundError:
        folder = None
    if folder is not None:
        if run is not None and not (run / run_folder.CONFIG).is_file():
            run = None
        return folder, run
    raise CLIError(f"no checkpoint in {path} (expected {checkpoint / run_folder.STATE} or "
                   f"{path / run_folder.STATE})")


def _model_evaluation(env_id: str, checkpoint: Path | None, model: str | None, mode: str | None,
                      episodes: int, num_envs: int | None, seed: int, device: str | None = None,
                      dtype: str | None = None, quantize: str | None = None,
                      overrides: dict[str, Any] | None = None, max_episode_steps: int | None = None,
                      env_overrides: dict[str, Any] | None = None, announce: bool = True,
                      given_policy: dict[str, Any] | None = None,
                      ) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Evaluate a checkpoint or a bare model: ``(label, result, env_kwargs of the run)``.
    ``overrides``: policy settings given as flags, over the checkpoint's own; ``given_policy``:
    policy settings (``--config``) over a bare model's registered ones (under the flags);
    ``env_overrides``: env settings over the run's or a bare model's registered ones (``--config``'s
    ``[env_kwargs]``; ``textgym benchmark``: a step cap, held-out TextWorld games), under
    ``max_episode_steps`` (the flag);
    ``announce``: the lines and progress on stderr (``textgym benchmark`` shows its own)."""
    from textgym.cli.training import build_policy

    from textgym.trainers import make_trainer, read_checkpoint
    from textgym.trainers.engine.evaluation import eval_envs

    state: dict[str, Any] = {}
    saved: dict[str, Any] = {}
    recorded: dict[str, Any] = {}
    if checkpoint is not None:
        folder, run = find_checkpoint(checkpoint)
        state = read_checkpoint(folder)
        if run is None and state.get("out_dir") and Path(state["out_dir"], run_folder.CONFIG).is_file():
            run = Path(state["out_dir"])
        if run is not None:
            saved = run_config.load_toml(run / run_folder.CONFIG)
        recorded = state.get("policy") or {}  # the checkpoint names its base model and mode
        model = model or saved.get("model") or recorded.get("name")
        mode = mode or saved.get("mode") or recorded.get("mode")
        if model is None:
            raise CLIError(f"which base model does {checkpoint} fine-tune? give --model "
                           f"(its run folder has no config.toml)")
    mode = mode or saved.get("mode") or "score"
    # The checkpoint's own policy settings (normalization, chat template...) when it is its base model.
    settings = {k: v for k, v in recorded.items() if k not in ("name", "mode", "seed") and v is not None} \
        if recorded.get("name") == model else {}
    env_kwargs = state.get("env_kwargs")
    if checkpoint is None:  # a bare model plays with the env's registered settings for the mode
        from textgym.registry import training_defaults

        registered = training_defaults(env_id, mode)
        settings = {**registered.policy, **(given_policy or {})}
        env_kwargs = registered.env_kwargs
    env_kwargs = {**(env_kwargs or {}), **(env_overrides or {})}
    if max_episode_steps is not None:  # the env's own step limit, over the run's and the file's
        env_kwargs = {**env_kwargs, "max_episode_steps": max_episode_steps}
    overrides = overrides or {}
    if checkpoint is not None and announce:
        _say_settings(settings, overrides)
    settings.update(overrides)
    if "act_dtype" in overrides:  # --act-dtype: what the evaluation acts in
        settings["eval_act_dtype"] = overrides["act_dtype"]
    # Device, precision and quantization are this machine's choice (flags), not the run's.
    policy = build_policy(model, mode, device=device, dtype=dtype, quantize=quantize, **settings)
    trainer_config = dict(state.get("config", {}))
    algorithm = trainer_config.pop("algorithm", state.get("algorithm", "reinforce"))
    # A bare model gets a fresh LoRA adapter, which starts as the identity (B = 0).
    trainer = make_trainer(algorithm, policy, env=env_id, config=trainer_config or None,
                           out_dir=None, env_kwargs=env_kwargs)
    if checkpoint is not None:
        try:
            trainer.load_state(folder)
        except (ValueError, FileNotFoundError, KeyError) as exc:
            raise CLIError(f"cannot load checkpoint {checkpoint}: {exc}") from exc
        except RuntimeError as exc:  # torch's size-mismatch report runs to kilobytes
            base = recorded.get("name")
            raise CLIError(f"cannot load checkpoint {checkpoint} into model {model!r}: its weights do not fit"
                           + (f" (it fine-tunes {base!r}; drop --model)" if base and base != model else "")) from exc
    label = "checkpoint" if checkpoint is not None else model
    from textgym.cli.display import evaluation_progress

    envs = min(num_envs, episodes) if num_envs else eval_envs(episodes)
    if announce:
        choice = trainer.policy.eval_precision, trainer.policy.precision_choice
        say(f"textgym: {episodes} greedy episodes, {envs} envs per forward pass, acting in "
            f"{choice[1].describe() if choice[1] is not None and choice[1].dtype == choice[0] else choice[0]}",
            err=True)
    with evaluation_progress() if announce else contextlib.nullcontext():
        result = trainer.evaluate(episodes=episodes, seed=seed, num_envs=envs)
    result = with_stderr(result)
    from textgym.registry import exact_return

    exact = exact_return(env_id)
    if exact is not None:  # the greedy play's exact expected return, where the env can compute it
        result["exact_return"] = exact(trainer.policy, env_kwargs)
    return label, result, dict(env_kwargs or {})


def _say_settings(recorded: dict[str, Any], overrides: dict[str, Any]) -> None:
    """One line on stderr: the checkpoint's policy settings are used, but for the flags given."""
    if not recorded:
        source = "the model registry's policy settings (the checkpoint's base model differs)"
    else:
        source = "the checkpoint's policy settings"
    changed = [("chat_template from --chat-template" if name == "chat_template"
                else f"{name}={value!r}") for name, value in overrides.items()
               if recorded.get(name) != value]
    say(f"textgym: evaluating with {source}" + (f", except {', '.join(changed)}" if changed else ""),
        err=True)


def run(env: str, checkpoint: Path | list[Path] | None, model: str | None, mode: str | None,
        baselines: list[str], episodes: int, num_envs: int | None, seed: int, json_out: bool,
        device: str | None = None, dtype: str | None = None, quantize: str | None = None,
        policy_flags: dict[str, Any] | None = None, max_episode_steps: int | None = None,
        config: Path | None = None) -> None:
    from textgym.cli.envtools import check_env_kwargs, check_mode
    from textgym.cli.training import policy_config

    check_option_names(device, dtype, quantize)
    overrides = run_config.policy_flags(policy_flags or {}).get("policy", {})
    # --config (a train config file): its mode, env_kwargs and policy tables, for a bare model;
    # its env_kwargs also over a checkpoint's
    given = run_config.load_toml(config) if config is not None else {}
    given_kwargs, given_policy = given.get("env_kwargs") or {}, given.get("policy") or {}
    for name, table in (("env_kwargs", given_kwargs), ("policy", given_policy)):
        if not isinstance(table, dict):
            raise CLIError(f"{config}: '{name}' must be a table")
    mode = mode or given.get("mode")
    if overrides or given_policy:  # bad values fail here, before any model loads
        policy_config(None, mode, None, {**given_policy, **overrides})
    env_id = resolve_env(env)
    # a bare model plays in score mode unless told otherwise: a served env must list actions for it
    check_env_kwargs(env_id, given_kwargs, (mode or "score") if model is not None and not checkpoint else None)
    if model is not None and not checkpoint:  # a bare model plays in the mode given (a checkpoint: its own)
        from textgym.registry import training_defaults

        check_mode(env_id, mode, {**training_defaults(env_id, mode or "score").env_kwargs, **given_kwargs})
    from textgym.baselines import reference_policy_names

    known = reference_policy_names(env_id)
    # "scripted" on an env without one is a table line saying so; any other unknown name is a typo
    unknown = [name for name in baselines if name not in known and name != "scripted"]
    if unknown:
        raise CLIError(f"--baseline {unknown[0]}: {env_id} has the reference policies {', '.join(known)}",
                       exit_code=EXIT_USAGE)
    checkpoints = [checkpoint] if isinstance(checkpoint, Path) else list(checkpoint or [])
    if not checkpoints and model is None and not baselines:
        raise CLIError("nothing to evaluate: give --checkpoint DIR, --model NAME or --baseline")
    if len({find_checkpoint(c)[0].resolve() for c in checkpoints}) < len(checkpoints):  # before any model loads
        raise CLIError("the same checkpoint is given twice")
    results: dict[str, dict[str, Any] | None] = {}
    env_kwargs: dict[str, Any] = dict(given_kwargs)
    for one in checkpoints or ([None] if model is not None else []):
        label, result, env_kwargs = _model_evaluation(env_id, one, model, mode, episodes,
                                                      num_envs, seed, device, dtype, quantize,
                                                      overrides, max_episode_steps,
                                                      env_overrides=given_kwargs, given_policy=given_policy)
        results[str(one) if len(checkpoints) > 1 else label] = result  # several: each by its path
    if baselines:
        from textgym.baselines import evaluate_baseline
        from textgym.registry import held_out

        env_kwargs = held_out(env_kwargs)  # a self-play run is measured against the default opponent
        if max_episode_steps is not None:
            env_kwargs = {**env_kwargs, "max_episode_steps": max_episode_steps}
        game = make_env(env_id, **env_kwargs)  # the same env settings as the run
        try:
            for kind in dict.fromkeys(baselines):
                result = evaluate_baseline(game, kind, episodes, seed)
                results[kind] = with_stderr(result) if result is not None else None
        finally:
            game.close()
    if json_out:
        print(json.dumps({"env": env_id, "episodes": episodes, "seed": seed, "results": results},
                         indent=2, default=float))
        return
    _print_table(env_id, episodes, seed, results)


def _print_table(env_id: str, episodes: int, seed: int,
                 results: dict[str, dict[str, Any] | None]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 100))
    say(styled((env_id, "bold"), f": {episodes} episodes per policy on held-out seeds from "
               f"{seed} (models act greedily)"), console=console)
    table = Table()
    table.add_column("policy", style="bold")
    table.add_column("return (mean ± s.e.)", justify="right")
    table.add_column("length", justify="right")
    table.add_column("invalid", justify="right")
    games = any(r and "win_rate" in r for r in results.values())
    if games:
        table.add_column("win / draw / loss", justify="right")
    tools = any(r and "valid_tool_call_rate" in r for r in results.values())  # a tool env
    if tools:
        table.add_column("valid tool calls", justify="right")
        table.add_column("used a tool", justify="right")
        table.add_column("answer reward", justify="right")  # the final answer's, penalties apart
    extra = int(games) + 3 * int(tools)
    for name, result in results.items():
        if result is None:
            table.add_row(name, "(no scripted policy for this env)", "", "", *([""] * extra))
            continue
        stderr = result.get("return_stderr", math.nan)
        row = [name, f"{result['return_mean']:.3f} ± {stderr:.3f}",
               f"{result['length_mean']:.1f}", f"{result['invalid_rate']:.1%}"]
        if games:
            row.append(" / ".join(f"{result[k]:.0%}" for k in ("win_rate", "draw_rate", "loss_rate"))
                       if "win_rate" in result else "")
        if tools:
            row += [f"{result['valid_tool_call_rate']:.1%}", f"{result['tool_use_rate']:.1%}",
                    f"{result['answer_reward_mean']:.3f} ± {result['answer_reward_stderr']:.3f}"] \
                if "valid_tool_call_rate" in result else ["", "", ""]
        table.add_row(*row)
    console.print(table)
