"""The ``textgym`` command line (Typer).

    textgym train cartpole                 # train the default model on CartPole, live display
    textgym eval cartpole --checkpoint runs/cartpole-reinforce-...  --baseline random
    textgym envs                           # every registered text env, plugins included
    textgym play blackjack                 # play the text env yourself, through the same parser
    textgym plot runs/a runs/b             # learning curves of several runs, overlaid
    textgym view runs/a runs/b             # an HTML page: curves, settings, episode transcripts
    textgym export runs/a --out my-agent --merge   # a model folder any Hugging Face tool loads
    textgym benchmark --suite quick        # a fixed suite of runs, greedy results beside references

This module stays cheap to import (``textgym --help`` is instant): torch, transformers,
peft, trl and even gymnasium are imported inside the commands that need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from textgym.cli.config import ENV_FLAGS, HARDWARE, RUN, TRAINER_FLAGS, EnvSettings, RunConfig
from textgym.cli.errors import TextgymGroup
from textgym.cli.options import flags_of, option, with_settings

from textgym.benchmark import BenchmarkConfig
from textgym.policy.config import PolicyConfig
from textgym.trainers import TrainConfig

app = typer.Typer(
    cls=TextgymGroup,
    name="textgym",
    help="Turn Gymnasium envs into text envs and train LLM agents on them with online RL.",
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _complete_env(incomplete: str) -> list[str]:
    """Shell completion of ENV: the short names of the registered text envs (plugins too)."""
    import textgym

    names = sorted({info.short_name for info in textgym.list_envs()})
    return [name for name in names if name.startswith(incomplete.lower())]


# Options that are settings are declared once, as config dataclass fields (cli/options.py derives
# them: name, type, range, help, panel): RunConfig and EnvSettings (cli/config.py), PolicyConfig,
# TrainConfig.
_TRAIN_SETTINGS = ((RunConfig, flags_of(RunConfig), {}),
                   (EnvSettings, ENV_FLAGS, {}),
                   (PolicyConfig, flags_of(PolicyConfig), {"default_text": ""}),  # the panel says
                   (TrainConfig, TRAINER_FLAGS, {}))
_EVAL_POLICY_PANEL = "Policy (default: the checkpoint's)"
#: The policy settings ``eval`` may override (greedy play: no temperature or top-p).
_EVAL_POLICY_FLAGS = ("max_new_tokens", "normalization", "chat_template", "act_dtype")
_EVAL_SETTINGS = (
    (RunConfig, ("mode",), {"default_text": "the run's", "panel": "Options"}),
    (PolicyConfig, _EVAL_POLICY_FLAGS, {"default_text": "the checkpoint's", "panel": _EVAL_POLICY_PANEL}),
    (TrainConfig, ("num_envs",), {"default_text": "all episodes side by side, up to 64"}),  # eval_envs
    (TrainConfig, ("eval_seed",), {"flag": "--seed"}),
    (RunConfig, ("device", "dtype", "quantize"), {}),
    (EnvSettings, ("max_episode_steps",), {"default_text": "the run's", "panel": "Options"}),
)


def _print_version(value: bool) -> None:
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    from textgym.cli.messages import say

    try:
        installed = version("textgym")
    except PackageNotFoundError:  # run from a source tree that was never pip-installed
        installed = "(not installed)"
    say(f"textgym {installed}")
    raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(
        False, "--debug", help="Show full tracebacks (accepted anywhere on the command line)."
    ),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True,
        help="Print textgym's version (of the installed package) and exit.",
    ),
) -> None:
    """Turn Gymnasium envs into text envs and train LLM agents on them with online RL."""


@app.command()
@with_settings(*_TRAIN_SETTINGS)
def train(
    env: str | None = typer.Argument(
        None, help="Env short name (cartpole, blackjack, frozenlake, bandit, ...) or id.",
        show_default=False, autocompletion=_complete_env, metavar="ENV",
    ),
    settings: dict[str, Any] | None = None,
    out: Path | None = typer.Option(
        None, help="Run folder.", show_default="runs/<env>-<algo>-<time>", rich_help_panel=RUN,
        metavar="DIR",
    ),
    config: Path | None = typer.Option(
        None, "--config", help="TOML config file; flags override it.", metavar="FILE",
        rich_help_panel=RUN,
    ),
    resume: Path | None = typer.Option(
        None, help="Continue the run in this folder from its last checkpoint.", metavar="RUN",
        rich_help_panel=RUN,
    ),
    force: bool = typer.Option(False, "--force", help="Start over in an existing --out folder.",
                               rich_help_panel=RUN),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live display."),
    processes: int | None = typer.Option(
        None, "--processes", min=1, show_default="1", metavar="N", rich_help_panel=HARDWARE,
        help="Train data-parallel in N local processes (not under torchrun or accelerate).",
    ),
    stop_after: int | None = typer.Option(
        None, "--stop-after", min=1, hidden=True,
        help="Act as if Ctrl-C was pressed after N updates (tests of resume).",
    ),
) -> None:
    """Train an LLM agent on a text env, with a live display; writes a run folder."""
    from textgym.cli import training

    training.run(
        {"env": env, **(settings or {})}, config_file=config, out=out, resume=resume, force=force,
        quiet=quiet, stop_after=stop_after, processes=processes,
    )


@app.command("eval")
@with_settings(*_EVAL_SETTINGS)
def evaluate(
    env: str = typer.Argument(..., help="Env short name or id.", show_default=False,
                              autocompletion=_complete_env, metavar="ENV"),
    settings: dict[str, Any] | None = None,
    checkpoint: list[Path] = typer.Option(
        [], help="Checkpoint folder, or a run folder (its latest checkpoint); repeat to compare several.",
        metavar="DIR",
    ),
    model: str | None = typer.Option(
        None, help="Model to evaluate without a checkpoint, or the base model of an adapter.",
        metavar="TEXT",
    ),
    baseline: list[str] = typer.Option(
        [], "--baseline", help="Also evaluate a reference policy of the env: random, scripted, "
        "optimal where it has one (repeatable).", metavar="NAME"
    ),
    episodes: int = typer.Option(50, min=1, help="Evaluation episodes.", metavar="N"),
    json_out: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    config: Path | None = typer.Option(
        None, "--config", help="TOML file: its mode, env_kwargs and policy tables, for --model "
        "and --baseline (as for train); its env_kwargs also over a checkpoint's run settings "
        "(another opponent, a step cap)."),
) -> None:
    """Greedy evaluation on held-out seeds: mean return +- standard error, length, invalid rate."""
    from textgym.cli import evaluation

    given = settings or {}
    defaults = TrainConfig()
    # a checkpoint's own settings unless these flags override
    policy_flags = {name: given[name] for name in _EVAL_POLICY_FLAGS}
    evaluation.run(
        env, checkpoint=checkpoint, model=model, mode=given["mode"],
        baselines=list(baseline), episodes=episodes,
        num_envs=given["num_envs"],  # None: textgym.trainers.engine.evaluation.eval_envs
        seed=defaults.eval_seed if given["eval_seed"] is None else given["eval_seed"],
        json_out=json_out, device=given["device"], dtype=given["dtype"],
        quantize=given["quantize"], policy_flags=policy_flags, max_episode_steps=given["max_episode_steps"],
        config=config,
    )


@app.command()
@with_settings((BenchmarkConfig, flags_of(BenchmarkConfig), {}))
def benchmark(
    settings: dict[str, Any] | None = None,
    out: Path | None = typer.Option(None, metavar="DIR", help="Output folder; the same again resumes.",
                                    show_default="runs/benchmark-<suite>"),
    doc: Path | None = typer.Option(None, metavar="FILE", help="Also write the table into this "
                                    "Markdown file's generated block (docs/results.md)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
) -> None:
    """Train a fixed suite of runs from the untrained model; greedy held-out results beside references."""
    from textgym.cli import benchmarking

    benchmarking.run(settings or {}, out=out, doc=doc, quiet=quiet)


@app.command("runs")
def list_runs(
    folder: Path = typer.Argument(Path("runs"), help="The folder holding the run folders."),
    json_out: bool = typer.Option(False, "--json", help="Print the list as JSON."),
) -> None:
    """List the runs in a folder, newest first: env, algorithm, status, progress, checkpoint."""
    from textgym.cli import runlist

    runlist.run(folder, json_out=json_out)


@app.command()
def envs(
    json_out: bool = typer.Option(False, "--json", help="Print the list as JSON."),
    family: str | None = typer.Option(None, "--family", help="List the ids of one env family "
                                      "(e.g. minigrid, textarena, reasoning_gym)."),
) -> None:
    """List every registered text env (built-in and plugins) with its actions, and the env families."""
    from textgym.cli import listing

    listing.run(json_out=json_out, family=family)


@app.command()
def play(
    env: str = typer.Argument(..., help="Env short name or id.", show_default=False,
                              autocompletion=_complete_env),
    seed: int | None = typer.Option(None, help="Seed of the first episode."),
    episodes: int = typer.Option(1, min=1, help="Episodes to play."),
    checkpoint: Path | None = typer.Option(
        None, help="Watch this run's (or checkpoint's) agent play greedily, with the run's env settings."),
) -> None:
    """Play a text env yourself: see the exact prompt, type answers (Ctrl-D quits)."""
    from textgym.cli import playing

    playing.run(env, seed=seed, episodes=episodes, checkpoint=checkpoint)


@app.command()
def serve(
    env: str | None = typer.Argument(None, help="Env short name or id.", show_default=False,
                                     autocompletion=_complete_env),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, help="Port to listen on (0: a free one, named in the line the server prints)."),
    max_sessions: int = typer.Option(64, "--max-sessions", min=1, help="Concurrent sessions (clients)."),
    config: Path | None = typer.Option(
        None, "--config", help="TOML file: its env and its env_kwargs table (as for train)."),
    step_timeout: float | None = typer.Option(
        None, "--step-timeout", show_default=False,
        help="Seconds a reset or step may take before its session is closed (default 30)."),
    token: str | None = typer.Option(
        None, "--token", envvar="TEXTGYM_TOKEN", show_default=False,
        help="Require this token (Authorization: Bearer) on every request; clients: TEXTGYM_TOKEN."),
) -> None:
    """Serve a text env over the network as an OpenEnv env (one session per client)."""
    from textgym.cli import serving

    serving.run(env, host=host, port=port, max_sessions=max_sessions, config=config,
                step_timeout=step_timeout, token=token)


@app.command("export")
def export(
    run: Path = typer.Argument(
        ..., help="Run folder (its latest checkpoint) or checkpoint folder.", show_default=False
    ),
    out: Path = typer.Option(..., help="Folder to write (new or empty).", show_default=False),
    merge: bool = typer.Option(
        False, "--merge",
        help="Merge the LoRA adapter into the base weights: a plain transformers model folder.",
    ),
    push_to_hub: str | None = typer.Option(
        None, "--push-to-hub", metavar="REPO_ID",
        help="Also upload the folder to this Hugging Face hub repository (created if needed).",
    ),
    force: bool = typer.Option(False, "--force", help="Replace an earlier export in --out."),
    device: str | None = option(RunConfig, "device", help_prefix="With --merge: ")[1],
    dtype: str | None = option(RunConfig, "dtype", help_prefix="With --merge: ")[1],
) -> None:
    """Export a checkpoint for use elsewhere: its adapter or merged model, tokenizer and card.

    The folder holds the PEFT adapter (or, with --merge, a merged model), the tokenizer, the
    policy settings and a model card."""
    from textgym.cli import exporting

    exporting.run(run, out, merge=merge, push_to_hub=push_to_hub, force=force, device=device,
                  dtype=dtype)


@app.command()
def plot(
    runs: list[Path] = typer.Argument(
        ..., help="Run folders or metrics.jsonl files.", show_default=False
    ),
    out: Path = typer.Option(Path("curves.png"), help="Output PNG."),
) -> None:
    """Learning curves (return, length, invalid rate, KL vs episodes and wall time) as a PNG."""
    from textgym.cli import plotting
    from textgym.cli.messages import say

    path = plotting.plot_runs(runs, out)
    say(f"wrote {path}")


@app.command()
def view(
    runs: list[Path] = typer.Argument(..., help="Run folders (several: curves overlaid).", show_default=False),
    out: Path = typer.Option(Path("report.html"), help="Output HTML file."),
    open_page: bool = typer.Option(False, "--open", help="Open the page in a browser."),
) -> None:
    """One self-contained HTML page: learning curves, settings and episode transcripts."""
    from textgym.cli import viewing

    viewing.run(runs, out, open_page=open_page)


if __name__ == "__main__":  # pragma: no cover
    app()
