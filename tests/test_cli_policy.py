"""The policy settings on the command line (``--temperature``, ``--top-p``, ``--max-new-tokens``,
``--normalization``, ``--chat-template``): checked by PolicyConfig before anything is loaded or
written, saved in ``config.toml``'s ``[policy]`` table and in every checkpoint, kept on
``--resume``, and the checkpoint's own on ``textgym eval`` unless a flag overrides them."""

from __future__ import annotations

import json
import tomllib

import pytest
from test_cli_runs import FAST, fast_config, no_model_load, one_error_line  # noqa: F401 - fixtures

# A ChatML template with a marker, so a test can tell it from the tokenizer's own.
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }} (custom)"
            "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_policy_flags_are_saved_in_the_run_and_every_checkpoint_and_kept_on_resume(
        cli, tmp_path, fast_config):
    template = tmp_path / "chatml.jinja"
    template.write_text(TEMPLATE)
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", fast_config, "--episodes", "16", "--out", run,
                 "--temperature", "0.5", "--normalization", "token", "--max-new-tokens", "7",
                 "--top-p", "0.9", "--chat-template", template, "--stop-after", "1")
    assert result.exit_code == 130, result.output
    policy = tomllib.loads((run / "config.toml").read_text())["policy"]
    assert policy["temperature"] == 0.5 and policy["normalization"] == "token"
    assert policy["max_new_tokens"] == 7 and policy["top_p"] == 0.9
    assert policy["chat_template"] == TEMPLATE  # the file's text: the run no longer needs the file
    assert policy["system_role"] is True and "mode" not in policy and "seed" not in policy
    recorded = json.loads((run / "checkpoint" / "policy.json").read_text())
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())["policy"]
    for settings in (recorded, state):
        assert {k: settings[k] for k in policy} == policy
        assert settings["name"] == "tiny" and settings["mode"] == "score" and settings["seed"] == 0
    # the checkpoint's policy (the one that acted) renders its prompts with the custom template
    import textgym

    loaded = textgym.Policy.load(run / "checkpoint")
    assert "(custom)" in loaded.tokenizer.decode(loaded.prompt_ids("Pick an animal.", "Color: red."))

    template.unlink()
    before = (run / "config.toml").read_bytes()
    line = one_error_line(cli("train", "--resume", run, "--temperature", "0.7"))
    assert "cannot resume" in line and "policy.temperature=0.7" in line and "0.5" in line
    assert (run / "config.toml").read_bytes() == before
    result = cli("train", "--resume", run, "--temperature", "0.5")  # the same value: allowed
    assert result.exit_code == 0, result.output
    assert tomllib.loads((run / "config.toml").read_text())["policy"] == policy
    after = json.loads((run / "checkpoint" / "policy.json").read_text())
    assert after == recorded
    assert json.loads((run / "checkpoint" / "trainer_state.json").read_text())["update_count"] == 2

    # eval: the checkpoint's settings unless a flag overrides them, and it says which
    evaluate = ("eval", "bandit", "--checkpoint", run, "--episodes", "4", "--num-envs", "4", "--json")
    result = cli(*evaluate)
    assert result.exit_code == 0, result.output
    assert "evaluating with the checkpoint's policy settings\n" in result.stderr
    assert json.loads(result.stdout)["results"]["checkpoint"]["episodes"] == 4
    result = cli(*evaluate, "--normalization", "sum")
    assert result.exit_code == 0, result.output
    assert "the checkpoint's policy settings, except normalization='sum'" in result.stderr


@pytest.mark.parametrize(("flags", "message"), [
    (["--temperature", "0"], "temperature must be > 0"),
    (["--top-p", "1.5"], "Invalid value for '--top-p'"),
    (["--max-new-tokens", "0"], "Invalid value for '--max-new-tokens'"),
    (["--normalization", "mean"], "'mean' is not one of 'sum', 'token', 'word'"),
    (["--chat-template", "missing.jinja"], "chat template file missing.jinja does not exist"),
    (["--chat-template", "{bad}"], "line 1: unexpected '}'"),
    (["--config", "{policy_mode}"], "set mode with --mode, not in [policy]"),
    (["--config", "{policy_history}"], "set history with --history, not in [policy]"),
    (["--config", "{policy_typo}"], "PolicyConfig has"),
])
def test_a_bad_policy_setting_is_one_line_before_anything_is_loaded_or_written(
        cli, tmp_path, no_model_load, flags, message):
    (tmp_path / "bad.jinja").write_text("{% for m in messages %}{{ m }")
    (tmp_path / "mode.toml").write_text('model = "tiny"\n[policy]\nmode = "generate"\n')
    (tmp_path / "typo.toml").write_text('model = "tiny"\n[policy]\ntemprature = 0.5\n')
    (tmp_path / "history.toml").write_text('model = "tiny"\n[policy]\nhistory = "full"\n')
    names = {"{bad}": tmp_path / "bad.jinja", "{policy_mode}": tmp_path / "mode.toml",
             "{policy_typo}": tmp_path / "typo.toml", "{policy_history}": tmp_path / "history.toml"}
    flags = [names.get(flag, flag) for flag in flags]
    run = tmp_path / "run"
    line = one_error_line(cli("train", "bandit", "--model", "tiny", *flags, "--out", run))
    assert message in line
    assert not run.exists()
    if flags[0] in ("--normalization", "--max-new-tokens", "--chat-template"):  # eval has these too
        line = one_error_line(cli("eval", "bandit", "--model", "tiny", *flags))
        assert message in line


def test_several_processes_get_the_same_policy_flags():
    from pathlib import Path

    from textgym.cli.training import worker_arguments

    flags = {"env": "bandit", "temperature": 0.5, "top_p": None, "chat_template": "t.jinja",
             "normalization": "word"}
    args = worker_arguments(flags, Path("runs/x"))
    assert args == ["train", "bandit", "--temperature", "0.5", "--chat-template", "t.jinja",
                    "--normalization", "word", "--out", "runs/x"]


def test_the_policy_flags_are_policyconfig_settings_on_train_and_eval():
    """The flags name PolicyConfig fields (a renamed setting cannot leave a flag behind)."""
    import dataclasses

    import typer

    from textgym.cli.config import POLICY_FLAGS
    from textgym.cli.main import app
    from textgym.policy import PolicyConfig

    assert set(POLICY_FLAGS) <= {f.name for f in dataclasses.fields(PolicyConfig)}
    commands = {c.name: c for c in typer.main.get_command(app).commands.values()}
    options = {name: {opt for p in commands[name].params for opt in p.opts} for name in ("train", "eval")}
    for name in POLICY_FLAGS:
        assert f"--{name.replace('_', '-')}" in options["train"], name
    assert {"--normalization", "--max-new-tokens", "--chat-template"} <= options["eval"]
