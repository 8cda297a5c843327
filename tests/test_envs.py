"""The built-in text envs: env checker, renderers' meaning words, kwargs pass-through, Bandit."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import textgym
from textgym.envs.bandit import CueBanditEnv
from textgym.envs.classic import (
    AcrobotText,
    BlackjackText,
    CartPoleText,
    GridText,
    MountainCarText,
    TaxiText,
    hit_bust_chance,
)
from textgym.registry import takes_free_text

# TextWorld generates a game per seed (~10 s for the checker's resets): tests/test_textworld.py
# runs check_env on it with a cached game. A free-text env (a tool env: Calculator-v0) names no
# actions: tests/test_tool_env.py checks it.
ALL_IDS = [info.id for info in textgym.list_envs()
           if info.source == "textgym" and info.id != "textgym/TextWorld-v0" and not takes_free_text(info.id)]
CLASSIC = ["textgym/CartPole-v1", "textgym/MountainCar-v0", "textgym/Acrobot-v1",
           "textgym/Blackjack-v1", "textgym/FrozenLake-v1", "textgym/Taxi-v4",
           "textgym/CliffWalking-v1", "textgym/Bandit-v0"]


def test_all_builtin_ids_are_registered():
    assert set(CLASSIC) <= set(ALL_IDS)


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_every_registered_text_env_passes_gymnasiums_env_checker(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
        check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and obs
    assert info["system_prompt"] and info["valid_actions"]
    first = info["valid_actions"][0]
    obs, _, _, _, info = env.step(first)
    assert info["parse"]["valid"] is True and info["parse"]["action_name"] == first


@pytest.mark.parametrize("env_id", CLASSIC)
def test_system_prompt_states_the_answer_format_and_observation_is_short(env_id):
    env = textgym.make(env_id)
    obs, info = env.reset(seed=3)
    names = env.get_wrapper_attr("action_names")
    assert info["system_prompt"].endswith(
        f"Answer with one word: {', '.join(names[:-1])} or {names[-1]}.")
    assert len(info["system_prompt"]) < 260
    assert len(obs) < 150     # Taxi's map is the longest (~70 tokens); CartPole is ~36


@pytest.mark.parametrize("env_id", CLASSIC + ["textgym/Bandit-v0"])
def test_generate_defaults_ask_for_the_format_the_policy_answers(env_id):
    from textgym.policy.config import PolicyConfig
    from textgym.registry import training_defaults
    from textgym.wrappers.answer_format import ANSWER_FORMATS

    defaults = training_defaults(env_id, "generate")
    fmt = ANSWER_FORMATS[defaults.env_kwargs["answer_format"]]
    config = PolicyConfig(mode="generate", **defaults.policy)
    assert (config.prefill, config.stop) == (fmt.prefill, fmt.stop) and config.temperature < 1.0
    env = textgym.make(env_id, **defaults.env_kwargs)
    _, info = env.reset(seed=0)
    names = env.get_wrapper_attr("action_names")
    # the format is stated once, at the end of the system prompt, and names every action
    assert info["system_prompt"].endswith(fmt.instructions(names))
    assert info["system_prompt"].count("Answer") == 1
    # what a policy writes in this format (prefill, a name, the stop string) is that action
    for i in range(len(names)):
        name = info["valid_actions"][i % len(info["valid_actions"])]
        _, _, terminated, truncated, info = env.step(config.prefill + name + config.stop[0])
        assert info["parse"]["valid"] and info["parse"]["action_name"] == name
        assert info["parse"]["parser"] == "json"
        assert info["reward_terms"]["format"] > 0           # the format bonus, at its start
        if terminated or truncated:
            _, info = env.reset(seed=i)
    _, _, _, _, info = env.step(config.prefill + "banana" + config.stop[0])
    assert not info["parse"]["valid"] and info["reward_terms"]["format"] == 0.0


def test_every_answer_format_is_read_by_the_default_parser():
    from textgym.wrappers.answer_format import ANSWER_FORMATS

    env_answers = {"word": "RIGHT", "json": '{"action": "RIGHT"', "think": "LEFT falls. <answer>RIGHT</answer>"}
    for name, fmt in ANSWER_FORMATS.items():
        env = textgym.make("textgym/CartPole-v1", answer_format=name)
        _, info = env.reset(seed=0)
        assert info["system_prompt"].endswith(fmt.instructions(["LEFT", "RIGHT"]))
        assert env.step(env_answers[name])[-1]["parse"]["action_name"] == "RIGHT"
    with pytest.raises(ValueError, match="unknown answer format 'xml'"):
        textgym.make("textgym/CartPole-v1", answer_format="xml")
    with pytest.raises(TypeError, match="either instructions= or answer_format="):
        textgym.make("textgym/CartPole-v1", answer_format="json", instructions="Say it.")


# --------------------------------------------------------------------------- renderers

def test_cartpole_text_gives_the_full_state_and_one_direction_word():
    text = CartPoleText()([0.02, -0.15, 0.09, -0.23])
    assert text == "Pole +0.09 rad, spin -0.23 turning left; cart at +0.02, velocity -0.15."
    text = CartPoleText()([-1.9, 1.2, -0.15, 0.8])
    assert text == "Pole -0.15 rad, spin +0.80 turning right; cart at -1.90, velocity +1.20."
    # the turning word is the only direction word: competing words hide it from a small model
    assert sum(text.count(word) for word in ("left", "right")) == 1


def test_cartpole_compact_text_puts_the_word_first_and_the_numbers_in_hundredths():
    state = [-1.9, 1.2, -0.15, 0.8]  # leaning left, turning right fast: heading +0.09, right
    assert CartPoleText("heading", compact=True)(state) == "Pole falling right: angle -15, spin +80; cart -190, velocity +120."
    assert CartPoleText(compact=True)(state).startswith("Pole turning right: angle -15")
    assert len(CartPoleText("heading", compact=True)(state)) < len(CartPoleText("heading")(state))
    env = textgym.make("textgym/CartPole-v1", word="heading", compact=True)
    obs, _ = env.reset(seed=0)
    base_obs, _ = gym.make("CartPole-v1").reset(seed=0)
    assert obs == CartPoleText("heading", compact=True)(base_obs)
    assert env.spec.kwargs["compact"] is True  # recorded, so a run's env is rebuilt the same


def test_cartpole_numbers_only_text_names_no_direction():
    """word="none": the same numbers, no direction word anywhere in the prompt (the benchmark's
    hard form of CartPole); its shaping defaults to the centring potential (heading and cart)."""
    state = [-1.9, 1.2, -0.15, 0.8]
    assert CartPoleText("none")(state) == "Pole -0.15 rad, spin +0.80; cart at -1.90, velocity +1.20."
    assert CartPoleText("none", compact=True)(state) == "Pole: angle -15, spin +80; cart -190, velocity +120."
    env = textgym.make("textgym/CartPole-v1", word="none", shaping=1.0)
    obs, info = env.reset(seed=0)
    base_obs, _ = gym.make("CartPole-v1").reset(seed=0)
    assert obs == CartPoleText("none")(base_obs)
    assert not any(word in obs.lower() for word in ("left", "right", "falling", "turning"))
    _, reward, _, _, info = env.step("LEFT")
    assert reward != 1.0 and info["reward_env"] == 1.0  # the centring shaping applies
    assert set(info["reward_terms"]) == {"scale", "centring"}
    with pytest.raises(ValueError, match="word must be one of"):
        CartPoleText("sideways")


def test_cartpole_env_renders_its_real_state():
    env = textgym.make("textgym/CartPole-v1")
    obs, _ = env.reset(seed=0)
    base_obs, _ = gym.make("CartPole-v1").reset(seed=0)
    assert obs == CartPoleText()(base_obs)


def test_mountaincar_text():
    renderer = MountainCarText()
    assert renderer([-0.52, 0.0]) == "Car at -0.52 valley bottom, velocity +0.000 still."
    assert "left slope" in renderer([-1.0, -0.01]) and "moving left" in renderer([-1.0, -0.01])
    assert "right slope" in renderer([0.1, 0.03]) and "moving right" in renderer([0.1, 0.03])
    assert "at the flag" in renderer([0.55, 0.03])


def test_acrobot_text_gives_angles_and_tip_height():
    hanging = AcrobotText()([1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    assert hanging == ("Upper link +0.00 rad, lower +0.00 rad; speeds +0.00, +0.00. "
                       "Tip height -2.00, still.")
    swinging_up = AcrobotText()([math.cos(1.5), math.sin(1.5), 1.0, 0.0, 1.0, 0.0])
    assert "Tip height -0.14, rising" in swinging_up


def test_blackjack_text():
    assert BlackjackText()((14, 10, 1)) == "Your total 14 with a usable ace: a hit cannot bust you. Dealer shows 10."
    assert BlackjackText()((12, 1, 0)) == "Your total 12: a hit busts you with chance 31%. Dealer shows an ace."
    assert BlackjackText()((11, 3, 0)) == "Your total 11: a hit cannot bust you. Dealer shows 3."
    assert BlackjackText()((21, 3, 0)).startswith("Your total 21: a hit busts you with chance 100%.")
    assert BlackjackText()((25, 7, 0)) == "Your total 25 (bust). Dealer shows 7."


@pytest.mark.parametrize("common_cards", [False, True], ids=["gymnasium", "common-cards"])
def test_blackjack_value_is_exact_and_basic_strategy_is_the_best_policy(common_cards):
    from textgym.envs.classic import DealerStream, basic_strategy_hits, blackjack_value

    assert blackjack_value(basic_strategy_hits) == pytest.approx(blackjack_value(), abs=1e-12)
    always_stick = blackjack_value(lambda total, dealer, ace: False)
    assert always_stick < blackjack_value(lambda total, dealer, ace: total < 17) < blackjack_value()
    # Gymnasium's own env agrees, and so does it with the dealer's own stream (the same game in
    # distribution): 20,000 seeded hands of "stick at 17+", within 4 standard errors
    env = DealerStream(gym.make("Blackjack-v1")) if common_cards else gym.make("Blackjack-v1")
    returns = []
    for seed in range(20_000):
        (total, *_), _ = env.reset(seed=seed)
        done = False
        while not done:
            (total, *_), reward, done, _, _ = env.step(int(total < 17))
        returns.append(reward)
    exact = blackjack_value(lambda total, dealer, ace: total < 17)
    assert abs(np.mean(returns) - exact) < 4 * np.std(returns) / np.sqrt(len(returns))


def test_blackjack_common_cards_deal_one_deck_to_every_hand_of_a_seed():
    from textgym.envs.classic import DealerStream

    def play(env, seed, hits):
        """The dealer's and the player's final hands after ``hits`` HITs, then STICK."""
        env.reset(seed=seed)
        done = False
        for _ in range(hits):
            _, _, done, _, _ = env.step(1)
            if done:
                break
        if not done:
            env.step(0)
        return list(env.unwrapped.dealer), list(env.unwrapped.player)

    common, plain = DealerStream(gym.make("Blackjack-v1")), gym.make("Blackjack-v1")
    dealers_differ = 0
    for seed in range(200):
        stick_dealer, stick_player = play(common, seed, 0)
        hit_dealer, hit_player = play(common, seed, 1)
        _, twice_player = play(common, seed, 2)
        assert hit_player[:3] == twice_player[:3]        # the same next card, whatever came before
        assert hit_player[:2] == stick_player            # the same first two cards
        if sum(hit_player) <= 21:                        # the hand that hit, then stuck,
            assert hit_dealer == stick_dealer, seed      # met the dealer's very hand
        plain_stick, _ = play(plain, seed, 0)
        plain_hit, plain_player = play(plain, seed, 1)
        dealers_differ += len(plain_player) == 3 and sum(plain_player) <= 21 and plain_hit != plain_stick
    assert dealers_differ > 20   # Gymnasium's one stream: a hit shifts the dealer's cards
    text = gym.make("textgym/Blackjack-v1", common_cards=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
        check_env(text, skip_render_check=True)
    text.reset(seed=3)
    assert text.step("STICK")[2]


def test_blackjack_action_values_rank_basic_strategys_moves():
    from textgym.envs.classic import (
        BLACKJACK_STATES,
        basic_strategy_hits,
        blackjack_action_values,
        blackjack_value,
    )

    values = blackjack_action_values()
    assert set(values) == set(BLACKJACK_STATES)
    for state, (hit, stick) in values.items():
        if abs(hit - stick) > 1e-12:  # the better move is basic strategy's
            assert (hit > stick) == basic_strategy_hits(*state), state
    assert values[(21, 10, False)][0] == -1.0  # a hard 21 busts on any card
    assert values[(21, 10, True)][0] > -1.0  # a soft 21 cannot bust
    # one state's wrong move costs its margin times the chance of reaching it: less than the margin
    hit, stick = values[(16, 6, False)]
    wrong = blackjack_value(lambda total, dealer, ace: basic_strategy_hits(total, dealer, ace)
                            or (total, dealer, ace) == (16, 6, False))
    assert 0 < blackjack_value() - wrong < stick - hit


@pytest.mark.parametrize("total", range(4, 22))
def test_hit_bust_chance_matches_gymnasiums_deck(total):
    # Gymnasium deals from DECK with replacement; count the cards that take the total past 21.
    from gymnasium.envs.toy_text.blackjack import deck

    assert hit_bust_chance(total) == pytest.approx(sum(total + card > 21 for card in deck) / len(deck))
    assert hit_bust_chance(total, usable_ace=True) == 0.0


def test_hit_bust_chance_known_values():
    assert [hit_bust_chance(t) for t in (11, 12, 16, 21)] == [0.0, 4 / 13, 8 / 13, 1.0]


def test_frozenlake_grid_marks_you_and_says_when_you_fell():
    env = textgym.make("textgym/FrozenLake-v1", is_slippery=False)
    obs, info = env.reset(seed=0)
    assert obs == "@...\n.H.H\n...H\nH..G\nYou: row 0, col 0."
    assert "slippery" not in info["system_prompt"]
    obs, reward, terminated, *_ = env.step("DOWN")
    obs, reward, terminated, *_ = env.step("RIGHT")       # row 1, col 1 is a hole
    assert obs == "S...\n.@.H\n...H\nH..G\nYou: row 1, col 1. You fell into a hole."
    assert terminated and reward == 0.0
    slippery = textgym.make("textgym/FrozenLake-v1")
    assert "slippery" in slippery.reset(seed=0)[1]["system_prompt"]


def test_frozenlake_map_kwargs_pass_through():
    obs, _ = textgym.make("textgym/FrozenLake-v1", map_name="8x8").reset(seed=0)
    assert obs.splitlines()[:8][-1] == "...H...G" and len(obs.splitlines()) == 9
    obs, _ = textgym.make("textgym/FrozenLake-v1", desc=["SF", "HG"]).reset(seed=0)
    assert obs == "@.\nHG\nYou: row 0, col 0."


def test_cliffwalking_grid_and_goal():
    env = textgym.make("textgym/CliffWalking-v1")
    obs, _ = env.reset(seed=0)
    assert obs.splitlines()[3] == "@CCCCCCCCCCG" and obs.endswith("You: row 3, col 0.")
    obs, reward, terminated, *_ = env.step("RIGHT")          # into the cliff: back to start
    assert reward == -100 and not terminated and obs.endswith("You: row 3, col 0.")
    assert GridText(["S.G"], notes={"G": "You reached the goal."})(2) == "S.@\nYou: row 0, col 2. You reached the goal."


def test_cliffwalking_has_a_step_limit_by_default():
    env = textgym.make("textgym/CliffWalking-v1")
    env.reset(seed=0)
    for step in range(1, 201):
        *_, truncated, info = env.step("UP")
        if truncated:
            break
    assert step == 200 and info["episode"]["length"] == 200


def test_taxi_text_shows_taxi_passenger_destination_and_legal_moves():
    env = textgym.make("textgym/Taxi-v4")
    obs, info = env.reset(seed=0)
    taxi = env.unwrapped
    row, col, passenger, destination = taxi.decode(taxi.s)
    lines = obs.splitlines()
    assert lines[row + 1][2 * col + 1] == "@"
    assert f"Passenger at {'RGYB'[passenger]}, destination {'RGYB'[destination]}." in obs
    assert obs.endswith(f"Legal: {', '.join(info['valid_actions'])}.")
    text = TaxiText()(taxi.encode(0, 0, 4, 1))
    assert "Passenger in the taxi, destination G. Legal: SOUTH, EAST, DROPOFF." in text
    assert text.splitlines()[1] == "|@: | : :G|"


def test_taxi_is_also_found_without_version():
    assert textgym.registry.resolve_id("textgym/Taxi") == "textgym/Taxi-v4"
    assert textgym.registry.resolve_id("taxi") == "textgym/Taxi-v4"


# --------------------------------------------------------------------------- make kwargs

def test_formatter_is_swappable_per_make_call():
    env = textgym.make("textgym/CartPole-v1", formatter=lambda obs: f"x={obs[0]:+.1f}")
    assert env.reset(seed=0)[0] == "x=+0.0"
    env = textgym.make("textgym/CartPole-v1", formatter="pole {2:+.3f}")
    assert env.reset(seed=0)[0] == "pole -0.046"
    env = textgym.make("textgym/CartPole-v1", system_prompt="Keep it up.")
    assert env.reset(seed=0)[1]["system_prompt"] == "Keep it up.\nAnswer with one word: LEFT or RIGHT."


def test_max_episode_steps_applies_inside_the_text_wrappers():
    env = textgym.make("textgym/CartPole-v1", max_episode_steps=3)
    env.reset(seed=0)
    for _ in range(3):
        *_, terminated, truncated, info = env.step("LEFT" if _ % 2 else "RIGHT")
    assert truncated and not terminated
    assert info["episode"] == {"return": 3.0, "length": 3, "invalid_count": 0}


def test_invalid_policy_and_history_pass_through():
    env = textgym.make("textgym/CartPole-v1", invalid_policy="terminate", invalid_penalty=-5.0)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("I cannot decide")
    assert terminated and reward == -5.0 and info["parse"]["policy"] == "terminate"

    env = textgym.make("textgym/Bandit-v0", history=1, invalid_policy="retry")
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step("hmm")
    assert not terminated and info["parse"]["policy"] == "retry" and "hmm" in obs


def test_gymnasium_env_kwargs_pass_through():
    env = textgym.make("textgym/Blackjack-v1", natural=True, sab=False)
    assert env.unwrapped.natural is True and env.unwrapped.sab is False
    env = textgym.make("textgym/FrozenLake-v1", render_mode="rgb_array", map_name="8x8")
    env.reset(seed=0)
    assert env.unwrapped.render_mode == "rgb_array" and env.render().ndim == 3
    assert env.unwrapped.desc.shape == (8, 8)
    # "ansi" is the text the model sees (tests/test_gymnasium_tools.py), not the base env's map
    env = textgym.make("textgym/FrozenLake-v1", render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs and env.unwrapped.render_mode is None


def test_unknown_make_kwarg_is_a_clear_error():
    with pytest.raises(TypeError, match=r"\['is_slipery'\].*is_slippery"):
        textgym.make("textgym/FrozenLake-v1", is_slipery=False)


# --------------------------------------------------------------------------- Bandit

def test_bandit_rewards_the_right_animal_for_the_color():
    env = textgym.make("textgym/Bandit-v0")
    seen = set()
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        assert obs in ("Color: red.", "Color: green.")
        assert info["valid_actions"] == ["cat", "dog"]
        right = "cat" if obs == "Color: red." else "dog"
        wrong = "dog" if right == "cat" else "cat"
        _, reward, terminated, truncated, info = env.step(f"I say {right}")
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert info["episode"]["return"] == 1.0
        env.reset(seed=seed)
        assert env.step(wrong)[1] == 0.0
        seen.add(obs)
    assert len(seen) == 2


def test_bandit_chance_reward_is_low():
    """A constant answer or a random guess earns about 1/num_arms, far below 0.9."""
    for num_cues, num_arms in [(2, 2), (4, 4)]:
        env = textgym.make("textgym/Bandit-v0", num_cues=num_cues, num_arms=num_arms)
        names = env.get_wrapper_attr("action_names")
        rng = np.random.default_rng(0)
        constant, guess = [], []
        for seed in range(400):
            env.reset(seed=seed)
            constant.append(env.step(names[0])[1])
            env.reset(seed=seed)
            guess.append(env.step(names[int(rng.integers(num_arms))])[1])
        assert abs(np.mean(constant) - 1 / num_arms) < 0.08
        assert abs(np.mean(guess) - 1 / num_arms) < 0.08


def test_bandit_is_deterministic_under_seed_and_continues_its_rng():
    def cues(env, seed):
        out = [env.reset(seed=seed)[0]]
        out += [env.reset()[0] for _ in range(15)]
        return out
    a, b = textgym.make("textgym/Bandit-v0", num_cues=4), textgym.make("textgym/Bandit-v0", num_cues=4)
    assert cues(a, 7) == cues(b, 7)
    assert len(set(cues(a, 7))) > 1
    assert cues(a, 7) != cues(a, 8)


def test_bandit_options():
    env = textgym.make("textgym/Bandit-v0", num_cues=3, num_arms=4, hint=True)
    _, info = env.reset(seed=0)
    assert info["valid_actions"] == ["cat", "dog", "fox", "owl"]
    assert info["system_prompt"] == ("Name the animal of the color: red cat, green dog, blue fox.\n"
                                     "Answer with one word: cat, dog, fox or owl.")
    env = textgym.make("textgym/Bandit-v0", mapping=[1, 1])
    env.reset(seed=0)
    assert env.step("dog")[1] == 1.0
    with pytest.raises(ValueError, match="num_arms"):
        CueBanditEnv(num_arms=9)
    with pytest.raises(ValueError, match="mapping"):
        CueBanditEnv(num_cues=2, num_arms=2, mapping=[0, 5])


# --------------------------------------------------------------------------- example

def test_stack_wrappers_example_runs_and_prints_the_parse_records():
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).parent.parent / "examples" / "stack_wrappers.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    parsed = [line for line in lines if line.startswith("PARSED:")]
    assert [p.split()[2] for p in parsed] == ["name=LEFT", "name=RIGHT", "name=None", "name=LEFT", "name=RIGHT"]
    assert "parser=json" in parsed[0] and "parser=regex" in parsed[1]
    assert "valid=False policy=penalty reward=+0.00" in parsed[2]
    assert "Your action: 'uhh, banana?' (invalid)" in out.stdout       # History shows the bad answer
    assert lines[-1] == "EPISODE: {'return': 4.0, 'length': 5, 'invalid_count': 1}"


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_every_env_takes_the_same_invalid_answer_keywords(env_id):
    """One vocabulary (InvalidAnswerRule's): classic envs, the bandit and the board-game views
    (TextWorld: tests/test_textworld.py) take the same keywords, with the same meaning."""
    env = textgym.make(env_id, invalid_policy="retry", invalid_penalty=-3.0, max_retries=1,
                       retry_fallback="terminate", feedback="No! {valid_actions}")
    _, info = env.reset(seed=0)
    obs, reward, terminated, _, step_info = env.step("?!")
    assert (reward, terminated, step_info["parse"]["policy"]) == (0.0, False, "retry")
    assert "No! " + ", ".join(info["valid_actions"]) in obs
    _, reward, terminated, _, step_info = env.step("?!")
    assert (reward, terminated, step_info["parse"]["policy"]) == (-3.0, True, "terminate")


def test_cartpole_heading_word_names_a_rule_that_balances_the_whole_episode():
    """Pushing the way the renderer's word says: the turning word keeps the pole up ~200 steps,
    the heading word (the sign of angle + 0.3 * spin) all 500 (seeds 0-4)."""
    from textgym.envs.classic import CartPoleText, pole_heading_potential

    assert CartPoleText("heading")([0.0, 0.0, 0.05, -0.2]).count("falling left") == 1  # 0.05 - 0.06 < 0
    assert CartPoleText("heading")([0.0, 0.0, 0.05, -0.1]).count("falling right") == 1
    with pytest.raises(ValueError, match="word must be one of"):
        CartPoleText("angle")

    def follow_the_word(word: str) -> float:
        env = textgym.make("textgym/CartPole-v1", word=word)
        lengths = []
        for seed in range(5):
            obs, _ = env.reset(seed=seed)
            done, steps = False, 0
            while not done:
                answer = "LEFT" if ("turning left" in obs or "falling left" in obs) else "RIGHT"
                obs, _, terminated, truncated, _ = env.step(answer)
                done, steps = terminated or truncated, steps + 1
            lengths.append(steps)
        return sum(lengths) / len(lengths)

    assert follow_the_word("heading") == 500
    assert follow_the_word("spin") < 300

    env = textgym.make("textgym/CartPole-v1", word="heading", shaping=1.0)
    env.reset(seed=0)
    before = pole_heading_potential(env.unwrapped)
    *_, info = env.step("LEFT")
    assert set(info["reward_terms"]) == {"scale", "heading"}
    assert info["reward_terms"]["heading"] == pytest.approx(pole_heading_potential(env.unwrapped) - before)
    with pytest.raises(ValueError, match="potential must be one of"):
        textgym.make("textgym/CartPole-v1", potential="cart")


@pytest.mark.parametrize("lean", [-0.1, 0.1])
def test_cartpole_centring_potential_keeps_a_rule_that_reads_the_sign_off_on_the_track(lean):
    """A rule that pushes toward the sign of the heading 0.1 rad off holds the pole but drives the
    cart off the track; with the centring potential's cart terms the same bias holds 500 steps."""
    from textgym.envs.classic import _CART_GAINS, pole_centring_potential

    def play(cart_gains) -> list[tuple[int, float]]:
        env = textgym.make("textgym/CartPole-v1", word="none", shaping=1.0, potential="centring")
        endings = []
        for seed in range(20):
            env.reset(seed=seed)
            done, steps = False, 0
            while not done:
                x, velocity, angle, spin = env.unwrapped.state
                heading = angle + 0.3 * spin + cart_gains[0] * x + cart_gains[1] * velocity - lean
                before = pole_centring_potential(env.unwrapped)
                _, _, terminated, truncated, info = env.step("RIGHT" if heading > 0 else "LEFT")
                assert info["reward_terms"]["centring"] == pytest.approx(
                    pole_centring_potential(env.unwrapped) - before)
                done, steps = terminated or truncated, steps + 1
            endings.append((steps, float(env.unwrapped.state[0])))
        return endings

    assert all(steps == 500 for steps, _ in play(_CART_GAINS))
    drifted = play((0.0, 0.0))
    assert all(steps < 200 and abs(x) > 2.4 for steps, x in drifted)   # off the track, pole up
