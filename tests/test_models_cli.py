"""The command line's side of textgym.models: ``--model`` names (hub ids, folders, offline),
``--device``, ``--dtype`` and ``--quantize`` on ``train`` and ``eval``, saved in the run and
honoured (and changeable) on ``--resume``."""

from __future__ import annotations

import importlib.util
import tomllib

import pytest
import torch
from test_cli import FAST, lines_of, one_error_line


@pytest.fixture
def fast_config(tmp_path):
    path = tmp_path / "fast.toml"
    path.write_text('model = "tiny"\nnum_envs = 8\nepisodes = 8\n' + FAST)
    return path


@pytest.mark.parametrize("name", ["Qwen/Qwen2.5-0.5B-Instruct", "gpt2"])
@pytest.mark.parametrize("network", ["HF_HUB_OFFLINE", "unreachable"])
def test_an_uncached_hub_id_offline_fails_in_one_line_before_anything_is_written(
        cli, tmp_path, name, network, empty_hub_cache, unreachable_hub, hub_watch, monkeypatch):
    if network == "HF_HUB_OFFLINE":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    line = one_error_line(cli("train", "bandit", "--model", name, "--out", tmp_path / "run"))
    assert f"model {name!r} is not in the local Hugging Face cache" in line
    assert "the hub cannot be reached" in line
    assert not (tmp_path / "run").exists()
    # no minute of hub retries: no download started, the hub asked once at most
    assert hub_watch.loads == [] and len(hub_watch.probes) == (network == "unreachable")


def test_a_local_model_folder_trains(cli, tmp_path, fast_config, tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    folder = tmp_path / "my-model.v2"  # a dot in the name, as in most hub ids
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", fast_config, "--model", folder, "--out", run)
    assert result.exit_code == 0, result.output
    assert "done: 1 update, 8 episodes" in result.stdout
    assert tomllib.loads((run / "config.toml").read_text())["model"] == str(folder)
    assert [m["update"] for m in lines_of(run / "metrics.jsonl")] == [1]


def test_bad_device_dtype_and_quantize_are_one_line_and_write_nothing(cli, tmp_path):
    run = tmp_path / "run"
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--dtype", "fp8", "--out", run))
    assert "unknown dtype 'fp8'" in line and "bfloat16" in line
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--device", "gpu", "--out", run))
    assert "unknown device 'gpu'" in line and "cuda:N" in line
    line = one_error_line(cli("eval", "bandit", "--model", "tiny", "--quantize", "2bit"))
    assert "unknown quantization '2bit'" in line
    if not torch.cuda.is_available():
        for command in (["train", "bandit", "--out", run], ["eval", "bandit"]):
            line = one_error_line(cli(*command, "--model", "tiny", "--device", "cuda"))
            assert "device 'cuda' is not available" in line
    assert not run.exists()


def test_quantize_without_bitsandbytes_is_one_line(cli, tmp_path, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # as if bitsandbytes were not installed
                        lambda name, *args: None if name == "bitsandbytes" else find_spec(name, *args))
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--quantize", "4bit",
                              "--out", tmp_path / "run"))
    assert "needs bitsandbytes" in line and "pip install 'textgym[quantize]'" in line
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--quantize", "8bit", "--full",
                              "--out", tmp_path / "run"))
    assert "LoRA adapter only" in line
    assert not (tmp_path / "run").exists()


def test_a_bfloat16_run_saves_its_precision_and_a_resume_may_change_it(cli, tmp_path, fast_config):
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", fast_config, "--episodes", "24", "--out", run,
                 "--device", "cpu", "--dtype", "bfloat16", "--stop-after", "1",
                 "--check-every", "0")  # every update of the budget, solved or not
    assert result.exit_code == 130, result.output
    assert "(cpu, bfloat16)" in result.stdout  # what was loaded, said once
    saved = tomllib.loads((run / "config.toml").read_text())
    assert (saved["device"], saved["dtype"]) == ("cpu", "bfloat16") and "quantize" not in saved
    # what the run trains cannot change on resume; where and in which precision it runs can
    line = one_error_line(cli("train", "--resume", run, "--quantize", "8bit"))
    assert "cannot resume" in line and "quantize" in line
    result = cli("train", "--resume", run, "--dtype", "float32")
    assert result.exit_code == 0, result.output
    assert "(cpu, float32)" in result.stdout
    assert tomllib.loads((run / "config.toml").read_text())["dtype"] == "float32"
    assert [m["update"] for m in lines_of(run / "metrics.jsonl")] == [1, 2, 3]
    result = cli("eval", "bandit", "--checkpoint", run, "--episodes", "4", "--num-envs", "4",
                 "--dtype", "bfloat16", "--json")
    assert result.exit_code == 0, result.output


def test_with_several_processes_the_device_is_the_launchers():
    from textgym.cli import config as run_config
    from textgym.cli import training
    from textgym.cli.errors import CLIError
    from textgym.distributed import ProcessContext

    process = ProcessContext(rank=1, world_size=2, local_rank=1, local_world_size=2,
                             device=torch.device("cpu"))
    for asked in ("auto", "cpu"):
        assert training._device_of(run_config.RunConfig(device=asked), process) == torch.device("cpu")
    with pytest.raises(CLIError, match="launcher put it on cpu .*ACCELERATE_USE_CPU"):
        training._device_of(run_config.RunConfig(device="cuda"), process)
    with pytest.raises(CLIError, match="--device cuda:1 with 2 processes"):
        training._check_process_device("cuda:1", 2)
    alone = ProcessContext(device=torch.device("cpu"))
    assert training._device_of(run_config.RunConfig(device="cuda:1"), alone) == "cuda:1"
