"""Checkpoints: pickle-free round trips, atomic writes, and resume continuing the same run."""

import json
import random

import numpy as np
import pytest
import torch

from textgym.trainers.state import checkpoint as ckpt


def _small_llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(config)


def _lora(model):
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))


def _step(params, optimizer):
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer.step()


def test_optimizer_state_round_trip_without_pickle():
    params = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(4))]
    opt = torch.optim.AdamW(params, lr=0.01, betas=(0.8, 0.9))
    _step(params, opt)
    _step(params, opt)
    tensors, meta = ckpt.flatten_optimizer(opt, "policy")
    meta = json.loads(json.dumps(meta))  # must survive JSON

    params2 = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt2 = torch.optim.AdamW(params2, lr=0.5)
    ckpt.unflatten_optimizer(opt2, "policy", tensors, meta)
    assert opt2.param_groups[0]["lr"] == 0.01
    for i in range(2):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[params[i]][key], opt2.state[params2[i]][key])
    # Both continue identically
    torch.manual_seed(1)
    _step(params, opt)
    torch.manual_seed(1)
    _step(params2, opt2)
    for a, b in zip(params, params2):
        assert torch.equal(a, b)


def test_rng_states_round_trip_through_json():
    states = json.loads(json.dumps(ckpt.get_rng_states()))
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    ckpt.set_rng_states(states)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a


def test_lora_checkpoint_round_trip(tmp_path):
    model = _lora(_small_llama())
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=0.01)
    _step(trainable, opt)
    head = torch.nn.Linear(16, 1)
    ckpt.save_checkpoint(tmp_path / "ck", model=model, optimizers={"policy": opt},
                         state={"update": 7}, value_head=head)
    assert (tmp_path / "ck" / "adapter" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "ck.tmp").exists()

    model2 = _lora(_small_llama())  # same base weights (seed 0), fresh adapter
    trainable2 = [p for p in model2.parameters() if p.requires_grad]
    opt2 = torch.optim.AdamW(trainable2, lr=0.5)
    head2 = torch.nn.Linear(16, 1)
    state = ckpt.load_checkpoint(tmp_path / "ck", model=model2, optimizers={"policy": opt2}, value_head=head2)
    assert state["update"] == 7 and state["weights"] == "adapter"
    for (n1, p1), (n2, p2) in zip(model.named_parameters(), model2.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    assert torch.equal(head.weight, head2.weight)
    assert opt2.param_groups[0]["lr"] == 0.01


def test_full_model_checkpoint_round_trip(tmp_path):
    model = _small_llama(seed=0)
    ckpt.save_checkpoint(tmp_path / "ck", model=model, optimizers={}, state={})
    model2 = _small_llama(seed=1)
    ckpt.load_checkpoint(tmp_path / "ck", model=model2, optimizers={})
    for p1, p2 in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p1, p2)
    with pytest.raises(ValueError, match="full model weights"):
        ckpt.load_checkpoint(tmp_path / "ck", model=_lora(_small_llama()), optimizers={})


def test_crash_mid_write_leaves_previous_checkpoint(tmp_path, monkeypatch):
    model = _small_llama()
    ckpt.save_checkpoint(tmp_path / "ck", model=model, optimizers={}, state={"update": 1})

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt, "save_file", crash)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save_checkpoint(tmp_path / "ck", model=model, optimizers={}, state={"update": 2})
    assert ckpt.read_state(tmp_path / "ck")["update"] == 1

    # A crash between the two renames: only <path>.old exists; it is found.
    monkeypatch.undo()
    (tmp_path / "ck").rename(tmp_path / "ck.old")
    assert ckpt.read_state(tmp_path / "ck")["update"] == 1
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ckpt.read_state(tmp_path / "nothing")


@pytest.mark.parametrize("algorithm", ["reinforce", "ppo", "grpo"])
def test_resume_continues_the_same_run(algorithm, tiny_model_and_tokenizer, tmp_path):
    import copy

    import textgym
    from textgym.trainers import Trainer, make_trainer
    from textgym.trainers.reporting.metrics import read_metrics

    model, tokenizer = tiny_model_and_tokenizer
    # seed 1: GRPO's third update has groups of unequal returns (at seed 0 every group is tied:
    # no advantage, no change, nothing to compare)
    config = {"num_envs": 4, "episodes_per_update": 8, "minibatch_size": 4, "lr": 3e-3, "epochs": 2,
              "seed": 1}
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0)
    trainer = make_trainer(algorithm, policy, env="textgym/Bandit-v0", config=config, out_dir=tmp_path / "run")
    trainer.train(updates=2)
    trainer.save_checkpoint()
    saved = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    third = trainer.train(updates=1)[0]
    weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert any(not torch.equal(saved[n], weights[n]) for n in saved)  # the update to compare moved them

    fresh = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=123)
    resumed = Trainer.resume(tmp_path / "run" / "checkpoint", policy=fresh)
    assert resumed.algorithm == algorithm and resumed.update_count == 2 and resumed.episodes_seen == 16
    again = resumed.train(updates=1)[0]
    for key in ("update", "episodes", "return_mean", "loss", "policy_loss", "kl"):
        assert again[key] == third[key], key  # bit for bit: the same answers, the same arithmetic
    assert again["wall_time"] >= third["wall_time"] - 60
    for name, p in resumed.model.named_parameters():
        if p.requires_grad:
            assert torch.equal(p, weights[name]), name
    # The run folder's metrics continue: the first session's update 3 (after the checkpoint) was
    # dropped on resume and redone, so each update has one line.
    metrics = read_metrics(tmp_path / "run")
    assert [m["update"] for m in metrics] == [1, 2, 3]
    assert metrics[2]["return_mean"] == pytest.approx(again["return_mean"])


@pytest.mark.parametrize("use_lora", [True, False], ids=["lora", "full-fine-tune"])
def test_a_warm_started_run_resumes_with_its_kl_reference(use_lora, tiny_model_and_tokenizer, tmp_path):
    # Warm start, then RL with a KL penalty to the warm-started policy: the reference is neither
    # the base model nor the trained weights, so a resume must read it from reference.safetensors.
    import copy

    import textgym
    from textgym.trainers import SFTConfig, Trainer, make_trainer
    from textgym.trainers.engine.sft import player_demonstrations

    model, tokenizer = tiny_model_and_tokenizer
    config = {"num_envs": 4, "episodes_per_update": 8, "minibatch_size": 4, "lr": 3e-3, "epochs": 2,
              "kl_coef": 0.5, "use_lora": use_lora}
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0)
    trainer = make_trainer("ppo", policy, env="textgym/Bandit-v0", config=config, out_dir=tmp_path / "run")
    demos, _ = player_demonstrations("bandit", "scripted", episodes=16, seed=3)
    trainer.warm_start(demos, SFTConfig(lr=1e-2, epochs=3, batch_size=16))
    trainer.train(updates=1)
    checkpoint = trainer.save_checkpoint()
    assert (checkpoint / ckpt.REFERENCE_FILE).is_file()
    second = trainer.train(updates=1)[0]
    weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert second["ref_kl"] > 1e-4  # the policy has moved away from its reference: the KL counts

    fresh = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=123)
    resumed = Trainer.resume(checkpoint, policy=fresh)
    again = resumed.train(updates=1)[0]
    for key in ("return_mean", "loss", "policy_loss", "ref_kl"):
        assert again[key] == second[key], key  # bit for bit
    for name, p in resumed.model.named_parameters():
        if p.requires_grad:
            assert torch.equal(p, weights[name]), name


def test_resume_without_a_policy_rebuilds_it_from_the_checkpoint(tmp_path):
    import textgym
    from textgym.trainers import Trainer, make_trainer

    model, tokenizer = textgym.models.load("tiny")
    policy = textgym.Policy(model, tokenizer, mode="score", temperature=0.7, seed=0, name="tiny")
    trainer = make_trainer("grpo", policy, env="textgym/Bandit-v0",
                           config={"num_envs": 4, "episodes_per_update": 8, "group_size": 4})
    trainer.train(updates=1)
    trainer.save_checkpoint(tmp_path / "ck")
    resumed = Trainer.resume(tmp_path / "ck")
    assert resumed.policy.temperature == 0.7 and resumed.policy.name == "tiny"
    assert resumed.update_count == 1 and resumed.config.group_size == 4
    for (n1, p1), (n2, p2) in zip(trainer.model.named_parameters(), resumed.model.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), n1


def test_a_checkpoint_records_every_policy_setting(tmp_path):
    import textgym
    from textgym.trainers import Trainer, make_trainer

    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    policy = textgym.Policy.from_pretrained("tiny", mode="generate", temperature=0.7, chat_template=template,
                                            system_role=False, stop=["}"], normalization="token", seed=3)
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0",
                           config={"num_envs": 2, "episodes_per_update": 2})
    trainer.save_checkpoint(tmp_path / "ck")
    recorded = ckpt.read_state(tmp_path / "ck")["policy"]
    assert recorded == {"name": "tiny", **policy.config.to_dict()}
    resumed = Trainer.resume(tmp_path / "ck")
    assert resumed.policy.config == policy.config and resumed.policy.name == "tiny"


# --- portable checkpoints: Policy.load and PEFT elsewhere ----------------------------------------

def _trained_bandit_trainer(model, tokenizer, out_dir, name="tiny", **settings):
    import copy

    import textgym
    from textgym.trainers import make_trainer

    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0, name=name, **settings)
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", out_dir=out_dir,
                           config={"num_envs": 4, "episodes_per_update": 8, "lr": 3e-2})
    trainer.train(updates=1)
    return trainer


def test_policy_load_reads_a_checkpoint_with_every_setting_and_the_trained_adapter(
        tmp_path, tiny_model_and_tokenizer):
    import textgym

    model, tokenizer = tiny_model_and_tokenizer
    trainer = _trained_bandit_trainer(model, tokenizer, tmp_path / "run", normalization="token",
                                      temperature=0.5)
    folder = trainer.save_checkpoint()
    assert sorted(p.name for p in (folder / "adapter").iterdir()) == [
        "README.md", "adapter_config.json", "adapter_model.safetensors"]
    assert (folder / "tokenizer" / "tokenizer.json").is_file()

    loaded = textgym.Policy.load(folder)
    assert loaded.name == "tiny" and loaded.is_lora and loaded.config == trainer.policy.config
    prompts = ["Color: red.", "Color: blue."]
    system = ["Pick an animal."] * 2
    actions = [["cat", "dog", "bird"]] * 2
    mine = trainer.policy.act(prompts, system, actions, greedy=True)
    theirs = loaded.act(prompts, system, actions, greedy=True)
    assert [d.text for d in theirs] == [d.text for d in mine]
    assert [d.logprob for d in theirs] == pytest.approx([d.logprob for d in mine], abs=1e-5)
    # the adapter really is the trained one, not a fresh (identity) adapter
    assert any(p.abs().sum() > 0 for n, p in loaded.model.named_parameters() if "lora_B" in n)


def test_a_checkpoint_adapter_names_the_base_models_hub_id_and_its_weights(tmp_path,
                                                                          tiny_model_and_tokenizer):
    """What PEFT records and the model card says, for the default model (whose weights textgym
    reads from a GGUF file) without loading it: a tiny model that carries its name."""
    from textgym.lora import add_lora
    from textgym.policy import Policy, persistence

    model, tokenizer = tiny_model_and_tokenizer
    import copy

    policy = Policy(add_lora(copy.deepcopy(model)), tokenizer, name="smollm2-135m")
    persistence.write(policy, tmp_path / "ck")
    adapter = json.loads((tmp_path / "ck" / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    card = (tmp_path / "ck" / "adapter" / "README.md").read_text()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card and "library_name: peft" in card
    assert "Q4_1-dequantized copy of HuggingFaceTB/SmolLM2-135M-Instruct" in card
    assert 'AutoPeftModelForCausalLM.from_pretrained("' + str(tmp_path / "ck" / "adapter") in card
    record = json.loads((tmp_path / "ck" / "policy.json").read_text())
    assert record["name"] == "smollm2-135m" and record["lora"] is True
    assert record["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    # the live model keeps what PEFT recorded when the adapter was added
    assert policy.model.peft_config["default"].base_model_name_or_path != adapter["base_model_name_or_path"]


def test_base_model_ids():
    from textgym import models

    assert models.base_model_id("smollm2-135m") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert models.base_model_id("qwen2.5-0.5b") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert models.base_model_id("gpt2") == "gpt2"
    assert models.base_model_id("someorg/some-model") == "someorg/some-model"
    assert models.base_model_id("tiny") is None
    assert models.base_model_id("./relative/folder").startswith("/")
    assert models.base_model_id("./relative/folder").endswith("/relative/folder")


def test_an_unnamed_policy_keeps_what_peft_recorded_as_its_base(tmp_path, tiny_model_and_tokenizer):
    """A policy built around a model the user loaded (textgym.Agent) has no name: the adapter
    keeps the model's own name_or_path, as PEFT records it."""
    import copy

    from textgym.lora import add_lora
    from textgym.policy import Policy, persistence

    model, tokenizer = tiny_model_and_tokenizer
    model = copy.deepcopy(model)
    model.name_or_path = "someorg/agent-base"
    persistence.write(Policy(add_lora(model), tokenizer), tmp_path / "ck")
    adapter = json.loads((tmp_path / "ck" / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "someorg/agent-base"
    card = (tmp_path / "ck" / "adapter" / "README.md").read_text()
    assert "whose name was not recorded" in card and "peft.PeftModel.from_pretrained" in card
