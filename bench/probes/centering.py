"""Does the update teach SmolLM2-135M to *read* the CartPole state, or only shift its answer?

Collects a few batches of CartPole episodes with the untrained policy (score mode, pole-spin
shaping 1.0, gamma 0.3: the batch-normalised advantage then correlates ~0.8 with "pushed toward
the pole's rotation"), and a held-out batch. Then, from the same start and on the same batches,
runs REINFORCE updates with and without ``state_centering`` and prints, on the held-out states,
P(RIGHT) where the pole turns right and where it turns left. A policy that reads the state
pushes RIGHT in the first case and LEFT in the second; a shift moves both numbers together.

    python bench/probes/centering.py [--batches 4] [--lr 3e-4]
"""

import argparse
import re
import time

import torch

import textgym
from textgym.rollout import decisions_of
from textgym.trainers import make_trainer


def spin_is_right(step) -> bool:
    return float(re.search(r"spin ([+-][0-9.]+)", step.observation).group(1)) > 0


@torch.no_grad()
def p_right_by_spin(policy, decisions, steps) -> tuple[float, float]:
    """Mean P(RIGHT) over held-out states whose pole turns right, and over those turning left."""
    p_chosen = torch.cat([policy.evaluate(decisions[i:i + 64]).logprobs[:, 0].exp()
                          for i in range(0, len(decisions), 64)])
    chose_right = torch.tensor([d.action_index == 1 for d in decisions])
    p_right = torch.where(chose_right, p_chosen, 1 - p_chosen)
    turning_right = torch.tensor([spin_is_right(s) for s in steps])
    return float(p_right[turning_right].mean()), float(p_right[~turning_right].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=4, help="training batches of 16 episodes")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--centering", type=float, nargs="+", default=[0.0, 1.0])
    args = parser.parse_args()
    torch.set_num_threads(2)

    policy = textgym.Policy.from_pretrained("smollm2-135m", mode="score")
    config = dict(lr=args.lr, num_envs=16, episodes_per_update=16, minibatch_size=32, gamma=0.3,
                  lora_layers=8)
    trainer = make_trainer("reinforce", policy, env="textgym/CartPole-v1", config=config,
                           env_kwargs={"shaping": 1.0})
    batches = []
    for update in range(args.batches + 1):  # same batches for every variant; the last is held out
        batches.append(trainer.collect().episodes)
        trainer.update_count += 1
    held = batches.pop()
    held_decisions, held_steps = decisions_of(held), [step for episode in held for step in episode.steps]
    start = {k: v.clone() for k, v in trainer.model.state_dict().items() if "lora_" in k}

    right, left = p_right_by_spin(policy, held_decisions, held_steps)
    print(f"{len(held_decisions)} held-out states; untrained: P(RIGHT | turning right) {right:.3f}, "
          f"P(RIGHT | turning left) {left:.3f}")
    for weight in args.centering:
        trainer.model.load_state_dict(start, strict=False)
        trainer.optimizer = torch.optim.AdamW(trainer._param_groups())
        trainer.config.state_centering = weight
        t0 = time.monotonic()
        for k, episodes in enumerate(batches, 1):
            trainer._update(episodes)
            right, left = p_right_by_spin(policy, held_decisions, held_steps)
            print(f"state_centering {weight}: after batch {k}: P(RIGHT | turning right) {right:.3f}, "
                  f"P(RIGHT | turning left) {left:.3f}, gap {right - left:+.3f}", flush=True)
        print(f"state_centering {weight}: {time.monotonic() - t0:.0f} s for {len(batches)} updates")


if __name__ == "__main__":
    main()
