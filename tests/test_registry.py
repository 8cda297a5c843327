"""Registry: gym.make after import, short names, close-match errors, metadata, register()."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

import textgym
from textgym import registry

SHORT_NAMES = {
    "cartpole": "textgym/CartPole-v1",
    "mountaincar": "textgym/MountainCar-v0",
    "acrobot": "textgym/Acrobot-v1",
    "blackjack": "textgym/Blackjack-v1",
    "frozenlake": "textgym/FrozenLake-v1",
    "taxi": "textgym/Taxi-v4",
    "cliffwalking": "textgym/CliffWalking-v1",
    "bandit": "textgym/Bandit-v0",
}


@pytest.fixture
def restore_registry():
    saved = [(table, dict(table)) for table in
             (gym.registry, registry._INFOS, registry._ORIGINS, registry._REFERENCES)]
    yield
    for table, content in saved:
        table.clear()
        table.update(content)


def test_gym_make_works_right_after_import_textgym_in_a_fresh_process():
    code = ("import gymnasium as gym, textgym, sys\n"
            "env = gym.make('textgym/CartPole-v1')\n"
            "obs, info = env.reset(seed=0)\n"
            "print(info['valid_actions'], obs.startswith('Pole '), 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['LEFT', 'RIGHT'] True False"


@pytest.mark.parametrize("short, full", sorted(SHORT_NAMES.items()))
def test_short_names_resolve_case_insensitively(short, full):
    assert registry.resolve_id(short) == full
    assert registry.resolve_id(short.upper()) == full
    assert registry.resolve_id(full.lower()) == full
    assert registry.resolve_id(full.split("/")[1].lower()) == full    # "cartpole-v1"


def test_exact_gymnasium_ids_stay_themselves():
    assert registry.resolve_id("CartPole-v1") == "CartPole-v1"
    assert registry.resolve_id("CartPole") == "textgym/CartPole-v1"  # a short name: the text env
    assert registry.resolve_id("Pendulum") == "Pendulum-v1"          # unversioned Gymnasium id: newest
    env = textgym.make("CartPole-v1", max_episode_steps=5)
    assert isinstance(env.reset(seed=0)[0], type(gym.make("CartPole-v1").reset(seed=0)[0]))
    assert env.spec.max_episode_steps == 5


def test_make_accepts_short_names():
    env = textgym.make("bandit")
    assert env.spec.id == "textgym/Bandit-v0"
    assert env.reset(seed=0)[1]["valid_actions"] == ["cat", "dog"]


@pytest.mark.parametrize("make", [textgym.make, lambda short: gym.make(registry.resolve_id(short))],
                         ids=["textgym.make", "gym.make"])
@pytest.mark.parametrize("short", ["cartpole", "bandit", "frozenlake"])
def test_a_failed_reset_leaves_the_env_working_after_the_next_reset(short, make):
    env, fresh = make(short), make(short)
    with pytest.raises(gym.error.Error, match="Seed must be greater or equal to zero"):
        env.reset(seed=-5)
    first = fresh.reset(seed=0)
    assert env.reset(seed=0) == first
    action = first[1]["valid_actions"][0]
    assert env.step(action)[:4] == fresh.step(action)[:4]


def test_unknown_id_names_close_matches():
    with pytest.raises(registry.UnknownEnvError) as error:
        textgym.make("textgym/CartPol-v1")
    assert "no env registered as 'textgym/CartPol-v1'" in str(error.value)
    assert "Did you mean: textgym/CartPole-v1" in str(error.value)
    assert isinstance(error.value, gym.error.Error)

    with pytest.raises(registry.UnknownEnvError, match="textgym/FrozenLake-v1"):
        registry.resolve_id("frozenlak")
    with pytest.raises(registry.UnknownEnvError, match=r"no env registered as 'zzzz'\. textgym"):
        textgym.make("zzzz")


def test_list_envs_reports_metadata():
    infos = {info.id: info for info in textgym.list_envs()}
    assert set(SHORT_NAMES.values()) <= set(infos)
    cartpole = infos["textgym/CartPole-v1"]
    assert cartpole.action_names == ("LEFT", "RIGHT")
    assert cartpole.source == "textgym" and cartpole.short_name == "cartpole"
    assert "pole" in cartpole.description.lower()
    assert infos["textgym/Taxi-v4"].action_names[-2:] == ("PICKUP", "DROPOFF")
    assert [info.id for info in textgym.list_envs()] == sorted(infos)


def test_register_keeps_metadata_and_passes_env_kwargs(restore_registry):
    textgym.register("mine/Colors-v0", "textgym.envs.bandit:make_bandit",
                     description="Four colors", action_names=["cat", "dog", "fox", "owl"],
                     num_cues=4, num_arms=4, kwargs={"max_episode_steps": None})
    info = {i.id: i for i in textgym.list_envs()}["mine/Colors-v0"]
    assert (info.source, info.description, info.short_name) == ("test_registry", "Four colors", "colors")
    env = textgym.make("mine/colors")
    assert env.reset(seed=0)[1]["valid_actions"] == ["cat", "dog", "fox", "owl"]
    assert gym.spec("mine/Colors-v0").kwargs == {"max_episode_steps": None, "num_cues": 4, "num_arms": 4}

    # The same source may register again (e.g. a re-run notebook cell): it replaces quietly.
    textgym.register("mine/Colors-v0", "textgym.envs.bandit:make_bandit", num_cues=2)
    assert gym.spec("mine/Colors-v0").kwargs == {"num_cues": 2}


def test_training_defaults_are_registered_with_the_env_per_mode(restore_registry):
    from textgym.registry import GENERIC_TRAINING_DEFAULTS, TrainingDefaults, training_defaults

    cartpole = training_defaults("cartpole")
    assert (cartpole.updates, cartpole.episodes, cartpole.minutes) == (12, None, None)  # no time budget
    assert (cartpole.until, cartpole.check_max_steps, cartpole.num_envs, cartpole.lr) == (195.0, 200, 8, 2e-4)
    assert cartpole.trainer["gamma"] == 0.3 and cartpole.env_kwargs == {"shaping": 1.0, "word": "heading"}
    info = {i.id: i for i in textgym.list_envs()}["textgym/CartPole-v1"]
    assert info.training_defaults.trainer == cartpole.trainer
    # a mode replaces what it names: Blackjack's KL penalty is for score mode only
    blackjack, generate = training_defaults("blackjack"), training_defaults("blackjack", "generate")
    assert (blackjack.updates, blackjack.sft_player, blackjack.trainer["kl_coef"]) == (0, "scripted", 0.2)
    assert generate.sft_player == "none"  # generate mode: REINFORCE from the untrained model
    assert (generate.updates, generate.trainer["kl_coef"], generate.trainer["entropy_coef"]) == (16, 0.0, 0.0)
    assert generate.trainer["episodes_per_update"] == blackjack.trainer["episodes_per_update"] == 64
    # an env that registered none gets the generic settings
    assert training_defaults("acrobot") == GENERIC_TRAINING_DEFAULTS
    assert {i.id for i in textgym.list_envs() if i.training_defaults is not None} >= {
        "textgym/CartPole-v1", "textgym/Bandit-v0", "textgym/Blackjack-v1",
        "textgym/TicTacToe-v0", "textgym/FrozenLake-v1"}

    mine = TrainingDefaults(lr=1e-3, trainer={"gamma": 0.9, "episodes_per_update": 8},
                            policy={"temperature": 1.0},
                            modes={"generate": {"lr": 1e-4, "trainer": {"gamma": 1.0},
                                                "policy": {"temperature": 0.7}}})
    textgym.register("mine/Colors-v0", "textgym.envs.bandit:make_bandit", training_defaults=mine)
    score = training_defaults("mine/Colors-v0", "score")
    generate = training_defaults("mine/Colors-v0", "generate")
    assert (score.lr, score.trainer["gamma"], score.updates) == (1e-3, 0.9, 8)   # unset: generic
    assert score.until is None                                                    # no early stop
    # a budget the env chose stays the only one
    textgym.register("mine/Colors-v2", "textgym.envs.bandit:make_bandit",
                     training_defaults=TrainingDefaults(episodes=64))
    assert (training_defaults("mine/Colors-v2").episodes, training_defaults("mine/Colors-v2").updates) == (64, None)
    assert (generate.lr, generate.trainer, generate.policy) == (
        1e-4, {"gamma": 1.0, "episodes_per_update": 8}, {"temperature": 0.7})
    assert generate.modes == {} and mine.trainer["gamma"] == 0.9       # the registered one is intact
    with pytest.raises(ValueError, match=r"mode 'generate' set unknown settings \['temprature'\]"):
        TrainingDefaults(modes={"generate": {"temprature": 0.5}})
    with pytest.raises(TypeError, match="training_defaults must be"):
        textgym.register("mine/Colors-v1", "textgym.envs.bandit:make_bandit",
                         training_defaults={"lr": 1e-3})


def test_an_algorithm_s_own_defaults_reach_only_its_runs():
    """reasoning-gym's score mode recommends REINFORCE on tree rollouts; the tree's fields are
    REINFORCE's, so a GRPO or PPO run gets the family's other settings and no error, and every
    registered entry is an algorithm whose config takes it."""
    from textgym.cli import training

    from textgym.envs.reasoning import SCORE_TREE_REINFORCE
    from textgym.registry import training_defaults
    from textgym.trainers import ALGORITHMS, config_for

    def resolved(**flags):
        cfg = training._new_config({}, {"env": "reasoning_gym/family_relationships", **flags}, None)
        return cfg, training._trainer_config(cfg)

    cfg, reinforce = resolved()  # score mode and REINFORCE: textgym train's defaults
    assert (cfg.mode, cfg.algo, cfg.updates, cfg.num_envs, reinforce.episodes_per_update) == (
        "score", "reinforce", 20, 32, 64)
    assert {name: getattr(reinforce, name) for name in SCORE_TREE_REINFORCE} == SCORE_TREE_REINFORCE
    for algo in ("grpo", "ppo"):
        cfg, other = resolved(algo=algo)
        assert not {"baseline", "branch_turns", "importance_floor", "clip_eps_high"} & set(cfg.trainer)
        assert other.episodes_per_update == 64 and other.importance_floor == 0.0
    _, generate = resolved(mode="generate")  # generate mode: no tree (no answer set to play out)
    assert generate.branch_turns == 0 and generate.episodes_per_update == 32
    assert resolved(trainer={"branch_turns": 0, "baseline": "batch"})[1].branch_turns == 0  # a given one wins
    for info in textgym.list_envs():
        for mode in ("score", "generate"):
            defaults = training_defaults(info.id, mode)
            for algo in defaults.algorithms:
                assert algo in ALGORITHMS, (info.id, algo)
                config_for(algo, dict(defaults.for_algorithm(algo).trainer))


def test_register_rejects_an_id_from_another_source(restore_registry):
    with pytest.raises(registry.DuplicateEnvError,
                       match=r"'textgym/Bandit-v0' is registered twice: first by package 'textgym', "
                             r"then by package 'someone'"):
        textgym.register("textgym/Bandit-v0", "textgym.envs.bandit:make_bandit", source="someone")
    with pytest.raises(registry.DuplicateEnvError, match="already in Gymnasium's registry"):
        textgym.register("CartPole-v1", "textgym.envs.classic:make_cartpole")
    assert gym.spec("CartPole-v1").entry_point.endswith("CartPoleEnv")


def test_make_vec_builds_independent_seeded_sub_envs():
    venv = textgym.make_vec("cartpole", num_envs=3, seed=10)
    assert isinstance(venv, textgym.TextVectorEnv) and venv.num_envs == 3
    obs, _ = venv.reset()
    expected = [textgym.make("textgym/CartPole-v1").reset(seed=10 + i)[0] for i in range(3)]
    assert obs == expected
    with pytest.raises(ValueError, match="num_envs"):
        textgym.make_vec("cartpole", num_envs=0)


def test_module_prefixed_id_imports_the_module_first():
    assert registry.resolve_id("textgym.envs.bandit:textgym/Bandit-v0") == "textgym/Bandit-v0"
    with pytest.raises(ModuleNotFoundError):
        registry.resolve_id("no_such_module_xyz:Foo-v0")
