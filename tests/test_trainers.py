"""Trainers: the shared interface, metrics, the NaN guard, KL control, minibatching, GRPO groups, SFT."""

import copy
import json
import math

import pytest
import torch

import textgym
from textgym.trainers import GRPOConfig, PPOConfig, ReinforceConfig, make_trainer
from textgym.trainers.engine.optimization import lr_factor
from textgym.trainers.reporting.metrics import read_metrics

# minibatches of minibatch_size decisions (not a fixed number per epoch): one step per 8 decisions
SMALL = {"num_envs": 4, "episodes_per_update": 8, "minibatch_size": 8, "minibatches": None, "lr": 1e-3}


def _adapter_weights(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def test_make_trainer_rejects_unknown_algorithm_and_fields(tiny_policy):
    with pytest.raises(ValueError, match="unknown algorithm 'dqn'"):
        make_trainer("dqn", tiny_policy)
    with pytest.raises(ValueError, match="no field"):
        make_trainer("ppo", tiny_policy, config={"learning_rate": 1e-3})
    with pytest.raises(ValueError, match="multiple of group_size"):
        GRPOConfig(episodes_per_update=10, group_size=4)


def test_shared_field_names_across_algorithms():
    shared = {"lr", "gamma", "num_envs", "episodes_per_update", "minibatch_size", "epochs", "max_grad_norm",
              "kl_coef", "target_kl", "entropy_coef", "use_lora", "lora_r", "seed"}
    for cls in (ReinforceConfig, GRPOConfig, PPOConfig):
        assert shared <= set(cls.__dataclass_fields__)
    # A config of one algorithm converts to another keeping shared fields.
    from textgym.trainers import config_for

    assert config_for("ppo", GRPOConfig(lr=0.123, num_envs=4, episodes_per_update=8)).lr == 0.123


@pytest.mark.parametrize("algorithm", ["reinforce", "grpo", "ppo"])
def test_update_metrics_and_jsonl(algorithm, tiny_policy, tmp_path):
    trainer = make_trainer(algorithm, tiny_policy, env="textgym/Bandit-v0", config=SMALL, out_dir=tmp_path)
    before = _adapter_weights(trainer)
    history = trainer.train(updates=2)
    assert [m["update"] for m in history] == [1, 2]
    m = history[-1]
    for key in ("update", "episodes", "decisions", "wall_time", "return_mean", "length_mean", "invalid_rate",
                "loss", "policy_loss", "kl", "entropy", "lr", "decisions_per_s", "tokens_per_s", "samples"):
        assert key in m, key
    assert m["episodes"] == 16 and m["decisions"] == 16  # one-step episodes
    # the update's 8 decisions over the time it took, split into the rollout's and the update's; the two
    # times are recorded to the millisecond, so their sum is within 1 ms of the time the speed used
    spent = m["rollout_seconds"] + m["update_seconds"]
    assert 8 / (spent + 0.001) <= m["decisions_per_s"] <= 8 / max(spent - 0.001, 1e-9)
    assert 0.0 <= m["return_mean"] <= 1.0 and m["length_mean"] == 1.0
    assert ("value_loss" in m) == (algorithm == "ppo")       # omitted, never faked
    assert "clip_frac" in m  # every algorithm clips its ratio by default (REINFORCE too)
    sample = m["samples"][0]
    assert sample["prompt"].startswith("Color:") and sample["answer"] in ("cat", "dog")
    assert not _same(before, _adapter_weights(trainer))        # the update changed the adapter
    lines = read_metrics(tmp_path)
    assert [line["update"] for line in lines] == [1, 2]
    pytest.importorskip("tensorboard")
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))  # TensorBoard scalars too
    assert lines[1]["return_mean"] == pytest.approx(m["return_mean"])


def test_nan_reward_skips_update_and_keeps_weights(tiny_policy, caplog):
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=SMALL)
    episodes = trainer.collect().episodes
    episodes[0].steps[0].reward = float("nan")
    before = _adapter_weights(trainer)
    with caplog.at_level("WARNING", logger="textgym.trainers"):
        metrics = trainer.update(episodes)
    assert metrics["nonfinite"] is True
    assert "non-finite" in caplog.text
    assert _same(before, _adapter_weights(trainer))
    assert trainer.nonfinite_updates == 1


@pytest.mark.parametrize("algorithm", ["reinforce", "ppo"])
def test_nan_loss_skips_update_and_keeps_weights(algorithm, tiny_policy, monkeypatch):
    trainer = make_trainer(algorithm, tiny_policy, env="textgym/Bandit-v0", config=SMALL)
    episodes = trainer.collect().episodes
    real_evaluate = tiny_policy.evaluate

    def poisoned(decisions):  # the model "diverged": its log-probs are NaN (with grad)
        ev = real_evaluate(decisions)
        ev.logprobs = ev.logprobs * float("nan")
        return ev

    monkeypatch.setattr(tiny_policy, "evaluate", poisoned)
    before = _adapter_weights(trainer)
    metrics = trainer.update(episodes)
    assert metrics["nonfinite"] is True and metrics["epochs"] == 0
    assert _same(before, _adapter_weights(trainer))
    assert all(math.isfinite(p.sum().item()) for p in trainer.model.parameters())
    monkeypatch.undo()
    assert "nonfinite" not in trainer.update(episodes)  # the next good update goes through


def test_target_kl_stops_epochs_early(tiny_policy):
    config = PPOConfig(**{**SMALL, "minibatch_size": 4, "lr": 1e-2}, epochs=6, target_kl=1e-6)
    trainer = make_trainer("ppo", tiny_policy, env="textgym/Bandit-v0", config=config)
    metrics = trainer.train(updates=1)[0]
    assert metrics["epochs"] < 6 and metrics["optimizer_steps"] >= 1


def test_target_kl_stops_a_single_epoch_between_minibatches(tiny_policy):
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                           config={**SMALL, "minibatch_size": 2, "lr": 5e-2, "epochs": 1})
    episodes = trainer.collect().episodes
    minibatches = -(-sum(len(ep.steps) for ep in episodes) // 2)
    start = _adapter_weights(trainer)
    assert trainer.update(episodes)["optimizer_steps"] == minibatches
    with torch.no_grad():  # same start, same batch, now with a KL limit
        for name, param in trainer.model.named_parameters():
            if name in start:
                param.copy_(start[name])
    trainer.optimizer = torch.optim.AdamW(trainer._param_groups())
    trainer.config.target_kl = 1e-5
    metrics = trainer.update(episodes)
    # the first step is always taken (the policy is still the rollout policy); once a minibatch
    # shows the policy has moved past 1.5 * target_kl, the update stops without stepping on it
    assert metrics["kl_stop"] is True
    assert 1 <= metrics["optimizer_steps"] < minibatches and metrics["epochs"] == 0


def test_kl_penalty_uses_reference_with_adapter_disabled(tiny_policy):
    trainer = make_trainer("grpo", tiny_policy, env="textgym/Bandit-v0",
                           config=GRPOConfig(**SMALL, group_size=4, kl_coef=0.5, epochs=1))
    episodes = trainer.collect().episodes
    first = trainer.update(episodes)
    assert first["ref_kl"] == pytest.approx(0.0, abs=1e-6)  # adapter starts as the identity
    trainer.config.lr = 1e-2
    for group in trainer.optimizer.param_groups:
        group["base_lr"] = 1e-2
    for _ in range(3):
        last = trainer.update(trainer.collect().episodes)
    assert last["ref_kl"] > 0
    # The reference really is the base model: disabling the adapter gives the untrained log-probs.
    decisions = [s.decision for ep in episodes for s in ep.steps]
    with torch.no_grad(), tiny_policy.reference():
        ref = tiny_policy.evaluate(decisions).logprobs
    assert torch.allclose(ref, torch.tensor([[d.logprob] for d in decisions]), atol=1e-4)


def test_gradient_accumulation_matches_one_big_step(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    trainers = []
    for accum in (1, 4):
        policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0)
        trainers.append(make_trainer("reinforce", policy, env="textgym/Bandit-v0",
                                     config=ReinforceConfig(**SMALL, gradient_accumulation_steps=accum)))
    episodes = trainers[0].collect().episodes
    grads = []
    for trainer in trainers:
        step = trainer.optimizer.step

        def capture(*args, trainer=trainer, step=step, **kwargs):  # the gradient the step sees
            grads.append({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
            return step(*args, **kwargs)

        trainer.optimizer.step = capture
        trainer.update(episodes)
    a, b = grads
    assert a.keys() == b.keys() and len(a) > 0
    assert all(torch.allclose(a[k], b[k], rtol=1e-3, atol=1e-6) for k in a)


def test_lr_schedules():
    assert lr_factor(0, warmup=4, total=None, schedule="constant") == 0.25
    assert lr_factor(3, warmup=4, total=None, schedule="constant") == 1.0
    assert lr_factor(5, warmup=0, total=10, schedule="linear") == 0.5
    assert lr_factor(0, warmup=0, total=10, schedule="cosine") == 1.0
    assert lr_factor(5, warmup=0, total=10, schedule="cosine") == pytest.approx(0.5)
    assert lr_factor(10, warmup=0, total=10, schedule="cosine") == pytest.approx(0.0)


def test_lr_schedule_holds_the_peak_then_decays_to_its_final_multiplier():
    # held at 1 for the first 60% of 10 updates, then linearly to 0.1 at update 10, and kept there
    factors = [lr_factor(u, warmup=0, total=10, schedule="linear", decay_from=0.6, final=0.1) for u in range(12)]
    assert factors == pytest.approx([1, 1, 1, 1, 1, 1, 1, 0.775, 0.55, 0.325, 0.1, 0.1])
    assert lr_factor(8, warmup=0, total=10, schedule="cosine", decay_from=0.6, final=0.1) == pytest.approx(0.55)
    assert lr_factor(3, warmup=2, total=None, schedule="linear", decay_from=0.6, final=0.1) == 1.0


def test_linear_schedule_reaches_zero_over_train_budget(tiny_policy):
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                           config=ReinforceConfig(**{**SMALL, "lr": 1e-3}, lr_schedule="linear"))
    lrs = [m["lr"] for m in trainer.train(updates=4)]
    assert lrs == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])


def test_schedule_from_the_config_sets_each_updates_lr(tiny_policy):
    config = ReinforceConfig(**{**SMALL, "lr": 1e-3}, lr_schedule="linear", total_updates=4, lr_decay_from=0.5,
                             lr_final=0.2)
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=config)
    lrs = [m["lr"] for m in trainer.train(updates=5)]
    assert lrs == pytest.approx([1e-3, 1e-3, 1e-3, 6e-4, 2e-4])
    with pytest.raises(ValueError, match="lr_decay_from"):
        ReinforceConfig(lr_decay_from=1.0)


def test_grpo_groups_share_their_start(tiny_policy):
    trainer = make_trainer("grpo", tiny_policy, env="textgym/Bandit-v0",
                           config=GRPOConfig(num_envs=8, episodes_per_update=16, group_size=4))
    episodes = trainer.collect().episodes
    assert len(episodes) == 16
    for g in range(4):
        group = episodes[4 * g:4 * g + 4]
        assert len({ep.seed for ep in group}) == 1
        assert len({ep.steps[0].observation for ep in group}) == 1
    assert len({ep.seed for ep in episodes}) == 4


def test_grpo_turn_credit_uses_each_groups_returns_to_go(tiny_policy, countdown_env_cls, monkeypatch):
    import textgym.trainers.algorithms.grpo as grpo_module
    from textgym.vector import TextVectorEnv

    seen, original = [], grpo_module.turn_group_advantages

    def spy(group, scale=True):
        seen.append([g.tolist() for g in group])
        return original(group, scale=scale)

    monkeypatch.setattr(grpo_module, "turn_group_advantages", spy)
    venv = TextVectorEnv([countdown_env_cls() for _ in range(4)])
    trainer = make_trainer("grpo", tiny_policy, env=venv,
                           config=GRPOConfig(**{**SMALL, "group_size": 2}, credit="turn", gamma=0.5))
    rollout = trainer.collect()
    metrics = trainer.update(rollout.episodes, rollout.stats)
    assert math.isfinite(metrics["loss"]) and metrics["decisions"] == sum(ep.length for ep in rollout.episodes)

    def to_go(ep):  # discounted by hand
        out, running = [], 0.0
        for step in reversed(ep.steps):
            running = float(step.reward) + 0.5 * running
            out.insert(0, running)
        return out

    eps = rollout.episodes
    assert seen == [[to_go(eps[g]), to_go(eps[g + 1])] for g in range(0, len(eps), 2)]
    with pytest.raises(ValueError, match="credit"):
        GRPOConfig(credit="step")


def test_full_fine_tuning_changes_base_weights(tiny_policy):
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                           config=ReinforceConfig(**SMALL, use_lora=False, kl_coef=0.1))
    weight = trainer.model.model.layers[0].mlp.down_proj.weight
    before = weight.detach().clone()
    metrics = trainer.train(updates=1)[0]
    assert "ref_kl" in metrics
    assert not torch.equal(before, weight)


def test_lora_layers_adapts_only_the_top_layers(tiny_policy):
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                           config=ReinforceConfig(**SMALL, lora_layers=1))
    trained = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trained and all(".layers.1." in n for n in trained)  # tiny has layers 0 and 1
    before = _adapter_weights(trainer)
    trainer.train(updates=1)
    assert not _same(before, _adapter_weights(trainer))
    with pytest.raises(ValueError, match="lora_layers must be an integer >= 1"):
        ReinforceConfig(lora_layers=0)


def test_generate_mode_update(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="generate", max_new_tokens=4, seed=0)
    trainer = make_trainer("ppo", policy, env="textgym/Bandit-v0", config=SMALL)
    metrics = trainer.train(updates=1)[0]
    assert math.isfinite(metrics["loss"]) and metrics["invalid_rate"] > 0.5  # a random model babbles
    assert metrics["decisions"] == 8


def test_train_budgets_and_callback_stop(tiny_policy):
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=SMALL)
    assert len(trainer.train(episodes=20)) == 3  # 8 episodes per update: 24 >= 20
    seen = []
    history = trainer.train(updates=10, callback=lambda m: seen.append(m["update"]) or len(seen) < 2)
    assert len(history) == 2 and seen == [4, 5]
    with pytest.raises(ValueError, match="budget"):
        trainer.train()


def test_evaluate_is_greedy_on_held_out_seeds(tiny_policy):
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=SMALL)
    a = trainer.evaluate(episodes=16)
    b = trainer.evaluate(episodes=16)
    assert a == b and a["episodes"] == 16 and a["seed"] == trainer.config.eval_seed
    assert trainer.rollout_seed(0) > a["seed"] + 10_000  # training never plays the eval seeds


def test_sft_warm_start_teaches_the_demonstrated_answers(tiny_policy, tmp_path):
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps({"observation": f"Color: {c}.", "action": a}) + "\n"
                             for c, a in [("red", "cat"), ("green", "dog")] * 8))
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                           config=ReinforceConfig(**SMALL))
    from textgym.trainers import SFTConfig

    # 60 epochs: the loss has settled (after 30 it had not, and float rounding decided the greedy answer)
    losses = trainer.warm_start(demos, SFTConfig(lr=1e-2, epochs=60, batch_size=16))
    assert losses[-1] < losses[0] - 0.3  # NLL per answer token (the random tiny model starts near ln 49152)
    assert trainer.evaluate(episodes=32)["return_mean"] == 1.0  # red -> cat, green -> dog


def test_sft_of_a_prefilled_format_learns_what_the_policy_writes(tiny_model_and_tokenizer):
    from textgym.trainers.engine.sft import Demonstration, demonstration_decisions

    model, tokenizer = tiny_model_and_tokenizer
    policy = textgym.Policy(model, tokenizer, mode="generate", prefill='{"action": "', stop=['"'])
    [prefilled, plain] = demonstration_decisions(policy, [Demonstration("Color: red.", '{"action": "cat"}'),
                                                          Demonstration("Color: red.", "cat")], "Name an animal.")
    chat = policy.prompt_ids("Name an animal.", "Color: red.")
    assert prefilled.prompt_ids == chat + policy.prefill_ids       # as acting writes it: prefill in the prompt
    assert tokenizer.decode(prefilled.answer_ids) == 'cat"}'
    assert plain.prompt_ids == chat and tokenizer.decode(plain.answer_ids) == "cat"


def test_a_reference_player_s_play_becomes_demonstrations_as_a_policy_reads_it():
    from textgym.envs.classic import scripted_blackjack
    from textgym.trainers.engine.sft import player_demonstrations

    demos, stats = player_demonstrations("blackjack", "scripted", episodes=6, seed=7)
    assert stats["episodes"] == 6 and len(demos) == stats["decisions"]
    env = textgym.make("blackjack")
    obs, info = env.reset(seed=7)  # the first episode's first turn, as a rollout reads it
    assert demos[0].prompt == obs and demos[0].valid_actions == ["STICK", "HIT"]
    assert demos[0].system_prompt == env.get_wrapper_attr("system_prompt")
    assert demos[0].answer == scripted_blackjack(env)(info)  # basic strategy's answer on that hand
    assert all(d.answer in d.valid_actions for d in demos)
    with pytest.raises(ValueError, match="no reference player 'oracle'; it has: random, scripted"):
        player_demonstrations("blackjack", "oracle")


def test_score_mode_sft_ranks_the_demonstrated_action_first(tiny_policy):
    from textgym.trainers import SFTConfig
    from textgym.trainers.engine.sft import demonstration_decisions, player_demonstrations

    demos, stats = player_demonstrations("bandit", "scripted", episodes=16, seed=3)
    assert stats["return_mean"] == 1.0
    [decision] = demonstration_decisions(tiny_policy, demos[:1], "")
    assert decision.candidates == tiny_policy.candidate_set(demos[0].valid_actions)
    assert decision.answer_ids == decision.candidates[demos[0].valid_actions.index(demos[0].answer)]
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=ReinforceConfig(**SMALL))
    before = trainer.evaluate(episodes=32)["return_mean"]
    # 20 epochs: greedy play was perfect from 10 (mean NLL 0.31) and the loss is 0.18 at 20
    losses = trainer.warm_start(demos, SFTConfig(lr=1e-2, epochs=20, batch_size=16))
    assert losses[-1] < losses[0]  # the NLL of the player's action among the valid ones
    assert before < 1.0 and trainer.evaluate(episodes=32)["return_mean"] == 1.0


@pytest.mark.parametrize("use_lora", [True, False], ids=["lora", "full-fine-tune"])
def test_after_a_warm_start_the_kl_reference_is_the_warm_started_policy(tiny_policy, tmp_path, use_lora):
    from textgym.rollout import collect, decisions_of
    from textgym.trainers import SFTConfig, Trainer
    from textgym.trainers.engine.kl import flat_units, reference_logprobs
    from textgym.trainers.engine.sft import player_demonstrations

    rollout = collect(tiny_policy, textgym.make_vec("textgym/Bandit-v0", num_envs=2), episodes=4, seed=0)
    decisions = decisions_of(rollout.episodes)

    def logprobs(policy, reference=False):
        if reference:
            return torch.cat(reference_logprobs(policy, decisions, 8))
        with torch.no_grad():
            ev = policy.evaluate(decisions)
        return torch.cat(flat_units(ev.logprobs, ev.mask))

    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                           config=ReinforceConfig(**SMALL, kl_coef=0.1, use_lora=use_lora), out_dir=tmp_path / "run")
    untrained = logprobs(tiny_policy, reference=True)  # no warm start: the adapter disabled
    assert torch.allclose(untrained, logprobs(tiny_policy))  # (a new adapter changes nothing yet)
    demos, _ = player_demonstrations("bandit", "scripted", episodes=16, seed=3)
    trainer.warm_start(demos, SFTConfig(lr=1e-2, epochs=5, batch_size=16))
    warm = logprobs(tiny_policy)
    assert (warm - untrained).abs().max() > 0.1
    assert torch.equal(logprobs(tiny_policy, reference=True), warm)
    trainer.train(updates=1)  # RL moves the policy, not its reference
    after = logprobs(tiny_policy)
    assert (after - warm).abs().max() > 1e-3
    assert torch.equal(logprobs(tiny_policy, reference=True), warm)
    assert torch.equal(logprobs(tiny_policy), after)  # its own weights came back after the reference pass
    resumed = Trainer.resume(trainer.save_checkpoint(), env="textgym/Bandit-v0")  # the reference is kept
    assert torch.allclose(logprobs(resumed.policy, reference=True), warm, atol=1e-6)
    assert torch.allclose(logprobs(resumed.policy), after, atol=1e-6)
    # and the alarms still read a confident policy as the imitation (tests/test_alarms.py)
    assert trainer.alarm_reference.warm_started and resumed.alarm_reference.warm_started


def test_sft_on_demonstrations_with_and_without_valid_actions_in_one_batch(tiny_policy):
    """A file's plain demonstrations beside a player's (``--sft`` and ``--sft-player`` together):
    one batch holds both kinds, each learned by its own loss."""
    from textgym.trainers import SFTConfig
    from textgym.trainers.engine.sft import Demonstration, player_demonstrations, sft

    played, _ = player_demonstrations("bandit", "scripted", episodes=8, seed=3)
    plain = [Demonstration("Color: red.", "cat"), Demonstration("Color: green.", "dog")]
    listed = [d.valid_actions is not None for d in played + plain]
    assert any(listed) and not all(listed)  # both kinds in the one batch of 16
    losses = sft(tiny_policy, played + plain, "Name an animal.", SFTConfig(lr=1e-2, epochs=10, batch_size=16))
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0]


def test_score_mode_demonstrations_keep_the_frozen_layers_output_once(tiny_policy):
    """Training the top layers only, a demonstration is the decision the policy would make (with the
    frozen layers' output recorded), choosing the player's action: each epoch re-scores the top
    alone (one-token candidates: the squares), and the log-probs equal a full re-score's."""
    import dataclasses

    from textgym.policy.policy import shared_prefix_length
    from textgym.trainers.engine.sft import demonstration_decisions, player_demonstrations

    pytest.importorskip("pettingzoo")
    demos, _ = player_demonstrations("tictactoe", "scripted", episodes=6, seed=3)
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/TicTacToe-v0",
                           config=ReinforceConfig(**SMALL, lora_layers=1))
    decisions = demonstration_decisions(tiny_policy, demos, trainer.venv.envs[0].get_wrapper_attr("system_prompt"))
    assert [d.text for d in decisions] == [demo.answer for demo in demos]
    assert [d.candidates[d.action_index] for d in decisions] == [d.answer_ids for d in decisions]
    prefix = shared_prefix_length([d.prompt_ids for d in decisions])
    assert tiny_policy._top_rescorer.trunk_for(tiny_policy.model, decisions, prefix) is not None
    with torch.no_grad():
        top = tiny_policy.evaluate(decisions)
        full = tiny_policy.evaluate([dataclasses.replace(d, trunk=None) for d in decisions])
    assert torch.allclose(top.logprobs, full.logprobs, atol=1e-5)


def test_online_sft_on_best_episodes(tiny_policy):
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                           config=ReinforceConfig(**SMALL, sft_every=2, sft_top_fraction=0.5))
    history = trainer.train(updates=2)
    assert "sft_loss" not in history[0]
    assert math.isfinite(history[1]["sft_loss"]) and history[1]["sft_decisions"] == 8
    assert len(trainer.replay) == 16


def test_online_sft_is_reproducible():
    """Online SFT shuffles its batches with a seed of the run and the update: two runs of one
    config take the same steps (its order was drawn unseeded, so reruns and resumes differed)."""
    def sft_losses():
        policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
        trainer = make_trainer("reinforce", policy, env="textgym/CartPole-v1",
                               config={**SMALL, "episodes_per_update": 4, "max_train_episode_steps": 6,
                                       "minibatch_size": 4, "sft_every": 1, "sft_top_fraction": 1.0})
        return [metrics["sft_loss"] for metrics in trainer.train(updates=2)]

    assert sft_losses() == sft_losses()


def test_demonstrations_file_errors(tmp_path):
    from textgym.trainers.engine.sft import load_demonstrations

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "answer": "y"}\n{"prompt": 3}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        load_demonstrations(bad)
    ok = tmp_path / "ok.jsonl"
    ok.write_text('{"prompt": "Your hand: 18.", "answer": "STICK", "system_prompt": "Play blackjack."}\n')
    [demo] = load_demonstrations(ok)
    assert (demo.prompt, demo.answer, demo.system_prompt) == ("Your hand: 18.", "STICK", "Play blackjack.")
    ok.write_text('{"prompt": "Your hand: 18.", "answer": "STICK", "valid_actions": ["STICK", "HIT"]}\n')
    assert load_demonstrations(ok)[0].valid_actions == ["STICK", "HIT"]
    bad.write_text('{"prompt": "Your hand: 18.", "answer": "STAND", "valid_actions": ["STICK", "HIT"]}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: valid_actions must be a list of strings holding the answer"):
        load_demonstrations(bad)



@pytest.mark.parametrize("algorithm", ["reinforce", "grpo", "ppo"])
def test_multi_step_episodes_of_different_lengths(algorithm, tiny_policy, countdown_env_cls):
    from textgym.vector import TextVectorEnv

    venv = TextVectorEnv([countdown_env_cls() for _ in range(4)])
    trainer = make_trainer(algorithm, tiny_policy, env=venv,
                           config={**SMALL, "group_size": 2} if algorithm == "grpo" else SMALL)
    rollout = trainer.collect()
    lengths = sorted({ep.length for ep in rollout.episodes})
    assert len(lengths) > 1  # episodes of 1..4 steps, finishing independently
    metrics = trainer.update(rollout.episodes, rollout.stats)
    assert metrics["decisions"] == sum(ep.length for ep in rollout.episodes)
    assert math.isfinite(metrics["loss"]) and "nonfinite" not in metrics
    if algorithm == "grpo":  # a group's members start from the same seed, hence the same length
        for g in range(0, len(rollout.episodes), 2):
            assert rollout.episodes[g].length == rollout.episodes[g + 1].length
    with pytest.raises(ValueError, match="needs an env"):
        make_trainer(algorithm, tiny_policy, env=None, config=SMALL if algorithm != "grpo" else
                     {**SMALL, "group_size": 2}).evaluate(episodes=2)


def test_state_centering_keeps_values_and_scales_the_shared_shift():
    from types import SimpleNamespace

    from textgym.policy import Evaluation
    from textgym.trainers.engine.centering import centred_logprobs

    # Four decisions over the same two candidates; a shared bias b shifts every state alike.
    state_logits = torch.tensor([[0.3, -0.2], [1.0, 0.5], [-0.4, 0.1], [0.2, 0.9]])
    actions = [0, 1, 1, 0]
    decisions = [SimpleNamespace(candidates=[[1], [2]], action_index=a) for a in actions]

    def chosen(weight):
        bias = torch.zeros(2, requires_grad=True)
        per_state = (state_logits + bias).log_softmax(-1)
        ev = Evaluation(logprobs=per_state[torch.arange(4), actions][:, None],
                        mask=torch.ones(4, 1, dtype=torch.bool), old_logprobs=torch.zeros(4, 1),
                        entropy=torch.zeros(4), hidden=torch.zeros(4, 1),
                        candidate_logprobs=list(per_state.unbind()))
        out = centred_logprobs(ev, decisions, weight) if weight else ev.logprobs
        out.sum().backward()
        return out.detach(), bias.grad

    plain, plain_grad = chosen(0.0)
    half, half_grad = chosen(0.5)
    full, full_grad = chosen(1.0)
    assert torch.allclose(plain, half) and torch.allclose(plain, full)  # same values
    assert plain_grad.abs().sum() > 0.05
    assert torch.allclose(half_grad, 0.5 * plain_grad, atol=1e-6)
    assert torch.allclose(full_grad, torch.zeros(2), atol=1e-6)  # no credit for a shared shift


def test_state_centering_adds_no_push_to_a_policy_sure_of_its_answers():
    """Every decision took its state's near-certain answer: the policy's own gradient is ~0, and
    centring must not add one (it did when it centred the chosen log-probs: the third state's
    unlikely first answer was pushed through its full softmax gradient)."""
    from types import SimpleNamespace

    from textgym.policy import Evaluation
    from textgym.trainers.engine.centering import centred_logprobs

    logits = torch.tensor([[9.0, -9.0], [9.0, -9.0], [-9.0, 9.0]], requires_grad=True)
    actions = [0, 0, 1]
    per_state = logits.log_softmax(-1)
    ev = Evaluation(logprobs=per_state[torch.arange(3), actions][:, None], mask=torch.ones(3, 1, dtype=torch.bool),
                    old_logprobs=torch.zeros(3, 1), entropy=torch.zeros(3), hidden=torch.zeros(3, 1),
                    candidate_logprobs=list(per_state.unbind()))
    decisions = [SimpleNamespace(candidates=[[1], [2]], action_index=a) for a in actions]
    centred_logprobs(ev, decisions, 1.0).sum().backward()
    assert logits.grad.abs().max() < 1e-6


def test_state_centering_groups_by_candidate_set_and_is_validated(tiny_policy):
    from types import SimpleNamespace

    from textgym.policy import Evaluation
    from textgym.trainers.engine.centering import centred_logprobs

    # Three decisions over candidates {1, 2}, one alone over {3, 4}: a group of one is left as is.
    logits = torch.tensor([[0.3, -0.2], [1.0, 0.5], [-0.4, 0.1], [0.2, 0.9]], requires_grad=True)
    per_state = logits.log_softmax(-1)
    sets = [[[1], [2]]] * 3 + [[[3], [4]]]
    decisions = [SimpleNamespace(candidates=c, action_index=0) for c in sets]
    ev = Evaluation(logprobs=per_state[:, :1], mask=torch.ones(4, 1, dtype=torch.bool),
                    old_logprobs=torch.zeros(4, 1), entropy=torch.zeros(4), hidden=torch.zeros(4, 1),
                    candidate_logprobs=list(per_state.unbind()))
    centred_logprobs(ev, decisions, 1.0)[3, 0].backward(retain_graph=True)
    lone = logits.grad.clone()
    logits.grad = None
    per_state[3, 0].backward()
    assert torch.allclose(lone, logits.grad)  # same gradient as without centering
    assert lone[:3].abs().sum() == 0          # and nothing from the other group

    with pytest.raises(ValueError, match="state_centering"):
        ReinforceConfig(state_centering=1.5)
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                           config={"num_envs": 4, "episodes_per_update": 8, "state_centering": 1.0})
    metrics = trainer.train(updates=1)[0]
    assert math.isfinite(metrics["policy_loss"])


def test_the_trainer_config_shapes_the_lora_adapter_of_the_readme_flow():
    import warnings

    from textgym.lora import adapter_settings

    # The README's flow: a policy from a model name, then a trainer whose config says how LoRA looks.
    with pytest.warns(FutureWarning, match="no longer needed"):
        policy = textgym.Policy.from_pretrained("tiny", mode="score", lora=True)
    config = {**SMALL, "lora_r": 4, "lora_alpha": 8, "lora_layers": 1, "lora_target_modules": ["q_proj", "v_proj"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to complain about: the config is applied
        trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=config)
    settings = adapter_settings(trainer.model)
    assert (settings.r, settings.alpha, settings.layers, settings.target_modules) == (4, 8, 1, ("q_proj", "v_proj"))
    trained = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trained and all(".layers.1." in n and ("q_proj" in n or "v_proj" in n) for n in trained)
    assert policy.model is trainer.model and policy.is_lora


def test_a_model_that_has_an_adapter_keeps_training_it_and_says_where_the_config_differs(tiny_policy):
    import warnings

    from textgym.lora import LoraSettings, adapter_settings, add_lora

    tiny_policy.model = add_lora(tiny_policy.model, LoraSettings(r=8, alpha=16))  # e.g. a loaded checkpoint
    adapter = tiny_policy.model
    with pytest.warns(UserWarning, match=r"already has a LoRA adapter.*r: 8 \(config: 16\)"):
        trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=SMALL)
    assert trainer.model is adapter and adapter_settings(adapter).r == 8  # continued, not re-wrapped
    before = _adapter_weights(trainer)
    trainer.train(updates=1)
    assert not _same(before, _adapter_weights(trainer))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a config that matches the adapter: silent
        make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                     config={**SMALL, "lora_r": 8, "lora_alpha": 16})
    with pytest.raises(ValueError, match="use_lora=False"):
        make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config={**SMALL, "use_lora": False})


def test_long_answers_are_rescored_in_chunks_that_fit_the_token_budget():
    from textgym.trainers.engine.optimization import chunks_of, run_minibatches

    counts = [3, 120, 5, 118, 2, 64, 7, 90]
    for chunk in chunks_of(torch.arange(8), 1, counts, 256):
        assert len(chunk) * max(counts[i] for i in chunk.tolist()) <= 256
    assert sorted(torch.cat(chunks_of(torch.arange(8), 1, counts, 256)).tolist()) == list(range(8))
    assert len(chunks_of(torch.arange(8), 3, [1] * 8, 256)) == 3  # accumulation steps still count
    # the chunks' gradients add up to the whole minibatch's
    weight = torch.nn.Parameter(torch.ones(8))
    values = torch.arange(1.0, 9.0)

    def loss_fn(idx):
        return (weight[idx] * values[idx]).pow(2).mean(), {}

    grads = []
    for budget in (None, 128):
        weight.grad = None
        optimizer = torch.optim.SGD([weight], lr=0.0)  # lr 0: look at the gradient only
        captured = []
        optimizer.step = lambda captured=captured: captured.append(weight.grad.clone())
        run_minibatches(optimizer, 8, loss_fn, epochs=1, minibatch_size=8, max_grad_norm=None,
                        token_counts=counts, max_chunk_tokens=budget)
        grads.append(captured[0])
    assert torch.allclose(grads[0], grads[1])


def test_think_answers_train_with_every_generated_token(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode="generate", max_new_tokens=40, seed=0,
                            stop=["</answer>"])
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0",
                           config={**SMALL, "max_chunk_answer_tokens": 64}, env_kwargs={"answer_format": "think"})
    rollout = trainer.collect()
    decisions = [d for ep in rollout.episodes for d in ep.decisions]
    assert max(len(d.answer_ids) for d in decisions) == 40   # a random model rambles to the limit
    ev = policy.evaluate(decisions)
    assert ev.mask.sum().item() == sum(len(d.answer_ids) for d in decisions)  # every token kept
    assert torch.allclose(ev.logprobs[ev.mask], ev.old_logprobs[ev.mask], atol=1e-4)
    rescored = []  # (rows, longest answer) of every re-scoring pass of the update
    evaluate = policy.evaluate
    policy.evaluate = lambda batch: rescored.append((len(batch), max(len(d.answer_ids) for d in batch))) \
        or evaluate(batch)
    metrics = trainer.update(rollout.episodes, stats=rollout.stats)
    assert math.isfinite(metrics["loss"]) and metrics["optimizer_steps"] == 1
    assert len(rescored) > 1 and all(rows * longest <= 64 for rows, longest in rescored)


def test_minibatches_by_state_keep_each_state_together_and_the_number_of_steps():
    from textgym.trainers.engine.optimization import minibatches, row_batches

    keys = [i % 5 for i in range(40)]  # 5 states met 8 times each, interleaved
    for seed in range(5):
        torch.manual_seed(seed)
        batches = [b.tolist() for b in minibatches(40, 10, keys=keys)]
        assert sorted(i for b in batches for i in b) == list(range(40))
        assert len(batches) == 4  # as many optimizer steps as shuffled one by one
        rows = sum(len({keys[i] for i in b}) for b in batches)
        assert rows <= 5 + len(batches) - 1  # a state is cut only where a minibatch ends
    assert row_batches(keys[:10], 2) == [[0, 5, 1, 6], [2, 7, 3, 8], [4, 9]]


def test_an_update_rescores_each_state_of_a_minibatch_once(tiny_policy):
    from textgym.rollout import decisions_of

    trainer = make_trainer("grpo", tiny_policy, env="textgym/Blackjack-v1",
                           config={"num_envs": 8, "episodes_per_update": 32, "group_size": 8, "minibatches": 2,
                                   "epochs": 1, "kl_coef": 0.0})
    rollout = trainer.collect()
    decisions = decisions_of(rollout.episodes)
    states = len({d.rescoring_key() for d in decisions})
    assert states < len(decisions) / 2  # a group of 8 deals the same first hand 8 times
    rows = []  # distinct states of every re-scoring pass of the update
    evaluate = tiny_policy.evaluate
    tiny_policy.evaluate = lambda batch: rows.append(len({d.rescoring_key() for d in batch})) or evaluate(batch)
    metrics = trainer.update(rollout.episodes, stats=rollout.stats)
    assert metrics["optimizer_steps"] == 2
    assert sum(rows) <= states + 1  # each state once, but one cut between the two minibatches


def test_reference_logprobs_run_each_state_once_and_keep_each_decisions_answer(tiny_policy):
    from textgym.rollout import decisions_of
    from textgym.trainers.engine.kl import reference_logprobs

    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=SMALL)
    decisions = decisions_of(trainer.collect().episodes)
    answers: dict[int, set] = {}
    for d in decisions:
        answers.setdefault(d.rescoring_key(), set()).add(d.action_index)
    assert len(answers) <= 2 and any(len(chosen) > 1 for chosen in answers.values())  # one state, two answers
    passes = []
    evaluate = tiny_policy.evaluate
    tiny_policy.evaluate = lambda batch: passes.append(len(batch)) or evaluate(batch)
    together = reference_logprobs(tiny_policy, decisions, 2)
    assert passes == [len(decisions)]  # two states at most: one pass of two rows holds every decision
    for decision, units in zip(decisions, together, strict=True):
        assert torch.allclose(units, reference_logprobs(tiny_policy, [decision], 1)[0], atol=1e-5)


def test_the_reference_memo_serves_decisions_met_before_until_the_reference_changes(tiny_policy):
    from textgym.rollout import decisions_of
    from textgym.trainers.engine.kl import ReferenceMemo, reference_logprobs

    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0",
                           config={**SMALL, "kl_coef": 0.1, "lr": 1e-2})
    episodes = trainer.collect().episodes
    decisions = decisions_of(episodes)
    passes = []
    evaluate = tiny_policy.evaluate
    tiny_policy.evaluate = lambda batch: passes.append(len(batch)) or evaluate(batch)
    memo = ReferenceMemo()
    first = memo.logprobs(tiny_policy, decisions, 8, entries=100)
    assert memo.hits == 0 and passes
    for got, fresh in zip(first, reference_logprobs(tiny_policy, decisions, 8), strict=True):
        assert torch.equal(got, fresh)
    passes.clear()
    again = memo.logprobs(tiny_policy, decisions, 8, entries=100)
    assert memo.hits == len(decisions) and passes == []  # no reference pass at all
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    # the trainer's updates share one memo: the second update on the same decisions runs no reference pass
    trainer.update(episodes)
    assert trainer.reference_memo.hits == 0
    trainer.update(episodes)
    assert trainer.reference_memo.hits == len(decisions)
    # a rebased reference (a warm start) makes every kept value stale
    tiny_policy.evaluate = evaluate
    with torch.no_grad():
        moved = tiny_policy.evaluate(decisions)
    tiny_policy.rebase_reference()
    rebased = memo.logprobs(tiny_policy, decisions, 8, entries=100)
    assert memo.hits == 0
    assert torch.allclose(torch.cat(rebased), moved.logprobs[moved.mask], atol=1e-5)
    assert not torch.allclose(torch.cat(rebased), torch.cat(first), atol=1e-3)  # the updates moved the policy
    # at most ``entries`` kept: the least recently used go first
    memo.logprobs(tiny_policy, decisions, 8, entries=1)
    memo.logprobs(tiny_policy, decisions[-1:], 8, entries=1)
    assert memo.hits == 1
    memo.logprobs(tiny_policy, decisions, 8, entries=0)
    memo.logprobs(tiny_policy, decisions, 8, entries=0)
    assert memo.hits == 0


def test_the_reference_memo_keys_a_decision_by_its_context_candidates_and_answer(tiny_policy):
    import dataclasses

    from textgym.rollout import collect, decisions_of
    from textgym.trainers.engine.kl import ReferenceMemo

    rollout = collect(tiny_policy, textgym.make_vec("textgym/Bandit-v0", num_envs=2), episodes=4, seed=0)
    decision = decisions_of(rollout.episodes)[0]
    key = ReferenceMemo.key(decision)
    assert ReferenceMemo.key(dataclasses.replace(decision)) == key
    other_choice = (decision.action_index + 1) % len(decision.candidates)
    changed = [dataclasses.replace(decision, action_index=other_choice),
               dataclasses.replace(decision, prompt_ids=decision.prompt_ids[:-1]),
               dataclasses.replace(decision, candidates=[*decision.candidates, [7]]),
               # the same token ids cut at another place between context and answer
               dataclasses.replace(decision, prompt_ids=decision.prompt_ids[:-1],
                                   answer_ids=decision.prompt_ids[-1:] + decision.answer_ids)]
    assert len({key, *(ReferenceMemo.key(d) for d in changed)}) == 1 + len(changed)


def test_long_prompts_are_rescored_in_chunks_that_fit_the_token_budget(tiny_policy):
    from textgym.trainers.engine.optimization import sequence_cost

    trainer = make_trainer("reinforce", tiny_policy, env="textgym/CartPole-v1",
                           config={**SMALL, "max_chunk_tokens": 100, "max_train_episode_steps": 4})
    rollout = trainer.collect()
    decisions = [d for ep in rollout.episodes for d in ep.decisions]
    longest = max(len(d.prompt_ids) + sum(map(len, d.candidates)) for d in decisions)
    states = len({d.rescoring_key() for d in decisions})
    assert states * sequence_cost(longest) > 100       # the whole minibatch would not fit
    rescored = []  # (rows, the longest prompt plus candidates) of every re-scoring pass of the update
    evaluate = tiny_policy.evaluate
    tiny_policy.evaluate = lambda batch: rescored.append(
        (len({d.rescoring_key() for d in batch}),
         max(len(d.prompt_ids) + sum(map(len, d.candidates)) for d in batch))) or evaluate(batch)
    metrics = trainer.update(rollout.episodes, stats=rollout.stats)
    assert math.isfinite(metrics["loss"]) and metrics["optimizer_steps"] >= 1
    assert len(rescored) > 1 and all(rows * sequence_cost(n) <= 100 for rows, n in rescored)


def test_max_train_episode_steps_caps_training_episodes_only(tiny_policy):
    config = ReinforceConfig(**SMALL, max_train_episode_steps=3)
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/CartPole-v1", config=config)
    metrics = trainer.train(updates=1)[0]
    assert metrics["length_mean"] <= 3 and metrics["decisions"] <= 8 * 3
    assert trainer.evaluate(episodes=4)["length_mean"] > 3  # evaluation keeps the env's own limit
    with pytest.raises(ValueError, match="max_train_episode_steps"):
        ReinforceConfig(max_train_episode_steps=0)


def test_ppo_bootstraps_a_cut_episode_from_the_value_of_the_state_it_reached(tiny_policy, countdown_env_cls,
                                                                             monkeypatch):
    from textgym.trainers.algorithms import ppo

    envs = [countdown_env_cls(max_length=5) for _ in range(4)]
    config = PPOConfig(**{**SMALL, "episodes_per_update": 4}, max_train_episode_steps=2)
    trainer = make_trainer("ppo", tiny_policy, env=envs, config=config)
    episodes = trainer.collect().episodes
    valued, last_values = [], []

    def values(decisions):  # value i for the i-th decision asked for: shows which value each episode used
        valued.extend(decisions)
        return torch.arange(len(decisions), dtype=torch.float32) + 100.0

    def recording_gae(rewards, values, last_value, gamma, lam):
        last_values.append(last_value)
        return real_gae(rewards, values, last_value, gamma, lam)

    real_gae = ppo.gae
    monkeypatch.setattr(trainer, "_values", values)
    monkeypatch.setattr(ppo, "gae", recording_gae)
    trainer.update(episodes)
    decisions = sum(ep.length for ep in episodes)
    cut = [ep for ep in episodes if ep.truncated]
    assert cut and len(cut) < len(episodes)  # episodes of 1..5 steps, cut at 2
    # the bootstrap decisions are valued after every played one, in episode order
    assert valued[decisions:] == [ep.bootstrap for ep in cut]
    expected, k = [], 0
    for ep in episodes:
        expected.append(100.0 + decisions + k if ep.truncated else 0.0)
        k += ep.truncated
    assert last_values == expected


@pytest.mark.parametrize("mode, history", [("score", "full"), ("generate", None), ("generate", "full")])
def test_ppo_with_cut_episodes_updates_in_every_mode(tiny_model_and_tokenizer, mode, history):
    model, tokenizer = tiny_model_and_tokenizer
    policy = textgym.Policy(copy.deepcopy(model), tokenizer, mode=mode, history=history, max_new_tokens=3, seed=0)
    trainer = make_trainer("ppo", policy, env="textgym/CartPole-v1",
                           config=PPOConfig(**SMALL, max_train_episode_steps=2))
    rollout = trainer.collect()
    cut = [ep for ep in rollout.episodes if ep.truncated]
    assert cut and all(ep.bootstrap is not None for ep in cut)
    if history:  # the bootstrap decision continues the episode's conversation
        assert all(ep.bootstrap.continues(ep.steps[-1].decision) for ep in cut)
    metrics = trainer.update(rollout.episodes, stats=rollout.stats)
    assert math.isfinite(metrics["loss"]) and math.isfinite(metrics["value_loss"])
