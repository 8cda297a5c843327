"""The TRL adapter: TRL's GRPOTrainer trains on textgym envs through a rollout_func (CPU, tiny model)."""

import copy

import pytest
import torch

pytest.importorskip("trl")


def test_trl_grpo_two_steps_on_the_bandit(tiny_model_and_tokenizer):
    from textgym.trainers.trl import make_trl_grpo_trainer

    model, tokenizer = tiny_model_and_tokenizer
    model = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    def even_tokens(prompts, completions, completion_ids, **kwargs):
        # The random model's answers are all invalid, so the env return alone ties within a group
        # and GRPO has nothing to learn; an arbitrary token-level reward that varies between samples
        # gives the update a signal, so the test can check that TRL really trained the weights.
        return [sum(t % 2 == 0 for t in ids) / max(1, len(ids)) for ids in completion_ids]

    trainer = make_trl_grpo_trainer(model, tokenizer, "textgym/Bandit-v0", num_prompts=16, max_new_tokens=4,
                                    extra_reward_funcs=(even_tokens,),
                                    args={"max_steps": 2, "per_device_train_batch_size": 8, "num_generations": 4,
                                              "learning_rate": 1e-3, "max_completion_length": 8})
    trainer.train()
    rollout = trainer.textgym_rollout
    assert trainer.state.global_step == 2
    assert rollout.episodes_played >= 16  # 8 completions per step, each one episode
    assert all(r in (0.0, -0.1, 1.0) or -1.0 <= r <= 1.0 for r in rollout.returns)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2
    changed = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert changed, "two GRPO steps left every weight unchanged"


def test_group_members_share_the_seed_and_multi_turn_masks_env_tokens(tiny_model_and_tokenizer):
    from textgym.trainers.trl import TextgymRollout

    model, tokenizer = tiny_model_and_tokenizer
    import textgym

    env = textgym.make("textgym/CartPole-v1")
    obs, info = env.reset(seed=5)
    key = (info["system_prompt"], obs)
    rollout = TextgymRollout("textgym/CartPole-v1", tokenizer, {key: [5]}, num_generations=2, max_turns=3,
                             max_new_tokens=3, max_completion_length=200)
    prompt = [{"role": "system", "content": key[0]}, {"role": "user", "content": key[1]}]

    class FakeTrainer:  # what the rollout reads from TRL's trainer
        class accelerator:
            @staticmethod
            def unwrap_model(m):
                return m

    FakeTrainer.model = model
    out = rollout([prompt, prompt], FakeTrainer)
    assert len(out["completion_ids"]) == 2 and out["prompt_ids"][0] == out["prompt_ids"][1]
    for completion, logprobs, mask in zip(out["completion_ids"], out["logprobs"], out["env_mask"]):
        assert len(completion) == len(logprobs) == len(mask)
        assert 1 in mask and 0 in mask  # model answers and env observations interleaved
        env_text = tokenizer.decode([t for t, m in zip(completion, mask) if m == 0])
        assert "Cart" in env_text or "cart" in env_text or "pole" in env_text.lower()
        assert all(lp <= 0 for lp, m in zip(logprobs, mask) if m)
