"""wrap_pettingzoo (AEC and parallel), the board-game renderers, and the single-agent game views."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from gymnasium.utils.env_checker import check_env
from pettingzoo.classic import connect_four_v3, rps_v2, tictactoe_v3
from pettingzoo.test import api_test, parallel_api_test

import textgym
from textgym.baselines import evaluate_baseline, reference_policy_names
from textgym.envs import games
from textgym.envs.pettingzoo import wrap_pettingzoo

POLICIES = ["penalty", "default", "retry", "terminate"]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # api_test's advice about Box/Discrete spaces
        yield


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("make", [tictactoe_v3.env, connect_four_v3.env, rps_v2.env],
                         ids=["tictactoe", "connect_four", "rps"])
def test_aec_api_test_passes(make, policy):
    # api_test answers with random strings: every move is illegal, so this also drives the policy
    api_test(wrap_pettingzoo(make(), invalid_policy=policy), num_cycles=100)


@pytest.mark.parametrize("policy", ["penalty", "default", "terminate"])
def test_parallel_api_test_passes(policy):
    parallel_api_test(wrap_pettingzoo(rps_v2.parallel_env(), invalid_policy=policy), num_cycles=50)


def test_parallel_retry_is_a_clear_error():
    with pytest.raises(ValueError, match="needs turns"):
        wrap_pettingzoo(rps_v2.parallel_env(), invalid_policy="retry")
    with pytest.raises(ValueError, match="choose one of"):
        wrap_pettingzoo(tictactoe_v3.env(), invalid_policy="ignore")
    with pytest.raises(TypeError, match="AECEnv or ParallelEnv"):
        wrap_pettingzoo(object())


def test_tictactoe_text_and_parsing():
    env = textgym.wrap_pettingzoo(tictactoe_v3.env())
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.last()
    assert obs["text"].splitlines()[0] == " 1 | 2 | 3"
    assert info["valid_actions"] == [str(n) for n in range(1, 10)]
    assert "tic-tac-toe" in info["system_prompt"] and "You are X. Your move." in obs["text"]
    first_prompt = info["system_prompt"]
    env.step('{"action": "3"}')                         # top right
    record = env.infos["player_1"]["parse"]
    assert record == {"raw": '{"action": "3"}', "action": 6, "action_name": "3", "parser": "json",
                      "valid": True, "invalid_count": 0, "policy": None, "retries": 0}
    obs, *_ , info = env.last()
    assert env.agent_selection == "player_2"
    assert obs["text"].splitlines()[0] == " 1 | 2 | X"
    assert "You are O. Your move." in obs["text"] and "3" not in info["valid_actions"]
    assert info["system_prompt"] == first_prompt   # one shared prefix for both seats
    env.step("Action: 7")
    obs, *_ = env.last()
    assert obs["text"].splitlines()[4] == " O | 8 | 9"


def test_connect_four_and_rps_text():
    env = wrap_pettingzoo(connect_four_v3.env())
    env.reset(seed=0)
    env.step("4")
    obs, *_ = env.last()
    lines = obs["text"].splitlines()
    assert lines[0] == "1 2 3 4 5 6 7" and lines[6] == ". . . X . . ."
    assert lines[-1] == "You are O. Your move. Open columns: 1, 2, 3, 4, 5, 6, 7."

    par = wrap_pettingzoo(rps_v2.parallel_env(max_cycles=2))
    obs, infos = par.reset(seed=0)
    assert obs["player_0"]["text"] == "Round 1. Your move: ROCK, PAPER, SCISSORS."
    obs, rewards, terms, truncs, infos = par.step({"player_0": "paper", "player_1": '{"move": "ROCK"}'})
    assert rewards == {"player_0": 1.0, "player_1": -1.0}
    assert obs["player_0"]["text"].startswith("Round 2. Your opponent last played ROCK.")
    assert infos["player_1"]["parse"]["parser"] == "json"


def test_illegal_moves_never_crash_and_follow_the_policy():
    bad = ["", "5", "banana", "\x00" * 10, "x" * 100_000, '{"action": 99}', "🤖", None, 5]
    rng = np.random.default_rng(0)
    for policy in POLICIES:
        for seed in range(3):
            env = wrap_pettingzoo(tictactoe_v3.env(), invalid_policy=policy, invalid_penalty=-0.5)
            env.reset(seed=seed)
            env.step("5")                                        # now "5" is taken
            for agent in env.agent_iter(200):
                obs, reward, terminated, truncated, info = env.last()
                if terminated or truncated:
                    env.step(None)
                    continue
                answer = bad[int(rng.integers(len(bad)))] if rng.random() < 0.5 else \
                    str(rng.choice(info["valid_actions"]))
                before = env.game_returns[agent]
                env.step(answer)
                record = env.infos.get(agent, {}).get("parse") or env._last_parse[agent]
                if answer is None or answer not in info["valid_actions"]:
                    allowed = ("retry", "penalty") if policy == "retry" else (policy,)  # retry falls back
                    assert record["valid"] is False and record["policy"] in allowed
                    if record["policy"] == "penalty":       # a random legal move was played, plus the penalty
                        assert record["action"] is not None
                        game_reward = env.game_returns[agent] - before
                        assert env.rewards[agent] == pytest.approx(-0.5 + game_reward)
                    if policy == "terminate":
                        assert all(env.terminations.values()) and env.rewards[agent] == -0.5
                else:
                    assert record["valid"] is True and record["action_name"] == answer
            assert not env.agents                                    # every game finished


def test_retry_keeps_the_turn_then_falls_back():
    env = wrap_pettingzoo(tictactoe_v3.env(), invalid_policy="retry", max_retries=2, invalid_penalty=-0.25)
    env.reset(seed=0)
    for attempt in (1, 2):
        env.step("no idea")
        assert env.agent_selection == "player_1"
        obs, reward, *_ , info = env.last()
        assert obs["text"].startswith("'no idea' is not a legal move. Legal moves: 1, 2, 3")
        assert info["parse"]["policy"] == "retry" and reward == 0.0
        assert info["parse"]["retries"] == attempt
    env.step("no idea")                       # third in a row: penalty, a random legal move
    assert env.agent_selection == "player_2"
    assert env.infos["player_1"]["parse"]["policy"] == "penalty"
    assert env.rewards["player_1"] == -0.25
    obs, reward, *_ = env.last()
    assert "is not a legal move" not in obs["text"]


def test_terminate_ends_the_game_as_a_forfeit():
    env = wrap_pettingzoo(tictactoe_v3.env(), invalid_policy="terminate", invalid_penalty=-1.0)
    env.reset(seed=0)
    env.step("5")
    env.step("5")                             # player_2 names a taken square
    assert all(env.terminations.values())
    assert env.rewards == {"player_1": 0.0, "player_2": -1.0}
    assert env.outcome("player_2") == "loss" and env.outcome("player_1") == "win"
    for agent in env.agent_iter():
        env.step(None)
    assert env.agents == []


def test_a_raising_user_parser_counts_as_unreadable():
    def broken(text, names):
        raise RuntimeError("parser bug")

    env = wrap_pettingzoo(tictactoe_v3.env(), parser=broken, invalid_policy="default")
    env.reset(seed=0)
    env.step("5")
    record = env.infos["player_1"]["parse"]
    assert record["valid"] is False and record["policy"] == "default"
    assert "parser bug" in record["error"] and record["action"] is not None


def test_generic_renderer_for_other_envs():
    from textgym.envs.pettingzoo import generic_text_game

    env = wrap_pettingzoo(tictactoe_v3.env(), game=generic_text_game("tictactoe"))
    env.reset(seed=0)
    obs, *_, info = env.last()
    assert obs["text"].startswith("Observation: [0,0,0,")
    assert info["valid_actions"] == [str(i) for i in range(9)]
    env.step("I play 4")
    assert env.infos["player_1"]["parse"]["action"] == 4
    api_test(env, num_cycles=20)


# -- single-agent views ----------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["textgym/TicTacToe-v0", "textgym/ConnectFour-v3"])
@pytest.mark.parametrize("opponent", ["random", "opportunist", "scripted", "callable"])
def test_views_pass_check_env(env_id, opponent):
    games.register_envs()
    opp = (lambda text, valid: valid[-1]) if opponent == "callable" else opponent
    env = textgym.make(env_id, opponent=opp)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert info["valid_actions"] and info["seat"] in ("first", "second")


def _play(env, seeds, rng):
    counts = {"win": 0, "draw": 0, "loss": 0}
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        terminated = truncated = False
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = env.step(str(rng.choice(info["valid_actions"])))
        counts[info["outcome"]] += 1
        assert reward == {"win": 1.0, "draw": 0.0, "loss": -1.0}[info["outcome"]]
        assert info["episode"]["return"] == reward
    return counts


def test_scripted_opponent_beats_random_play():
    rng = np.random.default_rng(0)
    vs_random = _play(games.make_tictactoe(opponent="random"), range(60), rng)
    vs_scripted = _play(games.make_tictactoe(opponent="scripted"), range(60), rng)
    # a random player wins often against a random opponent and almost never against the script
    assert vs_random["win"] >= 20
    assert vs_scripted["win"] <= 5 and vs_scripted["loss"] >= 45
    c4 = _play(games.make_connect_four(opponent="scripted"), range(10), rng)
    assert c4["loss"] >= 8


def _tictactoe_observation(mine, theirs):
    """A PettingZoo observation (cells column-major: cell = col * 3 + row)."""
    planes = np.zeros((3, 3, 2), np.int8)
    for c in mine:
        planes[c // 3, c % 3, 0] = 1
    for c in theirs:
        planes[c // 3, c % 3, 1] = 1
    mask = np.array([0 if c in mine or c in theirs else 1 for c in range(9)], np.int8)
    return {"observation": planes, "action_mask": mask}


def test_scripted_tictactoe_wins_and_blocks():
    obs = _tictactoe_observation
    rng = np.random.default_rng(0)
    assert games.scripted_tictactoe(obs([0, 1], [4, 8]), rng) == 2        # completes its column
    assert games.scripted_tictactoe(obs([0], [4, 5]), rng) == 3           # blocks the middle row
    assert games.scripted_tictactoe(obs([], []), rng) == 4                # takes the centre


def _connect_four_observation(mine, theirs):
    """A PettingZoo connect-four observation from (row, col) cells; row 5 is the bottom."""
    planes = np.zeros((6, 7, 2), np.int8)
    for plane, cells in ((0, mine), (1, theirs)):
        for row, col in cells:
            planes[row, col, plane] = 1
    mask = (planes[0].sum(1) == 0).astype(np.int8)
    return {"observation": planes, "action_mask": mask}


def test_the_opportunist_takes_every_win_and_otherwise_plays_at_random():
    rng = np.random.default_rng(0)
    # tic-tac-toe: its column 0-1-2 is open (and so is the opponent's middle row: no block)
    wins = {games.opportunist_move("tictactoe_v3", _tictactoe_observation([0, 1], [4, 5]), rng) for _ in range(50)}
    assert wins == {2}
    # two wins open (cell 2 and cell 8): both are drawn, nothing else
    two = _tictactoe_observation([0, 1, 4], [3, 5, 7])
    assert {games.opportunist_move("tictactoe_v3", two, rng) for _ in range(100)} == {2, 8}
    # no win: uniform over the free cells, threats of the other side ignored (no block)
    free = {games.opportunist_move("tictactoe_v3", _tictactoe_observation([0], [4, 5]), rng) for _ in range(300)}
    assert free == {1, 2, 3, 6, 7, 8}
    # connect four: three in the bottom row, the fourth column open
    c4 = _connect_four_observation([(5, 0), (5, 1), (5, 2)], [(4, 0), (4, 1), (4, 2)])
    assert {games.opportunist_move("connect_four_v3", c4, rng) for _ in range(50)} == {3}


def test_every_missed_block_loses_against_the_opportunist():
    """The same seeded games: a player that never blocks loses more to the opportunist than to
    random play, and the optimal player (the best response to the opportunist's known play) none."""
    never_blocks = lambda view: min(int(c) for c in np.flatnonzero(view.raw_observation()["action_mask"]))
    losses = {}
    for opponent in ("random", "opportunist"):
        env = textgym.make("textgym/TicTacToe-v0", opponent=opponent)
        view, outcomes = env.unwrapped, []
        for seed in range(100):
            env.reset(seed=seed)
            terminated = truncated = False
            while not (terminated or truncated):
                _, _, terminated, truncated, info = env.step(view.action_names[never_blocks(view)])
            outcomes.append(info["outcome"])
        losses[opponent] = outcomes.count("loss")
    assert losses["opportunist"] > losses["random"] + 10
    optimal = evaluate_baseline(textgym.make("textgym/TicTacToe-v0", opponent="opportunist"), "optimal", 200, seed=0)
    assert optimal["loss_rate"] == 0.0 and optimal["win_rate"] >= 0.9


def test_optimal_tictactoe_takes_a_win_and_is_deterministic():
    obs = _tictactoe_observation
    for opponent in ("random", "opportunist", "scripted", "unknown"):
        assert games.optimal_tictactoe(obs([0, 1], [4, 8]), opponent) == 2    # completes its column
        assert games.optimal_tictactoe(obs([0, 4], [1, 2]), opponent) == 8    # completes the diagonal
    assert games.optimal_tictactoe(obs([], []), "random") == games.optimal_tictactoe(obs([], []), "random")
    # against the worst case or a player who takes every win, a threat must be blocked
    assert games.optimal_tictactoe(obs([0], [4, 5]), "unknown") == 3
    assert games.optimal_tictactoe(obs([0], [4, 5]), "opportunist") == 3


@pytest.mark.parametrize("opponent", ["random", "opportunist", "scripted"])
def test_optimal_tictactoe_never_loses_and_outscores_the_scripted_player(opponent):
    """The best response to the opponent's known play, from both seats, on the same seeded games."""
    env = textgym.make("textgym/TicTacToe-v0", opponent=opponent)
    optimal = evaluate_baseline(env, "optimal", 200, seed=0)
    scripted = evaluate_baseline(env, "scripted", 200, seed=0)
    assert optimal["loss_rate"] == 0.0 and optimal["invalid_rate"] == 0.0
    assert optimal["return_mean"] > scripted["return_mean"]
    assert "optimal" in reference_policy_names("textgym/TicTacToe-v0")


def test_the_safe_best_response_to_random_play_never_loses_to_a_player_who_wins_and_blocks():
    """The best response to random play takes risks: against the scripted player it loses games
    that the safe one (only moves keeping the minimax value) draws, on the same seeded games."""
    env = textgym.make("textgym/TicTacToe-v0", opponent="scripted")
    view = env.unwrapped
    losses = {}
    for safe in (False, True):
        outcomes = []
        for seed in range(100):
            env.reset(seed=seed)
            terminated = truncated = False
            while not (terminated or truncated):
                move = games.optimal_tictactoe(view.raw_observation(), "random", safe=safe)
                _, _, terminated, truncated, info = env.step(view.action_names[move])
            outcomes.append(info["outcome"])
        losses[safe] = outcomes.count("loss")
    assert losses[True] == 0 and losses[False] > 10
    against_random = evaluate_baseline(textgym.make("textgym/TicTacToe-v0"), "safe", 200, seed=0)
    assert against_random["loss_rate"] == 0.0 and against_random["win_rate"] >= 0.9


def test_views_seat_policy_opponent_and_invalid_answers():
    calls = []

    class FakePolicy:                                  # textgym.Policy's act() signature
        def act(self, observations, system_prompts, valid_actions, greedy=False):
            calls.append((observations[0], system_prompts[0]))
            return [type("D", (), {"text": valid_actions[0][0]})()]

    env = games.TwoPlayerGameEnv("tictactoe", opponent=FakePolicy(), seat="second")
    obs, info = env.reset(seed=0)
    assert info["seat"] == "second" and len(info["valid_actions"]) == 8
    assert calls and "You are X. Your move." in calls[0][0]   # the opponent saw its own view
    assert calls[0][1] == info["system_prompt"]
    assert " X | 2 | 3" in obs                           # it took square 1
    obs, reward, terminated, truncated, info = env.step("I'd rather not play")
    assert info["parse"]["valid"] is False and info["parse"]["policy"] == "penalty"
    assert reward == -1.0 or terminated
    with pytest.raises(ValueError, match="seat"):
        games.TwoPlayerGameEnv("tictactoe", seat="middle")
    with pytest.raises(ValueError, match="opponent"):
        games.TwoPlayerGameEnv("tictactoe", opponent="genius")
    with pytest.raises(ValueError, match="unknown game"):
        games.TwoPlayerGameEnv("chess")


def test_training_and_evaluation_on_a_game_report_win_draw_loss_rates(tiny_policy):
    from textgym.trainers import make_trainer

    trainer = make_trainer("reinforce", tiny_policy, env="textgym/TicTacToe-v0",
                           config={"num_envs": 4, "episodes_per_update": 8, "lr": 1e-3})
    metrics = trainer.train(updates=1)[-1]
    rates = [metrics[f"{o}_rate"] for o in ("win", "draw", "loss")]
    assert sum(rates) == pytest.approx(1.0)
    # return is +1 win, -1 loss, 0 draw (the tiny model always answers a legal square in score mode)
    assert metrics["invalid_rate"] == 0.0
    assert metrics["return_mean"] == pytest.approx(metrics["win_rate"] - metrics["loss_rate"])
    evaluation = trainer.evaluate(episodes=6, num_envs=3)
    assert sum(evaluation[f"{o}_rate"] for o in ("win", "draw", "loss")) == pytest.approx(1.0)
    assert evaluation["return_mean"] == pytest.approx(evaluation["win_rate"] - evaluation["loss_rate"])


def test_envs_without_outcomes_report_no_win_rate(tiny_policy):
    from textgym.trainers import make_trainer

    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                           config={"num_envs": 4, "episodes_per_update": 4})
    assert "win_rate" not in trainer.train(updates=1)[-1]


# -- one invalid-answer vocabulary -------------------------------------------------------------


def test_views_take_the_invalid_answer_keywords_of_every_env():
    env = textgym.make("textgym/TicTacToe-v0", opponent="random", seat="first",
                       invalid_policy="retry", invalid_penalty=-0.5, max_retries=1,
                       retry_fallback="terminate", feedback="Nope. Legal: {valid_actions}")
    obs0, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("pass")
    assert info["parse"]["policy"] == "retry" and obs.startswith("Nope. Legal: 1, 2, 3")
    assert (reward, terminated) == (0.0, False)
    obs, reward, terminated, truncated, info = env.step("pass")   # retries used up: the fallback
    assert info["parse"]["policy"] == "terminate" and terminated and reward == -0.5
    assert info["outcome"] == "loss"


def test_old_invalid_and_penalty_names_warn_and_mean_the_same():
    with pytest.warns(DeprecationWarning, match="use invalid_policy="):
        old = wrap_pettingzoo(tictactoe_v3.env(), invalid="terminate", penalty=-0.5)
    assert old.rule == wrap_pettingzoo(tictactoe_v3.env(), invalid_policy="terminate",
                                       invalid_penalty=-0.5).rule
    with pytest.warns(DeprecationWarning, match="use invalid_penalty="):
        view = games.TwoPlayerGameEnv("tictactoe", penalty=-0.25)
    assert view.aec.rule.penalty == -0.25 and view.aec.rule.policy == "penalty"
    with pytest.raises(TypeError, match="give invalid_policy= only"):
        wrap_pettingzoo(tictactoe_v3.env(), invalid="default", invalid_policy="penalty")


def test_cumulative_reward_is_what_last_reports():
    env = wrap_pettingzoo(tictactoe_v3.env(), invalid_policy="penalty", invalid_penalty=-0.5)
    env.reset(seed=0)
    env.step("nonsense")                            # player_1: a random legal move and -0.5
    assert env.cumulative_reward("player_1") == -0.5
    for agent in ("player_2", "player_1"):
        assert env.cumulative_reward(agent) == env.last()[1]
        env.step(env.last()[4]["valid_actions"][0])


class _Unprintable:
    def __str__(self):
        raise RuntimeError("no text here")


NON_TEXT = [None, 10 ** 5000, b"\xff5", bytearray(b"5"), _Unprintable(), [1, 2], {"a": 1},
            float("nan"), object()]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("env_id", ["textgym/TicTacToe-v0", "textgym/ConnectFour-v3"])
def test_non_text_answers_are_invalid_answers_on_the_views(env_id, policy):
    env = textgym.make(env_id, opponent="scripted", invalid_policy=policy)
    env.reset(seed=0)
    for answer in NON_TEXT:
        obs, reward, terminated, truncated, info = env.step(answer)
        assert isinstance(obs, str) and isinstance(info["parse"]["raw"], str)
        if answer is None or isinstance(answer, (int, _Unprintable)):   # no text at all
            assert info["parse"]["valid"] is False and info["parse"]["policy"] in (policy, "penalty")
        # (other objects are read through str(), as ParseAction reads them: "[1, 2]" names square 1)
        if terminated or truncated:
            env.reset(seed=1)


@pytest.mark.parametrize("env_id", ["textgym/TicTacToe-v0", "textgym/ConnectFour-v3"])
def test_board_games_ask_for_the_answer_format_of_their_generate_defaults(env_id):
    from textgym.registry import training_defaults
    from textgym.wrappers.answer_format import ANSWER_FORMATS

    word = textgym.make(env_id).reset(seed=0)[1]["system_prompt"]
    assert word.endswith(".") and "Answer with the number of one" in word   # the word format, as before
    defaults = training_defaults(env_id, "generate")
    env = textgym.make(env_id, **defaults.env_kwargs)
    _, info = env.reset(seed=0)
    assert info["system_prompt"].endswith('in JSON: {"action": "1"}.')
    assert info["system_prompt"].count("Answer") == 1
    square = info["valid_actions"][-1]
    fmt = ANSWER_FORMATS["json"]
    _, _, _, _, info = env.step(defaults.policy["prefill"] + square + fmt.stop[0])
    assert info["parse"]["valid"] and info["parse"]["action_name"] == square
    # a renderer that states its own answer format takes only the word format
    from textgym.envs.pettingzoo import generic_text_game

    with pytest.raises(ValueError, match="states its own answer format"):
        wrap_pettingzoo(tictactoe_v3.env(), game=generic_text_game("tictactoe"), answer_format="json")
