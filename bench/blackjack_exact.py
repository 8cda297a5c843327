"""Exact expected return of Blackjack policies: no sample of hands, so no luck of the deal.

A text policy on ``textgym/Blackjack-v1`` sees the total, the dealer's card and whether an ace is
usable, so its greedy play is a table over those (280 states). This asks a trained run's policy
for its greedy answer in every state (one batch, as ``textgym eval`` acts: ``Policy.evaluating``),
then computes that table's expected return exactly (:func:`textgym.envs.classic.blackjack_value`),
beside basic strategy (the best hit/stick policy), "stick at 17+" and the untrained model. A mean
over 2,000 hands has a standard error of about 0.021; the exact values rank policies that such a
sample cannot tell apart, and say what the sample's target means in expectation.

Also: basic strategy with its close sticks turned into hits (what a pull toward HIT, such as a KL
penalty to the always-HIT untrained model, can cost at most), and, for each table, the states
where it differs from basic strategy that cost the most (``--record``: the last table of each run
in a ``bench/rl_ablation.py`` record).

Usage:
    python bench/blackjack_exact.py RUN [RUN ...] [--record RL_ABLATION.json ...] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import textgym
from textgym.envs.classic import (
    BLACKJACK_STATES,
    basic_strategy_hits,
    blackjack_action_values,
    blackjack_greedy_table,
    blackjack_value,
)

ENV_ID = "textgym/Blackjack-v1"
STATES = BLACKJACK_STATES
greedy_table = blackjack_greedy_table  # the greedy table as the text env renders it (textgym.envs.classic)
#: Margins below which basic strategy's sticks are turned into hits in the reference rows.
MARGINS = (0.022, 0.066, 0.1, 0.13, 0.2)


def close_sticks_hit(margin: float) -> dict:
    """Basic strategy with every stick that beats HIT by less than ``margin`` played as a hit."""
    values = blackjack_action_values()
    return {state: hit > stick - margin for state, (hit, stick) in values.items()}


def table_value(table: dict) -> float:
    """The exact expected return of a table ``{state: hits}``."""
    return blackjack_value(lambda total, dealer, usable: table[(total, dealer, usable)])


def costliest(table: dict, best: dict, count: int = 5) -> list[tuple[tuple, float]]:
    """The ``count`` states where ``table`` differs from ``best`` whose correction alone gains the
    most, with that gain."""
    base = table_value(table)
    gains = [(state, table_value({**table, state: best[state]}) - base) for state in STATES if table[state] != best[state]]
    return sorted(gains, key=lambda item: -item[1])[:count]


def recorded_tables(path: Path) -> dict[str, dict]:
    """The last greedy table of each run in a bench/rl_ablation.py record (its ``table`` strings)."""
    record = json.loads(path.read_text())
    tables = {}
    for name, run in record.get("variants", record.get("runs", {})).items():
        last = [point for point in run["curve"] if "table" in point]
        if last:
            tables[f"{path.name}: {name} @{last[-1]['update']}"] = {
                state: mark == "H" for state, mark in zip(STATES, last[-1]["table"])}
    return tables


def load_run(run: Path) -> textgym.Policy:
    """The trained policy of a run folder: its model, policy settings and adapter (read only)."""
    from textgym.cli import config as run_config

    from textgym.trainers import make_trainer

    config = run_config.load_toml(run / "config.toml")
    policy = textgym.Policy.from_pretrained(config["model"], mode=config.get("mode", "score"),
                                            **config.get("policy", {}))
    trainer = make_trainer(config.get("algo", "reinforce"), policy, env=ENV_ID,
                           config=dict(config.get("trainer", {})), env_kwargs=config.get("env_kwargs"))
    trainer.load_state(run / "checkpoint")
    return trainer.policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="run folders of textgym/Blackjack-v1")
    parser.add_argument("--record", type=Path, action="append", default=[],
                        help="a bench/rl_ablation.py record: the last table of each of its runs")
    parser.add_argument("--model", default="smollm2-135m", help="the untrained model's row")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    rows = {"basic strategy (the best hit/stick policy)": blackjack_value(basic_strategy_hits),
            "stick at 17+": blackjack_value(lambda total, dealer, usable: total < 17),
            "always stick": blackjack_value(lambda total, dealer, usable: False)}
    for margin in MARGINS:
        rows[f"basic strategy, sticks better by < {margin} hit"] = table_value(close_sticks_hit(margin))
    tables = {}
    untrained = textgym.Policy.from_pretrained(args.model, mode="score")
    tables[f"untrained {args.model}"] = greedy_table(untrained)
    for run in args.runs:
        tables[str(run)] = greedy_table(load_run(run))
    for record in args.record:
        tables.update(recorded_tables(record))
    best = {state: basic_strategy_hits(*state) for state in STATES}
    for name, table in tables.items():
        rows[name] = table_value(table)
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                            check=False).stdout.strip()
    print(f"exact expected return per hand, textgym/Blackjack-v1 (commit {commit})")
    for name, value in rows.items():
        differs = ""
        if name in tables:
            wrong = [state for state in STATES if tables[name][state] != best[state]]
            differs = f"  ({len(wrong)} of {len(STATES)} states differ from basic strategy)"
        print(f"{value:+.4f}  {name}{differs}")
        if name in tables:
            for (total, dealer, usable), gain in costliest(tables[name], best):
                print(f"           {'soft' if usable else 'hard'} {total} vs {dealer}: "
                      f"{'HIT' if tables[name][(total, dealer, usable)] else 'STICK'} costs {gain:.4f}")
    if args.json is not None:
        disagreements = {name: [list(state) for state in STATES if table[state] != best[state]]
                         for name, table in tables.items()}
        args.json.write_text(json.dumps({"commit": commit, "expected_return": rows,
                                         "states_unlike_basic_strategy": disagreements}, indent=1) + "\n")


if __name__ == "__main__":
    main()
