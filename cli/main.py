"""The ``textgym`` command line (Typer).

    textgym train cartpole                 # train the default model on CartPole, live display
    textgym eval cartpole --checkpoint runs/cartpole-reinforce-...  --baseline random
    textgym envs                           # every registered text env, plugins included
    textgym play blackjack                 # play the text env yourself, through the same parser
    textgym plot runs/a runs/b             # learning curves of several runs, overlaid

This module stays cheap to import (``textgym --help`` is instant): torch, transformers,
peft, trl and even gymnasium are imported inside the commands that need them.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from textgym.cli.errors import TextgymGroup

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


class Algo(str, Enum):
    reinforce = "reinforce"
    grpo = "grpo"
    ppo = "ppo"


class Mode(str, Enum):
    score = "score"
    generate = "generate"


class Baseline(str, Enum):
    random = "random"
    scripted = "scripted"


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
def train(
    env: str | None = typer.Argument(
        None, help="Env short name (cartpole, blackjack, frozenlake, bandit, ...) or id.",
        show_default=False, autocompletion=_complete_env,
    ),
    algo: Algo | None = typer.Option(None, help="RL algorithm.", show_default="reinforce"),
    model: str | None = typer.Option(
        None, help="Model registry name, hub id or local folder.", show_default="smollm2-135m"
    ),
    mode: Mode | None = typer.Option(
        None, help="score: pick the likeliest valid action; generate: free text.",
        show_default="score",
    ),
    think: bool | None = typer.Option(
        None, "--think", help="Generate mode: the model reasons in free text, then answers in "
        "<answer></answer> tags (implies --mode generate).", show_default=False,
    ),
    episodes: int | None = typer.Option(
        None, min=1, help="Training episodes in total.", show_default="per env"
    ),
    num_envs: int | None = typer.Option(
        None, "--num-envs", min=1, help="Envs stepped together.", show_default="per env"
    ),
    minutes: float | None = typer.Option(
        None, help="Time budget of this session; the run stops cleanly when it is spent.",
        show_default="per env",
    ),
    lr: float | None = typer.Option(None, help="Learning rate.", show_default="the algorithm's"),
    seed: int | None = typer.Option(None, help="Random seed.", show_default="0"),
    lora: bool | None = typer.Option(
        None, "--lora/--full", help="Train a LoRA adapter or all weights.", show_default="lora"
    ),
    sft: Path | None = typer.Option(
        None, help="JSONL of {prompt, answer} pairs: supervised warm-up before RL."
    ),
    out: Path | None = typer.Option(
        None, help="Run folder.", show_default="runs/<env>-<algo>-<time>"
    ),
    config: Path | None = typer.Option(
        None, "--config", help="TOML config file; flags override it."
    ),
    resume: Path | None = typer.Option(
        None, help="Continue the run in this folder from its last checkpoint."
    ),
    force: bool = typer.Option(False, "--force", help="Start over in an existing --out folder."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live display."),
    stop_after: int | None = typer.Option(
        None, "--stop-after", min=1, hidden=True,
        help="Act as if Ctrl-C was pressed after N updates (tests of resume).",
    ),
) -> None:
    """Train an LLM agent on a text env, with a live display; writes a run folder."""
    from textgym.cli import training

    flags = {
        "env": env,
        "algo": algo.value if algo else None,
        "model": model,
        "mode": mode.value if mode else None,
        "think": think,
        "episodes": episodes,
        "minutes": minutes,
        "num_envs": num_envs,
        "lr": lr,
        "seed": seed,
        "lora": lora,
        "sft": str(sft) if sft else None,
    }
    training.run(
        flags, config_file=config, out=out, resume=resume, force=force, quiet=quiet,
        stop_after=stop_after,
    )


@app.command("eval")
def evaluate(
    env: str = typer.Argument(..., help="Env short name or id.", show_default=False,
                              autocompletion=_complete_env),
    checkpoint: Path | None = typer.Option(
        None, help="Checkpoint folder, or a run folder (its latest checkpoint)."
    ),
    model: str | None = typer.Option(
        None, help="Model to evaluate without a checkpoint, or the base model of an adapter."
    ),
    mode: Mode | None = typer.Option(None, help="score or generate.", show_default="the run's"),
    baseline: list[Baseline] = typer.Option(
        [], "--baseline", help="Also evaluate a reference policy (repeatable)."
    ),
    episodes: int = typer.Option(50, min=1, help="Evaluation episodes."),
    num_envs: int = typer.Option(8, "--num-envs", min=1, help="Envs stepped together."),
    seed: int = typer.Option(
        1_000_000, help="First seed of the held-out episodes (training uses small seeds)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Greedy evaluation on held-out seeds: mean return +- standard error, length, invalid rate."""
    from textgym.cli import evaluation

    evaluation.run(
        env, checkpoint=checkpoint, model=model, mode=mode.value if mode else None,
        baselines=[b.value for b in baseline], episodes=episodes, num_envs=num_envs, seed=seed,
        json_out=json_out,
    )


@app.command()
def envs(
    json_out: bool = typer.Option(False, "--json", help="Print the list as JSON."),
) -> None:
    """List every registered text env (built-in and plugins) with its actions."""
    from textgym.cli import listing

    listing.run(json_out=json_out)


@app.command()
def play(
    env: str = typer.Argument(..., help="Env short name or id.", show_default=False,
                              autocompletion=_complete_env),
    seed: int | None = typer.Option(None, help="Seed of the first episode."),
    episodes: int = typer.Option(1, min=1, help="Episodes to play."),
) -> None:
    """Play a text env yourself: see the exact prompt, type answers (Ctrl-D quits)."""
    from textgym.cli import playing

    playing.run(env, seed=seed, episodes=episodes)


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


if __name__ == "__main__":  # pragma: no cover
    app()
