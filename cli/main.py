"""The ``textgym`` command line (Typer).

    textgym train cartpole                 # train the default model on CartPole, live display
    textgym eval cartpole --checkpoint runs/cartpole-reinforce-...  --baseline random
    textgym envs                           # every registered text env, plugins included
    textgym play blackjack                 # play the text env yourself, through the same parser
    textgym plot runs/a runs/b             # learning curves of several runs, overlaid
    textgym export runs/a --out my-agent --merge   # a model folder any Hugging Face tool loads

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


# --device/--dtype/--quantize of the commands that load a model; textgym.models checks the values.
_DEVICE_HELP = "auto (CUDA if available, else CPU), cpu, cuda, cuda:N or mps."
_DTYPE_HELP = "auto (bfloat16 on a CUDA GPU that supports it, else float32), float32, bfloat16, float16."
_QUANTIZE_HELP = "4bit or 8bit: load the model quantized by bitsandbytes (QLoRA; textgym[quantize])."
# Policy settings (textgym.policy.PolicyConfig checks the values; cli/config.py POLICY_FLAGS).
_POLICY_PANEL = "Policy settings (default: the model's)"
_TEMPERATURE_HELP = "Sampling temperature (> 0) over the candidates (score) or tokens (generate)."
_TOP_P_HELP = "Generate mode: nucleus sampling threshold, in (0, 1]."
_MAX_NEW_TOKENS_HELP = "Generate mode: the answer length limit in tokens."
_NORMALIZATION_HELP = ("Score mode: a candidate's score is the sum of its token log-probs (sum), "
                       "their mean (token) or the sum per word (word).")
_CHAT_TEMPLATE_HELP = "Jinja chat template file replacing the tokenizer's (its text is saved with the run)."
_EVAL_CHAT_TEMPLATE_HELP = "Jinja chat template file replacing the checkpoint's or the tokenizer's."


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
    history: str | None = typer.Option(
        None, metavar="full|N",
        help="What the model reads of an episode: 'full' (the whole episode as a chat, its KV "
             "cache kept across turns) or N (at least the last N turns).",
        show_default="the newest observation alone",
    ),
    updates: int | None = typer.Option(
        None, min=1, help="Training updates in total (with --episodes: whichever comes first).",
        show_default="per env",
    ),
    think: bool | None = typer.Option(
        None, "--think", help="Generate mode: the model reasons in free text, then answers in "
        "<answer></answer> tags (implies --mode generate).", show_default=False,
    ),
    episodes: int | None = typer.Option(
        None, min=1, help="Training episodes in total (with --updates: whichever comes first).",
        show_default="per env",
    ),
    num_envs: int | None = typer.Option(
        None, "--num-envs", min=1, help="Envs stepped together.", show_default="per env"
    ),
    minutes: float | None = typer.Option(
        None, help="Cap on this session's wall time: the update in progress at the cap is dropped "
                   "and --resume replays it.", show_default="none",
    ),
    until: float | None = typer.Option(
        None, help="Stop once the mean greedy return on held-out episodes reaches RETURN.",
        metavar="RETURN", show_default="the env's solved threshold",
    ),
    check_every: int | None = typer.Option(
        None, "--check-every", min=0, help="Greedy check every K updates (0: no early stop).",
        metavar="K", show_default="per env",
    ),
    check_episodes: int | None = typer.Option(
        None, "--check-episodes", min=1, help="Held-out greedy episodes per check.", metavar="M",
        show_default="per env",
    ),
    lr: float | None = typer.Option(None, help="Learning rate.", show_default="the algorithm's"),
    seed: int | None = typer.Option(None, help="Random seed.", show_default="0"),
    lora: bool | None = typer.Option(
        None, "--lora/--full", help="Train a LoRA adapter or all weights.", show_default="lora"
    ),
    device: str | None = typer.Option(None, help=_DEVICE_HELP, show_default="auto"),
    dtype: str | None = typer.Option(None, help=_DTYPE_HELP, show_default="auto"),
    quantize: str | None = typer.Option(None, help=_QUANTIZE_HELP, show_default="none"),
    temperature: float | None = typer.Option(
        None, help=_TEMPERATURE_HELP, rich_help_panel=_POLICY_PANEL, show_default=False),
    top_p: float | None = typer.Option(
        None, "--top-p", help=_TOP_P_HELP, rich_help_panel=_POLICY_PANEL, show_default=False),
    max_new_tokens: int | None = typer.Option(
        None, "--max-new-tokens", help=_MAX_NEW_TOKENS_HELP, rich_help_panel=_POLICY_PANEL,
        show_default=False),
    normalization: str | None = typer.Option(
        None, metavar="sum|token|word", help=_NORMALIZATION_HELP, rich_help_panel=_POLICY_PANEL,
        show_default=False),
    chat_template: Path | None = typer.Option(
        None, "--chat-template", metavar="FILE", help=_CHAT_TEMPLATE_HELP,
        rich_help_panel=_POLICY_PANEL, show_default=False),
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
    processes: int | None = typer.Option(
        None, "--processes", min=1, show_default="1",
        help="Train data-parallel in N local processes (each plays its share of the episodes). "
             "Not needed under torchrun or accelerate launch.",
    ),
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
        "history": history,
        "updates": updates,
        "think": think,
        "episodes": episodes,
        "minutes": minutes,
        "until": until,
        "check_every": check_every,
        "check_episodes": check_episodes,
        "num_envs": num_envs,
        "lr": lr,
        "seed": seed,
        "lora": lora,
        "device": device,
        "dtype": dtype,
        "quantize": quantize,
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "normalization": normalization,
        "chat_template": str(chat_template) if chat_template else None,
        "sft": str(sft) if sft else None,
    }
    training.run(
        flags, config_file=config, out=out, resume=resume, force=force, quiet=quiet,
        stop_after=stop_after, processes=processes,
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
    device: str | None = typer.Option(None, help=_DEVICE_HELP, show_default="auto"),
    dtype: str | None = typer.Option(None, help=_DTYPE_HELP, show_default="auto"),
    quantize: str | None = typer.Option(None, help=_QUANTIZE_HELP, show_default="none"),
    max_new_tokens: int | None = typer.Option(
        None, "--max-new-tokens", help=_MAX_NEW_TOKENS_HELP, rich_help_panel=_POLICY_PANEL,
        show_default="the checkpoint's"),
    normalization: str | None = typer.Option(
        None, metavar="sum|token|word", help=_NORMALIZATION_HELP, rich_help_panel=_POLICY_PANEL,
        show_default="the checkpoint's"),
    chat_template: Path | None = typer.Option(
        None, "--chat-template", metavar="FILE", help=_EVAL_CHAT_TEMPLATE_HELP,
        rich_help_panel=_POLICY_PANEL, show_default="the checkpoint's"),
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

    # greedy: no temperature or top-p; a checkpoint's own settings unless these flags override
    policy_flags = {"max_new_tokens": max_new_tokens, "normalization": normalization,
                    "chat_template": str(chat_template) if chat_template else None}
    evaluation.run(
        env, checkpoint=checkpoint, model=model, mode=mode.value if mode else None,
        baselines=[b.value for b in baseline], episodes=episodes, num_envs=num_envs, seed=seed,
        json_out=json_out, device=device, dtype=dtype, quantize=quantize,
        policy_flags=policy_flags,
    )


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
) -> None:
    """Play a text env yourself: see the exact prompt, type answers (Ctrl-D quits)."""
    from textgym.cli import playing

    playing.run(env, seed=seed, episodes=episodes)


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
    device: str | None = typer.Option(None, help="With --merge: " + _DEVICE_HELP, show_default="auto"),
    dtype: str | None = typer.Option(None, help="With --merge: " + _DTYPE_HELP, show_default="auto"),
) -> None:
    """Export a checkpoint for use elsewhere: its PEFT adapter (or a merged model) with the
    tokenizer, the policy settings and a model card."""
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


if __name__ == "__main__":  # pragma: no cover
    app()
