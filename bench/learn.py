"""Learning curves: SmolLM2-135M trained with REINFORCE, GRPO and PPO on Blackjack and CartPole.

For every (env, algorithm) pair it evaluates the untrained policy greedily on held-out seeds,
trains for a budget (minutes and/or episodes), evaluates again on the same held-out seeds, logs
mean return against episodes and wall time (``<out>/<env>-<algo>/metrics.jsonl``, one line per
update, and ``<out>/learn.jsonl``, one line per run), prints the results beside the references,
and draws the curves (``<out>/learn_<env>.png``).

References (Gymnasium Blackjack-v1 measured over 100,000 episodes; CartPole-v1):
    Blackjack: random -0.39, always stick -0.18, stick at 17 or more -0.08, basic strategy -0.046
    CartPole:  random ~22 steps, the v1 cap 500

Quick check (a couple of minutes):
    .venv/bin/python bench/learn.py --env blackjack --algo reinforce --episodes 64 --eval-episodes 50

The real measurement (on a quiet machine):
    .venv/bin/python bench/learn.py --env blackjack --minutes 20
    .venv/bin/python bench/learn.py --env cartpole --minutes 120
    .venv/bin/python bench/learn.py --env blackjack --algo reinforce --mode generate --minutes 20

``--mode generate`` plays free text with each env's registered generate-mode settings
(``textgym.registry.training_defaults(env, "generate")``: the JSON answer format, prefilled and
stopped at the closing quote, temperature 0.7, a fading format bonus); its runs go to
``<out>/<env>-<algo>-generate/``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from textgym import jsonl
from textgym.trainers import ALGORITHMS

ENVS = {
    "blackjack": "textgym/Blackjack-v1",
    "cartpole": "textgym/CartPole-v1",
}
REFERENCES = {
    "blackjack": {"random": -0.39, "always stick": -0.18, "stick at 17+": -0.08, "basic strategy": -0.046},
    "cartpole": {"random": 22.0, "v1 cap": 500.0},
}
EVAL_EPISODES = {"blackjack": 2000, "cartpole": 50}

# Per-env settings shared by the algorithms (TrainConfig field names), then per-algorithm ones.
SETTINGS = {
    # lr 2e-4 without an entropy bonus collapsed to always-STICK within 2 updates; 1e-4 with a
    # 0.05 entropy bonus keeps sampling both actions for longer. Top-8-layer LoRA: faster updates.
    "blackjack": {"num_envs": 32, "episodes_per_update": 64, "minibatch_size": 64, "lr": 1e-4, "gamma": 1.0,
                  "entropy_coef": 0.05, "lora_layers": 8},
    # The CLI's CartPole default (cli/training.py): pole-spin shaping 1.0 with gamma 0.3 gives
    # each push its own credit; lr 2e-4 after 2 warm-up updates; plain REINFORCE sharpens the
    # untrained model's preference for pushing the way the pole turns (see CartPoleText).
    "cartpole": {"num_envs": 8, "episodes_per_update": 16, "minibatch_size": 32, "lr": 2e-4, "gamma": 0.3,
                 "warmup_updates": 2, "lora_layers": 8},
}
# Env kwargs per env (the same for training and evaluation).
ENV_KWARGS = {"blackjack": {}, "cartpole": {"shaping": 1.0}}
ALGO_SETTINGS = {
    "reinforce": {},
    "grpo": {"group_size": 8, "epochs": 2},
    "ppo": {"epochs": 2, "target_kl": 0.05},
}


def log(msg: str) -> None:
    print(msg, flush=True)


def run(env_key: str, algo: str, args: argparse.Namespace) -> dict:
    import textgym
    from textgym.trainers import make_trainer

    env_id = ENVS[env_key]
    out_dir = Path(args.out) / (f"{env_key}-{algo}" + ("-generate" if args.mode == "generate" else ""))
    if out_dir.exists():
        for f in ("metrics.jsonl",):
            (out_dir / f).unlink(missing_ok=True)
    policy_settings, env_kwargs = mode_settings(env_key, args.mode)
    policy = textgym.Policy.from_pretrained(args.model, mode=args.mode, seed=args.seed, **policy_settings)
    config = {**SETTINGS[env_key], **ALGO_SETTINGS[algo], "seed": args.seed}
    if args.lr is not None:
        config["lr"] = args.lr
    if args.num_envs is not None:
        config["num_envs"] = args.num_envs
    if args.lora_layers is not None:
        config["lora_layers"] = args.lora_layers
    if args.entropy_coef is not None:
        config["entropy_coef"] = args.entropy_coef
    if args.state_centering is not None:
        config["state_centering"] = args.state_centering
    if args.grpo_credit is not None and algo == "grpo":
        config["credit"] = args.grpo_credit
    if algo == "grpo":
        config["episodes_per_update"] -= config["episodes_per_update"] % config["group_size"]
        config["num_envs"] = max(config["group_size"],
                                 config["num_envs"] - config["num_envs"] % config["group_size"])
    trainer = make_trainer(algo, policy, env=env_id, config=config, out_dir=out_dir, env_kwargs=env_kwargs)
    eval_episodes = args.eval_episodes or EVAL_EPISODES[env_key]

    warm_seconds = 0.0
    if args.warm_start and env_key == "blackjack":
        from textgym.trainers import SFTConfig

        sft_config = SFTConfig(lr=args.sft_lr) if args.sft_lr else None
        t = time.monotonic()
        losses = trainer.warm_start(args.warm_start, config=sft_config)
        warm_seconds = time.monotonic() - t
        log(f"  warm start on {args.warm_start}: SFT loss {losses[0]:.3f} -> {losses[-1]:.3f} ({warm_seconds:.0f}s)")

    t = time.monotonic()
    before = _untrained_evaluation(trainer, args, env_key, eval_episodes)
    log(f"  before: greedy mean return {before['return_mean']:+.3f} over {eval_episodes} held-out episodes "
        f"({time.monotonic() - t:.0f}s)")

    started = time.monotonic()
    elapsed: dict[int, float] = {}  # update -> seconds of training (the trainer's clock also counts evaluation)

    def progress(m: dict) -> None:
        elapsed[m["update"]] = round(time.monotonic() - started, 3)
        log(f"  update {m['update']:4d}  episodes {m['episodes']:6d}  return(last {trainer.config.metrics_window}) "
            f"{m['return_mean']:+8.3f}  loss {m.get('loss', float('nan')):+.4f}  kl {m.get('kl', 0):.4f}  "
            f"entropy {m.get('entropy', float('nan')):.3f}  "
            f"{m.get('decisions_per_s', 0):5.1f} dec/s  {time.monotonic() - started:6.0f}s")

    history = trainer.train(episodes=args.episodes, seconds=args.minutes * 60 if args.minutes else None,
                            callback=progress)
    train_seconds = time.monotonic() - started

    t = time.monotonic()
    after = trainer.evaluate(episodes=eval_episodes)
    log(f"  after:  greedy mean return {after['return_mean']:+.3f} over {eval_episodes} held-out episodes "
        f"({time.monotonic() - t:.0f}s)")
    table = blackjack_policy_table(trainer.policy) if env_key == "blackjack" and args.mode == "score" else None
    if table:
        log("  P(HIT) by your total (no usable ace):  " + "  ".join(f"{t:>4d}" for t in BLACKJACK_TOTALS))
        for dealer, row in table.items():
            log(f"    dealer shows {dealer:>2s}:                  " + "  ".join(f"{p:4.2f}" for p in row))
    result = {
        "env": env_id, "algorithm": algo, "model": args.model, "mode": args.mode,
        "policy": trainer.policy.config.to_dict(), "env_kwargs": env_kwargs, "config": trainer.config.to_dict(),
        "train_episodes": trainer.episodes_seen, "updates": trainer.update_count,
        "train_seconds": round(train_seconds, 1), "warm_start": args.warm_start,
        "warm_start_seconds": round(warm_seconds, 1), "eval_episodes": eval_episodes,
        "before": before["return_mean"], "after": after["return_mean"],
        "after_std": after["return_std"], "eval_seed": after["seed"],
        "curve": [{"episodes": m["episodes"], "wall_time": elapsed.get(m["update"], m["wall_time"]),
                   "return_mean": m["return_mean"]} for m in history],
        "references": REFERENCES[env_key],
        "policy_table": table,
    }
    if args.save_checkpoint:
        trainer.save_checkpoint()
    return result


def mode_settings(env_key: str, mode: str) -> tuple[dict, dict]:
    """``(policy settings, env kwargs)`` in ``mode``: generate mode adds the env's registered
    generate-mode settings (the JSON answer format, prefill, stop, temperature, format bonus)."""
    if mode != "generate":
        return {}, dict(ENV_KWARGS[env_key])
    from textgym.registry import training_defaults

    registered = training_defaults(ENVS[env_key], "generate")
    return dict(registered.policy), {**ENV_KWARGS[env_key], **registered.env_kwargs}


BLACKJACK_TOTALS = (6, 9, 11, 12, 13, 15, 16, 17, 18, 20)


def blackjack_policy_table(policy) -> dict[str, list[float]]:
    """P(HIT) of the trained policy (sampling temperature) for a few hands without a usable ace:
    shows whether it plays the observation (basic strategy hits up to 11 always, and 12-16
    against a dealer's 7 or more) or one constant action."""
    import textgym
    from textgym.envs.classic import BlackjackText

    _, info = textgym.make("textgym/Blackjack-v1").reset(seed=0)
    render = BlackjackText()
    table = {}
    for dealer in (2, 7, 10):
        obs = [render((total, dealer, 0)) for total in BLACKJACK_TOTALS]
        decisions = policy.act(obs, [info["system_prompt"]] * len(obs), [["STICK", "HIT"]] * len(obs),
                               greedy=True)
        table[str(dealer)] = [round(math.exp(d.logprob) if d.text == "HIT" else 1 - math.exp(d.logprob), 3)
                              for d in decisions]
    return table


def _untrained_evaluation(trainer, args: argparse.Namespace, env_key: str, episodes: int) -> dict:
    """The untrained policy's greedy evaluation, cached in ``<out>/untrained.json``: a fresh LoRA
    adapter changes nothing (its B matrix starts at zero), so every algorithm starts from the
    same numbers and a 2,000-episode evaluation is paid once, not once per algorithm."""
    path = Path(args.out) / "untrained.json"
    key = f"{env_key}|{args.model}|{episodes}|{trainer.config.eval_seed}|warm={args.warm_start}"
    if args.warm_start:
        key += f"|sft_lr={args.sft_lr}"
    policy_settings, env_kwargs = mode_settings(env_key, args.mode)
    if args.mode != "score":
        key += f"|{args.mode}|{json.dumps(policy_settings, sort_keys=True)}"
    if env_kwargs:
        key += f"|{json.dumps(env_kwargs, sort_keys=True)}"
    cache = json.loads(path.read_text()) if path.exists() else {}
    if key not in cache:
        cache[key] = trainer.evaluate(episodes=episodes)
        path.write_text(json.dumps(cache, indent=1))
    return cache[key]


def latest_results(out: Path) -> list[dict]:
    """The newest result per (env, algorithm, GRPO credit, policy mode) in ``<out>/learn.jsonl``
    (runs may be separate processes)."""
    path = out / "learn.jsonl"
    if not path.exists():
        return []
    latest: dict[tuple[str, str, str | None, str], dict] = {}
    for line in jsonl.read_lines(path):
        r = json.loads(line)
        latest[(r["env"], r["algorithm"], r["config"].get("credit"), r.get("mode", "score"))] = r
    return list(latest.values())


def plot(results: list[dict], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: no PNG")
        return []
    paths = []
    for env_key, env_id in ENVS.items():
        runs = [r for r in results if r["env"] == env_id]
        if not runs:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
        for ax, x_key, x_label in ((axes[0], "episodes", "training episodes"),
                                   (axes[1], "wall_time", "wall time (minutes)")):
            scale = 60.0 if x_key == "wall_time" else 1.0
            for r in sorted(runs, key=lambda r: (r["algorithm"], r["config"].get("credit") or "")):
                xs = [p[x_key] / scale for p in r["curve"]]
                ys = [p["return_mean"] for p in r["curve"]]
                name = r["algorithm"] + (", turn credit" if r["config"].get("credit") == "turn" else "")
                name += " after SFT warm start" if r.get("warm_start") else ""
                name += ", generate mode" if r.get("mode") == "generate" else ""
                line, = ax.plot(xs, ys, label=f"{name} (greedy {r['before']:+.3f} -> {r['after']:+.3f})")
                if xs:  # stars: greedy evaluation on held-out seeds, before and after training
                    ax.scatter([0, xs[-1]], [r["before"], r["after"]], color=line.get_color(),
                               marker="*", s=80, zorder=3)
            for i, (name, value) in enumerate(sorted(REFERENCES[env_key].items(), key=lambda kv: kv[1])):
                ax.axhline(value, linestyle=":", color="gray", linewidth=1)
                left, right = ax.get_xlim()  # alternate sides: close references stay legible
                ax.text(right if i % 2 else left, value, f" {name} {value:g} ", va="bottom",
                        ha="right" if i % 2 else "left", fontsize=7, color="gray")
            ax.set_xlabel(x_label)
        window = runs[0]["config"].get("metrics_window", 100)
        axes[0].set_ylabel(f"mean return (last {window} training episodes, sampled)")
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{runs[0]['model']} on {env_id}: training return; stars = greedy held-out evaluation")
        fig.tight_layout()
        path = out / f"learn_{env_key}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description="textgym learning curves (see the module docstring)")
    parser.add_argument("--env", default="all", choices=["all", *ENVS])
    parser.add_argument("--algo", default="all", choices=["all", *ALGORITHMS])
    parser.add_argument("--minutes", type=float, default=None, help="training wall-time budget per run")
    parser.add_argument("--episodes", type=int, default=None, help="training episode budget per run")
    parser.add_argument("--eval-episodes", type=int, default=None,
                        help="held-out greedy episodes (default 2000 Blackjack, 50 CartPole)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--mode", default="score", choices=["score", "generate"],
                        help="generate: free text with the env's registered generate-mode settings")
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--num-envs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm-start", default=None, metavar="JSONL",
                        help="Blackjack: SFT on demonstrations first (e.g. examples/blackjack_demos.jsonl)")
    parser.add_argument("--sft-lr", type=float, default=None,
                        help="learning rate of the warm start's SFT (default: SFTConfig's)")
    parser.add_argument("--entropy-coef", type=float, default=None)
    parser.add_argument("--state-centering", type=float, default=None,
                        help="TrainConfig.state_centering (how much of the shared shift to remove)")
    parser.add_argument("--grpo-credit", choices=["episode", "turn"], default=None,
                        help="GRPOConfig.credit: the episode's advantage on every decision, or each "
                             "decision's return-to-go against the group's at the same turn")
    parser.add_argument("--lora-layers", type=int, default=None,
                        help="adapt only the top N transformer layers (faster updates)")
    parser.add_argument("--save-checkpoint", action="store_true")
    parser.add_argument("--plot-only", action="store_true",
                        help="redraw the PNGs from <out>/learn.jsonl (newest run per env and algorithm)")
    parser.add_argument("--out", default="bench/results/learn")
    args = parser.parse_args()
    out = Path(args.out)
    if args.plot_only:
        for path in plot(latest_results(out), out):
            log(f"curve: {path}")
        return
    if args.minutes is None and args.episodes is None:
        parser.error("give a budget: --minutes and/or --episodes")

    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    out.mkdir(parents=True, exist_ok=True)
    envs = list(ENVS) if args.env == "all" else [args.env]
    algos = list(ALGORITHMS) if args.algo == "all" else [args.algo]
    results = []
    for env_key in envs:
        log(f"== {ENVS[env_key]}  references: "
            + ", ".join(f"{k} {v:g}" for k, v in REFERENCES[env_key].items()))
        for algo in algos:
            log(f"-- {algo}")
            result = run(env_key, algo, args)
            results.append(result)
            with open(out / "learn.jsonl", "a") as f:
                f.write(json.dumps(result) + "\n")

    log("\nenv                    algo       episodes  train s   before    after   references")
    for r in results:
        refs = ", ".join(f"{k} {v:g}" for k, v in r["references"].items())
        log(f"{r['env']:22s} {r['algorithm']:9s} {r['train_episodes']:9d} {r['train_seconds']:8.0f} "
            f"{r['before']:+8.3f} {r['after']:+8.3f}   {refs}")
    for path in plot(latest_results(out), out):  # with earlier runs' other algorithms
        log(f"curve: {path}")
    log("command: " + " ".join([Path(sys.executable).name, *sys.argv]))


if __name__ == "__main__":
    main()
