"""Envs over the network: decisions/s of CartPole in-process vs served on 127.0.0.1 (``textgym serve``).

One process starts one server (``textgym serve cartpole``, its own process) and then alternates,
``--repeats`` times, between the same rollout on in-process envs and on served envs (one OpenEnv
session per env), so that both see the same machine load; ratios are against the in-process run
of the same round.

* ``scripted``: a policy that answers at once (alternating LEFT/RIGHT): what the envs alone cost,
  so the network's share is as large as it gets; with 16 envs, and with 64 sessions on one server.
* ``tiny``: textgym's score-mode policy with the random ``tiny`` model, 16 envs: the same rollout
  path as training (one batched ``policy.act`` per vector step). The default model would only make
  the network's share smaller.

Per-step latency added by the network: (served - in-process env seconds) / decisions, env seconds
being the time spent inside ``env.step``/``reset`` (the rollout's ``env_seconds``).

Usage:
    python bench/network.py --json bench/results/network.json
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import textgym
from textgym.policy import Decision
from textgym.rollout import collect


class Alternating:
    """Answers at once: LEFT, RIGHT, LEFT... per env (the envs' cost alone)."""

    def __init__(self):
        self.turn = 0

    def act(self, observations, system_prompts, valid_actions=None, greedy=False):
        self.turn += 1
        return [Decision(text=actions[(self.turn + i) % 2], prompt_ids=[], answer_ids=[], token_logprobs=[],
                         logprob=0.0) for i, actions in enumerate(valid_actions)]


def start_server(max_sessions: int, printed: Path) -> tuple[subprocess.Popen, int]:
    """``textgym serve cartpole`` on a port the system chooses (``--port 0``: no other process can
    take it between a probe and the bind); the port is read from the URL the server prints."""
    with printed.open("wb") as stdout:
        server = subprocess.Popen([sys.executable, "-m", "textgym.cli", "serve", "cartpole", "--port", "0",
                                   "--max-sessions", str(max_sessions)], stdout=stdout)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if found := re.search(r"http://127\.0\.0\.1:(\d+)", printed.read_text(errors="replace")):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", int(found[1]))) == 0:
                    return server, int(found[1])
        if server.poll() is not None:
            raise RuntimeError("the server exited")
        time.sleep(0.2)
    server.kill()
    raise RuntimeError("the server did not listen in 300 s")


def run(policy, env_id: str, num_envs: int, steps: int, seed: int) -> dict[str, float]:
    venv = textgym.make_vec(env_id, num_envs=num_envs)
    try:
        collect(policy, venv, steps=num_envs, seed=seed)  # sessions opened, caches warm
        stats = collect(policy, venv, steps=steps, seed=seed + 1).stats
    finally:
        venv.close()
    return {"decisions": stats["decisions"], "seconds": stats["seconds"], "env_seconds": stats["env_seconds"],
            "decisions_per_s": stats["decisions_per_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=320, help="decisions per rollout (16 envs)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    printed = tempfile.TemporaryDirectory(prefix="textgym-network-")
    server, port = start_server(max_sessions=80, printed=Path(printed.name) / "server.out")
    url = f"openenv:http://127.0.0.1:{port}"
    try:
        import torch

        from textgym.policy import Policy

        torch.set_num_threads(1)
        tiny = Policy(*textgym.models.load("tiny", device="cpu"), mode="score", seed=0, name="tiny")
        cases = {"scripted_16": (Alternating, 16, args.steps), "tiny_16": (lambda: tiny, 16, args.steps),
                 "scripted_64": (Alternating, 64, 4 * args.steps)}
        rounds: dict[str, list[dict]] = {name: [] for name in cases}
        for r in range(args.repeats):
            for name, (make_policy, num_envs, steps) in cases.items():
                local = run(make_policy(), "cartpole", num_envs, steps, seed=100 * r)
                served = run(make_policy(), url, num_envs, steps, seed=100 * r)
                rounds[name].append({
                    "in_process": local, "served": served,
                    "ratio": served["decisions_per_s"] / local["decisions_per_s"],
                    "added_ms_per_step": 1000 * (served["env_seconds"] - local["env_seconds"]) / served["decisions"]})
                print(f"round {r + 1} {name}: in-process {local['decisions_per_s']:.0f}/s, served "
                      f"{served['decisions_per_s']:.0f}/s (x{rounds[name][-1]['ratio']:.3f}), "
                      f"+{rounds[name][-1]['added_ms_per_step']:.2f} ms per step", flush=True)
    finally:
        server.kill()
        server.wait(timeout=30)
        printed.cleanup()
    summary = {name: {"ratio_median": statistics.median(x["ratio"] for x in rs),
                      "in_process_median": statistics.median(x["in_process"]["decisions_per_s"] for x in rs),
                      "served_median": statistics.median(x["served"]["decisions_per_s"] for x in rs),
                      "added_ms_per_step_median": statistics.median(x["added_ms_per_step"] for x in rs)}
               for name, rs in rounds.items()}
    for name, s in summary.items():
        print(f"{name}: median in-process {s['in_process_median']:.0f}/s, served {s['served_median']:.0f}/s, "
              f"ratio {s['ratio_median']:.3f}, +{s['added_ms_per_step_median']:.2f} ms per step")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rounds": rounds, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
