"""textgym/TextWorld-v0: generated games, walkthrough wins, the text-env contract, bad answers."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("textworld")

from gymnasium.utils.env_checker import check_env

from textgym.envs import textworld as tw

GEN = dict(world_size=2, nb_objects=3, quest_length=2)
POOL = 3  # games generated once per session (~3 s each)


@pytest.fixture(scope="session")
def game_dir(tmp_path_factory):
    """A pool of small generated games, made once per test session."""
    folder = tmp_path_factory.mktemp("tw_games")
    for seed in range(POOL):
        tw.generate_game(seed, cache_dir=folder, **GEN)
    return folder


def make(game_dir, **kwargs):
    return tw.make_textworld(**GEN, games=POOL, cache_dir=game_dir, **kwargs)


def test_walkthrough_wins_every_generated_game(game_dir):
    env = make(game_dir)
    played = set()
    for seed in range(12):
        obs, info = env.reset(seed=seed)
        if info["game_file"] in played:
            continue
        played.add(info["game_file"])
        commands = env.unwrapped.walkthrough
        assert commands, "a generated game stores its walkthrough"
        total = 0.0
        for i, command in enumerate(commands):
            assert command in info["valid_actions"], (command, info["valid_actions"])
            # answers in the forms a model gives them
            answer = [f'{{"action": "{command}"}}', f"Action: {command}", f"I will {command}."][i % 3]
            obs, reward, terminated, truncated, info = env.step(answer)
            assert info["parse"]["valid"] and info["parse"]["action"] == command
            total += reward
        assert terminated and not truncated
        assert info["won"] and not info["lost"]
        assert total == info["max_score"] > 0
        assert info["episode"]["return"] == total
        assert "*** The End ***" in obs and "RESTART" not in obs
    assert len(played) == POOL


def test_same_seed_same_game_and_cache_on_disk(game_dir, tmp_path, monkeypatch):
    a, b = make(game_dir), make(game_dir)
    obs_a, info_a = a.reset(seed=7)
    obs_b, info_b = b.reset(seed=7)
    assert obs_a == obs_b and info_a["game_file"] == info_b["game_file"]
    assert info_a["system_prompt"] == info_b["system_prompt"]
    # generate_game returns the cached file without regenerating (same file, same bytes; its
    # modification time marks it as recently used)
    path = tw.generate_game(0, cache_dir=game_dir, **GEN)
    before = (path.stat().st_ino, path.read_bytes())
    again = tw.generate_game(0, cache_dir=game_dir, **GEN)
    assert (again.stat().st_ino, again.read_bytes()) == before
    # the default cache lives under $TEXTGYM_HOME/textworld, keyed by the parameters
    monkeypatch.setenv("TEXTGYM_HOME", str(tmp_path))
    folder = tw._cache_dir(2, 3, 2, "house")
    assert folder.parent == tmp_path / "textworld" and folder.name.startswith("r2-o3-q2-house-")
    assert tw._cache_dir(2, 3, 3, "house") != folder


def test_the_cache_keeps_the_most_recently_used_games_only(game_dir, tmp_path):
    import os
    import shutil

    for seed in range(POOL):                       # a full cache: game 0 the oldest, then 1, 2
        for suffix in (".z8", ".json"):
            shutil.copy(game_dir / f"game_{seed}{suffix}", tmp_path)
        os.utime(tmp_path / f"game_{seed}.z8", (1_000_000 + seed,) * 2)
    (tmp_path / "notes.txt").write_text("mine")
    assert tw.generate_game(0, cache_dir=tmp_path, keep=POOL, **GEN) == tmp_path / "game_0.z8"  # used
    tw.generate_game(POOL, cache_dir=tmp_path, keep=POOL, **GEN)   # a new game: game 1 goes
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "game_0.json", "game_0.z8", "game_2.json", "game_2.z8", "game_3.json", "game_3.z8", "notes.txt"]
    with pytest.raises(ValueError, match="cache_games must be a positive int or None"):
        make(game_dir, cache_games=0)


def test_observation_is_clean_and_contract_holds(game_dir):
    env = make(game_dir)
    obs, info = env.reset(seed=0)
    assert "$$" not in obs and "\\$" not in obs       # no banner art
    assert not any(line.startswith(">") for line in obs.splitlines())   # no prompt/status line
    assert "-= " in obs                                 # the room title stays
    assert obs.endswith(".") and "Commands: " in obs
    assert info["valid_actions"] and all(isinstance(c, str) for c in info["valid_actions"])
    task = info["system_prompt"].split("Task: ", 1)[1]
    assert task == env.unwrapped.objective and len(task.split()) >= 4
    assert "TextWorld" not in task and "TextWorld" not in obs   # the greeting is trimmed away
    assert env.observation_space.contains(obs)
    obs, reward, terminated, truncated, info = env.step(info["valid_actions"][0])
    assert set(info["parse"]) >= {"raw", "action", "action_name", "parser", "valid", "invalid_count", "policy"}


def test_clean_feedback_strips_boilerplate():
    raw = ("\n\n   ________  ________\n  |        \\|        \\\n   \\$$$$$$$$| $$$$$$$$\n\n"
           "Welcome! Do the thing.\n\n-= Kitchen =-\nA kitchen.\n\n\n\n>    -= Kitchen =-0/1")
    assert tw.clean_feedback(raw) == "Welcome! Do the thing.\n\n-= Kitchen =-\nA kitchen."
    end = ("You win.\n\n*** The End ***\n\nWould you like to RESTART, RESTORE a saved game, QUIT or "
           "UNDO the last command?\n>   -= Kitchen =-1/2")
    assert tw.clean_feedback(end) == "You win.\n\n*** The End ***"


def test_clean_objective_keeps_the_instructions_only():
    assert tw.clean_objective("Hey, thanks for coming over to TextWorld! Please eat the carrot.") == \
        "Please eat the carrot."
    text = ("Welcome to TextWorld! Here is your task for today. First off, go south. "
            "Then, close the box within the study. That's it!")
    assert tw.clean_objective(text) == "First off, go south. Then, close the box within the study. That's it!"
    assert tw.clean_objective("Your objective is to close the safe.") == "Your objective is to close the safe."
    assert tw.clean_objective("Welcome to TextWorld!") == "Welcome to TextWorld!"   # nothing else: kept


def test_task_in_the_first_observation_when_not_in_the_system_prompt(game_dir):
    env = make(game_dir, task_in_system_prompt=False)
    obs, info = env.reset(seed=0)
    assert obs.startswith(env.unwrapped.objective + "\n\n-= ")
    assert "Task: " not in info["system_prompt"] and obs.count(env.unwrapped.objective) == 1


def test_check_env(game_dir):
    check_env(make(game_dir, max_episode_steps=5), skip_render_check=True)


BAD_ANSWERS = ["", "dance wildly", "\\q", "quit", "restart", "x" * 100_000, "\x00\x1b[31m",
               "ünïcödé 🤖", '{"action": 3.5}', '{"action": ["go north"]}', "\n\n\n", "undo"]


def test_bad_answers_never_crash_and_never_control_the_game(game_dir):
    env = make(game_dir, max_episode_steps=100)
    obs, info = env.reset(seed=1)
    valid = list(info["valid_actions"])
    for n, answer in enumerate(BAD_ANSWERS, start=1):
        obs, reward, terminated, truncated, info = env.step(answer)
        record = info["parse"]
        assert record["valid"] is False and record["policy"] == "penalty"
        assert record["invalid_count"] == n
        assert reward == pytest.approx(-0.1)            # the penalty, no score change
        assert not terminated and not truncated
        assert info["valid_actions"] == valid           # the game state did not move
        sent = record["action"]
        assert sent is None or (len(sent) <= 80 and "\\" not in sent)
        assert sent not in ("quit", "restart", "q", "undo")
    # a free-text command the game understands is sent as it is
    obs, reward, terminated, truncated, info = env.step("look")
    assert info["parse"]["valid"] and info["parse"]["action"] == "look"


CONTROL_IN_A_LATER_CLAUSE = [
    "wait then save", "wait then script", "wait then quit", "wait then restart",
    "look, transcript", "look. save", "inventory then restore", "wait THEN q", "then undo",
    "wait, superbrief", "look then wait then save game_0", "wait then y",
]


@pytest.mark.parametrize("policy", ["penalty", "default"])
def test_control_verbs_in_any_clause_are_never_sent(game_dir, tmp_path, monkeypatch, policy):
    """Free text is typed into the game, but never a clause the interpreter would run as a
    save/script/quit/restart...: nothing is written into the working directory and the game
    stays playable (no "Are you sure?" question waiting)."""
    monkeypatch.chdir(tmp_path)
    env = make(game_dir, invalid_policy=policy, max_episode_steps=100)
    obs, info = env.reset(seed=1)
    valid = list(info["valid_actions"])
    blocked = 0
    for answer in CONTROL_IN_A_LATER_CLAUSE:
        obs, reward, terminated, truncated, info = env.step(answer)
        record = info["parse"]
        if record["valid"]:      # the parser found an admissible command in it ("look"): only that is sent
            assert record["action"] in valid, answer
        else:
            assert record["action"] is None and "controls the game" in obs, answer
            blocked += 1
        assert not terminated and not truncated
        assert list(tmp_path.iterdir()) == [], answer
    assert blocked >= 8
    total = 0.0
    for command in env.unwrapped.walkthrough:          # the game still plays to a win
        obs, reward, terminated, truncated, info = env.step(command)
        assert info["parse"]["valid"], (command, obs)
        total += reward
    assert terminated and info["won"] and total == pytest.approx(info["max_score"])
    assert list(tmp_path.iterdir()) == []


def test_control_verb_finds_the_clauses_the_parser_runs():
    assert tw.control_verb("wait then save") == "save"
    assert tw.control_verb("take key, then restart") == "restart"
    assert tw.control_verb("look.quit") == "quit"
    assert tw.control_verb("open the save box") is None       # a noun, not a verb
    assert tw.control_verb("wait and save") is None           # "and" does not split commands
    assert tw.control_verb("go north") is None and tw.control_verb("") is None


class _Unprintable:
    def __str__(self):
        raise RuntimeError("no text here")


NON_TEXT = [None, 10 ** 5000, b"\xff\xfe go north", bytearray(b"look"), _Unprintable(), [1, 2],
            {"action": "look"}, 3.5, float("nan"), object()]


# The non-text answers that still carry a command (decoded bytes, an action dict) and the command
COMMAND_IN = {2: "go north", 3: "look", 6: "look"}
# each invalid-answer policy: its record's policy, reward and whether the episode ends
POLICY_OUTCOME = {"penalty": ("penalty", -0.1, False), "default": ("default", 0.0, False),
                  "retry": ("retry", 0.0, False), "terminate": ("terminate", -0.1, True)}


@pytest.mark.parametrize("policy", ["penalty", "default", "retry", "terminate"])
def test_non_text_answers_are_invalid_answers_never_exceptions(game_dir, policy):
    env = make(game_dir, invalid_policy=policy, max_retries=len(NON_TEXT), max_episode_steps=200)
    env.reset(seed=0)
    for n, answer in enumerate(NON_TEXT):
        obs, reward, terminated, truncated, info = env.step(answer)
        record = info["parse"]
        assert isinstance(obs, str) and isinstance(record["raw"], str)
        if n in COMMAND_IN:  # sent as the command it carries
            assert record["valid"] and record["action"] == COMMAND_IN[n] and reward == 0.0
        else:                # an invalid answer, handled as the policy says
            assert not record["valid"]
            assert (record["policy"], reward, terminated) == POLICY_OUTCOME[policy], (n, record)
        if policy == "terminate" and n not in COMMAND_IN:
            assert obs == "You gave up: that is not a command here."
        if terminated or truncated:
            env.reset(seed=0)


def test_retry_fallback_is_configurable(game_dir):
    env = make(game_dir, invalid_policy="retry", max_retries=1, retry_fallback="terminate",
               invalid_penalty=-0.5, feedback="No. Try: {valid_actions}")
    obs0, info = env.reset(seed=2)
    obs, reward, terminated, truncated, info = env.step("blah")
    assert info["feedback"].startswith("No. Try: ") and obs.endswith(info["feedback"])
    obs, reward, terminated, truncated, info = env.step("blah")
    assert terminated and reward == -0.5 and info["parse"]["policy"] == "terminate"


def test_retry_and_terminate_policies(game_dir):
    env = make(game_dir, invalid_policy="retry", max_retries=1)
    obs0, info = env.reset(seed=2)
    obs, reward, terminated, truncated, info = env.step("blah")
    assert info["parse"]["policy"] == "retry" and info["parse"]["action"] is None
    assert info["parse"]["retries"] == 1
    assert obs.startswith(obs0) and "Reply with one of" in obs and reward == 0.0
    obs, reward, terminated, truncated, info = env.step("blah")   # retries used up -> penalty
    assert info["parse"]["policy"] == "penalty" and reward == pytest.approx(-0.1)

    env = make(game_dir, invalid_policy="terminate", invalid_penalty=-1.0)
    env.reset(seed=2)
    obs, reward, terminated, truncated, info = env.step("blah")
    assert terminated and reward == -1.0 and info["parse"]["policy"] == "terminate"
    assert info["episode"]["invalid_count"] == 1

    def broken(text, names):
        raise ValueError("parser bug")

    env = make(game_dir, parser=broken)
    env.reset(seed=2)
    obs, reward, terminated, truncated, info = env.step("look")
    assert "parser bug" in info["parse"]["error"] and info["parse"]["valid"] is False
    assert info["parse"]["action"] == "look"            # sent as free text all the same


def test_truncation_at_step_limit(game_dir):
    env = make(game_dir, max_episode_steps=3)
    env.reset(seed=0)
    flags = [env.step("look")[3] for _ in range(3)]
    assert flags == [False, False, True]


def test_seeds_cover_the_pool_once_each(game_dir):
    """reset(seed=s) plays game s % pool, so seeds 0..pool-1 evaluate every game exactly once."""
    env = make(game_dir)
    files = [env.reset(seed=s)[1]["game_file"] for s in range(2 * POOL)]
    expected = [str(tw.generate_game(s % POOL, cache_dir=game_dir, **GEN)) for s in range(2 * POOL)]
    assert files == expected
    by_files = tw.make_textworld(game_files=game_dir)
    listed = by_files.unwrapped.game_files
    assert [by_files.reset(seed=s)[1]["game_file"] for s in range(POOL)] == listed
    # an unseeded reset still draws from the pool
    assert env.reset()[1]["game_file"] in expected


def test_game_files_folder_and_list(game_dir):
    env = tw.make_textworld(game_files=game_dir)
    files = env.unwrapped.game_files
    assert len(files) == POOL and all(f.endswith(".z8") for f in files)
    obs, info = env.reset(seed=0)
    assert info["game_file"] in files
    single = tw.make_textworld(game_files=[files[0]])
    _, info = single.reset(seed=5)
    assert info["game_file"] == files[0]
    with pytest.raises(FileNotFoundError, match="game file not found"):
        tw.TextWorldEnv(game_files=[str(game_dir / "missing.z8")])
    with pytest.raises(ValueError, match="no .z1-.z8 game files"):
        tw.TextWorldEnv(game_files=[])


def test_registered_id_makes_the_env(game_dir):
    import textgym

    tw.register_envs()
    env = textgym.make("textgym/TextWorld-v0", **GEN, games=POOL, cache_dir=str(game_dir),
                       max_episode_steps=4)
    obs, info = env.reset(seed=0)
    assert info["valid_actions"]
    truncated = False
    for _ in range(4):
        obs, reward, terminated, truncated, info = env.step("inventory")
    assert truncated and info["episode"]["length"] == 4


def test_import_does_not_load_textworld():
    code = ("import sys, textgym.envs.textworld, textgym.envs.pettingzoo, textgym.envs.games; "
            "print('textworld' in sys.modules, 'pettingzoo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_progress_reward_follows_the_walkthrough(game_dir):
    env = make(game_dir, progress_reward=0.5)
    obs, info = env.reset(seed=0)
    obs, reward, *_ , info = env.step("inventory")          # no progress
    assert info["progress"] == 0 and reward == 0.0
    total = 0.0
    for command in env.unwrapped.walkthrough:
        obs, reward, terminated, truncated, info = env.step(command)
        assert info["progress"] == 1
        total += reward
    assert terminated and total == pytest.approx(info["max_score"] + 0.5 * len(env.unwrapped.walkthrough))


def test_a_game_without_textworld_metadata_takes_typed_commands(game_dir, tmp_path):
    import shutil

    shutil.copy(game_dir / "game_0.z8", tmp_path / "lone.z8")       # no .json next to it
    env = tw.make_textworld(game_files=tmp_path)
    obs, info = env.reset(seed=0)
    assert info["valid_actions"] == [] and "Commands:" not in obs and "-= " in obs
    obs, reward, terminated, truncated, info = env.step("Inventory")
    assert info["parse"]["valid"] and info["parse"]["parser"] == "text"
    assert info["parse"]["action"] == "inventory" and reward == 0.0 and "carrying" in obs.lower()
    obs, reward, terminated, truncated, info = env.step("quit")
    assert info["parse"]["valid"] is False and info["parse"]["action"] is None


def test_scripted_reference_plays_the_walkthrough(game_dir):
    import textgym
    from textgym.baselines import evaluate_baseline

    env = textgym.make("textgym/TextWorld-v0", game_files=str(game_dir))
    result = evaluate_baseline(env, "scripted", episodes=POOL, seed=0)
    assert result["return_mean"] == 1.0 and result["invalid_rate"] == 0.0
    lengths = [len(tw.walkthrough(game_dir / f"game_{s}.z8")) for s in range(POOL)]
    assert result["length_mean"] == pytest.approx(sum(lengths) / POOL)


def test_gymnasium_tools_work_on_textworld(game_dir):
    import gymnasium as gym
    from gymnasium.envs.registration import EnvSpec

    import textgym

    env = textgym.make("textgym/TextWorld-v0", game_files=str(game_dir), render_mode="ansi",
                       invalid_policy="retry")
    obs, info = env.reset(seed=0)
    assert env.render() == obs
    obs, *_ = env.step("dance")                                  # a retry: the feedback is shown
    assert env.render() == obs and "Reply with one of" in obs
    rebuilt = gym.make(EnvSpec.from_json(env.spec.to_json()))
    assert str(rebuilt) == str(env) and env.spec.kwargs["max_episode_steps"] == 30
    assert rebuilt.reset(seed=1)[0] == env.reset(seed=1)[0]
    stats = gym.wrappers.RecordEpisodeStatistics(textgym.make("textgym/TextWorld-v0",
                                                              game_files=str(game_dir)),
                                                 stats_key="gym_episode")
    stats.reset(seed=0)
    for command in stats.unwrapped.walkthrough:
        *_, info = stats.step(command)
    assert info["gym_episode"]["r"] == info["episode"]["return"] == 1.0


def test_answer_formats_ask_for_a_command_and_type_the_one_given(game_dir):
    from textgym.wrappers.answer_format import ANSWER_FORMATS

    assert make(game_dir).reset(seed=0)[1]["system_prompt"].startswith(tw.SYSTEM_PROMPT)  # word: as before
    env = make(game_dir, answer_format="json")
    _, info = env.reset(seed=0)
    assert "in JSON: {\"action\": \"go north\"}." in info["system_prompt"]
    assert info["system_prompt"].count("Answer") == 1 and "Task:" in info["system_prompt"]
    command = info["valid_actions"][0]
    _, _, _, _, info = env.step(ANSWER_FORMATS["json"].prefill + command + '"')
    assert info["parse"]["valid"] and info["parse"]["action"] == command
    # a command the game does not list is typed as the answer gives it, not as raw JSON
    _, _, _, _, info = env.step('{"action": "dance wildly"')
    assert not info["parse"]["valid"] and info["parse"]["action"] == "dance wildly"
    env = make(game_dir, answer_format="think")
    env.reset(seed=1)
    _, _, _, _, info = env.step("I should look around first. <answer>look</answer>")
    assert info["parse"]["valid"] and info["parse"]["action"] == "look"
