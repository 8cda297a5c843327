"""How a CartPole policy's held-out greedy episodes end: the pole falling, or the cart leaving the track.

Plays a checkpoint's greedy policy on the held-out episodes ``textgym eval`` plays (the same seeds,
the same step cap), then replays each episode's actions in Gymnasium's own ``CartPole-v1``, reset
with the episode's seed (the env is deterministic), to read the state it ended in: an episode cut
short either let the pole pass 12 degrees or took the cart past 2.4 from the centre. A policy that
balances the pole but drifts along the track shows itself here, and a credit horizon (``gamma``)
too short to see the drift is the first thing to suspect.

Usage:
    python bench/cartpole_endings.py RUN_OR_CHECKPOINT [--episodes 50] [--max-steps 200] [--act-dtype float32]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import gymnasium as gym

import textgym
from textgym.rollout import collect

ENV_ID = "textgym/CartPole-v1"
EVAL_SEED = 1_000_000  # TrainConfig.eval_seed: the held-out episodes of `textgym eval`


def checkpoint_of(path: Path) -> Path:
    """A run folder's checkpoint, or the checkpoint folder itself."""
    return path / "checkpoint" if (path / "checkpoint" / "trainer_state.json").exists() else path


def ending(seed: int, actions: list[int]) -> dict:
    """Replay ``actions`` in Gymnasium's CartPole reset with ``seed``: the final state and why it ended."""
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    terminated = False
    for action in actions:
        state, _, terminated, _, _ = env.step(action)
    x, _, angle, _ = (float(v) for v in state)
    unwrapped = env.unwrapped
    cause = ("cart off the track" if abs(x) > unwrapped.x_threshold else
             "pole fell" if abs(angle) > unwrapped.theta_threshold_radians else "cut at the cap")
    return {"seed": seed, "length": len(actions), "terminated": bool(terminated), "cause": cause,
            "cart_position": round(x, 3), "pole_angle": round(angle, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run folder or a checkpoint folder of textgym/CartPole-v1")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--max-steps", type=int, default=200, help="the step cap (the benchmark's 200)")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--act-dtype", default=None,
                        help="the precision the greedy policy acts in (default: the checkpoint's evaluation one)")
    parser.add_argument("--json", type=Path, default=None, help="also write the endings here")
    args = parser.parse_args()

    checkpoint = checkpoint_of(args.run)
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    env_kwargs = {k: v for k, v in (state.get("env_kwargs") or {}).items() if k != "max_episode_steps"}
    policy = textgym.Policy.load(checkpoint, **({"eval_act_dtype": args.act_dtype} if args.act_dtype else {}))
    venv = textgym.make_vec(ENV_ID, num_envs=args.num_envs, max_episode_steps=args.max_steps, **env_kwargs)
    with policy.evaluating():  # the precision `textgym eval` acts in
        rollout = collect(policy, venv, episodes=args.episodes, seed=EVAL_SEED, greedy=True,
                          max_episode_steps=args.max_steps)
    endings = [ending(ep.seed, [int(step.parse["action"]) for step in ep.steps]) for ep in rollout.episodes]
    for record, episode in zip(endings, rollout.episodes):
        assert record["length"] == episode.length and record["terminated"] == episode.steps[-1].terminated, \
            "the replay in Gymnasium's CartPole did not follow the text env's episode"
    mean = sum(e["length"] for e in endings) / len(endings)
    causes: dict[str, int] = {}
    for e in endings:
        causes[e["cause"]] = causes.get(e["cause"], 0) + 1
    print(f"{checkpoint}: mean return {mean:.2f} on {len(endings)} episodes capped at {args.max_steps} "
          f"(env_kwargs {env_kwargs})")
    for cause, count in sorted(causes.items(), key=lambda kv: -kv[1]):
        print(f"  {cause}: {count}")
    for e in sorted((e for e in endings if e["cause"] != "cut at the cap"), key=lambda e: e["length"]):
        print(f"  seed {e['seed']}: {e['cause']} after {e['length']} steps "
              f"(cart at {e['cart_position']:+.2f}, pole {e['pole_angle']:+.3f} rad)")
    if args.json is not None:
        args.json.write_text(json.dumps({"checkpoint": str(checkpoint), "env_kwargs": env_kwargs,
                                         "act_dtype": policy.config.eval_act_dtype,
                                         "max_steps": args.max_steps, "return_mean": mean, "causes": causes,
                                         "episodes": endings}, indent=1) + "\n")


if __name__ == "__main__":
    main()
