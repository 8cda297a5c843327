"""``textgym export`` and portable checkpoints: a run's result used elsewhere.

A merged export loads with plain ``transformers`` and acts as the checkpoint does; an adapter
(in a checkpoint or an export) loads with PEFT's ``AutoPeftModelForCausalLM`` once its base is
available (a local folder, or a hub id in the Hugging Face cache); ``textgym.Policy.load`` reads
checkpoints and exports; bad input and an unreachable hub are one line, with nothing written."""

from __future__ import annotations

import json

import pytest
import torch
from test_cli_runs import FAST, one_error_line
from test_models import _fake_hub_cache
from textgym.cli.main import app
from typer.testing import CliRunner

import textgym
from textgym.policy import Policy, PolicyConfig
from textgym.seeds import EVAL_BASE

HELD_OUT = EVAL_BASE  # evaluation seeds: never played in training


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A short CLI run of the tiny model on the bandit (token normalization, a final greedy
    evaluation in summary.json); do not write into it."""
    folder = tmp_path_factory.mktemp("export")
    config = folder / "fast.toml"
    config.write_text(FAST.replace("episodes = 8", "episodes = 16\neval_episodes = 8\nlr = 0.03"))
    run = folder / "run"
    result = CliRunner().invoke(app, ["train", "bandit", "--config", str(config), "--out", str(run),
                                      "--normalization", "token", "--quiet"])
    assert result.exit_code == 0, result.output
    return run


def greedy_decisions(policy: Policy, episodes: int = 16) -> list[tuple[str, float]]:
    """``(action, log-prob)`` of each greedy decision on held-out bandit episodes."""
    envs = textgym.make_vec("textgym/Bandit-v0", num_envs=episodes, seed=HELD_OUT)
    observations, infos = envs.reset(seed=HELD_OUT)
    decisions = policy.act(list(observations), [i["system_prompt"] for i in infos],
                           [i["valid_actions"] for i in infos], greedy=True)
    envs.close()
    return [(d.text, d.logprob) for d in decisions]


def assert_same_decisions(theirs, mine):
    assert [action for action, _ in theirs] == [action for action, _ in mine]
    assert [logp for _, logp in theirs] == pytest.approx([logp for _, logp in mine], abs=1e-4)


def test_export_merge_is_a_plain_model_folder_that_acts_as_the_checkpoint(cli, trained_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "merged"
    result = cli("export", trained_run, "--out", out, "--merge")
    assert result.exit_code == 0, result.output
    assert f"exported the merged model of {trained_run / 'checkpoint'} to {out}" in result.stdout
    assert {"config.json", "model.safetensors", "tokenizer.json", "policy.json", "README.md"} <= {
        p.name for p in out.iterdir()}
    assert not (out / "adapter_config.json").exists()

    checkpoint = Policy.load(trained_run / "checkpoint")
    assert checkpoint.is_lora and checkpoint.normalization == "token"
    reference = greedy_decisions(checkpoint)
    # transformers alone, with the settings recorded beside the weights
    record = json.loads((out / "policy.json").read_text())
    assert record["lora"] is False and record["name"] == "tiny"
    settings = PolicyConfig.from_dict({k: v for k, v in record.items()
                                       if k not in ("name", "base_model", "lora")})
    model = AutoModelForCausalLM.from_pretrained(out)
    merged = Policy(model, AutoTokenizer.from_pretrained(out), config=settings)
    assert_same_decisions(greedy_decisions(merged), reference)
    assert_same_decisions(greedy_decisions(Policy.load(out)), reference)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, checkpoint.model(ids).logits, atol=1e-4)

    card = (out / "README.md").read_text()
    assert "library_name: transformers" in card and "textgym/Bandit-v0" in card
    assert "| algorithm | reinforce |" in card and "| episodes | 16 |" in card
    summary = json.loads((trained_run / "summary.json").read_text())["eval"]
    assert f"mean return {summary['return_mean']:.3f}" in card and "over 8 held-out episodes" in card
    assert f'AutoModelForCausalLM.from_pretrained("{out}")' in card


def test_export_of_the_adapter_loads_with_policy_load(cli, trained_run, tmp_path):
    out = tmp_path / "adapter"
    result = cli("export", trained_run / "checkpoint", "--out", out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        ".textgym-export", "README.md", "adapter_config.json", "adapter_model.safetensors", "chat_template.jinja",
        "policy.json", "tokenizer.json", "tokenizer_config.json"]
    card = (out / "README.md").read_text()
    assert "library_name: peft" in card and f'textgym.Policy.load("{out}")' in card
    assert "no weights to download" in card  # tiny: only textgym rebuilds its base
    reference = greedy_decisions(Policy.load(trained_run / "checkpoint"))
    assert_same_decisions(greedy_decisions(Policy.load(out)), reference)

    # a second export into the same folder needs --force; --force replaces only an export
    line = one_error_line(cli("export", trained_run, "--out", out))
    assert "exists and is not empty" in line and "--force" in line
    result = cli("export", trained_run, "--out", out, "--force", "--merge")
    assert result.exit_code == 0, result.output
    assert (out / "config.json").is_file() and not (out / "adapter_config.json").exists()


def test_autopeft_loads_the_checkpoint_adapter_with_its_local_base(
        cli, tmp_path, tiny_model_and_tokenizer):
    from peft import AutoPeftModelForCausalLM

    model, tokenizer = tiny_model_and_tokenizer
    base = tmp_path / "base-model"
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    config = tmp_path / "fast.toml"
    config.write_text(FAST.replace('model = "tiny"\n', "lr = 0.03\n"))
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", config, "--model", base, "--out", run, "--quiet")
    assert result.exit_code == 0, result.output

    adapter = run / "checkpoint" / "adapter"
    recorded = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded == str(base.resolve())
    peft_model = AutoPeftModelForCausalLM.from_pretrained(adapter)
    policy = Policy.load(run / "checkpoint")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        assert torch.allclose(peft_model(ids).logits, policy.model(ids).logits, atol=1e-5)
        assert not torch.allclose(peft_model(ids).logits, model(ids).logits, atol=1e-5)  # trained

    out = tmp_path / "exported"
    assert cli("export", run, "--out", out).exit_code == 0
    with torch.no_grad():
        exported = AutoPeftModelForCausalLM.from_pretrained(out)
        assert torch.allclose(exported(ids).logits, policy.model(ids).logits, atol=1e-5)


def test_autopeft_loads_an_adapter_on_a_hub_model_from_the_hub_cache_offline(
        tmp_path, tiny_model_and_tokenizer, empty_hub_cache, monkeypatch):
    import copy

    from huggingface_hub import constants
    from peft import AutoPeftModelForCausalLM

    from textgym.lora import add_lora
    from textgym.policy import persistence

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read by huggingface_hub at import
    model, tokenizer = tiny_model_and_tokenizer
    _fake_hub_cache(empty_hub_cache, "someorg/tiny-test", model, tokenizer)
    policy = Policy(add_lora(copy.deepcopy(model)), tokenizer, name="someorg/tiny-test")
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.01)
    persistence.write(policy, tmp_path / "checkpoint")
    adapter = tmp_path / "checkpoint" / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())[
        "base_model_name_or_path"] == "someorg/tiny-test"
    assert "base_model: someorg/tiny-test" in (adapter / "README.md").read_text()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        loaded = AutoPeftModelForCausalLM.from_pretrained(adapter)
        assert torch.allclose(loaded(ids).logits, policy.model(ids).logits, atol=1e-5)


def test_a_full_weights_checkpoint_exports_as_its_model_folder(cli, tmp_path, tiny_model_and_tokenizer):
    import copy

    from transformers import AutoModelForCausalLM

    from textgym.trainers import make_trainer

    model, tokenizer = tiny_model_and_tokenizer
    policy = Policy(copy.deepcopy(model), tokenizer, seed=0, name="tiny")
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0",
                           config={"num_envs": 4, "episodes_per_update": 4, "use_lora": False})
    trainer.train(updates=1)
    checkpoint = trainer.save_checkpoint(tmp_path / "checkpoint")
    assert (checkpoint / "model" / "tokenizer.json").is_file()
    result = cli("export", checkpoint, "--out", tmp_path / "out", "--merge")
    assert result.exit_code == 0, result.output
    assert "full weights: nothing to merge" in result.stdout
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        assert torch.allclose(exported(ids).logits, trainer.model(ids).logits, atol=1e-5)
        assert not torch.allclose(exported(ids).logits, model(ids).logits, atol=1e-5)  # trained
    assert_same_decisions(greedy_decisions(Policy.load(tmp_path / "out")),
                          greedy_decisions(trainer.policy))


def test_export_removes_nothing_it_did_not_create(cli, trained_run, tmp_path):
    """An empty --out is filled, not replaced; folders named like a temporary or a backup of it
    are the user's and stay; --force swaps only an earlier export."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("out.old", "out.tmp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "notes.txt").write_text("keep me")
    result = cli("export", trained_run, "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "adapter_config.json").is_file()
    result = cli("export", trained_run, "--out", out, "--force")
    assert result.exit_code == 0, result.output
    assert (out / "adapter_config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.old", "out.tmp"]
    for name in ("out.old", "out.tmp"):
        assert [p.name for p in (tmp_path / name).iterdir()] == ["notes.txt"]
        assert (tmp_path / name / "notes.txt").read_text() == "keep me"

    looks_like_an_export = tmp_path / "old-style"   # policy.json, but not written by export
    looks_like_an_export.mkdir()
    (looks_like_an_export / "policy.json").write_text("{}")
    line = one_error_line(cli("export", trained_run, "--out", looks_like_an_export, "--force"))
    assert "replaces only an earlier export" in line and ".textgym-export" in line
    assert [p.name for p in looks_like_an_export.iterdir()] == ["policy.json"]


def test_export_through_a_symlink_writes_into_its_target(cli, trained_run, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    for flags in ((), ("--force",)):
        result = cli("export", trained_run, "--out", link, *flags)
        assert result.exit_code == 0, result.output
        assert link.is_symlink() and link.resolve() == real.resolve()
        assert (real / "adapter_config.json").is_file()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


# --- bad input --------------------------------------------------------------------------------


def test_bad_export_input_is_one_line_and_writes_nothing(cli, trained_run, tmp_path):
    out = tmp_path / "out"
    line = one_error_line(cli("export", tmp_path / "nowhere", "--out", out))
    assert "does not exist" in line
    (tmp_path / "empty").mkdir()
    line = one_error_line(cli("export", tmp_path / "empty", "--out", out))
    assert "no checkpoint in" in line
    line = one_error_line(cli("export", trained_run, "--out", trained_run / "checkpoint" / "x"))
    assert "inside or around" in line
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    line = one_error_line(cli("export", trained_run, "--out", tmp_path / "mine", "--force"))
    assert "replaces only an earlier export" in line
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    line = one_error_line(cli("export", trained_run, "--out", out, "--dtype", "fp8"))
    assert "unknown dtype 'fp8'" in line
    line = one_error_line(cli("export", trained_run, "--out", out, "--push-to-hub", "a/b/c"))
    assert "not a hub repository id" in line
    assert not out.exists()


@pytest.mark.parametrize("network", ["HF_HUB_OFFLINE", "unreachable", "no token"])
def test_push_to_hub_without_a_hub_is_one_line_before_anything_is_written(
        cli, trained_run, tmp_path, network, unreachable_hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    if network == "HF_HUB_OFFLINE":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    elif network == "no token":
        from huggingface_hub import constants

        monkeypatch.delenv("HF_TOKEN")
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
        monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))
    out = tmp_path / "out"
    line = one_error_line(cli("export", trained_run, "--out", out, "--push-to-hub", "me/my-agent"))
    assert line.startswith("textgym: error: cannot push to the hub: ")
    assert {"HF_HUB_OFFLINE": "HF_HUB_OFFLINE is set", "no token": "not logged in",
            "unreachable": f"{unreachable_hub} cannot be reached"}[network] in line
    assert not out.exists()


def test_push_to_hub_creates_the_repository_and_uploads_the_exported_folder(
        cli, trained_run, tmp_path, monkeypatch):
    """The upload goes through huggingface_hub's HfApi (a recording stand-in: no hub here)."""
    import huggingface_hub

    calls = []

    class RecordingApi:
        def __init__(self, endpoint=None):
            self.endpoint = endpoint

        def whoami(self):
            calls.append(("whoami",))
            return {"name": "me"}

        def create_repo(self, repo_id, exist_ok=False):
            calls.append(("create_repo", repo_id, exist_ok))
            return f"{self.endpoint}/{repo_id}"

        def upload_folder(self, repo_id, folder_path, commit_message=None, ignore_patterns=None):
            calls.append(("upload_folder", repo_id, sorted(p.name for p in folder_path.iterdir()
                                                          if p.name not in (ignore_patterns or ()))))

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    out = tmp_path / "out"
    result = cli("export", trained_run, "--out", out, "--push-to-hub", "me/bandit-agent")
    assert result.exit_code == 0, result.output
    assert calls == [("whoami",), ("create_repo", "me/bandit-agent", True),
                     ("upload_folder", "me/bandit-agent", sorted(p.name for p in out.iterdir()
                                                                 if p.name != ".textgym-export"))]
    assert "pushed" in result.stdout and "me/bandit-agent" in result.stdout
    card = (out / "README.md").read_text()
    assert "# me/bandit-agent" in card and 'snapshot_download("me/bandit-agent")' in card
