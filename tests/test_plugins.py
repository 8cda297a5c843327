"""Entry-point plugins, proven with real throwaway distributions put on sys.path.

Each test writes packages plus ``<name>-1.0.dist-info`` folders (METADATA, entry_points.txt)
into a temporary folder, prepends it to ``sys.path`` and lets textgym find them through
``importlib.metadata``, exactly as it finds an installed package.
"""

from __future__ import annotations

import sys
import textwrap
import warnings

import gymnasium as gym
import pytest

import textgym
from textgym import registry

CARTPOLE = "gymnasium.envs.classic_control.cartpole:CartPoleEnv"


@pytest.fixture
def clean_registry(monkeypatch):
    """Restore textgym's and Gymnasium's registries, and forget plugin modules, after a test."""
    saved_gym = dict(gym.registry)
    saved = (dict(registry._INFOS), dict(registry._ORIGINS), set(registry._loaded_entry_points),
             dict(registry._REFERENCES))
    modules_before = set(sys.modules)
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    yield
    gym.registry.clear()
    gym.registry.update(saved_gym)
    targets = (registry._INFOS, registry._ORIGINS, registry._loaded_entry_points, registry._REFERENCES)
    for target, value in zip(targets, saved):
        target.clear()
        target.update(value)
    for name in set(sys.modules) - modules_before:
        if name.split(".")[0].endswith("plug"):
            del sys.modules[name]


def write_distribution(root, dist: str, entry_points: dict[str, str], modules: dict[str, str]):
    """A minimal installed distribution: its modules and a dist-info with its entry points."""
    for module, source in modules.items():
        package = root / module
        package.mkdir()
        (package / "__init__.py").write_text(textwrap.dedent(source))
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[textgym.envs]\n{lines}")


GOOD = f"""
    import textgym
    textgym.register("goodplug/Thing-v0", "{CARTPOLE}",
                     description="A plugin env", action_names=["LEFT", "RIGHT"])
"""

CALLABLE = f"""
    import textgym

    def register_envs():
        textgym.register("callplug/Other-v2", "{CARTPOLE}", description="Registered by a function")
"""


def test_module_and_callable_plugins_are_found_lazily_by_make_and_list(tmp_path, monkeypatch,
                                                                       clean_registry):
    write_distribution(tmp_path, "goodplug", {"good": "goodplug"}, {"goodplug": GOOD})
    write_distribution(tmp_path, "callplug", {"more": "callplug:register_envs"},
                       {"callplug": CALLABLE})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "goodplug/Thing-v0" not in gym.registry      # nothing loads before it is needed

    env = textgym.make("goodplug/Thing-v0")             # make triggers discovery
    assert env.unwrapped.__class__.__name__ == "CartPoleEnv"
    assert gym.make("callplug/Other-v2") is not None    # so plain gym.make works afterwards

    infos = {info.id: info for info in textgym.list_envs()}
    assert infos["goodplug/Thing-v0"].source == "goodplug"
    assert infos["goodplug/Thing-v0"].description == "A plugin env"
    assert infos["goodplug/Thing-v0"].action_names == ("LEFT", "RIGHT")
    assert infos["callplug/Other-v2"].source == "callplug"
    assert infos["textgym/CartPole-v1"].source == "textgym"
    # plugin ids get short names too
    assert registry.resolve_id("thing") == "goodplug/Thing-v0"
    assert registry.resolve_id("OTHER") == "callplug/Other-v2"


KNOWING = """
    import textgym
    from textgym.registry import TrainingDefaults

    def always_left(env, seed):
        return lambda info: "LEFT"

    textgym.register("knowplug/Pole-v0", "textgym.envs.classic:make_cartpole",
                     kwargs={"max_episode_steps": None},
                     training_defaults=TrainingDefaults(episodes=64, num_envs=4, lr=5e-4,
                                                        modes={"generate": {"lr": 1e-4}}),
                     reference_policies={"scripted": always_left})
"""


def test_a_plugin_registers_training_defaults_and_reference_policies(tmp_path, monkeypatch,
                                                                      clean_registry):
    from textgym.baselines import evaluate_baseline

    write_distribution(tmp_path, "knowplug", {"know": "knowplug"}, {"knowplug": KNOWING})
    monkeypatch.syspath_prepend(str(tmp_path))
    info = {i.id: i for i in textgym.list_envs()}["knowplug/Pole-v0"]
    assert info.source == "knowplug" and info.reference_policies == ("random", "scripted")
    assert registry.training_defaults("pole").lr == 5e-4
    assert registry.training_defaults("pole", mode="generate").lr == 1e-4
    result = evaluate_baseline(textgym.make("pole"), "scripted", episodes=2, seed=0)
    assert result["invalid_rate"] == 0.0 and result["return_mean"] < 20   # always LEFT falls


def test_discovery_is_cached_until_forced(tmp_path, monkeypatch, clean_registry):
    textgym.list_envs()                                  # first scan: no plugin on the path
    write_distribution(tmp_path, "goodplug", {"good": "goodplug"}, {"goodplug": GOOD})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "goodplug/Thing-v0" not in {info.id for info in textgym.list_envs()}
    registry.load_plugins(force=True)
    assert "goodplug/Thing-v0" in {info.id for info in textgym.list_envs()}
    registry.load_plugins(force=True)                    # loading again re-registers nothing


def test_broken_plugin_warns_with_its_name_and_error_and_others_still_load(tmp_path, monkeypatch,
                                                                          clean_registry):
    write_distribution(tmp_path, "brokenplug", {"bad": "brokenplug"},
                       {"brokenplug": "raise ImportError('needs libfoo 9')\n"})
    write_distribution(tmp_path, "missingplug", {"gone": "missingplug.nowhere:register"}, {})
    write_distribution(tmp_path, "goodplug", {"good": "goodplug"}, {"goodplug": GOOD})
    monkeypatch.syspath_prepend(str(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids = {info.id for info in textgym.list_envs()}
    messages = [str(w.message) for w in caught if issubclass(w.category, registry.PluginLoadWarning)]
    assert len(messages) == 2, messages
    broken = next(m for m in messages if "brokenplug" in m)
    assert "'bad' = 'brokenplug'" in broken and "ImportError: needs libfoo 9" in broken
    missing = next(m for m in messages if "missingplug" in m)
    assert "ModuleNotFoundError" in missing
    assert "goodplug/Thing-v0" in ids and "textgym/CartPole-v1" in ids


def test_a_plugin_calling_sys_exit_is_a_broken_plugin_not_the_end(tmp_path, monkeypatch,
                                                                   clean_registry):
    write_distribution(tmp_path, "exitplug", {"bye": "exitplug"},
                       {"exitplug": "import sys\nsys.exit(3)\n"})
    write_distribution(tmp_path, "goodplug", {"good": "goodplug"}, {"goodplug": GOOD})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(registry.PluginLoadWarning, match=r"'exitplug'.*SystemExit: 3"):
        ids = {info.id for info in textgym.list_envs()}
    assert "goodplug/Thing-v0" in ids and "textgym/CartPole-v1" in ids


def test_ctrl_c_while_loading_a_plugin_still_stops(tmp_path, monkeypatch, clean_registry):
    write_distribution(tmp_path, "slowplug", {"slow": "slowplug"},
                       {"slowplug": "raise KeyboardInterrupt\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        textgym.list_envs()


def test_duplicate_id_names_both_sources(tmp_path, monkeypatch, clean_registry):
    dup = f"""
        import textgym
        textgym.register("goodplug/Thing-v0", "{CARTPOLE}")
    """
    write_distribution(tmp_path, "goodplug", {"good": "goodplug"}, {"goodplug": GOOD})
    write_distribution(tmp_path, "dupplug", {"dup": "dupplug"}, {"dupplug": dup})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(registry.DuplicateEnvError) as error:
        textgym.make("goodplug/Thing-v0")
    message = str(error.value)
    assert "'goodplug/Thing-v0' is registered twice" in message
    assert "plugin 'goodplug'" in message and "plugin 'dupplug'" in message


def test_plugin_cannot_take_a_builtin_id(tmp_path, monkeypatch, clean_registry):
    thief = f"""
        import textgym
        textgym.register("textgym/CartPole-v1", "{CARTPOLE}")
    """
    write_distribution(tmp_path, "thiefplug", {"steal": "thiefplug"}, {"thiefplug": thief})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(registry.DuplicateEnvError, match=r"first by package 'textgym', then by "
                                                         r"plugin 'thiefplug'"):
        textgym.list_envs()
    assert gym.spec("textgym/CartPole-v1").entry_point == "textgym.envs.classic:make_cartpole"
