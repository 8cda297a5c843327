"""``textgym play``: a person plays a text env through exactly what the model sees.

Each episode starts by printing the system prompt (the task and the answer format); each step
prints the observation text and reads one answer line from stdin. The answer goes through the
env's own parser, and the parse record and reward are printed, so this is also the quickest way
to debug a prompt or a parser. Reads piped stdin too (one answer per line); EOF ends the game.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from textgym.cli.envtools import make_env, resolve_env
from textgym.cli.errors import CLIError


def _rule(title: str) -> str:
    return f"--- {title} " + "-" * max(3, 60 - len(title))


def _read_answer() -> str | None:
    print("> ", end="", flush=True)
    line = sys.stdin.readline()
    if not line:  # EOF
        print()
        return None
    if not sys.stdin.isatty():
        print(line.rstrip("\n"))  # echo piped answers so the transcript reads like a session
    return line.rstrip("\n")


def run(env: str, seed: int | None = None, episodes: int = 1) -> None:
    if sys.stdin is None or sys.stdin.closed:
        raise CLIError("textgym play reads your answers from stdin, which is closed")
    env_id = resolve_env(env)
    game = make_env(env_id)
    print(f"Playing {env_id}. Type an answer per step; Ctrl-D quits.")
    try:
        for episode in range(episodes):
            obs, info = game.reset(seed=None if seed is None else seed + episode)
            print(_rule(f"episode {episode + 1}: system prompt"))
            print(info.get("system_prompt", ""))
            total, steps, done = 0.0, 0, False
            while not done:
                print(_rule(f"step {steps + 1}: observation"))
                print(obs)
                print(f"(valid actions: {', '.join(info.get('valid_actions', []))})")
                answer = _read_answer()
                if answer is None:
                    print("end of input: stopped.")
                    return
                obs, reward, terminated, truncated, info = game.step(answer)
                total += float(reward)
                steps += 1
                done = terminated or truncated
                print(f"parse: {json.dumps(_plain(info.get('parse', {})))}")
                print(f"reward: {float(reward):g}" + ("  (terminated)" if terminated else "")
                      + ("  (truncated)" if truncated else ""))
            stats = info.get("episode_stats") or {"return": total, "length": steps}
            print(_rule("episode over"))
            print(f"return {float(stats['return']):g}, length {int(stats['length'])}, "
                  f"invalid answers {int(stats.get('invalid_count', 0))}")
    finally:
        game.close()


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    """The parse record with numpy scalars as Python numbers (for JSON)."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in record.items()}
