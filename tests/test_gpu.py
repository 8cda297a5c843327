"""The tiny model on a CUDA device: training, evaluation, checkpoint and resume, bf16 acting,
generate mode, and the command line's ``--device cuda``. Greedy play is compared with the CPU's
(fp32 matmuls on the GPU differ from the CPU's in the last bits only: TF32 is off by default);
sampled play draws from a generator on the GPU, so a run is compared with itself. Where torch
sees no CUDA device these tests skip, naming why (conftest.py); run them with ``pytest -m gpu``."""

from __future__ import annotations

import copy
import tomllib

import pytest
import torch

import textgym
from textgym.policy import Policy
from textgym.rollout import collect
from textgym.trainers import ReinforceConfig, Trainer, make_trainer
from textgym.trainers.reporting.metrics import read_metrics

pytestmark = pytest.mark.gpu


@pytest.fixture
def tiny_device():
    """The tiny-model fixtures of this module are on the GPU."""
    return "cuda"


CONFIG = ReinforceConfig(num_envs=4, episodes_per_update=8, minibatch_size=4, lr=3e-3, epochs=2, seed=0)


def _on_cpu(model):
    return copy.deepcopy(model).to("cpu")


def _trainable(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def test_training_on_cuda_moves_the_adapter_there_and_repeats_under_its_seed(tiny_model_and_tokenizer):
    # The answers are drawn by a generator on the model's device: a CUDA run samples other
    # answers than a CPU run, so it is compared with itself (same seed, same run).
    model, tokenizer = tiny_model_and_tokenizer
    runs = []
    for _ in range(2):
        policy = Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0)
        trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=CONFIG)
        before = _trainable(trainer)
        runs.append((trainer.train(updates=2), before, _trainable(trainer)))
    (metrics, before, after), (again, _, after_again) = runs
    assert {p.device.type for p in after.values()} == {"cuda"}  # the adapter was made on the GPU
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert all(torch.isfinite(torch.tensor(m["loss"])) for m in metrics)
    for got, want in zip(again, metrics):
        assert got["return_mean"] == want["return_mean"]  # the same answers were sampled
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4, abs=1e-6)
    for name, weights in after.items():
        assert torch.allclose(after_again[name], weights, atol=1e-5), name


def test_evaluation_on_cuda_plays_the_cpus_greedy_episodes(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    results = {}
    for device, weights in (("cuda", model), ("cpu", _on_cpu(model))):
        trainer = make_trainer("reinforce", Policy(weights, tokenizer, mode="score", seed=0),
                               env="textgym/Bandit-v0", config=CONFIG)
        results[device] = trainer.evaluate(episodes=16, num_envs=8)
    assert results["cuda"]["episodes"] == 16
    assert results["cuda"]["return_mean"] == results["cpu"]["return_mean"]


def test_a_cuda_run_resumes_on_cuda_where_it_stopped(tiny_model_and_tokenizer, tmp_path):
    model, tokenizer = tiny_model_and_tokenizer
    trainer = make_trainer("reinforce", Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0),
                           env="textgym/Bandit-v0", config=CONFIG, out_dir=tmp_path / "run")
    trainer.train(updates=2)
    trainer.save_checkpoint()
    third = trainer.train(updates=1)[0]
    weights = _trainable(trainer)

    fresh = Policy(copy.deepcopy(model), tokenizer, mode="score", seed=123)
    resumed = Trainer.resume(tmp_path / "run" / "checkpoint", policy=fresh)
    assert resumed.update_count == 2
    assert {p.device.type for p in _trainable(resumed).values()} == {"cuda"}
    again = resumed.train(updates=1)[0]
    for key in ("return_mean", "loss", "policy_loss"):
        assert again[key] == pytest.approx(third[key], rel=1e-4, abs=1e-6), key
    for name, value in _trainable(resumed).items():
        assert torch.allclose(value, weights[name], atol=1e-5), name
    assert [m["update"] for m in read_metrics(tmp_path / "run")] == [1, 2, 3]


def test_bf16_acting_on_cuda_measures_a_small_mismatch_and_trains(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    policy = Policy(model, tokenizer, mode="score", act_dtype="bfloat16", seed=0)
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=CONFIG)
    before = _trainable(trainer)
    [metrics] = trainer.train(updates=1)
    acting = policy.acting_model()
    assert acting is not policy.model and next(acting.parameters()).dtype == torch.bfloat16
    assert next(acting.parameters()).device.type == "cuda"
    assert 0 < metrics["act_mismatch_abs"] < 0.05 and metrics["act_mismatch_kl"] >= 0
    assert any(not torch.equal(before[n], value) for n, value in _trainable(trainer).items())


def test_generate_mode_on_cuda_records_the_log_probs_it_sampled(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    policy = Policy(model, tokenizer, mode="generate", max_new_tokens=6, seed=0)
    venv = textgym.make_vec("textgym/Bandit-v0", num_envs=4, seed=0)
    rollout = collect(policy, venv, episodes=4, seed=0)
    assert len(rollout.episodes) == 4
    decisions = [step.decision for step in rollout.steps]
    assert all(1 <= len(d.answer_ids) <= 6 for d in decisions)
    with torch.no_grad():
        again = policy.evaluate(decisions)
    for row, d in enumerate(decisions):
        n = len(d.token_logprobs)
        assert again.logprobs[row, :n].cpu().tolist() == pytest.approx(d.token_logprobs, abs=1e-4)


def test_the_command_line_trains_and_evaluates_on_cuda(cli, tmp_path):
    from test_cli import FAST

    config = tmp_path / "fast.toml"
    config.write_text('model = "tiny"\nnum_envs = 8\nepisodes = 16\n' + FAST)
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", config, "--out", run, "--device", "cuda")
    assert result.exit_code == 0, result.output
    assert "(cuda" in result.stdout  # where the model was loaded, said once
    assert tomllib.loads((run / "config.toml").read_text())["device"] == "cuda"
    assert [m["update"] for m in read_metrics(run)] == [1, 2]
    result = cli("eval", "bandit", "--checkpoint", run, "--episodes", "8", "--num-envs", "4",
                 "--device", "cuda", "--json")
    assert result.exit_code == 0, result.output
