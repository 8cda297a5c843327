"""Settings declared once (textgym.settings): every numeric setting's range is checked where it is
declared, whichever way a value comes in (a flag, a config file, a checkpoint), in one line,
before a model loads and before anything is written; ``--help`` is derived from the same fields."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from test_cli_runs import no_model_load, one_error_line  # noqa: F401 - no_model_load is a fixture
from textgym.cli import config as run_config
from textgym.cli.config import RunConfig

from textgym.lora import LoraSettings
from textgym.policy.config import PolicyConfig
from textgym.selfplay import SelfPlayConfig
from textgym.settings import setting_of
from textgym.trainers import ALGORITHMS, Trainer, TrainConfig

# Each: the flags (or config file text), and what the one error line must say.
BAD_SETTINGS = [
    ("[trainer]\nmax_grad_norm = -1.0\n", "max_grad_norm must be a finite number > 0, got -1.0"),
    (["--seed", "-1"], "'--seed'"),
    ("seed = -1\n", "seed must be an integer in [0, 4_294_967_295], got -1"),
    (["--temperature", "nan"], "temperature must be a finite number > 0, got nan"),
    ("[policy]\ntemperature = nan\n", "temperature must be a finite number > 0, got nan"),
    ("[trainer]\nlora_alpha = nan\n", "lora_alpha must be an integer >= 1, got nan"),
    ("num_envs = 99999999999\n", "num_envs must be an integer in [1, 4096], got 99999999999"),
    (["--num-envs", "99999999999"], "'--num-envs'"),
    ("[trainer]\neval_seed = -1\n", "eval_seed must be an integer in [0, 9_999_999], got -1"),
    ("[trainer]\nlog_samples = -1\n", "log_samples must be an integer >= 0, got -1"),
    ("[trainer]\nentropy_coef = inf\n", "entropy_coef must be a finite number >= 0, got inf"),
    ("[trainer]\nwarmup_updates = -3\n", "warmup_updates must be an integer >= 0, got -3"),
    ("[trainer]\nreplay_size = -1\n", "replay_size must be an integer >= 1, got -1"),
    (["--max-new-tokens", "100000000"], "'--max-new-tokens'"),
    ("[policy]\nmax_new_tokens = 100000000\n", "max_new_tokens must be an integer in [1, 32768]"),
    (["--lr", "inf"], "lr must be a finite number > 0, got inf"),
    (["--minutes", "nan"], "minutes must be a finite number > 0, got nan"),
    (["--until", "nan"], "until must be a finite number, got nan"),
    ("eval_episodes = -1\n", "eval_episodes must be an integer in [0, 1_000_000], got -1"),
]


@pytest.mark.parametrize(("given", "message"), BAD_SETTINGS, ids=lambda v: str(v)[:30])
def test_a_setting_out_of_range_is_one_line_before_anything_loads_or_is_written(
        cli, tmp_path, no_model_load, given, message):
    run = tmp_path / "run"
    if isinstance(given, str):
        (tmp_path / "c.toml").write_text('model = "tiny"\n' + given)
        flags = ["--config", tmp_path / "c.toml"]
    else:
        flags = ["--model", "tiny", *given]
    line = one_error_line(cli("train", "bandit", *flags, "--out", run))
    assert message in line
    assert not run.exists()


def test_an_edited_checkpoint_counter_is_refused_before_anything_loads(cli, tmp_path, no_model_load):
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "config.toml").write_text(run_config.dumps(RunConfig(
        env="textgym/Bandit-v0", model="tiny", updates=2)))
    state = {"algorithm": "reinforce", "config": {"algorithm": "reinforce"}, "env_kwargs": {},
             "update_count": -5, "episodes_seen": 0, "decisions_seen": 0, "wall_time": 0.0}
    (run / "checkpoint" / "trainer_state.json").write_text(json.dumps(state))
    before = sorted(p.name for p in run.rglob("*"))
    line = one_error_line(cli("train", "--resume", run))
    assert "trainer_state.json: update_count must be an integer >= 0, got -5" in line
    assert sorted(p.name for p in run.rglob("*")) == before


def test_an_edited_checkpoint_config_field_is_refused_before_anything_loads(cli, tmp_path, no_model_load):
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "config.toml").write_text(run_config.dumps(RunConfig(
        env="textgym/Bandit-v0", model="tiny", updates=2)))
    state = {"algorithm": "reinforce", "config": {"algorithm": "reinforce", "lora_r": 0}, "env_kwargs": {},
             "update_count": 1, "episodes_seen": 0, "decisions_seen": 0, "wall_time": 0.0}
    (run / "checkpoint" / "trainer_state.json").write_text(json.dumps(state))
    line = one_error_line(cli("train", "--resume", run))
    assert "trainer_state.json: lora_r must be an integer >= 1, got 0" in line
    with pytest.raises(ValueError, match="trainer_state.json: lora_r must be an integer >= 1, got 0"):
        Trainer.resume(run / "checkpoint")  # refused before the checkpoint's model would load


def test_eval_seed_out_of_range(cli):
    line = one_error_line(cli("eval", "bandit", "--model", "tiny", "--seed", "-1"))
    assert "'--seed'" in line


# --- one declaration ---------------------------------------------------------------------------


def test_the_algorithm_list_is_the_registry():
    from textgym.trainers import TRAINERS, make_trainer  # noqa: F401 - the public names stay

    assert tuple(TRAINERS) == ALGORITHMS
    assert dict(dataclasses.fields(RunConfig)[1].metadata)  # algo is declared with its choices
    assert setting_of({f.name: f for f in dataclasses.fields(RunConfig)}["algo"]).choices == ALGORITHMS


def test_the_run_config_default_model_is_the_model_registry_default():
    from textgym import models

    assert RunConfig().model == models.DEFAULT_MODEL


def test_settings_passed_on_share_their_declaration():
    """The CLI's num_envs, lr and seed are TrainConfig's: one range, one doc."""
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    train = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for name in ("num_envs", "lr", "seed"):
        mine, theirs = setting_of(fields[name]), setting_of(train[name])
        assert (mine.at_least, mine.at_most, mine.above) == (theirs.at_least, theirs.at_most, theirs.above)


def test_the_trainer_settings_of_a_run_are_derived_from_their_declarations():
    """A run's top-level trainer settings are the RunConfig fields declared like TrainConfig's (no
    hand-kept map): --full reaches use_lora, an lr not given is the algorithm's and is written back."""
    from textgym.cli import training
    from textgym.cli.config import TRAINER_FLAGS, TRAINER_SETTINGS

    assert TRAINER_SETTINGS == {"num_envs": "num_envs", "lr": "lr", "seed": "seed", "lora": "use_lora",
                                "checkpoint_every": "checkpoint_every"}
    assert TRAINER_FLAGS == tuple(f.name for f in dataclasses.fields(TrainConfig) if setting_of(f).flag)
    cfg = RunConfig(env="textgym/Bandit-v0", algo="ppo", num_envs=4, lora=False, seed=3,
                    trainer={"episodes_per_update": 8, "seed": 99})
    trainer_config = training._trainer_config(cfg)
    assert (trainer_config.use_lora, trainer_config.num_envs, trainer_config.seed) == (False, 4, 3)
    assert trainer_config.lr == TrainConfig.lr  # PPO's own default
    training._fill_from_trainer(cfg, trainer_config)
    assert cfg.lr == trainer_config.lr and cfg.trainer["episodes_per_update"] == 8
    assert not {"use_lora", "num_envs", "seed", "lr", "algorithm"} & set(cfg.trainer)


@pytest.mark.parametrize(("cls", "given", "message"), [
    (SelfPlayConfig, {"invalid": "ignore"}, "invalid must be one of penalty, default, retry, terminate, got 'ignore'"),
    (SelfPlayConfig, {"eval_games": -1}, "eval_games must be an integer >= 0, got -1"),
    (LoraSettings, {"dropout": 1.0}, "dropout must be a finite number in [0, 1), got 1.0"),
], ids=["selfplay-invalid", "selfplay-eval-games", "lora-dropout"])
def test_self_play_and_lora_settings_are_checked_as_declared(cls, given, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        cls(**given)


def test_every_flag_setting_is_a_train_option(cli):
    result = cli("train", "--help")
    assert result.exit_code == 0, result.output
    for cls in (RunConfig, PolicyConfig):
        for field in dataclasses.fields(cls):
            rule = setting_of(field)
            if rule.flag:
                flag = rule.flag if isinstance(rule.flag, str) else "--" + field.name.replace("_", "-")
                assert flag.split("/")[0] in result.output, flag


# --- help at 80 columns ------------------------------------------------------------------------


def test_help_at_80_columns_is_short_grouped_and_keeps_brackets(monkeypatch):
    from textgym.cli.main import app
    from typer.testing import CliRunner

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERMINAL_WIDTH", "80")
    result = CliRunner().invoke(app, ["train", "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    text = result.output
    assert max(len(line) for line in text.splitlines()) <= 80
    options = text.count("│ --")
    # short descriptions: it was 134 lines for 31 options (4.3 a option), each help now fits ~3
    assert len(text.splitlines()) < 3.5 * options, (len(text.splitlines()), options)
    assert "textgym[quantize]" in text  # not eaten as Rich markup
    assert "<bool>" not in text  # a flag takes no value
    for panel in ("What to train", "Budget and early stop", "Training", "Hardware",
                  "Policy (default: the model's)", "Run folder"):
        assert re.search(r"─ " + re.escape(panel) + " ─", text), panel
    assert "[default: (smollm2-135m)]" in text  # the field's default, not a typed copy


def test_train_and_eval_options_are_the_declared_settings():
    """Every option of ``train`` but the launch options is a declared setting (a field of RunConfig,
    EnvSettings, PolicyConfig or TrainConfig), and the defaults ``--help`` states by hand are the
    code's."""
    import inspect

    from textgym.cli import main
    from textgym.cli.config import ENV_FLAGS, TRAINER_FLAGS, EnvSettings
    from textgym.cli.options import flags_of

    from textgym import remote, step_cap
    from textgym.settings import field_docs

    launch = {"env", "out", "config", "resume", "force", "quiet", "processes", "stop_after"}
    declared = {*flags_of(RunConfig), *ENV_FLAGS, *TRAINER_FLAGS, *flags_of(PolicyConfig)}
    assert set(inspect.signature(main.train).parameters) == launch | declared
    eval_options = set(inspect.signature(main.evaluate).parameters)
    assert "max_episode_steps" in eval_options and "step_timeout" not in eval_options
    fields = {f.name: f for f in dataclasses.fields(EnvSettings)}
    assert setting_of(fields["step_timeout"]).default_text == f"{remote.DEFAULT_STEP_TIMEOUT:g}"
    assert f"no limit: {step_cap.DEFAULT_MAX_EPISODE_STEPS})" in field_docs(EnvSettings)["max_episode_steps"]


def test_an_env_recommends_the_settings_a_run_declares():
    """TrainingDefaults and RunConfig share one declaration per setting (range and doc), so an env's
    recommendation is checked like a flag."""
    from textgym.settings import short_help
    from textgym.training_defaults import TrainingDefaults

    run = {f.name: f for f in dataclasses.fields(RunConfig)}
    for field in dataclasses.fields(TrainingDefaults):
        if field.name in ("trainer", "env_kwargs", "policy", "algorithms", "modes"):
            continue
        mine, theirs = setting_of(run[field.name]), setting_of(field)
        assert (mine.at_least, mine.at_most, mine.above, mine.finite) == (
            theirs.at_least, theirs.at_most, theirs.above, theirs.finite), field.name
        assert short_help(RunConfig, field.name) == short_help(TrainingDefaults, field.name) != "", field.name
    with pytest.raises(ValueError, match="check_episodes must be an integer in"):
        TrainingDefaults(check_episodes=0)
