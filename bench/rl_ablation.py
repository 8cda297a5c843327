"""Ablation of RL's own mechanisms on Blackjack from the untrained model: exact expected returns.

Each variant trains REINFORCE (or GRPO) from the untrained SmolLM2-135M (no warm start), with the same seed
and budget, and differs from the others in one setting (``explore_floor``, ``state_credit``...).
Before training and after every ``--every`` updates, the greedy table of the policy is read in all
280 states (:func:`textgym.envs.classic.blackjack_greedy_table`, recorded as one H or S per state)
and its exact expected return computed (:func:`textgym.envs.classic.blackjack_value`): no sample of
hands, so two variants are compared without the luck of the deal. Variants run one after the other
in this process.

Usage:
    OMP_NUM_THREADS=2 python bench/rl_ablation.py --updates 8 --json bench/results/rl_blackjack_ablation.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import textgym
from textgym.trainers import make_trainer

ENV_ID = "textgym/Blackjack-v1"
#: What every variant shares (TrainConfig fields): no KL penalty to the untrained model, no
#: entropy bonus, the registered Blackjack batch of 64 hands twice over.
BASE = {"num_envs": 32, "episodes_per_update": 128, "lr": 1e-3, "gamma": 1.0, "kl_coef": 0.0,
        "entropy_coef": 0.0, "lora_layers": 8, "metrics_window": 256}
#: The variants: each one's settings over BASE.
VARIANTS = {
    "floor+credit": {"explore_floor": 0.2, "state_credit": 1.0},
    "floor": {"explore_floor": 0.2, "state_credit": 0.0},
    "credit": {"explore_floor": 0.0, "state_credit": 1.0},
    "plain": {"explore_floor": 0.0, "state_credit": 0.0},
    # REINFORCE's baseline "state" (a state's decisions compared with each other only, ReBN where
    # a state is alone) on twice the hands, a small entropy bonus, half or most of the shared shift
    # of the gradient removed (state_centering)
    "state-baseline": {"baseline": "state", "explore_floor": 0.2, "episodes_per_update": 256,
                       "entropy_coef": 0.02, "state_centering": 0.5},
    "state-baseline-centred": {"baseline": "state", "explore_floor": 0.2, "episodes_per_update": 256,
                               "entropy_coef": 0.02, "state_centering": 0.8},
    # GRPO: groups of 8 hands dealt from one seed (the same cards in the same order), each state's
    # decisions compared within its group only (GiGPO's anchor states): HIT and STICK in one state
    # meet the same cards still to come
    "grpo-anchors": {"algorithm": "grpo", "group_size": 8, "explore_floor": 0.2, "episodes_per_update": 256,
                     "state_credit": 1.0, "entropy_coef": 0.02, "state_centering": 0.5},
    # the same at a third of the learning rate (GRPO's two epochs and group-scaled advantages take
    # about three times REINFORCE's step: at 1e-3 one seed's policy went deterministic in 6 updates)
    "grpo-anchors-3e-4": {"algorithm": "grpo", "group_size": 8, "explore_floor": 0.2, "episodes_per_update": 256,
                          "state_credit": 1.0, "entropy_coef": 0.02, "state_centering": 0.5, "lr": 3e-4},
    # without state centering (at 0.5 both seeds tried flipped to HIT everywhere at update 12, once
    # the policy was near deterministic: the centred term does not vanish where the policy's own
    # gradient does) and a larger entropy bonus
    "grpo-anchors-entropy": {"algorithm": "grpo", "group_size": 8, "explore_floor": 0.2, "episodes_per_update": 256,
                             "state_credit": 1.0, "entropy_coef": 0.05, "lr": 3e-4},
}
# grpo-anchors-3e-4 with every exploration draw weighed at least 1 (importance_floor): past stick
# at 12+, the floor's HITs where the policy STICKs weighed ~0.1-0.3 (pi/mu)
VARIANTS["grpo-anchors-floor1"] = {**VARIANTS["grpo-anchors-3e-4"], "importance_floor": 1.0}
# grpo-anchors-3e-4 with a small KL penalty to the untrained model, which HITs nearly everywhere:
# it keeps HIT from vanishing in a state (where the importance-weighted gradient cannot bring it
# back), at the cost of a pull toward HIT where STICK is better by less than ~kl_coef x log 9
VARIANTS["grpo-anchors-kl"] = {**VARIANTS["grpo-anchors-3e-4"], "kl_coef": 0.03}
# the same, the penalty lowered to 0.01 from update 32 (``later``: a list of settings changed from an
# update on): a KL to an always-HIT model keeps HIT where STICK is better by less than ~kl_coef x log 9, which
# are basic strategy's sticks at 12-16 against a 2-6. Measured since: those sticks played as hits cost
# the best table ~0.002 at 0.03 (bench/blackjack_exact.py's margin rows), so the fade changes little
VARIANTS["grpo-anchors-kl-fade"] = {**VARIANTS["grpo-anchors-kl"], "later": [{"from_update": 32, "kl_coef": 0.01}]}
# a stronger penalty while the rest of the play is poor, then grpo-anchors-kl's: at first HIT is
# worse than STICK at 12-16 (the HITs that follow bust), by ~0.2-0.4; at kl_coef 0.03 its
# probability falls to ~0 there and the importance weights stop the floor's HITs from bringing it
# back once it is the better move against a 7 or more (every grpo-anchors-kl seed sat at stick at
# 12+ until update 28-44). At 0.1 it keeps ~0.3; from update 20 the penalty is 0.03. Measured
# (seeds 0, 1): out of stick at 12+ at update 24-28, no sooner; -0.0743 and -0.0710 after 60 minutes
VARIANTS["grpo-anchors-kl-early"] = {**VARIANTS["grpo-anchors-kl"], "kl_coef": 0.1,
                                     "later": [{"from_update": 20, "kl_coef": 0.03}]}
# grpo-anchors-kl with the step shrunk over the last 40% of the time budget (linearly to a tenth;
# ``lr_decay``, needs --minutes): past stick at 12+ its greedy tables moved by up to 0.015 between
# checks 4 updates apart, so the last table was partly the luck of where the run stopped
VARIANTS["grpo-anchors-kl-decay"] = {**VARIANTS["grpo-anchors-kl"], "lr_decay": {"from_fraction": 0.6, "to": 0.1}}
# grpo-anchors-kl-decay on four times the hands per update, without state centering: an update lays
# out each state's decisions in one minibatch and re-scores them with one row (Trainer.optimize), so
# its cost follows the states met (at most 280), not the hands; centering would compare a minibatch's
# few states with each other, so the layout is off with it
VARIANTS["grpo-anchors-kl-1024"] = {**VARIANTS["grpo-anchors-kl-decay"], "state_centering": 0.0,
                                    "episodes_per_update": 1024}

# grpo-anchors-kl-1024 with the dealer drawing from a random stream of its own (the env's
# ``common_cards``): a group's hands then meet the same cards whatever they do, so a state's HIT
# and STICK are compared on the same deck, the dealer's hand included (common random numbers)
VARIANTS["grpo-anchors-kl-1024-common"] = {**VARIANTS["grpo-anchors-kl-1024"], "env_kwargs": {"common_cards": True}}
# the same with every exploration draw weighed at least 1 (importance_floor) and an upper clip of
# the ratio of 1 (clip_eps_high): once stick at 12+ holds, the exact policy gradient toward a better
# HIT is ~pi(HIT), ~0.01, and the symmetric clip lets pi(HIT) grow by at most 1.2 an update; the
# floor's HITs, compared on the same cards as the group's STICKs, then move it at full weight
VARIANTS["grpo-anchors-kl-1024-common-high"] = {**VARIANTS["grpo-anchors-kl-1024-common"], "importance_floor": 1.0,
                                                "clip_eps_high": 1.0}
# grpo-anchors-kl-1024-common on twice the hands (2,048 an update), meant with --update-dtype
# bfloat16: the update re-scores each state met once, so its cost follows the states (at most 280)
# and the bf16 update halves it; the hands per minute grow ~1.6-fold. A tabular learner that
# remembers every hand (bench/blackjack_data_budget.py) needs ~50,000-100,000 hands to pass -0.060:
# the runs at 1,024 saw ~50,000 in 60 minutes. The step decays over updates (TrainConfig's schedule,
# which the benchmark row can run) instead of the time budget: held for 24 updates, then linearly to
# a tenth at update 40, about the 60 minutes' count
VARIANTS["grpo-anchors-kl-2048-common"] = {
    **{k: v for k, v in VARIANTS["grpo-anchors-kl-1024-common"].items() if k != "lr_decay"},
    "episodes_per_update": 2048, "lr_schedule": "linear", "total_updates": 40, "lr_decay_from": 0.6, "lr_final": 0.1}
# the same on 4,096 hands an update, meant with --score-memo-mib: within an update's rollout each of
# the ~280 states is run through the model once (score_memo_bytes), so acting costs little more than
# the env and the sampling, and the update's cost follows the states; held for 27 updates, then to a
# tenth at update 45 (about the 60 minutes' count with three runs sharing the 2 cores)
VARIANTS["grpo-anchors-kl-4096-common"] = {**VARIANTS["grpo-anchors-kl-2048-common"], "episodes_per_update": 4096,
                                           "total_updates": 45}
# the same at twice the step: with 4,096 hands an update the advantages are less noisy, and the
# optimizer's steps (not the hands) may be what limits how far each update moves the table
VARIANTS["grpo-anchors-kl-4096-common-6e-4"] = {**VARIANTS["grpo-anchors-kl-4096-common"], "lr": 6e-4}
# the same with the step held for 38 updates, then to a tenth at 64: about the 60 minutes' count with
# two runs sharing the 2 cores, each update re-scored by the top layers alone
VARIANTS["grpo-anchors-kl-4096-common-6e-4-64"] = {**VARIANTS["grpo-anchors-kl-4096-common-6e-4"], "total_updates": 64}


def lr_scale(decay: dict | None, elapsed: float, budget: float | None) -> float:
    """The learning rate's multiplier at ``elapsed`` seconds of a ``budget`` (``lr_decay``: 1
    until ``from_fraction`` of the budget, then linearly down to ``to`` at its end)."""
    if not decay or not budget:
        return 1.0
    progress = (elapsed / budget - decay["from_fraction"]) / (1.0 - decay["from_fraction"])
    return 1.0 - (1.0 - decay["to"]) * min(1.0, max(0.0, progress))


def run_variant(name: str, settings: dict, updates: int, every: int, seed: int, model: str,
                on_point=None, act_dtype: str = "float32", minutes: float | None = None,
                save: Path | None = None, update_dtype: str = "float32", score_memo_mib: float = 0.0) -> dict:
    from textgym.envs.classic import BLACKJACK_STATES, blackjack_greedy_table, blackjack_value

    def read_table() -> tuple[float, str]:
        """The greedy table's exact return, and the table itself (H or S per BLACKJACK_STATES)."""
        table = blackjack_greedy_table(trainer.policy)
        value = blackjack_value(lambda total, dealer, usable: table[(total, dealer, usable)])
        return value, "".join("H" if table[state] else "S" for state in BLACKJACK_STATES)

    # the greedy tables are read in float32 (eval_act_dtype) whatever precision the policy acts in
    policy = textgym.Policy.from_pretrained(model, mode="score", act_dtype=act_dtype, eval_act_dtype="float32",
                                            update_dtype=update_dtype, score_memo_bytes=int(score_memo_mib * 2**20))
    settings = dict(settings)
    algorithm = settings.pop("algorithm", "reinforce")
    later = settings.pop("later", None)
    decay = settings.pop("lr_decay", None)
    env_kwargs = settings.pop("env_kwargs", None)
    if decay and minutes is None:
        raise SystemExit(f"{name}: lr_decay follows the time budget: give --minutes")
    changes = {change["from_update"]: change for change in later or ()}
    trainer = make_trainer(algorithm, policy, env=ENV_ID, config={**BASE, **settings, "seed": seed},
                           env_kwargs=env_kwargs)
    value, table = read_table()
    curve = [{"update": 0, "exact_return": value, "table": table, "seconds": 0.0}]
    started = time.monotonic()
    print(f"{name}: start {curve[0]['exact_return']:+.4f}", flush=True)
    peak = [group["base_lr"] for group in trainer.optimizer.param_groups]
    for k in range(updates):
        if k in changes:
            trainer.config = trainer.config.with_changes({n: v for n, v in changes[k].items() if n != "from_update"})
        scale = lr_scale(decay, time.monotonic() - started, None if minutes is None else minutes * 60)
        for group, lr in zip(trainer.optimizer.param_groups, peak):  # the trainer sets lr from base_lr
            group["base_lr"] = lr * scale
        metrics = trainer.train(updates=1)[-1]
        out_of_time = minutes is not None and time.monotonic() - started >= minutes * 60
        if (k + 1) % every == 0 or k + 1 == updates or out_of_time:
            value, table = read_table()
            point = {"update": k + 1, "exact_return": value, "table": table,
                     "sampled_return": metrics.get("return_mean"),
                     "importance_weight": metrics.get("importance_weight"),
                     "optimizer_steps": metrics.get("optimizer_steps"), "kl": metrics.get("kl"),
                     "entropy": metrics.get("entropy"), "rollout_seconds": metrics.get("rollout_seconds"),
                     "update_seconds": metrics.get("update_seconds"), "lr_scale": round(scale, 4),
                     "seconds": round(time.monotonic() - started, 1)}
            curve.append(point)
            if save is not None:  # a later variant can branch from here (Trainer.load_state)
                trainer.save_checkpoint(save / f"{name}-seed{seed}-update{k + 1}")
            if on_point is not None:  # a long run keeps its curve so far
                on_point(curve)
            print(f"{name}: update {k + 1} exact {point['exact_return']:+.4f} sampled "
                  f"{point['sampled_return']:+.3f} entropy {point['entropy']:.3f} ({point['seconds']:.0f} s)",
                  flush=True)
        if out_of_time:  # the update that crossed the budget is the last
            break
    recorded = {**BASE, **settings, "seed": seed, **({"later": later} if later else {}),
                **({"lr_decay": decay} if decay else {}), **({"env_kwargs": env_kwargs} if env_kwargs else {})}
    return {"algorithm": algorithm, "settings": recorded, "act_dtype": act_dtype, "update_dtype": update_dtype,
            "score_memo_mib": score_memo_mib, "curve": curve,
            "start_exact_return": curve[0]["exact_return"], "exact_return": curve[-1]["exact_return"],
            "train_seconds": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="floor+credit,floor", help="comma-separated names of VARIANTS")
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--every", type=int, default=2, help="exact return every this many updates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--act-dtype", default="float32", choices=("float32", "bfloat16"),
                        help="the precision of the sampled play (greedy tables are read in float32)")
    parser.add_argument("--update-dtype", default="float32", choices=("float32", "bfloat16"),
                        help="the precision of the update's re-scoring (PolicyConfig.update_dtype)")
    parser.add_argument("--score-memo-mib", type=float, default=0.0,
                        help="score each state once per update's rollout (PolicyConfig.score_memo_bytes)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="stop after the update that ends past this wall time (per variant)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--save", type=Path, default=None,
                        help="save the trainer's checkpoint here at every check (one folder each)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                            check=False, cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    from textgym.envs.classic import blackjack_value

    results = {"command": "python " + " ".join(sys.argv), "commit": commit, "env": ENV_ID,
               "optimum": blackjack_value(), "variants": {}}
    def write() -> None:
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=1) + "\n")

    for name in args.variants.split(","):
        def partial(curve: list, name: str = name) -> None:
            results["variants"][name] = {"curve": curve, "finished": False}
            write()

        results["variants"][name] = run_variant(name, VARIANTS[name], args.updates, args.every, args.seed,
                                                args.model, on_point=partial, act_dtype=args.act_dtype,
                                                minutes=args.minutes, save=args.save,
                                                update_dtype=args.update_dtype,
                                                score_memo_mib=args.score_memo_mib)
        write()
    for name, result in results["variants"].items():
        print(f"{name:14s} exact {result['start_exact_return']:+.4f} -> {result['exact_return']:+.4f} "
              f"({result['train_seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
