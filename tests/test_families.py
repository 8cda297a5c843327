"""Env families (minigrid/..., textarena/..., reasoning_gym/...), describers, env action names and
Box actions. A family's tests skip only when its package is not installed."""

from __future__ import annotations

import enum
import json
import re
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import textgym
from textgym import registry
from textgym.wrappers import ParseAction, env_action_names
from textgym.wrappers.describers import _DESCRIBERS, describer_settings, register_describer
from textgym.wrappers.parsers import box_grid, box_instructions, parse_numbers


def _check(env):
    """Gymnasium's env checker on a text env (the wrappers are part of the env under test)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # "different from the unwrapped version": by design
        check_env(env, skip_render_check=True)


# ------------------------------------------------------------------ the family mechanism

def _toy_make(name, max_episode_steps=None, **kwargs):
    return textgym.wrap(gym.make(name, max_episode_steps=max_episode_steps, **kwargs))


@pytest.fixture
def toy_family():
    registry.register_family("toyfam", _toy_make, lambda: ["CartPole-v1", "Acrobot-v1"],
                             install="toy-package", description="toys")
    yield
    _drop_family("toyfam")


def _drop_family(prefix):
    """Forget a test's family and the ids it registered (textgym's and Gymnasium's registries)."""
    registry._FAMILIES.pop(prefix)
    for env_id in [i for i in registry._INFOS if i.startswith(prefix + "/")]:
        registry._INFOS.pop(env_id)
        registry._FAMILY_IDS.discard(env_id)
        gym.registry.pop(env_id, None)


def test_a_family_id_is_made_on_demand_everywhere(toy_family):
    assert registry.resolve_id("toyfam/CartPole-v1") == "toyfam/CartPole-v1"
    assert registry.resolve_id("toyfam/cartpole-v1") == "toyfam/CartPole-v1"    # case-insensitive
    env = textgym.make("toyfam/CartPole-v1", max_episode_steps=3)
    assert env.reset(seed=0)[1]["valid_actions"] == ["0", "1"]
    assert env.step("1")[1] == 1.0
    assert isinstance(gym.make("toyfam/CartPole-v1").reset(seed=0)[0], str)   # now in Gymnasium's registry
    venv = textgym.make_vec("toyfam/CartPole-v1", num_envs=2, seed=0)
    assert len(venv.reset()[0]) == 2
    assert "toyfam/CartPole-v1" in {info.id for info in textgym.list_envs()}
    assert registry.family_ids("toyfam") == ["toyfam/CartPole-v1", "toyfam/Acrobot-v1"]


def test_gym_make_takes_any_id_of_a_family_without_textgym_resolving_it_first(toy_family):
    assert "toyfam/Acrobot-v1" not in gym.registry
    assert isinstance(gym.make("toyfam/Acrobot-v1").reset(seed=0)[0], str)    # Gymnasium's own make
    assert len(gym.make_vec("toyfam/acrobot-v1", num_envs=2).reset(seed=0)[0]) == 2
    with pytest.raises(registry.UnknownEnvError, match="Did you mean: toyfam/CartPole-v1"):
        gym.make("toyfam/CartPol-v1")
    with pytest.raises(gym.error.Error):      # other ids: Gymnasium's lookup, unchanged
        gym.make("nofam/CartPole-v1")
    registry.family_ids("toyfam", register_all=True)
    assert "toyfam/CartPole-v1" in gym.registry


def test_an_unknown_id_of_a_family_names_its_closest_ids(toy_family):
    with pytest.raises(registry.UnknownEnvError, match=r"no toyfam env 'CartPol-v1'\. Did you mean: "
                                                      r"toyfam/CartPole-v1.*textgym envs --family toyfam"):
        registry.resolve_id("toyfam/CartPol-v1")


def test_a_family_without_its_package_says_what_to_install():
    def missing():
        raise ModuleNotFoundError("No module named 'toy_package'")

    registry.register_family("missingfam", _toy_make, missing, install="textgym[toy]")
    try:
        with pytest.raises(registry.UnknownEnvError) as error:
            textgym.make("missingfam/Anything-v0")
        message = str(error.value)
        assert "\n" not in message and "pip install 'textgym[toy]'" in message
    finally:
        registry._FAMILIES.pop("missingfam")


def test_a_family_prefix_is_a_plain_name():
    with pytest.raises(ValueError, match="prefix"):
        registry.register_family("a/b", _toy_make, list)


def test_cli_lists_the_families_and_their_ids(toy_family):
    from textgym.cli.main import app
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["envs", "--family", "toyfam", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout) == ["toyfam/CartPole-v1", "toyfam/Acrobot-v1"]
    result = CliRunner().invoke(app, ["envs", "--family", "nofam"])
    assert result.exit_code != 0 and "no env family 'nofam'" in result.output


# ------------------------------------------------------------------ describers and action names

def test_a_describer_registered_for_a_class_or_an_id_prefix_sets_wraps_defaults():
    from gymnasium.envs.classic_control import CartPoleEnv

    register_describer(CartPoleEnv, lambda env: {"formatter": "x={0:.1f}", "system_prompt": "Cart."})
    register_describer("Acrobot", lambda env: {"system_prompt": "Swing."})
    try:
        obs, info = textgym.wrap(gym.make("CartPole-v1")).reset(seed=0)
        assert obs == "x=0.0" and info["system_prompt"].startswith("Cart.\n")
        assert textgym.wrap(gym.make("Acrobot-v1")).reset(seed=0)[1]["system_prompt"].startswith("Swing.\n")
        # the caller's own arguments win
        assert textgym.wrap(gym.make("CartPole-v1"), formatter="{obs}").reset(seed=0)[0].startswith("[")
        assert describer_settings(gym.make("MountainCar-v0")) == {}
    finally:
        _DESCRIBERS.pop(CartPoleEnv)
        _DESCRIBERS.pop("Acrobot")


def test_env_action_names_come_from_an_enum_or_a_names_attribute():
    class Moves(enum.IntEnum):
        push = 1
        pull = 0

    env = gym.make("CartPole-v1")
    env.unwrapped.Actions = Moves
    assert env_action_names(env, 2) == ["pull", "push"]          # in action order
    env = gym.make("CartPole-v1")
    env.unwrapped.move_names = ["west", "east"]
    assert textgym.wrap(env).reset(seed=0)[1]["valid_actions"] == ["west", "east"]
    assert env_action_names(gym.make("CartPole-v1"), 2) is None


# ------------------------------------------------------------------ continuous (Box) actions

def test_parse_numbers_reads_json_lists_tags_and_the_last_numbers():
    assert parse_numbers('{"action": [0.5, -1]}', 2) == [0.5, -1.0]
    assert parse_numbers("I'd push with torque -1.25.", 1) == [-1.25]
    assert parse_numbers("first 3 then <answer>0.5</answer>", 1) == [0.5]
    assert parse_numbers("[1, 2, 3] then [4, 5]", 2) == [4.0, 5.0]
    assert parse_numbers("1e3", 1) == [1000.0]
    for garbage in ("", "push left", "v1 and x2", "nan", "[true]", "{}" * 5000, "\ud800"):
        assert parse_numbers(garbage, 1) is None, garbage
    assert parse_numbers("1 2", 3) is None


def test_box_grid_and_instructions_document_the_discretization():
    names, actions = box_grid(gym.spaces.Box(-2.0, 2.0, (1,)))
    assert names == ["-2", "-1", "0", "1", "2"] and actions[1].tolist() == [-1.0]
    names, _ = box_grid(gym.spaces.Box(-1.0, 1.0, (3,)))
    assert len(names) == 27 and names[0] == "[-1, -1, -1]"
    names, _ = box_grid(gym.spaces.Box(-1.0, 1.0, (6,)))
    assert len(names) == 13                                      # centre, then each axis' two ends
    assert box_instructions(gym.spaces.Box(-2.0, 2.0, (1,))) == "Answer with a number from -2 to 2."


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "MountainCarContinuous-v0"])
def test_continuous_envs_work_through_wrap_with_no_extra_argument(env_id):
    env = textgym.wrap(gym.make(env_id))
    _, info = env.reset(seed=0)
    high = float(env.unwrapped.action_space.high[0])
    assert info["system_prompt"].endswith(f"Answer with a number from {-high:g} to {high:g}.")
    assert len(info["valid_actions"]) == 5
    _, _, _, _, info = env.step("Torque: 0.25")
    assert info["parse"]["action"] == [0.25] and info["parse"]["valid"] is True
    _, _, _, _, info = env.step('{"action": [99]}')
    assert info["parse"]["action"] == [high]                     # clipped to the bound
    _, _, _, _, info = env.step("no idea")
    assert info["parse"]["valid"] is False and info["parse"]["action"] == [0.0]    # the centre
    _check(textgym.wrap(gym.make(env_id)))


def test_an_unparsable_continuous_answer_follows_the_invalid_policy():
    env = textgym.wrap(gym.make("Pendulum-v1"), invalid_policy="terminate", invalid_penalty=-5.0)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("spin it")
    assert (reward, terminated, info["parse"]["policy"]) == (-5.0, True, "terminate")
    env = ParseAction(gym.make("Pendulum-v1"), default_action="2", invalid_policy="default")
    env.reset(seed=0)
    assert env.step("?")[4]["parse"]["action"] == [2.0]


# ------------------------------------------------------------------ MiniGrid / BabyAI

def _view(**cells):
    image = np.zeros((7, 7, 3), dtype=np.uint8)
    image[:, :, 0] = 1
    for (x, y), value in cells.items():
        image[x, y] = value
    return image


def test_minigrid_renderer_says_what_the_agent_sees_relative_to_it():
    from textgym.envs.minigrid_text import MiniGridText

    render = MiniGridText()
    view = _view()
    view[2, 4] = (6, 0, 0)          # a red ball: 2 forward, 1 left
    view[4, 5] = (4, 4, 2)          # a locked yellow door: 1 forward, 1 right
    view[3, 2] = (2, 5, 0)          # a wall 4 ahead (nearer than the next one)
    view[3, 1] = (2, 5, 0)
    view[6, 6] = (2, 5, 0)          # a wall 3 right
    view[0, 0] = (8, 1, 0)          # the goal: 6 forward, 3 left
    view[3, 6] = (5, 2, 0)          # the agent carries a blue key
    text = render({"image": view, "direction": 1, "mission": "open the yellow door"})
    assert text == ("Mission: open the yellow door.\n"
                    "You see a locked yellow door 1 step forward and 1 step right, "
                    "a red ball 2 steps forward and 1 step left, the goal 6 steps forward and 3 steps left, "
                    "a wall 3 steps right, a wall 4 steps forward.\n"
                    "You carry a blue key.")
    view = _view()
    view[3, 5] = (4, 0, 0)
    assert render({"image": view, "direction": 0, "mission": "go"}) == \
        "Mission: go.\nYou see an open red door 1 step forward."
    assert render({"image": _view(), "direction": 0, "mission": "x"}).endswith("You see nothing.")


def test_minigrid_family_plays_with_minigrids_own_action_names():
    pytest.importorskip("minigrid")
    env = textgym.make("minigrid/MiniGrid-Empty-5x5-v0")
    obs, info = env.reset(seed=0)
    assert info["valid_actions"] == ["left", "right", "forward", "pickup", "drop", "toggle", "done"]
    assert obs.startswith("Mission: get to the green goal square.\nYou see ") and "array" not in obs
    assert "the goal" in obs or "wall" in obs
    # Empty-5x5 from seed 0: the agent faces the goal's row; forward, forward, right, forward, forward
    for answer in ("forward", "forward", "right", "forward"):
        _, reward, terminated, _, _ = env.step(answer)
        assert not terminated
    _, reward, terminated, _, info = env.step('{"action": "forward"}')
    assert terminated and reward > 0.5 and info["episode"]["return"] == reward
    # the renderer also serves a plain textgym.wrap of a MiniGrid env
    import minigrid  # noqa: F401

    wrapped = textgym.wrap(gym.make("BabyAI-GoToRedBall-v0"))
    assert wrapped.reset(seed=1)[0].startswith("Mission: go to the red ball.")
    _check(textgym.make("minigrid/BabyAI-GoToRedBall-v0"))


def test_minigrid_shaping_credits_each_step_toward_the_missions_object():
    pytest.importorskip("minigrid")
    from textgym.registry import reference_policy

    # Empty-5x5 from seed 0: the goal 4 steps away on a 5 + 5 grid; the turn moves no closer
    env = textgym.make("minigrid/MiniGrid-Empty-5x5-v0", shaping=2.0)
    env.reset(seed=0)
    terms, rewards = [], []
    for answer in ("forward", "forward", "right", "forward", "forward"):
        _, reward, terminated, _, info = env.step(answer)
        terms.append(info["reward_terms"]["distance"])
        rewards.append(reward)
    assert terminated and terms == pytest.approx([0.2, 0.2, 0.0, 0.2, 0.2])
    plain = textgym.make("minigrid/MiniGrid-Empty-5x5-v0")
    plain.reset(seed=0)
    env_rewards = [plain.step(answer)[1] for answer in ("forward", "forward", "right", "forward", "forward")]
    assert rewards == pytest.approx([r + t for r, t in zip(env_rewards, terms)])
    # BabyAI: next to the ball named by the mission; the bot's episode ends there, so its terms
    # add up to the weight times the steps it started from, over width + height
    env = textgym.make("minigrid/BabyAI-GoToRedBallNoDists-v0", shaping=1.0)
    bot = reference_policy("minigrid/BabyAI-GoToRedBallNoDists-v0", "scripted")(env, 3)
    _, info = env.reset(seed=3)
    level = env.unwrapped
    (bx, by), (ax, ay) = level.instrs.desc.obj_poss[0], level.agent_pos
    start = abs(bx - ax) + abs(by - ay) - 1
    total, terminated = 0.0, False
    while not terminated:
        _, reward, terminated, truncated, info = env.step(bot(info))
        total += info["reward_terms"]["distance"]
        assert not truncated
    assert start > 0 and total == pytest.approx(start / (level.grid.width + level.grid.height))
    # a mission that names no one object to reach, on a grid without a goal square: said at reset
    with pytest.raises(ValueError, match="names no one object"):
        textgym.make("minigrid/BabyAI-PutNextLocal-v0", shaping=1.0).reset(seed=0)
    with pytest.raises(ValueError, match="shaping must be >= 0"):
        textgym.make("minigrid/MiniGrid-Empty-5x5-v0", shaping=-1.0)


def test_babyai_levels_have_minigrids_bot_as_their_scripted_player():
    pytest.importorskip("minigrid")
    from textgym.baselines import evaluate_baseline
    from textgym.registry import reference_policy

    env = textgym.make("minigrid/BabyAI-GoToRedBallNoDists-v0")
    scripted = evaluate_baseline(env, "scripted", episodes=20, seed=0)
    random = evaluate_baseline(env, "random", episodes=20, seed=0)
    # the bot reaches the ball every time, in a few steps; a random walk rarely does
    assert scripted["return_mean"] > 0.85 and scripted["length_mean"] < 10
    assert random["return_mean"] < 0.5 < scripted["return_mean"] - random["return_mean"]
    assert reference_policy("minigrid/MiniGrid-Empty-5x5-v0", "scripted") is None  # not a BabyAI level
    # BabyAI levels train from the bot's play by default; other MiniGrid ids have no bot to imitate
    from textgym.registry import training_defaults

    assert training_defaults("minigrid/BabyAI-GoToRedBallNoDists-v0").sft_player == "scripted"
    assert training_defaults("minigrid/MiniGrid-Empty-5x5-v0").sft_player is None


# ------------------------------------------------------------------ reasoning-gym

EASY = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def test_reasoning_gym_one_item_per_episode_scored_by_the_dataset():
    pytest.importorskip("reasoning_gym")
    env = textgym.make("reasoning_gym/basic_arithmetic", **EASY)
    obs, info = env.reset(seed=3)
    assert obs.startswith("Calculate ") and info["valid_actions"] == []
    assert "<answer>" in info["system_prompt"]
    _, reward, terminated, _, info = env.step("<answer>not a number</answer>")
    answer = info["answer"]
    assert (reward, terminated) == (0.0, True) and answer not in ("", None)
    again, _ = env.reset(seed=3)
    assert again == obs                                           # the same seed, the same item
    _, reward, terminated, _, info = env.step(f"<answer>{answer}")     # a policy stopped at </answer>
    assert reward == 1.0 and info["parse"]["valid"] is True and info["episode"]["return"] == 1.0
    # training seeds (10_000_000 + ...) and held-out seeds (1_000_000 + ...) draw different items
    train = {env.reset(seed=10_000_000 + i)[0] for i in range(20)}
    held_out = {env.reset(seed=1_000_000 + i)[0] for i in range(20)}
    assert len(train | held_out) > 30
    _check(textgym.make("reasoning_gym/basic_arithmetic", **EASY))


def test_reasoning_gym_config_and_curriculum_change_the_items():
    pytest.importorskip("reasoning_gym")
    long_sums = textgym.make("reasoning_gym/basic_arithmetic", min_terms=5, max_terms=5,
                             min_digits=1, max_digits=1)
    assert len(re.findall(r"\d+", long_sums.reset(seed=0)[0])) == 5
    env = textgym.make("reasoning_gym/basic_arithmetic", level=0)
    easy = [len(env.reset(seed=s)[0]) for s in range(10)]
    env.unwrapped.set_level(3)
    hard = [len(env.reset(seed=s)[0]) for s in range(10)]
    assert sum(hard) > sum(easy)
    assert len(env.reset(seed=0, options={"level": 0})[0]) == easy[0]
    with pytest.raises(TypeError, match="no config field"):
        textgym.make("reasoning_gym/basic_arithmetic", difficulty=3)


def test_reasoning_gym_finite_answer_sets_hold_every_answer_and_make_score_mode_work():
    reasoning_gym = pytest.importorskip("reasoning_gym")
    from textgym.envs.reasoning import ANSWER_SETS, answer_set

    for dataset in ANSWER_SETS:
        answers = {str(item["answer"]) for item in reasoning_gym.create_dataset(dataset, seed=7, size=30)}
        assert answers <= set(answer_set(dataset)), (dataset, answers - set(answer_set(dataset)))
    env = textgym.make("reasoning_gym/family_relationships")
    _, info = env.reset(seed=3)
    assert len(info["valid_actions"]) == 16 and "grandmother" in info["valid_actions"]
    _, _, _, _, end = env.step(info["valid_actions"][0])
    right = end["answer"]
    env.reset(seed=3)
    _, reward, terminated, _, end = env.step(right)        # score mode answers with the candidate itself
    assert reward == 1.0 and terminated and end["parse"]["valid"] and end["parse"]["parser"] == "candidate"
    assert textgym.make("reasoning_gym/basic_arithmetic").reset(seed=0)[1]["valid_actions"] == []


def test_reasoning_gym_candidates_and_answer_formats():
    pytest.importorskip("reasoning_gym")
    env = textgym.make("reasoning_gym/basic_arithmetic", candidates=["1", "2"], **EASY)
    assert env.reset(seed=0)[1]["valid_actions"] == ["1", "2"]
    think = textgym.make("reasoning_gym/basic_arithmetic", answer_format="think", **EASY)
    assert "step-by-step" in think.reset(seed=0)[1]["system_prompt"]
    with pytest.raises(ValueError, match="answer_format='json'"):
        textgym.make("reasoning_gym/basic_arithmetic", answer_format="json")


# ------------------------------------------------------------------ TextArena

def test_textarena_single_player_game_gives_its_reward_at_the_end():
    pytest.importorskip("textarena")
    env = textgym.make("textarena/GuessTheNumber-v0")
    obs, info = env.reset(seed=0)
    # the game does not list its moves: textgym knows them (score mode), the guessed ones dropped
    assert "Guess The Number" in obs and info["valid_actions"] == [f"[{n}]" for n in range(1, 21)]
    low, high, reward, terminated, guessed = 1, 20, 0.0, False, set()
    while not terminated:            # bisection with the game's own hints
        guess = (low + high) // 2
        obs, reward, terminated, _, info = env.step(f"My guess: [{guess}]")
        assert info["parse"]["valid"] is True
        guessed.add(f"[{guess}]")
        if not terminated:
            assert set(info["valid_actions"]) == {f"[{n}]" for n in range(1, 21)} - guessed
        last = obs.rsplit("[GAME]", 1)[1]
        if "higher" in last:
            low = guess + 1
        elif "lower" in last:
            high = guess - 1
    assert reward == 1.0 and info["episode"]["length"] <= 5 and info["outcome"] == "win"
    obs, info = env.reset(seed=0)
    _, _, terminated, _, info = env.step("no brackets at all")
    assert info["parse"]["valid"] is False and not terminated
    _, _, terminated, _, info = env.step("still none")     # the game ends it: still counted invalid
    assert terminated and info["parse"]["valid"] is False and info["parse"]["invalid_count"] == 2
    assert info["outcome"] == "loss"


@pytest.mark.parametrize(("text", "moves"), [
    ("[GAME] Board\nAvailable Moves: '[0]', '[4]', '[8]'", ["[0]", "[4]", "[8]"]),          # TicTacToe
    ("[GAME] Available Actions: [up], [down], [left], [right]", ["[up]", "[down]", "[left]", "[right]"]),
    ("[GAME] You control snake 0. Valid moves: '[up]'/'[down]' (or w/s).", ["[up]", "[down]"]),
    ("[GAME] Your possible actions: '[check]', '[bet]'", ["[check]", "[bet]"]),
    ("[GAME] Rules. Valid moves: [Up], [Down].\n[GAME] Board 2 4", ["[Up]", "[Down]"]),    # listed once, in the rules
    ("[GAME] Moves: Available Moves: '[0]'\n[GAME] Now Available Moves: '[3]', '[5]'", ["[3]", "[5]"]),  # the newest
    ("[GAME] Submit your code as '[2 1 4 5]'.", []),                   # one format example, not a list
    ("[GAME] Invalid moves (wrong format) will result in warnings: '[X]'", []),
    ("[GAME] Play '[rock]', '[paper]' or '[scissors]'.", ["[rock]", "[paper]", "[scissors]"]),
])
def test_textarena_listed_moves_are_the_games_announced_moves(text, moves):
    from textgym.envs.textarena_games import listed_moves

    assert listed_moves(text) == moves


def test_textarena_games_that_list_moves_unquoted_play_in_score_mode():
    pytest.importorskip("textarena")
    env = textgym.make("textarena/FrozenLake-v0")
    _, info = env.reset(seed=0)
    assert info["valid_actions"][:4] == ["[up]", "[down]", "[left]", "[right]"]
    _, _, _, _, info = env.step("[right]")
    assert info["parse"]["valid"] is True and "[down]" in info["valid_actions"]


def test_textarena_two_player_game_against_a_random_opponent():
    pytest.importorskip("textarena")
    env = textgym.make("textarena/TicTacToe-v0", seat="second")
    _, info = env.reset(seed=1)
    assert info["seat"] == "second" and len(info["valid_actions"]) == 8     # the opponent moved first
    rng = np.random.default_rng(0)
    terminated = False
    while not terminated:
        _, reward, terminated, _, info = env.step(str(rng.choice(info["valid_actions"])))
        assert info["parse"]["valid"] is True
    assert reward in (-1.0, 0.0, 1.0)
    assert info["outcome"] == {1.0: "win", 0.0: "draw", -1.0: "loss"}[reward]
    first = textgym.make("textarena/TicTacToe-v0", seat="first")
    assert len(first.reset(seed=1)[1]["valid_actions"]) == 9
    replay = textgym.make("textarena/TicTacToe-v0", seat="second")
    assert replay.reset(seed=1)[0] == env.reset(seed=1)[0]                  # a seed replays the game
    _check(textgym.make("textarena/TicTacToe-v0"))


def test_textarena_game_needing_a_download_fails_with_one_line():
    pytest.importorskip("textarena")
    nltk = pytest.importorskip("nltk")
    try:
        nltk.data.find("corpora/words")
        pytest.skip("the NLTK words corpus is installed here: Wordle needs no download")
    except LookupError:
        pass
    # In a fresh process: nltk binds its download messages to the sys.stderr of its first import,
    # which inside this test session may be an earlier test's closed capture stream.
    code = ("import textgym\n"
            "try:\n    textgym.make('textarena/Wordle-v0')\n"
            "except RuntimeError as error:\n    print(error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and "unavailable offline: needs the NLTK data" in lines[0], result.stdout
    assert "nltk_data" not in result.stderr


def test_the_random_baseline_on_free_text_envs_is_one_clear_line_or_a_random_candidate(tmp_path):
    pytest.importorskip("reasoning_gym")
    from textgym.cli.main import app
    from typer.testing import CliRunner

    from textgym.baselines import BaselineNotApplicable, evaluate_baseline

    env = textgym.make("reasoning_gym/basic_arithmetic")
    with pytest.raises(BaselineNotApplicable, match=r"^reasoning_gym/basic_arithmetic: the random baseline "
                                                    r".*free-text answers; no baseline applies to it$"):
        evaluate_baseline(env, "random", episodes=2)
    result = CliRunner().invoke(app, ["eval", "reasoning_gym/basic_arithmetic", "--baseline", "random",
                                      "--episodes", "2"])
    lines = result.output.strip().splitlines()
    assert result.exit_code != 0 and len(lines) == 1 and "no baseline applies" in lines[0], result.output
    # with a finite answer set (candidates, from eval's --config), random picks one of them
    config = tmp_path / "add.toml"
    config.write_text('[env_kwargs]\nmin_terms = 2\nmax_terms = 2\nmax_digits = 1\noperators = ["+"]\n'
                      'allow_negation = false\ncandidates = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", '
                      '"10", "11", "12", "13", "14", "15", "16", "17", "18"]\n')
    result = CliRunner().invoke(app, ["eval", "reasoning_gym/basic_arithmetic", "--config", str(config),
                                      "--baseline", "random", "--episodes", "40", "--json"])
    assert result.exit_code == 0, result.output
    random = json.loads(result.stdout)["results"]["random"]
    assert random["invalid_rate"] == 0.0 and 0.0 <= random["return_mean"] < 0.5


def test_textarena_two_player_game_against_scripted_and_policy_opponents(tiny_policy):
    pytest.importorskip("textarena")
    with pytest.raises(ValueError, match="has no scripted player; games with one: TicTacToe"):
        textgym.make("textarena/Nim-v0", opponent="scripted")
    with pytest.raises(ValueError, match="opponent='best'"):
        textgym.make("textarena/TicTacToe-v0", opponent="best")
    # the scripted player takes the centre, then blocks the learner's line 0-1-2
    env = textgym.make("textarena/TicTacToe-v0", opponent="scripted", seat="first")
    env.reset(seed=0)
    _, _, _, _, info = env.step("[0]")
    assert "[4]" not in info["valid_actions"] and len(info["valid_actions"]) == 7
    _, _, _, _, info = env.step("[1]")
    assert "[2]" not in info["valid_actions"] and len(info["valid_actions"]) == 5
    # self-play: the learner's own policy in the other seat (a frozen copy in training)
    calls = []

    class Recording:
        def act(self, observations, system_prompts, valid_actions):
            calls.append(valid_actions[0])
            return tiny_policy.act(observations, system_prompts, valid_actions, greedy=True)

    env = textgym.make("textarena/TicTacToe-v0", opponent=Recording(), seat="second")
    obs, info = env.reset(seed=0)
    system_prompt, terminated = info["system_prompt"], False
    while not terminated:
        answer = tiny_policy.act([obs], [system_prompt], [info["valid_actions"]], greedy=True)[0].text
        obs, reward, terminated, _, info = env.step(answer)
        assert info["parse"]["valid"] is True
    assert calls and len(calls[0]) == 9 and reward in (-1.0, 0.0, 1.0)


def test_a_family_env_that_raises_mid_episode_is_one_line_naming_the_id_and_seed(tiny_policy):
    from faultenvs import FaultyTextEnv

    from textgym.rollout import EnvError

    registry.register_family("faultfam", lambda name, max_episode_steps=None: FaultyTextEnv("raise", raise_at=2),
                             lambda: ["Raise-v0"])
    try:
        venv = textgym.make_vec("faultfam/Raise-v0", num_envs=1)
        with pytest.raises(EnvError) as error:
            textgym.collect(tiny_policy, venv, episodes=2, seed=7)
        message = str(error.value)
        assert "\n" not in message and message.startswith("env faultfam/Raise-v0 raised RuntimeError")
        assert "at step 2 of the episode with seed 7" in message
    finally:
        _drop_family("faultfam")
