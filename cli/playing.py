"""``textgym play``: a person plays a text env through exactly what the model sees.

Each episode starts by printing the system prompt (the task and the answer format); each step
prints the observation text and the valid actions (``free text`` for an env that lists none) and
reads one answer line from stdin; the end prints the return and the env's reference answer
(``info["answer"]``) where it has one. An episode the env does not end is cut at the step cap
(:mod:`textgym.step_cap`). The answer goes through the
env's own parser, and the parse record and reward are printed, so this is also the quickest way
to debug a prompt or a parser. Reads piped stdin too (one answer per line); EOF ends the game.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from textgym.cli.envtools import make_env, resolve_env
from textgym.cli.errors import CLIError

from textgym.step_cap import StepCap
from textgym.wrappers.episode_stats import episode_stats


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


def _trained_agent(checkpoint: Path, env_id: str) -> tuple[Any, dict[str, Any]]:
    """The policy of a run's checkpoint and the env settings it trained with (CLIError: not a
    checkpoint, another env's, or unloadable)."""
    from textgym.cli.evaluation import find_checkpoint

    from textgym.trainers import read_checkpoint

    folder, _ = find_checkpoint(checkpoint)
    state = read_checkpoint(folder)
    trained_on = str(state.get("env_id") or "").split(":")[-1]
    if trained_on and trained_on != env_id:
        raise CLIError(f"checkpoint {checkpoint} was trained on {trained_on}, not {env_id}")
    from textgym.policy import Policy

    try:
        policy = Policy.load(folder)
    except Exception as exc:
        raise CLIError(f"cannot load checkpoint {checkpoint}: {exc}") from exc
    return policy, dict(state.get("env_kwargs") or {})


def run(env: str, seed: int | None = None, episodes: int = 1, checkpoint: Path | None = None) -> None:
    """Play ``env`` with the settings ``textgym train ENV`` uses (its registered training
    defaults' env settings: the same prompt wording), or with ``checkpoint`` watch that run's
    agent play greedily, with the run's own env settings."""
    if checkpoint is None and (sys.stdin is None or sys.stdin.closed):
        raise CLIError("textgym play reads your answers from stdin, which is closed")
    env_id = resolve_env(env)
    if checkpoint is not None:
        policy, env_kwargs = _trained_agent(Path(checkpoint), env_id)
    else:
        from textgym.registry import training_defaults

        policy, env_kwargs = None, dict(training_defaults(env_id, "score").env_kwargs)
    game = make_env(env_id, **env_kwargs)
    settings = f" with {', '.join(f'{k}={v!r}' for k, v in env_kwargs.items())}" if env_kwargs else ""
    if policy is not None:
        print(f"Watching the agent of {checkpoint} play {env_id}{settings} (greedy).")
    else:
        print(f"Playing {env_id}{settings}, as training sees it. Type an answer per step; Ctrl-D quits.")
    try:
        for episode in range(episodes):
            obs, info = game.reset(seed=None if seed is None else seed + episode)
            print(_rule(f"episode {episode + 1}: system prompt"))
            print(info.get("system_prompt", ""))
            total, steps, done = 0.0, 0, False
            cap = StepCap.of()
            while not done:
                print(_rule(f"step {steps + 1}: observation"))
                print(obs)
                print(_valid_actions_line(info))
                answer = _read_answer() if policy is None else _agent_answer(policy, obs, info)
                if answer is None:
                    print("end of input: stopped.")
                    return
                obs, reward, terminated, truncated, info = game.step(answer)
                total += float(reward)
                steps += 1
                cut = cap.cuts(steps, terminated or truncated)
                done = terminated or truncated or cut
                print(f"parse: {json.dumps(_plain(info.get('parse', {})))}")
                print(f"reward: {float(reward):g}" + ("  (terminated)" if terminated else "")
                      + ("  (truncated)" if truncated else "")
                      + (f"  (cut at {cap.limit} steps: the env has no step limit of its own)" if cut else ""))
            stats = episode_stats(info) or {"return": total, "length": steps}
            print(_rule("episode over"))
            print(f"return {float(stats['return']):g}, length {int(stats['length'])}, "
                  f"invalid answers {int(stats.get('invalid_count', 0))}")
            if info.get("answer") is not None:  # a free-text env's reference answer
                print(f"answer: {info['answer']}")
    finally:
        game.close()


def _valid_actions_line(info: dict[str, Any]) -> str:
    """What the env accepts at this step: its valid actions, or free text when it lists none."""
    actions = info.get("valid_actions") or []
    return f"(valid actions: {', '.join(map(str, actions))})" if actions else "(free text: answer as you like)"


def _agent_answer(policy: Any, observation: str, info: dict[str, Any]) -> str:
    """The agent's greedy answer to one observation, printed like a typed one."""
    [decision] = policy.act([observation], [info.get("system_prompt", "")], [info.get("valid_actions") or []],
                            greedy=True)
    print(f"> {decision.text}  (the agent)")
    return decision.text


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    """The parse record with numpy scalars as Python numbers (for JSON)."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in record.items()}
