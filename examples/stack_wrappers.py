"""Stack textgym's wrappers by hand on a plain Gymnasium CartPole and play scripted answers.

Run: python examples/stack_wrappers.py   (textgym.wrap(env, ...) builds the same stack in one call)
"""

import gymnasium as gym

from textgym.wrappers import (
    EpisodeStats,
    FormatBonus,
    History,
    ParseAction,
    Scale,
    ShapeReward,
    TextObservation,
)

env = gym.make("CartPole-v1", max_episode_steps=5)               # a short episode for the demo
env = TextObservation(env, formatter="Pole angle {2:+.3f} rad, spin {3:+.2f}.",
                      system_prompt="Keep the pole upright.",
                      instructions="Answer with one word: LEFT or RIGHT.")
env = ParseAction(env, ["LEFT", "RIGHT"], invalid_policy="penalty", invalid_penalty=-1.0)
env = EpisodeStats(env)                                            # return, length, invalid count
env = ShapeReward(env, terms=[Scale(1.0), FormatBonus(bonus=0.1)])  # env reward + format bonus
env = History(env, window=1)                                       # show the previous turn

obs, info = env.reset(seed=0)
print("SYSTEM:", info["system_prompt"].replace("\n", " "))
answers = ['{"action": "LEFT"}', "Action: RIGHT", "uhh, banana?", "I would push left", "RIGHT"]
for answer in answers:
    print(f"\nPROMPT: {obs!r}\nANSWER: {answer!r}")
    obs, reward, terminated, truncated, info = env.step(answer)
    parse = info["parse"]
    print(f"PARSED: action={parse['action']} name={parse['action_name']} parser={parse['parser']} "
          f"valid={parse['valid']} policy={parse['policy']} reward={reward:+.2f}")
    if terminated or truncated:
        print("\nEPISODE:", info["episode"])
        break
